"""``POST /v1/claims/{name}/resize`` and what shows a resize, used bytes and provider capacity, on a real
controller; the provisioner's calls are made by hand (an admin may speak for it) so every step is seen."""

from __future__ import annotations

import pytest

from tests.helpers import ControllerProcess, wait_for

GiB = 2**30
CONFIG = """
[claims]
retry_base = 0.05
retry_cap = 0.1
max_attempts = 2

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
capacity = "10Gi"

[[claim_classes]]
name = "grow"
provider = "simfs"
pools = ["p"]

[[claim_classes]]
name = "fixed"
provider = "fixedfs"
pools = ["p"]
"""
CAN = {"create_snapshot": False, "clone": False, "expand": True, "online_expand": True,
       "access_modes": ["RWO", "RWX"]}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    root = tmp_path_factory.mktemp("resize")
    (root / "xce.toml").write_text(CONFIG)
    ctl = ControllerProcess(state_dir=str(root / "ctl"), config=str(root / "xce.toml")).start()
    api = ctl.client()
    alice = ctl.client(api.post("/v1/tokens", json={"user": "alice"}).json()["token"])
    epoch = api.post("/v1/agents/provisioner/lease", json={"holder": "test"}).json()["epoch"]
    yield ctl, api, alice, epoch
    alice.close()
    api.close()
    ctl.stop()


def agent(api, epoch: int, path: str, body: dict) -> dict:
    r = api.post(f"/v1/agents/provisioner/{path}", json={"epoch": epoch, **body})
    assert r.status_code == 200, r.text
    return r.json()


def run_due(api, epoch: int, results: dict[str, dict]) -> list[dict]:
    """Take the due ops, commit their intents, report ``results[op kind]`` for each."""
    ops = api.get("/v1/agents/provisioner/work", params={"epoch": epoch}).json()["ops"]
    agent(api, epoch, "intents", {"ops": [{"op_id": o["op_id"], "claim_id": o["claim_id"]} for o in ops]})
    agent(api, epoch, "reports", {"results": [{"op_id": o["op_id"], "claim_id": o["claim_id"], **results.get(o["op"], {"ok": True})}
                                              for o in ops]})
    return ops


def ready(api, epoch, name: str, cls: str = "grow", size: str = "2Gi") -> dict:
    r = api.post("/v1/claims", json={"name": name, "class": cls, "size": size, "access_mode": "RWO"})
    assert r.status_code == 201, r.text
    wait_for(lambda: api.get(f"/v1/claims/{name}").json()["op"], what="placed")
    run_due(api, epoch, {"create": {"ok": True, "handle": f"h-{name}", "size_bytes": r.json()["size_bytes"]}})
    return api.get(f"/v1/claims/{name}").json()


def log_position(api) -> float:
    return next(float(line.split()[1]) for line in api.get("/metrics").text.splitlines()
                if line.startswith("xce_log_position "))


def claim(api, name: str) -> dict:
    return api.get(f"/v1/claims/{name}").json()


def test_capabilities_are_reported_by_the_agent_and_shown_with_the_classes(env):
    ctl, api, alice, epoch = env
    out = agent(api, epoch, "capabilities", {"classes": [
        {"class_name": "grow", "provider": "simfs", "capabilities": CAN},
        {"class_name": "fixed", "provider": "fixedfs", "capabilities": None},
        {"class_name": "grow", "provider": "btrfs", "capabilities": CAN}]})
    assert out["changed"] == 2 and out["refused"] == {"grow": "claim class grow is provided by simfs, not btrfs"}
    again = agent(api, epoch, "capabilities", {"classes": [
        {"class_name": "grow", "provider": "simfs", "capabilities": CAN}]})
    assert again["changed"] == 0, "the same answer again is no new fact"
    classes = {c["name"]: c["capabilities"] for c in api.get("/v1/claimclasses").json()}
    assert classes == {"grow": {"create_snapshot": False, "clone": False, "expand": True, "online_expand": True},
                       "fixed": dict.fromkeys(("create_snapshot", "clone", "expand", "online_expand"), False)}
    r = api.post("/v1/agents/provisioner/capabilities", json={"epoch": epoch + 5, "classes": []})
    assert r.status_code == 409 and r.json()["error"]["code"] == "stale_epoch"


def test_resize_is_accepted_reserved_expanded_and_shown(env):
    ctl, api, alice, epoch = env
    ready(api, epoch, "ckpt")
    r = alice.post("/v1/claims/ckpt/resize", json={"size": "5Gi"})
    assert r.status_code == 202, r.text
    assert r.json()["resize"]["state"] in ("REQUESTED", "EXPANDING") and r.json()["state"] == "READY"
    c = wait_for(lambda: (c := claim(api, "ckpt"))["resize"]["state"] == "EXPANDING" and c, what="reserved")
    assert c["op"]["op"] == "expand" and c["size_bytes"] == 2 * GiB
    [op] = run_due(api, epoch, {"expand": {"ok": True, "size_bytes": 5 * GiB}})
    assert (op["op"], op["size_bytes"], op["handle"]) == ("expand", 5 * GiB, "h-ckpt"), "the new size, the object"
    c = claim(api, "ckpt")
    assert (c["state"], c["size_bytes"], c["resize"]["state"], c["resize"]["old_bytes"]) == (
        "READY", 5 * GiB, "DONE", 2 * GiB)
    assert [h["state"] for h in c["resize"]["history"]] == ["REQUESTED", "EXPANDING", "DONE"]
    trail = api.get("/v1/audit", params={"target": "claim/ckpt", "limit": 1000}).json()
    assert [a["result"] for a in trail if a["action"] == "claim.resize"] == ["REQUESTED", "EXPANDING", "DONE"]


