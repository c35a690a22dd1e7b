"""The audit trail lives in the store: every record exactly once across restarts (SIGKILL and clean),
an old state directory keeps its trail, and snapshots no longer grow with audit traffic."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from tests.helpers import ControllerProcess, audit_trail
from xce.config import DEFAULT_CONFIG

pytestmark = pytest.mark.long  # started first under make test (tests/conftest.py)

# every refusal its own record (the limiter's bucket never runs dry here), and frequent snapshots
CONFIG = (DEFAULT_CONFIG
          .replace("snapshot_every = 50000", "snapshot_every = 25")
          .replace("refusal_audit_rate = 1.0", "refusal_audit_rate = 1000.0")
          .replace("refusal_audit_burst = 20", "refusal_audit_burst = 5000")
          .replace("refusal_audit_global_rate = 50.0", "refusal_audit_global_rate = 10000.0"))


def controller(tmp_path, config: str = CONFIG) -> ControllerProcess:
    (tmp_path / "xce.toml").write_text(config)
    return ControllerProcess(state_dir=str(tmp_path / "ctl"), config=str(tmp_path / "xce.toml"))


def db(ctl: ControllerProcess) -> sqlite3.Connection:
    return sqlite3.connect(os.path.join(ctl.state_dir, "xce.db"))


def snapshot(ctl: ControllerProcess) -> tuple[int, dict]:
    """The stored snapshot's size in bytes and its content."""
    with db(ctl) as conn:
        (data,) = conn.execute("SELECT data FROM xce_snapshot WHERE id = 1").fetchone()
    return len(data), json.loads(data)


def new_user(ctl: ControllerProcess, name: str) -> str:
    with ctl.client() as c:
        assert c.post("/v1/users", json={"name": name, "projects": ["default"]}).status_code == 201
        return c.post("/v1/tokens", json={"user": name}).json()["token"]


def traffic(ctl: ControllerProcess, token: str, jobs: int, refusals: int) -> list[int]:
    with ctl.client(token) as c:
        ids = [c.post("/v1/jobs", json={"command": ["true"], "name": f"a{i}"}).json()["id"] for i in range(jobs)]
        for _ in range(refusals):
            assert c.post("/v1/jobs", json={"command": ["true"], "queue": "nope"}).status_code == 404
            assert c.get("/v1/users").status_code == 403
    return ids


def what(rec: dict) -> tuple:
    return rec["time"], rec["user"], rec["action"], rec["target"], rec["result"], rec["detail"]


def assert_once(trail: list[dict], job_ids: list[int]) -> None:
    assert len({r["seq"] for r in trail}) == len(trail)
    assert len({(r["position"], what(r)) for r in trail}) == len(trail), "a record written twice"
    submits = [r["target"] for r in trail if r["action"] == "POST /v1/jobs" and r["result"] == "ok"]
    assert sorted(submits) == sorted(f"job/{i}" for i in job_ids)


def test_every_record_exactly_once_across_sigkill_and_clean_restarts(tmp_path):
    ctl = controller(tmp_path).start()
    try:
        alice = new_user(ctl, "alice")
        ids = traffic(ctl, alice, jobs=40, refusals=15)  # ~130 facts: five snapshots, and a tail
        with ctl.client() as c:
            first = audit_trail(c)
        assert_once(first, ids)
        assert sum(r["result"] == "forbidden" for r in first) == 15
        ctl.kill()  # SIGKILL: the restart replays the tail after the newest snapshot

        ctl.start()
        with ctl.client() as c:
            second = audit_trail(c)
        assert second[:len(first)] == first
        assert_once(second, ids)
        ids += traffic(ctl, alice, jobs=5, refusals=2)
        with ctl.client() as c:
            third = audit_trail(c)
        assert ctl.stop() == 0  # clean: a snapshot at the end, nothing to replay

        ctl.start()
        with ctl.client() as c:
            fourth = audit_trail(c)
        assert fourth[:len(third)] == third
        assert_once(fourth, ids)
        assert all(r["position"] > 0 for r in fourth)  # every record names the fact it came with
    finally:
        ctl.stop()


def test_snapshot_size_does_not_grow_with_audit_traffic(tmp_path):
    ctl = controller(tmp_path, CONFIG.replace("snapshot_every = 25", "snapshot_every = 1000000")).start()
    try:
        alice = new_user(ctl, "alice")
        assert ctl.stop() == 0
        size_before, snap = snapshot(ctl)
        assert snap["format"] == 2 and "audit" not in snap
        ctl.start()
        with ctl.client() as c:
            records_before = len(audit_trail(c))
        with ctl.client(alice) as c:
            for _ in range(1000):
                assert c.get("/v1/users").status_code == 403  # refused: an audit record, no other state
        with ctl.client() as c:
            assert len(audit_trail(c)) >= records_before + 1000
        assert ctl.stop() == 0
        size_after, snap = snapshot(ctl)
        print(f"snapshot: {size_before} bytes before, {size_after} bytes after 1000 audited refusals")
        # the log position and counters may gain a digit or two; audit traffic adds nothing
        assert size_after - size_before <= 64, (size_before, size_after)
    finally:
        ctl.stop()


def test_an_old_state_directory_keeps_its_trail(tmp_path):
    """A snapshot of format 1 carried the trail, and the log's tail had its records only in memory:
    both move into the audit table once, and a snapshot without audit replaces the old one."""
    ctl = controller(tmp_path, CONFIG.replace("snapshot_every = 25", "snapshot_every = 1000000")).start()
    try:
        alice = new_user(ctl, "alice")
        ids = traffic(ctl, alice, jobs=5, refusals=2)
        with ctl.client() as c:
            in_snapshot = audit_trail(c)
        assert ctl.stop() == 0  # snapshot at P; the log before it compacted
        ctl.start()
        ids += traffic(ctl, alice, jobs=4, refusals=1)
        with ctl.client() as c:
            everything = audit_trail(c)
        ctl.kill()  # the tail after P stays in the log
    finally:
        ctl.stop()
    # make it look as the previous version left it: no audit table, the trail in a format-1 snapshot
    _, snap = snapshot(ctl)
    snap["format"] = 1
    snap["audit"] = [{"seq": i, **{k: r[k] for k in ("time", "user", "action", "target", "result", "detail")}}
                     for i, r in enumerate(in_snapshot, start=1)]
    with db(ctl) as conn:
        conn.execute("UPDATE xce_snapshot SET data = ? WHERE id = 1", (json.dumps(snap).encode(),))
        conn.execute("DROP TABLE xce_audit")
    conn.close()

    ctl.start()
    try:
        with ctl.client() as c:
            migrated = audit_trail(c)
        assert [what(r) for r in migrated[:len(everything)]] == [what(r) for r in everything]
        assert [r["position"] for r in migrated[:len(in_snapshot)]] == [0] * len(in_snapshot)
        assert all(r["position"] > 0 for r in migrated[len(in_snapshot):])
        assert_once(migrated, ids)
        size, snap = snapshot(ctl)
        assert snap["format"] == 2 and "audit" not in snap  # rewritten at once
        ctl.kill()
        ctl.start()
        with ctl.client() as c:
            again = audit_trail(c)
        assert again[:len(migrated)] == migrated
        assert_once(again, ids)
    finally:
        ctl.stop()
