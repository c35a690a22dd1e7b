"""What the ``xce`` command's tests share: a directory of warm CLI servers (``xce.cli.server``) per module."""

from __future__ import annotations

import os

import pytest

from tests.helpers import stop_cli_servers


@pytest.fixture(scope="module")
def runtime(tmp_path_factory):
    """The module's own directory of CLI servers (``XCE_RUNTIME_DIR``); every server started there is
    stopped (by pid) at the module's end."""
    d = tmp_path_factory.mktemp("runtime")
    os.chmod(d, 0o700)
    yield str(d)
    stop_cli_servers(str(d))
