"""What the ``xce`` command's tests share: a directory of warm CLI servers (``xce.cli.server``) per module."""

from __future__ import annotations

import glob
import os
import signal

import pytest

from tests.helpers import process_alive, wait_for


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The module's own directory of CLI servers (``XCE_RUNTIME_DIR``); every server started there is
    stopped (by pid) at the module's end."""
    d = tmp_path_factory.mktemp("runtime")
    os.chmod(d, 0o700)
    yield str(d)
    stop_servers(str(d))


def stop_servers(runtime_dir: str) -> None:
    for pid_file in glob.glob(os.path.join(runtime_dir, "*.pid")):
        with open(pid_file) as fh:
            pid = int(fh.read())
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not process_alive(pid), what=f"CLI server {pid} gone")
