"""Bounded history on a real cluster (controller, provisioner, workers, simfs): finished jobs and
released claims leave the live model after ``keep_finished`` and are still shown, with their claims,
history and audit records; a controller killed with SIGKILL serves archived and live records alike."""

from __future__ import annotations

import json
import os
import sqlite3
import threading

import pytest

from tests.helpers import Cluster, audit_trail, wait_for
from tests.integration.test_job_claims import CONFIG as JOB_CLAIMS_CONFIG

CONFIG = JOB_CLAIMS_CONFIG.replace("[controller]\n", '[controller]\nkeep_finished = "1s"\nretire_every = 0.2\n'
                                                     "snapshot_every = 40\n", 1)


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("history")
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG)
    c = Cluster(str(root), config=str(cfg)).start()
    c.add_provisioner()
    for h in ("host1", "host2"):
        c.add_worker(h, slots=4, counters={"scratch": "4Gi"})
    yield c
    c.stop()


def live_job_ids(cl: Cluster) -> set[int]:
    with cl.api() as c:
        return {j["id"] for j in c.get("/v1/jobs", params={"all": "true", "limit": 10000}).json()}


def live_claim_ids(cl: Cluster) -> set[int]:
    with cl.api() as c:
        return {x["id"] for x in c.get("/v1/claims", params={"all": "true", "limit": 10000}).json()}


def test_a_retired_job_keeps_its_claims_history_array_and_audit(cl, tmp_path):
    cl.xce("claim", "create", "hckpt", "--class", "simfs", "--size", "64Mi", "--access", "RWX", "--wait")
    job_id = cl.submit("-J", "hsweep[1-3]", "-o", "/dev/null", "--claim", "hckpt:rw", "--scratch", "64Mi", "--",
                       "sh", "-c", 'echo $XCE_ARRAY_INDEX > "$XCE_CLAIM_HCKPT/$XCE_ARRAY_INDEX"')
    ids = [job_id, job_id + 1, job_id + 2]
    for i in ids:
        cl.wait_state(i, "DONE")
    wait_for(lambda: not set(ids) & live_job_ids(cl), timeout=60, what="the array to retire")
    jobs = json.loads(cl.xce("--json", "job", "show", str(job_id)).stdout)
    assert [j["display_id"] for j in jobs] == [f"{job_id}[{i}]" for i in (1, 2, 3)]
    for j in jobs:
        assert j["state"] == "DONE" and j["exit_code"] == 0
        assert [h["state"] for h in j["history"]] == ["PEND", "RUN", "DONE"]
        by_name = {c["name"]: c for c in j["claims"]}
        assert by_name["hckpt"]["form"] == "standalone" and by_name["hckpt"]["mode"] == "rw"
        scratch = by_name[f"j{j['id']}.1:scratch"]
        assert scratch["state"] == "RELEASED"
        # the template claim is archived with its job: shown by name and id, with its whole history
        claim = json.loads(cl.xce("--json", "claim", "show", f"j{j['id']}.1:scratch").stdout)
        assert claim["id"] == scratch["claim_id"] and claim["job_id"] == j["id"]
        assert [h["state"] for h in claim["history"]][-1] == "RELEASED" and claim["ops"]
        assert scratch["claim_id"] not in live_claim_ids(cl)
        with cl.api() as c:
            assert c.get(f"/v1/claims/by-id/{scratch['claim_id']}").json() == claim
            claim_trail = audit_trail(c, target=f"claim/j{j['id']}.1:scratch")
            assert [r["result"] for r in claim_trail if r["action"] == "claim.state"][-1] == "RELEASED"
    with cl.api() as c:  # the submission's record names the array's parent, which is archived too
        assert [r["action"] for r in audit_trail(c, target=f"job/{job_id}")] == ["POST /v1/jobs"]
    hist = json.loads(cl.xce("--json", "hist", "--name", "hsweep").stdout)
    assert [h["id"] for h in hist] == ids and all(h["archived"] and h["state"] == "DONE" for h in hist)
    # the standalone claim the array used is live, and holds what its elements wrote
    assert sorted(os.listdir(cl.claim("hckpt")["path"])) == ["1", "2", "3"]


