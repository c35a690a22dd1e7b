"""Standalone claims on a real local cluster: controller, provisioner and simfs processes.

Classes (see CONFIG): ``simfs`` (all modes, pool ``shared``), ``near3`` (reachable from host3
only), ``readonly`` (ROX only, reclaim retain by default), ``tiny`` (pool ``small``: 3Gi).
Quotas: project ``team-a`` at most 2 claims and 5Gi in class ``simfs``.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import Cluster, cli, wait_for

CONFIG = """
[controller]
host_timeout = 5.0
fence_time = 2.0
fence_margin = 0.5

[claims]
retry_base = 0.1
retry_cap = 0.5
max_attempts = 6
orphan_grace = 2.0
orphan_scan_interval = 0.5

[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[users]]
name = "alice"
projects = ["team-a"]

[[users]]
name = "bob"
projects = ["team-b"]

[[queues]]
name = "default"

[[projects]]
name = "default"

[[projects]]
name = "team-a"

[[projects]]
name = "team-b"

[[pools]]
name = "shared"
capacity = "1Ti"

[[pools]]
name = "small"
capacity = "3Gi"

[[claim_classes]]
name = "simfs"
provider = "simfs"
pools = ["shared"]
allowed_parameters = ["tier"]

[[claim_classes]]
name = "near3"
provider = "simfs-near3"
pools = ["shared"]

[[claim_classes]]
name = "readonly"
provider = "simfs"
pools = ["shared"]
access_modes = ["ROX"]
reclaim_policy = "retain"

[[claim_classes]]
name = "tiny"
provider = "simfs"
pools = ["small"]

