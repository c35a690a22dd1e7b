"""The controller loses no acknowledged fact: clean restarts, SIGKILL mid-burst, snapshots."""

from __future__ import annotations

import concurrent.futures
import os
import sqlite3
import threading


import httpx

from tests.helpers import ControllerProcess, audit_trail, wait_for


def submit_burst(ctl: ControllerProcess, clients: int, stop: threading.Event,
                 acked: list[int], attempted: list[int]) -> None:
    def one_client(i: int) -> None:
        with ctl.client() as c:
            n = 0
            while not stop.is_set():
                n += 1
                attempted.append(1)
                try:
                    r = c.post("/v1/jobs", json={"command": ["echo", f"{i}-{n}"], "name": f"c{i}-{n}"})
                except httpx.HTTPError:
                    return  # the controller died under us: this one was never acknowledged
                if r.status_code == 201:
                    acked.append(r.json()["id"])

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(one_client, range(clients)))


def test_sigkill_mid_burst_loses_no_acknowledged_job(tmp_path):
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    acked: list[int] = []
    attempted: list[int] = []
    stop = threading.Event()
    burst = threading.Thread(target=submit_burst, args=(ctl, 16, stop, acked, attempted))
    burst.start()
    wait_for(lambda: len(acked) >= 300, what="300 acknowledged submissions")
    ctl.kill()  # SIGKILL while requests are in flight
    stop.set()
    burst.join(30)
    assert len(attempted) > len(acked) or len(acked) >= 300

    ctl2 = ControllerProcess(state_dir=ctl.state_dir).start()
    try:
        with ctl2.client() as c:
            jobs = c.get("/v1/jobs", params={"all": "true"}).json()
            by_id = {j["id"]: j for j in jobs}
            missing = set(acked) - set(by_id)
            assert not missing, f"acknowledged jobs lost after SIGKILL: {sorted(missing)[:10]}"
            # nothing half-written: every job that exists is whole and has its audit record
            for j in jobs:
                assert j["state"] == "PEND" and j["command"][0] == "echo" and j["name"].startswith("c")
            audit = audit_trail(c)
            submits = [a for a in audit if a["action"] == "POST /v1/jobs" and a["result"] == "ok"]
            assert len(submits) == len(jobs)
            # ids stay unique and the log goes on after the crash
            r = c.post("/v1/jobs", json={"command": ["true"]})
            assert r.status_code == 201 and r.json()["id"] not in by_id
    finally:
        ctl2.stop()


def test_clean_restart_snapshots_and_keeps_state(tmp_path):
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    with ctl.client() as c:
        ids = [c.post("/v1/jobs", json={"command": ["true"], "name": f"j{i}"}).json()["id"] for i in range(20)]
        before = c.get("/v1/jobs").json()
        pos_before = c.get("/v1/ping").json()["log_position"]
    assert ctl.stop() == 0
    db = sqlite3.connect(os.path.join(ctl.state_dir, "xce.db"))
    (snap_pos,) = db.execute("SELECT position FROM xce_snapshot").fetchone()
    (left,) = db.execute("SELECT COUNT(*) FROM xce_facts").fetchone()
    db.close()
    assert snap_pos == pos_before, "clean shutdown writes a snapshot at the committed position"
    assert left == 0, "the log behind the snapshot is compacted"

    ctl2 = ControllerProcess(state_dir=ctl.state_dir).start()
    try:
        with ctl2.client() as c:
            assert c.get("/v1/jobs").json() == before
            ping = c.get("/v1/ping").json()
            assert ping["leader_epoch"] == 2  # a new holder takes a new epoch
            assert [j["id"] for j in before] == ids
    finally:
        ctl2.stop()


def test_periodic_snapshot_and_compaction(tmp_path):
    cfg = tmp_path / "xce.toml"
    cfg.write_text(
        '[controller]\nsnapshot_every = 25\n'
        '[[users]]\nname = "admin"\nrole = "admin"\nprojects = ["default"]\n'
        '[[queues]]\nname = "default"\npriority = 30\n'
        '[[projects]]\nname = "default"\n')
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl"), config=str(cfg)).start()
    try:
        with ctl.client() as c:
            for i in range(60):
                assert c.post("/v1/jobs", json={"command": ["true"]}).status_code == 201
        db = sqlite3.connect(os.path.join(ctl.state_dir, "xce.db"))
        wait_for(lambda: db.execute("SELECT COUNT(*) FROM xce_snapshot").fetchone()[0] == 1,
                 what="a periodic snapshot")
        (snap_pos,) = db.execute("SELECT position FROM xce_snapshot").fetchone()
        (oldest,) = db.execute("SELECT MIN(position) FROM xce_facts").fetchone()
        db.close()
        assert snap_pos >= 25
        assert oldest is None or oldest > snap_pos
    finally:
        ctl.kill()
    # recovery from snapshot + tail after a crash
    ctl2 = ControllerProcess(state_dir=ctl.state_dir, config=str(cfg)).start()
    try:
        with ctl2.client() as c:
            assert len(c.get("/v1/jobs").json()) == 60
    finally:
        ctl2.stop()



def test_restart_after_sigkill_leads_before_the_dead_leaders_lease_would_expire(tmp_path):
    """On the embedded store leadership is a lock that dies with its process: a controller restarted
    after SIGKILL leads and takes a submission at once, while the dead leader's lease row still
    claims the lease (its TTL is long, so waiting it out could not pass this test)."""
    cfg = tmp_path / "xce.toml"
    cfg.write_text(
        '[controller]\nlease_ttl = 60\n'
        '[[users]]\nname = "admin"\nrole = "admin"\nprojects = ["default"]\n'
        '[[queues]]\nname = "default"\n'
        '[[projects]]\nname = "default"\n')
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl"), config=str(cfg)).start()
    with ctl.client() as c:
        first = c.post("/v1/jobs", json={"command": ["true"]}).json()["id"]
    db = sqlite3.connect(os.path.join(ctl.state_dir, "xce.db"))
    old_holder, old_epoch, old_expires = db.execute(
        "SELECT holder, epoch, expires_at FROM xce_lease WHERE name='leader'").fetchone()
    ctl.kill()

    ctl2 = ControllerProcess(state_dir=ctl.state_dir, config=str(cfg)).start()  # waits for /healthz leader
    try:
        with ctl2.client() as c:
            r = c.post("/v1/jobs", json={"command": ["true"], "name": "after-the-crash"})
            assert r.status_code == 201 and r.json()["id"] > first
            second = r.json()["id"]
        holder, epoch, _ = db.execute("SELECT holder, epoch, expires_at FROM xce_lease WHERE name='leader'").fetchone()
        assert holder != old_holder and epoch == old_epoch + 1
        # the submission's fact was written by the new epoch, and its audit record's time (the
        # controller's clock, stored with the fact) is before the dead leader's lease would have run out
        position, when = db.execute("SELECT position, time FROM xce_audit WHERE action = 'POST /v1/jobs'"
                                    " AND target = ? ORDER BY seq DESC LIMIT 1", (f"job/{second}",)).fetchone()
        (fact_epoch,) = db.execute("SELECT epoch FROM xce_facts WHERE position = ?", (position,)).fetchone()
        assert fact_epoch == old_epoch + 1
        assert when < old_expires
    finally:
        db.close()
        ctl2.stop()