def test_a_released_standalone_claim_is_archived_and_still_shown(cl):
    cl.xce("claim", "create", "hgone", "--class", "simfs", "--size", "16Mi", "--access", "RWO", "--wait")
    cl.xce("claim", "delete", "hgone", "--wait")
    claim_id = cl.claim("hgone")["id"]
    wait_for(lambda: claim_id not in live_claim_ids(cl), timeout=60, what="the claim to retire")
    shown = json.loads(cl.xce("--json", "claim", "show", "hgone").stdout)
    assert shown["id"] == claim_id and shown["state"] == "RELEASED"
    assert json.loads(cl.xce("--json", "claim", "show", str(claim_id)).stdout) == shown  # by id too
    assert [h["state"] for h in shown["history"]] == ["PENDING", "PREPARING", "READY", "RELEASING", "RELEASED"]
    usage = json.loads(cl.xce("--json", "usage", "--since", "1h").stdout)
    assert any(u["project"] == "default" and u["claims"] >= 1 and u["claim_byte_hours"] > 0 for u in usage)


def test_history_pages_every_job_once_while_jobs_run_finish_and_retire(cl):
    first = [cl.submit("-J", "hpage", "-o", "/dev/null", "--", "true") for _ in range(12)]
    for i in first:
        cl.wait_state(i, "DONE")
    stop = threading.Event()
    made: list[int] = []

    def arrive() -> None:
        while not stop.is_set() and len(made) < 40:
            made.append(cl.submit("-J", "hpage", "-o", "/dev/null", "--", "true"))

    t = threading.Thread(target=arrive)
    t.start()
    try:
        seen: list[int] = []
        cursor = None
        with cl.api() as c:
            while True:
                r = c.get("/v1/history/jobs", params={"name": "hpage", "limit": 3, "all": "true",
                                                      **({"cursor": cursor} if cursor else {})})
                assert r.status_code == 200, r.text
                seen += [j["id"] for j in r.json()]
                cursor = r.headers.get("X-Next-Cursor")
                if cursor is None:
                    break
    finally:
        stop.set()
        t.join()
    assert len(seen) == len(set(seen)), "a job shown twice"
    assert set(first) <= set(seen), f"jobs skipped: {sorted(set(first) - set(seen))}"


def test_a_controller_killed_serves_archived_and_live_records_after_restart(cl):
    done = cl.submit("-J", "hkill", "-o", "/dev/null", "--", "true")
    cl.wait_state(done, "DONE")
    wait_for(lambda: done not in live_job_ids(cl), timeout=60, what="retirement")
    held = cl.submit("-J", "hkill-live", "-H", "--", "true")
    before = {i: cl.job(i) for i in (done, held)}
    # the snapshot holds the live model only: no job retired before its position is in it
    with sqlite3.connect(os.path.join(cl.ctl.state_dir, "xce.db")) as db:
        position, data = db.execute("SELECT position, data FROM xce_snapshot WHERE id = 1").fetchone()
        archived = {r[0] for r in db.execute("SELECT id FROM xce_archive_jobs WHERE position <= ?", (position,))}
        assert done in {r[0] for r in db.execute("SELECT id FROM xce_archive_jobs")}
    assert archived and not archived & {j["id"] for j in json.loads(data)["jobs"]}
    cl.ctl.kill()
    cl.ctl.start()
    for w in cl.workers.values():  # (the workers find the new controller by themselves)
        assert w.proc.poll() is None
    assert {i: cl.job(i) for i in (done, held)} == before
    hist = json.loads(cl.xce("--json", "hist", "--name", "hkill").stdout)
    assert [h["id"] for h in hist] == [done]
