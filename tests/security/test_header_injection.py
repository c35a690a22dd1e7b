"""Issue 27, finding 4: a token or URL with control characters is refused before anything is sent.

``XCE_TOKEN=$'tok\\r\\nX-Injected: 1' xce jobs``: the native front refused it and handed over to the
Python CLI, whose client sent the header.  Here every front door is run against a listener on
loopback that records every byte it is sent (and answers 401, as a controller would): the ``xce``
command (its native front, and the Python CLI), the Python client, and the daemons (``xce worker``
from ``XCE_TOKEN``, ``xce provisioner`` from a token file).  Each must refuse, say why, and send
nothing at all.
"""

from __future__ import annotations

import sys

import pytest

from tests.cli.test_native import build
from tests.helpers import XCE, cli, run_command, write_token_file
from tests.raw_server import RawServer
from xce.client import Client, InvalidToken, InvalidURL

INJECTED = "tok\r\nX-Injected: 1"


@pytest.fixture
def listener():
    s = RawServer()  # answers 401, as a controller would
    yield s
    s.close()


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return build(str(tmp_path_factory.mktemp("native") / "xce"), sys.executable)


def test_no_front_door_sends_a_token_or_url_with_control_characters(listener, native, tmp_path):
    env = {"XCE_URL": listener.url, "XCE_TOKEN": INJECTED, "XCE_CONFIG": ""}
    runs = {
        "native jobs": [native, "jobs"],
        "native submit": [native, "submit", "--", "true"],
        "python jobs": [*XCE, "jobs"],
        "python submit": [*XCE, "submit", "--", "true"],
        "worker": [*XCE, "worker", "--host", "h1", "--controller", listener.url, "--work-dir", str(tmp_path / "w")],
    }
    token_file = write_token_file(str(tmp_path / "token"), INJECTED)
    provisioner_config = tmp_path / "provisioner.toml"
    provisioner_config.write_text(f'[providers.simfs.config]\nroot = "{tmp_path}"\n')
    runs["provisioner"] = [*XCE, "provisioner", "--controller", listener.url, "--config", str(provisioner_config),
                           "--token-file", token_file]
    for what, argv in runs.items():
        r = run_command(argv, env)
        assert r.returncode == 2 and "control character" in r.stderr, (what, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr, what
    # a URL with a CR LF in it: a request line and headers of the caller's choosing
    bad_url = {**env, "XCE_TOKEN": "xce_0123456789ab_fine", "XCE_URL": listener.url + "/\r\nX-Injected: 1"}
    for argv in ([native, "jobs"], [*XCE, "jobs"]):
        r = run_command(argv, bad_url)
        assert r.returncode == 2 and "control character" in r.stderr, (argv[0], r.returncode, r.stderr)
    with pytest.raises(InvalidToken):
        Client(listener.url, INJECTED)
    with pytest.raises(InvalidURL):
        Client(listener.url + "/\r\nX-Injected: 1", "xce_0123456789ab_fine")
    assert listener.received == [], "nothing may be sent"
    # and the listener was there to hear it: a clean token reaches it
    r = cli({**env, "XCE_TOKEN": "xce_0123456789ab_fine"}, "jobs")
    assert r.returncode == 1 and "invalid or revoked token" in r.stderr, r.stderr
    assert len(listener.received) == 1 and b"X-Injected" not in listener.received[0]

