"""The snapshot routes and the agent routes for snapshot ops, against a real controller, with the
test playing the provisioner over the API (lease, capabilities, work, intents, reports)."""

from __future__ import annotations

import pytest

from tests.helpers import ControllerProcess, audit_trail, wait_for

CAN = {"create_snapshot": True, "clone": True, "expand": False, "online_expand": False,
       "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}


@pytest.fixture(scope="module")
def ctl(tmp_path_factory):
    c = ControllerProcess(state_dir=str(tmp_path_factory.mktemp("api-snap") / "ctl")).start()
    yield c
    c.stop()


class Agent:
    """The provisioner's side of the API, played by the test."""

    def __init__(self, api) -> None:
        self.api = api
        self.epoch = api.post("/v1/agents/provisioner/lease", json={"holder": "test"}).json()["epoch"]

    def work(self, **match) -> list[dict]:
        def found():
            ops = self.api.get("/v1/agents/provisioner/work", params={"epoch": self.epoch}).json()["ops"]
            return [o for o in ops if all(o.get(k) == v for k, v in match.items())]
        return wait_for(found, what=f"an op {match}")

    def run(self, op: dict, **result) -> None:
        ref = {"op_id": op["op_id"], "claim_id": op["claim_id"]}
        if op.get("snapshot_id") is not None:
            ref["snapshot_id"] = op["snapshot_id"]
        r = self.api.post("/v1/agents/provisioner/intents", json={"epoch": self.epoch, "ops": [ref]})
        assert r.json()["accepted"] == [op["op_id"]], r.text
        r = self.api.post("/v1/agents/provisioner/reports",
                          json={"epoch": self.epoch, "results": [{**ref, "ok": True, **result}]})
        assert r.status_code == 200 and r.json()["refused"] == {}, r.text


def test_snapshot_ops_go_through_intents_and_fenced_reports(ctl):
    with ctl.client() as api:
        r = api.post("/v1/claims", json={"name": "vol", "class": "simfs", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 201, r.text
        agent = Agent(api)
        [create] = agent.work(claim_name="vol", op="create")
        agent.run(create, handle="v-vol", size_bytes=2**30)
        # no capabilities reported yet: refused, naming the class
        r = api.post("/v1/snapshots", json={"name": "s1", "claim": "vol"})
        assert r.status_code == 409 and "claim class 'simfs' cannot take snapshots yet" in r.json()["error"]["message"]
        r = api.post("/v1/agents/provisioner/capabilities", json={"epoch": agent.epoch, "classes": [
            {"class_name": "simfs", "provider": "simfs", "capabilities": CAN}]})
        assert r.status_code == 200 and r.json()["refused"] == {}, r.text
        flags = {k: v for k, v in CAN.items() if k != "access_modes"}
        assert {c["name"]: c["capabilities"] for c in api.get("/v1/claimclasses").json()}["simfs"] == flags
        r = api.post("/v1/snapshots", json={"name": "s1", "claim": "vol"})
        assert r.status_code == 201, r.text
        snap = r.json()
        assert (snap["state"], snap["claim"], snap["op"]["op"]) == ("PENDING", "vol", "create_snapshot")
        [op] = agent.work(snapshot_id=snap["id"])
        assert (op["op"], op["handle"], op["claim_id"]) == ("create_snapshot", "v-vol", create["claim_id"])
        assert op["tags"]["xce.snapshot"] == str(snap["id"]) and op["tags"]["xce.op"] == op["op_id"]
        # a report without its intent, or from another epoch, changes nothing
        ref = {"op_id": op["op_id"], "claim_id": op["claim_id"], "snapshot_id": snap["id"]}
        r = api.post("/v1/agents/provisioner/reports", json={"epoch": agent.epoch, "results": [
            {**ref, "ok": True, "handle": "forged"}]})
        assert op["op_id"] in r.json()["refused"]
        agent.run(op, handle="s-1", size_bytes=2**30)
        s = api.get("/v1/snapshots/s1").json()
        assert (s["state"], s["handle"], s["attempts"]) == ("READY", "s-1", 1)
        metrics = api.get("/metrics").text
        assert 'xce_snapshots{class="simfs",state="READY"} 1.0' in metrics
        [charged] = [float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                     if line.startswith('xce_snapshot_bytes{class="simfs"} ')]
        assert charged == s["size_bytes"]
        assert api.get(f"/v1/snapshots/by-id/{snap['id']}").json()["name"] == "s1"
        # a clone's create carries its source's handle
        r = api.post("/v1/claims", json={"name": "copy", "from_snapshot": "s1"})
        assert r.status_code == 201, r.text
        assert r.json()["source"] == {"kind": "snapshot", "id": snap["id"], "name": "s1", "handle": "s-1"}
        [clone_op] = agent.work(claim_name="copy", op="create")
        assert clone_op["source_handle"] == "s-1"
        r = api.delete("/v1/snapshots/s1")
        assert r.status_code == 409 and "being made from it" in r.json()["error"]["message"]
        agent.run(clone_op, handle="v-copy", size_bytes=2**30)
        r = api.delete("/v1/snapshots/s1")
        assert r.status_code == 202 and r.json()["state"] == "RELEASING"
        [delete] = agent.work(snapshot_id=snap["id"])
        assert (delete["op"], delete["handle"]) == ("delete_snapshot", "s-1")
        agent.run(delete)
        assert api.get("/v1/snapshots/s1").json()["state"] == "RELEASED"
        assert api.get("/v1/snapshots").json() == [] and len(api.get("/v1/snapshots", params={"all": "true"}).json()) == 1
        trail = audit_trail(api, target="snapshot/s1")
        assert {(r["action"], r["result"]) for r in trail} >= {
            ("POST /v1/snapshots", "ok"), ("DELETE /v1/snapshots/{name}", "ok"), ("snapshot.state", "READY"),
            ("snapshot.state", "RELEASED")}


def test_bad_snapshot_requests_are_refused_before_the_model(ctl):
    with ctl.client() as api:
        assert api.post("/v1/snapshots", json={"name": "Bad Name", "claim": "vol"}).status_code == 422
        assert api.post("/v1/snapshots", json={"name": "ok", "claim": "vol", "extra": 1}).status_code == 422
        assert api.get("/v1/snapshots/..%2Fetc").status_code in (404, 422)
        r = api.post("/v1/claims", json={"name": "c", "from_snapshot": "nope", "from_claim": "vol"})
        assert r.status_code == 409
        r = api.post("/v1/claims", json={"name": "c", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 400 and "needs a class" in r.json()["error"]["message"]
        r = api.post("/v1/agents/node:h1/capabilities", json={"epoch": 1, "classes": []})
        assert r.status_code == 409
