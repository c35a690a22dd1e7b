import pytest

from tests.helpers import ControllerProcess


@pytest.fixture
def controller(tmp_path):
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    yield ctl
    ctl.stop()
