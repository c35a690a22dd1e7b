"""The claim agents' long-poll for work (``GET /v1/agents/{agent}/work?wait=``), against a real controller.

Facts that may open work wake every waiting poll, but many bring none for the agent that waits (the
report of an op it is still running, another agent's op).  A poll woken so must wait on: answering
empty would send a busy agent round in a loop of empty polls, costing the controller a request per
commit while the agent's real work queues behind them."""

from __future__ import annotations

import concurrent.futures

import pytest

from tests.helpers import ControllerProcess, wait_for

AGENT = "/v1/agents/provisioner"


@pytest.fixture
def ctl(tmp_path):
    c = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    yield c
    c.stop()


def create_ops(api, epoch: int, names: list[str]) -> list[dict]:
    for name in names:
        r = api.post("/v1/claims", json={"name": name, "class": "simfs", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 201, r.text

    def found():
        ops = api.get(f"{AGENT}/work", params={"epoch": epoch}).json()["ops"]
        return [o for o in ops if o["claim_name"] in names] if len(ops) >= len(names) else None
    return wait_for(found, what=f"the create ops of {names}")


@pytest.mark.parametrize("method", ["GET", "POST"])  # POST: the ops are taken with their intents
def test_a_poll_woken_by_facts_that_bring_it_no_work_waits_on_for_work(ctl, method):
    with ctl.client() as api, ctl.client() as poller:
        epoch = api.post(f"{AGENT}/lease", json={"holder": "test"}).json()["epoch"]
        running = create_ops(api, epoch, [f"busy{i}" for i in range(5)])
        refs = [{"op_id": o["op_id"], "claim_id": o["claim_id"]} for o in running]
        r = api.post(f"{AGENT}/intents", json={"epoch": epoch, "ops": refs})
        assert sorted(r.json()["accepted"]) == sorted(o["op_id"] for o in running), r.text
        assert api.get(f"{AGENT}/work", params={"epoch": epoch}).json()["ops"] == []  # all of it in flight

        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            poll = pool.submit(lambda: poller.request(
                method, f"{AGENT}/work", params={"epoch": epoch, "wait": 30} if method == "GET" else {"wait": 30},
                json={"epoch": epoch} if method == "POST" else None, timeout=60).json())
            # each report is a waking fact (ClaimOpSucceeded) that opens no work for the provisioner
            for ref in refs:
                r = api.post(f"{AGENT}/reports", json={"epoch": epoch, "results": [
                    {**ref, "ok": True, "handle": f"h-{ref['op_id']}", "size_bytes": 2**30}]})
                assert r.status_code == 200 and r.json()["refused"] == {}, r.text
            r = api.post("/v1/claims", json={"name": "wanted", "class": "simfs", "size": "1Gi",
                                             "access_mode": "RWO"})
            assert r.status_code == 201, r.text
            answer = poll.result(timeout=60)
        assert [(o["claim_name"], o["op"]) for o in answer["ops"]] == [("wanted", "create")], answer


def test_a_reported_result_with_used_bytes_shows_them_on_the_claim_at_once(ctl):
    """Used bytes in an op's reply are a reading the claim shows at once, not a scan interval later; a
    report the controller refuses (an op this epoch does not hold) leaves no reading."""
    with ctl.client() as api:
        epoch = api.post(f"{AGENT}/lease", json={"holder": "test"}).json()["epoch"]
        [op] = api.post(f"{AGENT}/work", json={"epoch": epoch}).json()["ops"] or create_and_take(api, epoch)
        ref = {"op_id": op["op_id"], "claim_id": op["claim_id"]}
        r = api.post(f"{AGENT}/reports", json={"epoch": epoch, "results": [
            {**ref, "ok": True, "handle": "h-1", "size_bytes": 2**30, "used_bytes": 12345}]})
        assert r.status_code == 200 and r.json()["refused"] == {}, r.text
        assert api.get(f"/v1/claims/{op['claim_name']}").json()["used_bytes"] == 12345
        # the op is over, and another is no op of this claim: neither reading is taken
        for op_id in (op["op_id"], "c999.create.1"):
            r = api.post(f"{AGENT}/reports", json={"epoch": epoch, "results": [
                {"op_id": op_id, "claim_id": op["claim_id"], "ok": True, "handle": "h-1", "used_bytes": 1}]})
            assert r.status_code == 200, r.text
        assert api.get(f"/v1/claims/{op['claim_name']}").json()["used_bytes"] == 12345


def create_and_take(api, epoch: int) -> list[dict]:
    r = api.post("/v1/claims", json={"name": "used", "class": "simfs", "size": "1Gi", "access_mode": "RWO"})
    assert r.status_code == 201, r.text
    return wait_for(lambda: api.post(f"{AGENT}/work", json={"epoch": epoch}).json()["ops"], what="the create op")
