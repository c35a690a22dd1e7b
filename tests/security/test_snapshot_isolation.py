"""Attack: bob (project team-b) goes after alice's (team-a) claim and snapshots through the API.

Snapshot names are per project, like claim names: bob must not snapshot alice's claim, list,
show or delete her snapshots, nor clone her snapshot or claim into his project (which would hand
him her data), by name or by id, with or without naming her project.  Every refusal looks like an
unknown name (404), so bob learns nothing about what exists, and every attempt is audited.
"""

from __future__ import annotations

import pytest

from tests.helpers import audit_trail
from tests.integration.test_snapshots import make_snapshot_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_snapshot_cluster(tmp_path_factory.mktemp("snapshot-isolation"))
    yield c
    c.stop()


def api_as(cl, user: str):
    return cl.ctl.client(token=cl.tokens[user])


def test_bob_cannot_touch_alices_snapshots_or_claims(cl):
    with api_as(cl, "alice") as alice:
        r = alice.post("/v1/claims", json={"name": "secret", "class": "simfs", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 201, r.text
    cl.wait_claim("secret", "READY")
    with api_as(cl, "alice") as alice:
        r = alice.post("/v1/snapshots", json={"name": "s-secret", "claim": "secret"})
        assert r.status_code == 201, r.text
        snap = r.json()
    with api_as(cl, "bob") as bob:
        attempts = [
            bob.post("/v1/snapshots", json={"name": "mine", "claim": "secret"}),
            bob.post("/v1/snapshots", json={"name": "mine", "claim": "secret", "project": "team-a"}),
            bob.get("/v1/snapshots/s-secret"),
            bob.get("/v1/snapshots/s-secret", params={"project": "team-a"}),
            bob.get(f"/v1/snapshots/by-id/{snap['id']}"),
            bob.delete("/v1/snapshots/s-secret"),
            bob.delete("/v1/snapshots/s-secret", params={"project": "team-a"}),
            bob.post("/v1/claims", json={"name": "loot", "from_snapshot": "s-secret"}),
            bob.post("/v1/claims", json={"name": "loot", "from_snapshot": "s-secret", "project": "team-a"}),
            bob.post("/v1/claims", json={"name": "loot", "from_claim": "secret"}),
            bob.post("/v1/claims", json={"name": "loot", "from_claim": "secret", "project": "team-b"}),
        ]
        for r in attempts:
            assert r.status_code in (403, 404), (r.request.method, r.request.url, r.status_code, r.text)
            assert "s-secret" not in r.text or r.status_code == 404
        # an unknown name and alice's look the same to bob
        unknown = bob.get("/v1/snapshots/no-such-thing").json()["error"]
        theirs = bob.get("/v1/snapshots/s-secret").json()["error"]
        assert (unknown["code"], theirs["code"]) == ("not_found", "not_found")
        assert bob.get("/v1/snapshots", params={"all": "true"}).json() == []
        assert bob.get("/v1/snapshots", params={"project": "team-a", "all": "true"}).json() == []
        assert "loot" not in [c["name"] for c in bob.get("/v1/claims", params={"all": "true"}).json()]
    with api_as(cl, "alice") as alice:
        s = alice.get("/v1/snapshots/s-secret").json()
        assert not s["delete_requested"] and s["state"] in ("PENDING", "READY")
    with cl.api() as admin:
        refused = [r for r in audit_trail(admin, user="bob") if r["result"] != "ok"]
    assert len(refused) >= 8, "every refused attempt is in the audit trail"
