"""Issue 27, finding 2: a storm of snapshots cannot fill the storage behind a pool.

In a pool with no byte quota a claim took snapshot after snapshot (simfs makes full copies) while
``/v1/pools`` still showed the pool's room free.  A snapshot's bytes are reserved in its claim's pool
as a claim's are (``snapshot_bytes`` in ``/v1/pools``): one that does not fit is refused.  And a
project has at most ``[claims] max_snapshots_per_project`` (here 4) at once.
"""

from __future__ import annotations

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.test_claims import CONFIG

GI = 1 << 30
LIMIT = 4


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("snapshot-storm")
    cfg = root / "xce.toml"
    assert "orphan_scan_interval = 0.5\n" in CONFIG
    cfg.write_text(CONFIG.replace("orphan_scan_interval = 0.5\n",
                                  f"orphan_scan_interval = 0.5\nmax_snapshots_per_project = {LIMIT}\n"))
    c = Cluster(str(root), config=str(cfg)).start()
    c.add_provisioner()
    with c.api() as api:
        c.tokens = {u: api.post("/v1/tokens", json={"user": u}).json()["token"] for u in ("alice", "bob")}

        def known() -> bool:
            caps = {k["name"]: k["capabilities"] for k in api.get("/v1/claimclasses").json()}
            return bool(caps["tiny"] and caps["tiny"]["create_snapshot"] and caps["simfs"])

        wait_for(known, what="the provisioner's report of what simfs can do")
    yield c
    c.stop()


def pool(cl, name: str) -> dict:
    with cl.api() as api:
        return next(p for p in api.get("/v1/pools").json() if p["name"] == name)


def ready_claim(cl, user: str, name: str, cls: str, size: str) -> None:
    with cl.ctl.client(cl.tokens[user]) as c:
        assert c.post("/v1/claims", json={"name": name, "class": cls, "size": size,
                                          "access_mode": "RWO"}).status_code == 201
    cl.wait_claim(name, "READY")


def snapshot(cl, user: str, claim: str, name: str):
    with cl.ctl.client(cl.tokens[user]) as c:
        return c.post("/v1/snapshots", json={"name": name, "claim": claim})


def wait_snapshot(cl, name: str, state: str) -> None:
    with cl.api() as api:
        wait_for(lambda: api.get(f"/v1/snapshots/{name}").json()["state"] == state, what=f"snapshot {name} {state}")


def test_snapshots_take_room_in_their_pool_and_one_that_does_not_fit_is_refused(cl):
    ready_claim(cl, "alice", "ckpt", "tiny", "1Gi")  # pool "small": 3Gi, no byte quota for class tiny
    assert pool(cl, "small")["free_bytes"] == 2 * GI
    for name in ("s1", "s2"):
        r = snapshot(cl, "alice", "ckpt", name)
        assert r.status_code == 201, r.text
        wait_snapshot(cl, name, "READY")
    shown = pool(cl, "small")
    assert (shown["used_bytes"], shown["snapshot_bytes"], shown["free_bytes"]) == (3 * GI, 2 * GI, 0), shown
    r = snapshot(cl, "alice", "ckpt", "s3")
    assert r.status_code == 409 and r.json()["error"]["code"] == "pool_full", r.text
    assert "no room for a snapshot of claim 'ckpt'" in r.json()["error"]["message"]
    with cl.ctl.client(cl.tokens["alice"]) as c:  # and no claim is placed into room the snapshots hold
        assert c.post("/v1/claims", json={"name": "more", "class": "tiny", "size": "1Gi",
                                          "access_mode": "RWO"}).status_code == 201
        waiting = wait_for(lambda: (m := c.get("/v1/claims/more").json())["waiting"] and m, what="a reason")
        assert waiting["state"] == "PENDING", waiting
        assert "no pool has room for 1Gi: small has 0B free" in waiting["waiting"], waiting
        assert c.delete("/v1/claims/more").status_code == 202
        assert c.delete("/v1/snapshots/s1").status_code == 202
    wait_snapshot(cl, "s1", "RELEASED")
    assert pool(cl, "small")["snapshot_bytes"] == GI
    assert snapshot(cl, "alice", "ckpt", "s3").status_code == 201, "its room is back"


def test_a_project_has_at_most_max_snapshots_per_project(cl):
    ready_claim(cl, "bob", "notes", "simfs", "1Mi")
    for i in range(LIMIT):
        r = snapshot(cl, "bob", "notes", f"n{i}")
        assert r.status_code == 201, r.text
    r = snapshot(cl, "bob", "notes", "one-too-many")
    assert r.status_code == 409 and "max_snapshots_per_project" in r.json()["error"]["message"], r.text
    with cl.ctl.client(cl.tokens["bob"]) as c:
        assert c.delete("/v1/snapshots/n0").status_code == 202
    wait_snapshot(cl, "n0", "RELEASED")
    assert snapshot(cl, "bob", "notes", "one-too-many").status_code == 201