def test_refusals_say_why_and_change_nothing(env):
    ctl, api, alice, epoch = env
    ready(api, epoch, "small", size="1Gi")
    ready(api, epoch, "stuck", cls="fixed")
    for name, size, status, fragment in [
        ("small", "1Gi", 400, "a resize can only grow it"),
        ("small", "512Mi", 400, "shrinking is not supported"),
        ("small", "11Gi", 409, "its pool p has a capacity of 10Gi"),
        ("stuck", "3Gi", 409, "claim class fixed cannot resize claims: its provider fixedfs does not expand"),
        ("nope", "3Gi", 404, "not found"),
    ]:
        r = alice.post(f"/v1/claims/{name}/resize", json={"size": size})
        assert r.status_code == status and fragment in r.json()["error"]["message"], (name, size, r.text)
    assert claim(api, "small")["resize"] is None and claim(api, "stuck")["resize"] is None
    r = alice.post("/v1/claims/small/resize", json={"size": "big"})
    assert r.status_code in (400, 422)


def test_a_resize_that_does_not_fit_waits_with_the_schedulers_reason_and_a_failure_keeps_the_old_size(env):
    ctl, api, alice, epoch = env
    wide = ready(api, epoch, "wide", size="1Gi")
    free = next(p for p in api.get("/v1/pools").json() if p["name"] == "p")["free_bytes"]
    r = api.post("/v1/claims/wide/resize", json={"size": wide["size_bytes"] + free + GiB})
    assert r.status_code == 202, r.text
    c = wait_for(lambda: (c := claim(api, "wide"))["resize"]["waiting"] and "no room" in c["resize"]["waiting"]
                 and c, what="the scheduler's reason")
    assert c["resize"]["state"] == "REQUESTED" and "pool p has no room for" in c["waiting"]
    api.delete("/v1/claims/wide")  # cancels the resize waiting for room
    c = wait_for(lambda: (c := claim(api, "wide"))["resize"]["state"] == "FAILED" and c, what="cancelled")
    assert "cancelled" in c["resize"]["error"]
    ready(api, epoch, "flaky", size="1Gi")
    api.post("/v1/claims/flaky/resize", json={"size": "2Gi"})
    wait_for(lambda: claim(api, "flaky")["resize"]["state"] == "EXPANDING", what="reserved")
    run_due(api, epoch, {"expand": {"ok": False, "code": "INVALID_ARGUMENT", "message": "no", "retryable": False}})
    c = claim(api, "flaky")
    assert (c["state"], c["size_bytes"], c["resize"]["state"], c["last_error"]) == (
        "READY", GiB, "FAILED", "INVALID_ARGUMENT: no")


def test_used_bytes_and_capacity_come_from_the_inventory_without_a_fact(env):
    ctl, api, alice, epoch = env
    c = ready(api, epoch, "filled", size="512Mi")
    position = log_position(api)
    agent(api, epoch, "inventory", {"class_name": "grow", "provider": "simfs", "capacity_bytes": 8 * GiB,
                                    "available_bytes": 2 * GiB, "objects": [
                                        {"handle": c["handle"], "tags": {}, "size_bytes": GiB // 2,
                                         "used_bytes": 123456}]})
    # the inventory call's own audit record (every agent call has one), and no fact for the readings
    assert log_position(api) == position + 1, "readings are not facts"
    assert claim(api, "filled")["used_bytes"] == 123456
    assert next(x for x in api.get("/v1/claims").json() if x["name"] == "filled")["used_bytes"] == 123456
    pool = next(p for p in api.get("/v1/pools").json() if p["name"] == "p")
    assert (pool["configured_bytes"], pool["capacity_bytes"], pool["available_bytes"]) == (10 * GiB, 8 * GiB, 2 * GiB)
    assert pool["free_bytes"] == min(8 * GiB - pool["used_bytes"], 2 * GiB)
    metrics = api.get("/metrics").text
    assert 'xce_claim_used_bytes{class="grow",pool="p"} 123456.0' in metrics
    assert 'xce_claims{class="grow",pool="p",state="READY"}' in metrics
    assert 'xce_claim_requested_bytes{class="grow",pool="p"}' in metrics
    assert 'xce_pool_capacity_bytes{pool="p"} 8.589934592e+09' in metrics
    assert 'xce_claim_ops_total{class="grow",op="expand",outcome="ok",pool="p"}' in metrics
    assert 'xce_claim_ops_total{class="grow",op="create",outcome="ok",pool="p"}' in metrics
    agent(api, epoch, "inventory", {"class_name": "grow", "provider": "simfs", "objects": []})
    pool = next(p for p in api.get("/v1/pools").json() if p["name"] == "p")
    assert pool["capacity_bytes"] == 10 * GiB and claim(api, "filled")["used_bytes"] is None, "no reading: config"
