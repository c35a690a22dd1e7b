"""Transfers in flight, on a real controller: a populated claim and a job staged before allocation; the
provisioner's calls are made by hand (an admin may speak for it) so every step is seen.

Progress readings (``POST /v1/agents/provisioner/progress``) are kept in the leader's memory: they show in
``claim show`` and ``job why`` while the op is open, and never become facts.
"""

from __future__ import annotations

import pytest

from tests.helpers import ControllerProcess

GiB = 2**30
MiB = 2**20
CONFIG = """
[claims]
retry_base = 0.05
retry_cap = 0.1
max_attempts = 3

[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[users]]
name = "alice"
projects = ["default"]

[[projects]]
name = "default"

[[queues]]
name = "default"

[[pools]]
name = "p"
capacity = "100Gi"

[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    (root / "xce.toml").write_text(CONFIG)
    ctl = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
    api = ctl.client()
    alice = ctl.client(api.post("/v1/tokens", json={"user": "alice"}).json()["token"])
    epoch = api.post("/v1/agents/provisioner/lease", json={"holder": "test"}).json()["epoch"]
    yield ctl, api, alice, epoch
    alice.close()
    api.close()
    ctl.stop()


def call(api, epoch: int, path: str, body: dict) -> dict:
    r = api.post(f"/v1/agents/provisioner/{path}", json={"epoch": epoch, **body})
    assert r.status_code == 200, r.text
    return r.json()


def take(api, epoch: int, kind: str, claim_id: int) -> dict:
    """The due op of ``kind`` on the claim, its intent committed."""
    ops = [o for o in api.get("/v1/agents/provisioner/work", params={"epoch": epoch}).json()["ops"]
           if o["op"] == kind and o["claim_id"] == claim_id]
    assert ops, f"no {kind} op due for claim {claim_id}"
    call(api, epoch, "intents", {"ops": [{"op_id": ops[0]["op_id"], "claim_id": claim_id}]})
    return ops[0]


def report(api, epoch: int, op: dict, **result) -> None:
    call(api, epoch, "reports", {"results": [{"op_id": op["op_id"], "claim_id": op["claim_id"],
                                              **(result or {"ok": True, "path": "/v/x", "handle": "h"})}]})


def position(api) -> int:
    return api.get("/v1/ping").json()["log_position"]


def wait_placed(api, name: str) -> dict:
    from tests.helpers import wait_for
    return wait_for(lambda: (c := api.get(f"/v1/claims/{name}").json())["op"] is not None and c,
                    what=f"claim {name} placed")


def test_a_populated_claim_shows_what_it_copied_and_is_ready_once_done(env):
    ctl, api, alice, epoch = env
    r = alice.post("/v1/claims", json={"name": "weights", "class": "vol", "size": "8Gi", "access_mode": "ROX",
                                       "populate_from": "https://models.example/llama/"})
    assert r.status_code == 201, r.text
    claim = wait_placed(api, "weights")
    report(api, epoch, take(api, epoch, "create", claim["id"]))
    op = take(api, epoch, "populate", claim["id"])
    assert op["source"] == "https://models.example/llama/" and op["size_bytes"] == 8 * GiB
    before = position(api)
    for copied in (1 * GiB, 2 * GiB):
        got = call(api, epoch, "progress", {"items": [{"op_id": op["op_id"], "claim_id": claim["id"], "bytes": copied,
                                                       "total_bytes": 4 * GiB, "rate": 310 * MiB}]})
        assert got == {"taken": 1}
    assert position(api) == before, "readings are not facts"
    shown = alice.get("/v1/claims/weights").json()
    assert shown["state"] == "PREPARING" and shown["populate_from"] == "https://models.example/llama/"
    assert shown["transfer"]["bytes"] == 2 * GiB and shown["transfer"]["total_bytes"] == 4 * GiB
    assert shown["waiting"] == "populating: 2.0 GiB of 4.0 GiB, 310 MiB/s"
    report(api, epoch, op, ok=True, message="populate: 1 item(s)")
    shown = alice.get("/v1/claims/weights").json()
    assert shown["state"] == "READY" and shown["transfer"] is None


def test_progress_is_taken_only_from_the_agent_holding_the_ops_intent(env):
    ctl, api, alice, epoch = env
    r = alice.post("/v1/claims", json={"name": "w2", "class": "vol", "size": "1Gi", "access_mode": "ROX",
                                       "populate_from": "https://models.example/x.bin"})
    claim = wait_placed(api, "w2")
    item = {"op_id": claim["op"]["op_id"], "claim_id": claim["id"], "bytes": 5}
    assert call(api, epoch, "progress", {"items": [item]}) == {"taken": 0}, "no intent yet"
    stale = api.post("/v1/agents/provisioner/progress", json={"epoch": epoch + 7, "items": [item]})
    assert stale.status_code == 409 and stale.json()["error"]["code"] == "stale_epoch"
    denied = alice.post("/v1/agents/provisioner/progress", json={"epoch": epoch, "items": [item]})
    assert denied.status_code == 403
    assert r.status_code == 201


def test_a_job_staged_before_allocation_says_how_far_its_stage_in_is(env):
    ctl, api, alice, epoch = env
    r = alice.post("/v1/jobs", json={"command": ["true"], "stage_in": ["https://data.example/in.bin"],
                                     "stage_class": "vol", "stage_size": "4Gi"})
    assert r.status_code == 201, r.text
    job = r.json()
    stage = next(c for c in job["claims"] if c.get("kind") == "stage")
    assert stage["name"] == f"j{job['id']}.1:stage" and job["hosts"] == []
    claim = wait_placed(api, stage["name"])
    report(api, epoch, take(api, epoch, "create", claim["id"]))
    op = take(api, epoch, "stage_in", claim["id"])
    assert op["items"] == [["https://data.example/in.bin", "in.bin"]] and op["user"] == "alice"
    call(api, epoch, "progress", {"items": [{"op_id": op["op_id"], "claim_id": claim["id"], "bytes": 1288490189,
                                             "total_bytes": 4 * GiB, "rate": 310 * MiB}]})
    shown = alice.get(f"/v1/jobs/{job['id']}").json()
    assert shown["pending_reason"] == "staging in: 1.2 GiB of 4.0 GiB, 310 MiB/s", shown["pending_reason"]
    assert shown["alloc_time"] is None and shown["held_s"] is None
    report(api, epoch, op, ok=False, code="ACCESS_DENIED", retryable=False, message="via remote x: denied")
    done = alice.get(f"/v1/jobs/{job['id']}").json()
    assert done["state"] == "EXIT" and done["exit_reason"].startswith("stage-in failed: ACCESS_DENIED")
    assert done["alloc_time"] is None, "no host was ever held"


def test_shared_staging_and_populate_refuse_paths(env):
    ctl, api, alice, epoch = env
    r = alice.post("/v1/jobs", json={"command": ["true"], "stage_in": ["/etc/hostname"], "stage_class": "vol"})
    assert r.status_code == 400 and "URLs and remotes only" in r.json()["error"]["message"]
    r = alice.post("/v1/claims", json={"name": "w3", "class": "vol", "size": "1Gi", "access_mode": "ROX",
                                       "populate_from": "/etc/shadow"})
    assert r.status_code == 400 and "URL or REMOTE:path" in r.json()["error"]["message"]


def test_a_worker_cannot_report_progress_for_an_op_it_does_not_hold(env):
    """Attack: a worker's daemon identity (host h1) reports readings for the provisioner's populate op, as
    the provisioner (refused: it speaks only for itself) and as itself (dropped: not its intent)."""
    ctl, api, alice, epoch = env
    assert api.post("/v1/users", json={"name": "worker-h1", "role": "daemon", "host": "h1"}).status_code == 201
    worker = ctl.client(api.post("/v1/tokens", json={"user": "worker-h1"}).json()["token"])
    try:
        r = alice.post("/v1/claims", json={"name": "w4", "class": "vol", "size": "1Gi", "access_mode": "ROX",
                                           "populate_from": "https://models.example/y.bin"})
        assert r.status_code == 201, r.text
        claim = wait_placed(api, "w4")
        report(api, epoch, take(api, epoch, "create", claim["id"]))
        op = take(api, epoch, "populate", claim["id"])
        item = {"op_id": op["op_id"], "claim_id": claim["id"], "bytes": 999, "total_bytes": 1000}
        as_provisioner = worker.post("/v1/agents/provisioner/progress", json={"epoch": epoch, "items": [item]})
        assert as_provisioner.status_code == 403
        own = worker.post("/v1/agents/node:h1/lease", json={"holder": "w"}).json()["epoch"]
        assert worker.post("/v1/agents/node:h1/progress", json={"epoch": own, "items": [item]}).json() == {"taken": 0}
        assert alice.get("/v1/claims/w4").json()["transfer"] is None, "nothing of the forged readings is shown"
    finally:
        worker.close()
