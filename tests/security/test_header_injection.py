"""Issue 27, finding 4: a token or URL with control characters is refused before anything is sent.

``XCE_TOKEN=$'tok\\r\\nX-Injected: 1' xce jobs``: the native front refused it and handed over to the
Python CLI, whose client sent the header.  Here every front door is run against a listener on
loopback that records every byte it is sent (and answers 401, as a controller would): the ``xce``
command (its native front, and the Python CLI), the Python client, and the daemons (``xce worker``
from ``XCE_TOKEN``, ``xce provisioner`` from a token file).  Each must refuse, say why, and send
nothing at all.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest

from tests.cli.test_native import build
from tests.helpers import XCE, cli, write_token_file
from xce.client import Client, InvalidToken, InvalidURL

INJECTED = "tok\r\nX-Injected: 1"


class Listener:
    """A TCP listener on 127.0.0.1 that keeps whatever it is sent and answers 401."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.received: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True, name="listener")
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    body = b'{"error":{"code":"unauthenticated","message":"invalid or revoked token"}}'
                    conn.sendall(b"HTTP/1.1 401 Unauthorized\r\nContent-Type: application/json\r\n"
                                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
                except OSError:
                    pass
                self.received.append(data)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener():
    s = Listener()
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
        r = cli(env, *argv[len(XCE):]) if argv[:len(XCE)] == XCE else cli_native(argv, env)
        assert r.returncode == 2 and "control character" in r.stderr, (what, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr, what
    # a URL with a CR LF in it: a request line and headers of the caller's choosing
    bad_url = {**env, "XCE_TOKEN": "xce_0123456789ab_fine", "XCE_URL": listener.url + "/\r\nX-Injected: 1"}
    for argv in ([native, "jobs"], [*XCE, "jobs"]):
        r = cli(bad_url, *argv[len(XCE):]) if argv[:len(XCE)] == XCE else cli_native(argv, bad_url)
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


def cli_native(argv: list[str], env: dict[str, str]):
    import subprocess

    return subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