[[quotas]]
project = "team-a"
claim_class = "simfs"
max_claims = 2
max_bytes = "5Gi"
"""

JSON_KEYS = {"id", "name", "form", "class", "size_bytes", "access_mode", "reclaim_policy", "state", "owner",
             "project", "attempts", "last_error", "next_retry", "reachable_hosts", "attachments", "history"}


def make_claims_cluster(root) -> Cluster:
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG)
    cl = Cluster(str(root), config=str(cfg)).start()
    near3 = root / "simfs-near3"
    near3.mkdir()
    cl.add_provisioner(extra_providers=f'[providers.simfs-near3]\n[providers.simfs-near3.config]\n'
                                       f'root = "{near3}"\nreachable_hosts = ["host3"]\n', extra_roots=(str(near3),))
    return cl


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_claims_cluster(tmp_path_factory.mktemp("claims"))
    tokens = {}
    with c.api() as api:
        for user in ("alice", "bob"):
            tokens[user] = api.post("/v1/tokens", json={"user": user}).json()["token"]
    c.tokens = tokens
    yield c
    c.stop()


def as_user(cl, user: str) -> dict[str, str]:
    return {**cl.env, "XCE_TOKEN": cl.tokens[user]} if user != "admin" else cl.env


def volumes(root: str) -> list[str]:
    d = os.path.join(root, "volumes")
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []


def claim_count(cl) -> int:
    with cl.api() as c:
        return len(c.get("/v1/claims", params={"all": "true"}).json())


def test_create_waits_until_ready_and_records_reachability(cl):
    r = cl.xce("claim", "create", "ckpt-near", "--class", "near3", "--size", "2Gi", "--access", "RWO", "--wait")
    assert r.stdout.splitlines()[-1] == "claim ckpt-near: READY"
    c = cl.claim("ckpt-near")
    assert JSON_KEYS <= set(c)
    assert (c["form"], c["class"], c["size_bytes"], c["access_mode"], c["reclaim_policy"], c["owner"]) == (
        "standalone", "near3", 2 * 2**30, "RWO", "delete", "admin")
    assert c["reachable_hosts"] == ["host3"] and c["attempts"] == 1 and c["last_error"] is None
    assert [h["state"] for h in c["history"]] == ["PENDING", "PREPARING", "READY"]
    assert c["handle"] in volumes(os.path.join(cl.root, "simfs-near3"))
    shown = cl.xce("claim", "show", "ckpt-near").stdout
    assert "Reachable hosts: host3" in shown and "c" + str(c["id"]) + ".create.1" in shown


def test_delete_with_reclaim_delete_removes_the_object(cl):
    cl.xce("claim", "create", "scratchy", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--wait")
    handle = cl.claim("scratchy")["handle"]
    assert handle in volumes(cl.provisioner.simfs_root)
    r = cl.xce("claim", "delete", "scratchy", "--wait")
    assert r.stdout.splitlines()[-1] == "claim scratchy: RELEASED"
    assert handle not in volumes(cl.provisioner.simfs_root)
    assert [h["state"] for h in cl.claim("scratchy")["history"]][-2:] == ["RELEASING", "RELEASED"]
    # the name is free again
    cl.xce("claim", "create", "scratchy", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--wait")
    cl.xce("claim", "delete", "scratchy", "--wait")


def test_delete_with_reclaim_retain_keeps_the_object_until_an_admin_purges_it(cl):
    cl.xce("claim", "create", "weights", "--class", "readonly", "--size", "1Gi", "--access", "ROX", "--wait")
    c = cl.claim("weights")
    assert c["reclaim_policy"] == "retain"
    r = cl.xce("claim", "delete", "weights", "--wait")
    assert "is retained" in r.stdout
    c = cl.claim("weights")
    assert (c["state"], c["retained"], c["data_exists"]) == ("RELEASED", True, True)
    assert c["handle"] in volumes(cl.provisioner.simfs_root), "retain never deletes the data"
    retained = json.loads(cl.xce("--json", "claim", "list", "--retained").stdout)
    assert [x["id"] for x in retained] == [c["id"]]
    r = cli(as_user(cl, "alice"), "claim", "list", "--retained")
    assert r.returncode == 1 and "only admins" in r.stderr
    cl.xce("claim", "purge", str(c["id"]))
    wait_for(lambda: c["handle"] not in volumes(cl.provisioner.simfs_root), what="purged object gone")
    wait_for(lambda: not cl.claim("weights")["retained"], what="claim no longer retained")


def test_delete_while_in_use_waits_for_the_last_attachment(cl):
    cl.xce("claim", "create", "busy", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--wait")
    with cl.api() as api:
        a1 = api.post("/v1/claims/busy/attachments", json={"host": "host1", "mode": "rw"}).json()
        a2 = api.post("/v1/claims/busy/attachments", json={"host": "host2", "mode": "ro"}).json()
    r = cl.xce("claim", "delete", "busy")
    assert "deletion waits for 2 attachments to go" in r.stdout
    c = cl.claim("busy")
    assert (c["state"], c["delete_requested"]) == ("READY", True) and c["handle"] in volumes(cl.provisioner.simfs_root)
    with cl.api() as api:
        api.delete(f"/v1/claims/busy/attachments/{a1['id']}")
        assert cl.claim("busy")["waiting"] == "deletion waits for 1 attachment to go"
        r = api.post("/v1/claims/busy/attachments", json={"host": "host1"})
        assert r.status_code == 409 and "being deleted" in r.json()["error"]["message"]
        api.delete(f"/v1/claims/busy/attachments/{a2['id']}")
    cl.wait_claim("busy", "RELEASED")
    assert c["handle"] not in volumes(cl.provisioner.simfs_root)


def test_pool_without_room_keeps_the_claim_pending_with_a_reason(cl):
    cl.xce("claim", "create", "fits", "--class", "tiny", "--size", "2Gi", "--access", "RWO", "--wait")
    cl.xce("claim", "create", "toobig", "--class", "tiny", "--size", "2Gi", "--access", "RWO")
    reason = wait_for(lambda: (c := cl.claim("toobig"))["waiting"] and "no pool has room" in c["waiting"]
                      and c["waiting"], what="placement reason")
    assert reason == "no pool has room for 2Gi: small has 1Gi free"
    assert cl.claim("toobig")["state"] == "PENDING"
    cl.xce("claim", "delete", "fits", "--wait")
    cl.wait_claim("toobig", "READY")
    cl.xce("claim", "delete", "toobig", "--wait")


def test_quota_refusal_says_the_limit_and_the_use(cl):
    alice = as_user(cl, "alice")
    for name in ("qa1", "qa2"):
        r = cli(alice, "claim", "create", name, "--class", "simfs", "--size", "2Gi", "--access", "RWO")
        assert r.returncode == 0, r.stderr
    r = cli(alice, "claim", "create", "qa3", "--class", "simfs", "--size", "1Gi", "--access", "RWO")
    assert r.returncode == 1
    assert r.stderr.strip() == "xce: quota exceeded for project team-a, class simfs: at most 2 claims, 2 in use"
    cli(alice, "claim", "delete", "qa2", "--wait")
    r = cli(alice, "claim", "create", "qa3", "--class", "simfs", "--size", "4Gi", "--access", "RWO")
    assert r.returncode == 1
    assert r.stderr.strip() == ("xce: quota exceeded for project team-a, class simfs: at most 5Gi, 2Gi in use, "
                                "4Gi asked")
    assert cli(alice, "claim", "create", "qa3", "--class", "simfs", "--size", "3Gi", "--access", "RWO").returncode == 0
    for name in ("qa1", "qa3"):
        cli(alice, "claim", "delete", name)


def test_users_see_and_change_only_their_projects_claims(cl):
    alice, bob = as_user(cl, "alice"), as_user(cl, "bob")
    assert cli(alice, "claim", "create", "mine", "--class", "tiny", "--size", "1Mi", "--access", "RWO").returncode == 0
    r = cli(alice, "claim", "create", "theirs", "--class", "tiny", "--size", "1Mi", "--access", "RWO",
            "--project", "team-b")
    assert r.returncode == 1 and r.stderr.strip() == "xce: user 'alice' is not a member of project 'team-b'"
    for args in (["claim", "show", "mine"], ["claim", "delete", "mine"]):
        r = cli(bob, *args)
        assert r.returncode == 1 and r.stderr.strip() == "xce: claim 'mine' not found"
    assert "mine" not in [c["name"] for c in json.loads(cli(bob, "--json", "claim", "list").stdout)]
    assert "mine" in [c["name"] for c in json.loads(cl.xce("--json", "claim", "list").stdout)]
    r = cli(bob, "orphans")
    assert r.returncode == 1 and "not an admin" in r.stderr
    cli(alice, "claim", "delete", "mine")


@pytest.mark.parametrize("args,status,fragment", [
    (["--size", "-5", "--access", "RWO"], 2, "invalid size '-5'"),  # bad usage, found before anything is sent
    (["--size", "lots", "--access", "RWO"], 2, "invalid size 'lots'"),
    (["--size", "0", "--access", "RWO"], 2, "must be more than 0 bytes"),
    (["--size", "1Gi", "--access", "RWZ"], 2, "invalid choice: 'RWZ'"),
    (["--size", "1Gi", "--access", "RWO", "--class", "nope"], 1, "claim class 'nope' does not exist"),
    (["--size", "1Gi", "--access", "RWO", "--class", "readonly"], 1,
     "claim class 'readonly' does not allow access mode RWO (allowed: ROX)"),
    (["--size", "1Gi", "--access", "RWO", "--param", "color=red"], 1,
     "claim class 'simfs' does not take parameter(s) color (allowed: tier)"),
    (["--size", "1Gi", "--access", "RWO", "--reclaim", "forever"], 2, "invalid choice: 'forever'"),
])
def test_bad_claim_requests_are_refused_and_create_nothing(cl, args, status, fragment):
    before = claim_count(cl)
    cls = [] if "--class" in args else ["--class", "simfs"]
    r = cl.xce("claim", "create", "badone", *cls, *args, ok=False)
    assert r.returncode == status and fragment in r.stderr, r.stderr
    assert claim_count(cl) == before


def test_duplicate_names_and_bad_names_are_refused(cl):
    cl.xce("claim", "create", "dup", "--class", "tiny", "--size", "1Mi", "--access", "RWO")
    before = claim_count(cl)
    r = cl.xce("claim", "create", "dup", "--class", "tiny", "--size", "1Mi", "--access", "RWO", ok=False)
    assert r.returncode == 1 and r.stderr.strip() == "xce: a claim named 'dup' already exists in project 'default'"
    with cl.api() as api:
        r = api.post("/v1/claims", json={"name": "Bad Name", "class": "simfs", "size": "1Gi", "access_mode": "RWO"})
        assert r.status_code == 422
        r = api.post("/v1/claims", json={"name": "x", "class": "simfs", "size": -1, "access_mode": "RWO"})
        assert r.status_code == 422
        r = api.post("/v1/claims", json={"name": "x", "class": "simfs", "size": "1Gi", "access_mode": "RWO",
                                         "surprise": 1})
        assert r.status_code == 422
    assert claim_count(cl) == before
    cl.xce("claim", "delete", "dup")


def test_every_create_delete_and_transition_is_audited(cl):
    cl.xce("claim", "create", "audited", "--class", "tiny", "--size", "1Mi", "--access", "RWO", "--wait")
    cl.xce("claim", "delete", "audited", "--wait")
    trail = json.loads(cl.xce("--json", "audit", "--limit", "100000").stdout)
    mine = [a for a in trail if a["target"] == "claim/audited"]
    assert [(a["action"], a["result"]) for a in mine if a["action"] != "claim.state"] == [
        ("POST /v1/claims", "ok"), ("DELETE /v1/claims/{name}", "ok")]
    assert [a["result"] for a in mine if a["action"] == "claim.state"] == [
        "PENDING", "PREPARING", "READY", "RELEASING", "RELEASED"]
    assert [a["user"] for a in mine if a["action"] == "claim.state"] == [
        "admin", "provisioner", "provisioner", "admin", "provisioner"]


def test_claim_classes_are_listed(cl):
    classes = json.loads(cl.xce("--json", "claimclass", "list").stdout)
    assert [c["name"] for c in classes] == ["simfs", "near3", "readonly", "tiny"]
    table = cl.xce("claimclass", "list").stdout
    assert "tiny" in table and "small (" in table and "free of 3Gi)" in table
