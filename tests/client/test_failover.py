"""``Transport``'s leader following against tiny loopback servers that misbehave on purpose.

A real standby and a real failover are in ``tests/controller/test_failover.py`` and
``tests/integration/test_failover.py``; here each server does one thing: answer, say who leads
(503 naming a URL), or take a request and close without answering (an answer lost).
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from xce.client import ApiError, Client, Unreachable


class Server:
    def __init__(self, reply) -> None:
        self.calls: list[tuple[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _any(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                outer.calls.append((self.command, self.path))
                status, doc = reply(self)
                data = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Mute:
    """Reads each request, then closes the connection without a word."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.requests = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            self.requests += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def servers():
    made = []

    def make(kind, reply=None):
        s = Mute() if kind == "mute" else Server(reply)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def test_a_standby_sends_the_call_to_the_leader_it_names(servers):
    leader = servers("ok", lambda h: (201, {"id": 1}))
    standby = servers("ok", lambda h: (503, {"error": {"code": "unavailable", "message": "not the leader",
                                                       "leader": leader.url}}))
    with Client(standby.url, "t") as c:  # one URL: the leader it names is followed all the same
        assert c.post("/v1/jobs", {"command": ["true"]}) == {"id": 1}
        assert c.url == leader.url and c.urls == [standby.url, leader.url]
        assert c.get("/v1/ping") == {"id": 1} and len(standby.calls) == 1  # remembered: straight there


def test_a_lost_answer_is_sent_again_only_when_the_call_is_idempotent(servers):
    mute = servers("mute")
    other = servers("ok", lambda h: (200, {"ok": True}))
    urls = f"{mute.url},{other.url}"
    with Client(urls, "t", failover=5) as c:
        with pytest.raises(Unreachable, match="closed the connection"):
            c.post("/v1/users", {"name": "x"})  # may have been done: not sent again
        assert other.calls == []
        assert c.get("/v1/jobs") == {"ok": True}  # a read is
        assert c.url == other.url
    with Client(urls, "t", failover=5) as c:
        assert c.submit(["true"]) == {"ok": True}  # a submission carries its request id: it is
        body_seen = other.calls[-1]
        assert body_seen == ("POST", "/v1/jobs")
    with Client(urls, "t", failover=5, retry_mutations=True) as c:  # the daemons'
        assert c.post("/v1/hosts/h/reports", {}) == {"ok": True}


def test_a_store_failure_503_is_ambiguous_and_a_refusal_is_final(servers):
    sick = servers("ok", lambda h: (503, {"error": {"code": "unavailable", "message": "commit refused"}}))
    no = servers("ok", lambda h: (403, {"error": {"code": "forbidden", "message": "no"}}))
    ok = servers("ok", lambda h: (200, {"ok": True}))
    with Client(f"{sick.url},{ok.url}", "t", failover=5) as c:
        with pytest.raises(ApiError, match="commit refused"):
            c.post("/v1/claims", {})
        assert c.get("/v1/claims") == {"ok": True}
    with Client(f"{no.url},{ok.url}", "t", failover=5) as c:
        with pytest.raises(ApiError, match="no") as e:
            c.get("/v1/claims")
        assert e.value.status == 403 and ok.calls == [("GET", "/v1/claims")]


def test_nobody_leading_backs_off_and_gives_up_after_the_failover_wait(servers):
    calls = []
    a = servers("ok", lambda h: (calls.append(1), (503, {"error": {"code": "unavailable", "message": "election",
                                                                    "leader": None}}))[1])
    b = servers("ok", lambda h: (503, {"error": {"code": "unavailable", "message": "election", "leader": None}}))
    with Client(f"{a.url},{b.url}", "t", failover=1.0) as c:
        with pytest.raises(ApiError, match=r"election \(no leader among") as e:
            c.get("/v1/ping")
        assert e.value.status == 503
    assert 2 <= len(calls) <= 12  # tried again, with pauses between rounds: not a busy loop
