"""Two controllers on one PostgreSQL database: one leads; the other takes over; the old one is fenced."""

from __future__ import annotations

import os
import signal

import httpx
import pytest

from tests import pg
from tests.helpers import ControllerProcess, cli, wait_for
from xce.client import Client, Unreachable

CONFIG = """
[controller]
lease_ttl = 1.5
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
"""


@pytest.fixture
def pg_dsn():
    with pg.database() as dsn:
        yield dsn


def test_only_the_lease_holder_writes_and_a_deposed_leader_is_fenced(tmp_path, pg_dsn):
    cfg = tmp_path / "xce.toml"
    cfg.write_text(CONFIG)
    a = ControllerProcess(state_dir=str(tmp_path / "a"), store=pg_dsn, config=str(cfg)).start()
    b = ControllerProcess(state_dir=str(tmp_path / "b"), store=pg_dsn, config=str(cfg)).start(wait_leader=False)
    token = a.token
    try:
        with a.client(token) as ca, b.client(token) as cb:
            epoch_a = ca.get("/v1/ping").json()["leader_epoch"]
            assert ca.post("/v1/jobs", json={"command": ["true"], "name": "on-a"}).status_code == 201
            # the standby refuses writes (and reads) while it does not hold the lease
            r = cb.post("/v1/jobs", json={"command": ["true"], "name": "on-b"})
            assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"
            assert not b.is_leader()

            a.signal(signal.SIGSTOP)  # the holder stops renewing (but is not dead)
            try:
                wait_for(b.is_leader, timeout=30, what="the standby to take the lease")
                ping_b = cb.get("/v1/ping").json()
                assert ping_b["leader_epoch"] > epoch_a
                assert [j["name"] for j in cb.get("/v1/jobs").json()] == ["on-a"]
                assert cb.post("/v1/jobs", json={"command": ["true"], "name": "on-b"}).status_code == 201
            finally:
                a.signal(signal.SIGCONT)
            # the old holder wakes up still believing it leads: its late write is refused by the store
            try:
                late = ca.post("/v1/jobs", json={"command": ["true"], "name": "late-from-a"}, timeout=20)
                assert late.status_code == 503, late.text
            except httpx.HTTPError:
                pass
            names = [j["name"] for j in cb.get("/v1/jobs").json()]
            assert names == ["on-a", "on-b"]
            wait_for(lambda: not a.is_leader(), timeout=20, what="the old holder to step down")
    finally:
        a.stop()
        b.stop()


def _token_everywhere(a: ControllerProcess, *others: ControllerProcess) -> str:
    """The first leader's admin token, in every controller's state dir (each reads its own)."""
    token = a.token
    for c in others:
        with open(os.path.join(c.state_dir, "admin.token"), "w") as fh:
            fh.write(token + "\n")
    return token


def test_a_standby_names_the_leader_and_clients_follow_it(tmp_path, pg_dsn):
    cfg = tmp_path / "xce.toml"
    cfg.write_text(CONFIG)
    a = ControllerProcess(state_dir=str(tmp_path / "a"), store=pg_dsn, config=str(cfg)).start()
    b = ControllerProcess(state_dir=str(tmp_path / "b"), store=pg_dsn, config=str(cfg)).start(wait_leader=False)
    try:
        token = _token_everywhere(a, b)
        with b.client(token) as cb:
            # the standby's 503 names the leader's advertised URL (from its config: the listen address)
            r = wait_for(lambda: (r := cb.post("/v1/jobs", json={"command": ["true"]})).json()["error"].get("leader")
                         and r, what="the standby to learn the leader's URL")
            assert r.status_code == 503 and r.json()["error"] == {
                "code": "unavailable", "leader": a.url,
                "message": r.json()["error"]["message"]} and a.url in r.json()["error"]["message"]
            # attack: a request cannot choose where clients are sent (Host, X-Forwarded-*, Forwarded)
            forged = cb.post("/v1/jobs", json={"command": ["true"]},
                             headers={"Host": "evil.example:80", "X-Forwarded-Host": "evil.example",
                                      "X-Forwarded-Proto": "https", "Forwarded": "host=evil.example"})
            assert forged.status_code == 503 and forged.json()["error"]["leader"] == a.url
            assert "evil" not in forged.text
        # one URL, a standby's: the client goes where it is sent
        with Client(b.url, token) as c:
            assert c.ping()["url"] == a.url and c.url == a.url
        # two URLs, the standby first: the same
        with Client(f"{b.url},{a.url}", token) as c:
            ping = wait_for(lambda: (p := c.ping())["standbys"] and p, what="the standby to announce itself")
            assert (ping["url"], ping["standbys"]) == (a.url, [b.url])
            listed = wait_for(lambda: (cs := c.get("/v1/controllers")) and cs[1]["behind"] == 0 and cs,
                              what="the standby to follow the log")
            assert [(x["url"], x["role"]) for x in listed] == [(a.url, "leader"), (b.url, "standby")]
            # a retried submission (same request id) returns the first job, never a second
            first = c.submit(["true"], name="once", request_id="retry-me-1")
            again = c.submit(["true"], name="once", request_id="retry-me-1")
            assert again["id"] == first["id"]
            assert [j["name"] for j in c.jobs()].count("once") == 1
        env = {"XCE_URL": f"{b.url},{a.url}", "XCE_TOKEN": token, "XCE_CONFIG": ""}
        out = cli(env, "ping")
        assert out.returncode == 0 and f"Leader:       {a.url}" in out.stdout and b.url in out.stdout, out
        out = cli(env, "controllers")
        assert out.returncode == 0 and "leader" in out.stdout and "standby" in out.stdout, out

        # the leader dies: the standby takes over, replays the tail it had not followed, and serves
        a.kill()
        with Client(f"{a.url},{b.url}", token, failover=60) as c:
            job = c.submit(["true"], name="after")
            assert c.url == b.url
            assert c.ping()["leader_epoch"] > 1
            assert {j["name"] for j in c.jobs()} == {"once", "after"} and job["id"] > first["id"]
            # the request id is in the log: a retry on the new leader still finds the first job
            assert c.submit(["true"], name="once", request_id="retry-me-1")["id"] == first["id"]
    finally:
        a.stop()
        b.stop()


def test_a_client_with_no_live_controller_gives_up_after_its_failover_wait(tmp_path):
    from tests.helpers import free_port

    urls = f"http://127.0.0.1:{free_port()},http://127.0.0.1:{free_port()}"
    with pytest.raises(Unreachable, match="no leader among"):
        Client(urls, "x", failover=0.5).ping()
