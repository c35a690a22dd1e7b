"""Two controllers on one PostgreSQL database: one leads; the other takes over; the old one is fenced."""

from __future__ import annotations

import signal

import httpx
import pytest

from tests import pg
from tests.helpers import ControllerProcess, wait_for

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
    admin_dsn, stop = pg.server()
    dsn = pg.fresh_database(admin_dsn)
    yield dsn
    pg.drop_database(admin_dsn, dsn)


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
