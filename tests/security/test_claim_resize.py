"""Resize attacks: nobody grows (or learns of) another project's claim, and nobody but the provisioner
speaks for what a class's provider can do or how an expand went."""

from __future__ import annotations

import pytest

from tests.helpers import cli
from tests.integration.test_claims import make_claims_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_claims_cluster(tmp_path_factory.mktemp("resize-attacks"))
    with c.api() as api:
        c.tokens = {u: api.post("/v1/tokens", json={"user": u}).json()["token"] for u in ("alice", "bob")}
    env = {**c.env, "XCE_TOKEN": c.tokens["alice"]}
    r = cli(env, "claim", "create", "alices", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    assert r.returncode == 0, r.stderr
    yield c
    c.stop()


def as_(cl, user: str):
    return cl.ctl.client(cl.tokens[user])


def test_bob_cannot_resize_alices_claim_nor_tell_it_exists(cl):
    before = cl.claim("alices")
    with as_(cl, "bob") as bob:
        for params in ({}, {"project": "team-a"}):
            r = bob.post("/v1/claims/alices/resize", json={"size": "2Gi"}, params=params)
            assert r.status_code == 404, r.text
        unknown = bob.post("/v1/claims/no-such-claim/resize", json={"size": "2Gi"})
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, r.json()["error"]["code"])
    r = cli({**cl.env, "XCE_TOKEN": cl.tokens["bob"]}, "claim", "resize", "alices", "2Gi", "--project", "team-a")
    assert r.returncode == 1 and "not found" in r.stderr
    after = cl.claim("alices")
    assert after["resize"] is None and after["size_bytes"] == before["size_bytes"]
    assert after["history"] == before["history"]
    with cl.api() as api:
        refused = [a for a in api.get("/v1/audit", params={"user": "bob", "limit": 1000}).json()
                   if "resize" in a["action"] or "alices" in a["target"]]
    assert refused and all(a["result"] != "ok" for a in refused), "every attempt is audited as refused"


def test_users_cannot_speak_for_the_provisioner_about_capabilities_or_expands(cl):
    with as_(cl, "bob") as bob:
        r = bob.post("/v1/agents/provisioner/capabilities", json={"epoch": 1, "classes": [
            {"class_name": "simfs", "provider": "simfs", "capabilities": None}]})
        assert r.status_code == 403, r.text
        r = bob.post("/v1/agents/provisioner/reports", json={"epoch": 1, "results": [
            {"op_id": "c1.expand.1", "claim_id": 1, "ok": True, "size_bytes": 2**50}]})
        assert r.status_code == 403, r.text
        r = bob.post("/v1/agents/provisioner/inventory", json={"epoch": 1, "class_name": "simfs",
                                                               "provider": "simfs", "objects": [],
                                                               "capacity_bytes": 1})
        assert r.status_code == 403, r.text
    classes = {c["name"]: c for c in cl.ctl.client().get("/v1/claimclasses").json()}
    assert classes["simfs"]["capabilities"]["expand"] is True, "still what simfs said"
