"""Snapshots and clones on a real local cluster (controller, provisioner, simfs processes): the CLI
end to end, quota, refusals at the API for a class whose provider cannot, and a provisioner
SIGKILLed between a snapshot's intent and its reply.

Classes: those of ``test_claims`` (``simfs`` snapshots and clones: simfs copies), and ``legacy``,
whose provider (simfs behind a wrapper) says it can do neither.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from tests.helpers import Cluster, cli, wait_for
from tests.integration.test_claims import CONFIG
from xce.providers import ProviderRequest, owner_tags, run_provider, simfs

LEGACY = textwrap.dedent("""\
    import json, sys
    from xce.providers import ProviderRequest, owner_tags, run_provider, simfs
    out = simfs.handle_document(json.load(sys.stdin))
    for r in out["replies"]:
        if "capabilities" in r:
            r["capabilities"] = dict(r["capabilities"], create_snapshot=False, clone=False)
    sys.stdout.write(json.dumps(out))
""")


def make_snapshot_cluster(root) -> Cluster:
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG + '\n[[claim_classes]]\nname = "legacy"\nprovider = "legacy"\npools = ["shared"]\n')
    cl = Cluster(str(root), config=str(cfg)).start()
    script, legacy_root = root / "legacy.py", root / "legacy"
    script.write_text(LEGACY)
    legacy_root.mkdir()
    cl.add_provisioner(extra_providers=f'[providers.legacy]\ncommand = {json.dumps([sys.executable, str(script)])}\n'
                                       f'[providers.legacy.config]\nroot = "{legacy_root}"\n',
                       extra_roots=(str(legacy_root),))
    with cl.api() as api:
        cl.tokens = {u: api.post("/v1/tokens", json={"user": u}).json()["token"] for u in ("alice", "bob")}
    wait_capabilities(cl)
    return cl


def wait_capabilities(cl) -> None:
    def known():
        with cl.api() as api:
            classes = {c["name"]: c["capabilities"] for c in api.get("/v1/claimclasses").json()}
        return classes["simfs"] is not None and classes["legacy"] is not None
    wait_for(known, what="the provisioner's report of its classes' capabilities")


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_snapshot_cluster(tmp_path_factory.mktemp("snapshots"))
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def no_faults_left(cl):
    yield
    simfs.inject(cl.provisioner.simfs_root, clear=True)


def as_user(cl, user: str) -> dict[str, str]:
    return {**cl.env, "XCE_TOKEN": cl.tokens[user]}


def run(cl, user: str, *args: str, ok: bool = True):
    r = cli(as_user(cl, user), *args)
    if ok:
        assert r.returncode == 0, f"xce {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def snapshot(cl, user: str, name: str) -> dict:
    return json.loads(run(cl, user, "--json", "snapshot", "show", name).stdout)


def snapshot_dirs(cl) -> list[str]:
    d = os.path.join(cl.provisioner.simfs_root, "snapshots")
    return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []


def test_snapshot_then_clone_keeps_that_moments_data(cl):
    run(cl, "alice", "claim", "create", "results", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    data = cl.claim("results")["path"]
    with open(os.path.join(data, "epoch.txt"), "w") as fh:
        fh.write("epoch 1\n")
    r = run(cl, "alice", "--json", "claim", "snapshot", "results", "ep1", "--wait")
    snap = json.loads(r.stdout)  # --json --wait: only the document on stdout
    assert (snap["state"], snap["claim"], snap["project"], snap["owner"]) == ("READY", "results", "team-a", "alice")
    assert snap["handle"] in snapshot_dirs(cl) and snap["attempts"] == 1
    assert [h["state"] for h in snap["history"]] == ["PENDING", "READY"]
    with open(os.path.join(data, "epoch.txt"), "w") as fh:
        fh.write("epoch 2\n")
    listed = run(cl, "alice", "snapshot", "list").stdout
    assert "ep1" in listed and "READY" in listed and "results" in listed
    shown = run(cl, "alice", "snapshot", "show", "ep1").stdout
    assert f"s{snap['id']}.create_snapshot.1" in shown and "Of claim:" in shown
    shown = run(cl, "alice", "claim", "show", "results").stdout  # the claim names its snapshots
    assert [line.split(None, 1)[1] for line in shown.splitlines() if line.startswith("Snapshots:")] == ["ep1 (READY)"]
    r = run(cl, "alice", "claim", "create", "restored", "--from-snapshot", "ep1", "--wait")
    assert r.stdout.splitlines()[-1] == "claim restored: READY"
    restored = cl.claim("restored")
    assert restored["source"]["kind"] == "snapshot" and restored["source"]["name"] == "ep1"
    assert (restored["class"], restored["size_bytes"], restored["access_mode"]) == ("simfs", 2**30, "RWO")
    with open(os.path.join(restored["path"], "epoch.txt")) as fh:
        assert fh.read() == "epoch 1\n"
    run(cl, "alice", "claim", "delete", "restored", "--wait")  # team-a may hold 2 claims of class simfs
    run(cl, "alice", "claim", "create", "forked", "--from-claim", "results", "--wait")
    with open(os.path.join(cl.claim("forked")["path"], "epoch.txt")) as fh:
        assert fh.read() == "epoch 2\n"
    run(cl, "alice", "claim", "delete", "forked", "--wait")
    # the snapshot outlives its claim, and can still be cloned
    run(cl, "alice", "claim", "delete", "results", "--wait")
    assert snapshot(cl, "alice", "ep1")["state"] == "READY"
    run(cl, "alice", "claim", "create", "again", "--from-snapshot", "ep1", "--wait")
    r = run(cl, "alice", "--json", "snapshot", "delete", "ep1", "--wait")
    gone = json.loads(r.stdout)
    assert gone["state"] == "RELEASED" and gone["handle"] not in snapshot_dirs(cl)
    assert [h["state"] for h in gone["history"]][-2:] == ["RELEASING", "RELEASED"]
    run(cl, "alice", "claim", "delete", "again", "--wait")


def test_a_class_that_cannot_snapshot_or_clone_is_refused_at_the_api(cl):
    run(cl, "alice", "claim", "create", "old", "--class", "legacy", "--size", "1Gi", "--access", "RWO", "--wait")
    r = run(cl, "alice", "claim", "snapshot", "old", "nope", ok=False)
    assert r.returncode == 1
    assert "claim class 'legacy' cannot take snapshots: its provider 'legacy' says create_snapshot: false" in r.stderr
    r = run(cl, "alice", "claim", "create", "copy", "--from-claim", "old", ok=False)
    assert r.returncode == 1 and "claim class 'legacy' cannot make claims from a snapshot or a claim" in r.stderr
    listed = json.loads(run(cl, "alice", "--json", "snapshot", "list", "--all").stdout)
    assert "nope" not in [s["name"] for s in listed]
    assert "copy" not in [c["name"] for c in json.loads(run(cl, "alice", "--json", "claim", "list", "-a").stdout)]
    classes = run(cl, "alice", "claimclass", "list").stdout
    assert any(line.startswith("simfs ") and "snapshot,clone" in line for line in classes.splitlines())
    run(cl, "alice", "claim", "delete", "old", "--wait")


def test_snapshots_count_in_the_projects_quota(cl):
    # team-a: at most 2 claims and 5Gi in class simfs
    run(cl, "alice", "claim", "create", "big", "--class", "simfs", "--size", "2Gi", "--access", "RWO", "--wait")
    run(cl, "alice", "claim", "snapshot", "big", "big-1", "--wait")
    r = run(cl, "alice", "claim", "snapshot", "big", "big-2", ok=False)
    assert r.returncode == 1 and "quota exceeded for project team-a, class simfs: at most 5Gi, 4Gi in use" in r.stderr
    run(cl, "alice", "snapshot", "delete", "big-1", "--wait")
    run(cl, "alice", "claim", "snapshot", "big", "big-2", "--wait")
    run(cl, "alice", "snapshot", "delete", "big-2", "--wait")
    run(cl, "alice", "claim", "delete", "big", "--wait")


def test_snapshot_retries_are_visible_and_keep_their_op_id(cl):
    run(cl, "alice", "claim", "create", "flaky", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    simfs.inject(cl.provisioner.simfs_root, fail_next=2, fail_code="UNAVAILABLE", fail_message="backend busy",
                 fail_ops=["create_snapshot"])
    run(cl, "alice", "claim", "snapshot", "flaky", "flaky-1", "--wait")
    s = snapshot(cl, "alice", "flaky-1")
    assert s["attempts"] == 3 and s["last_error"] is None and len(s["op_ids"]) == 1
    assert [o["result"] for o in s["ops"] if o["result"] != "started"] == ["UNAVAILABLE", "UNAVAILABLE", "ok"]
    run(cl, "alice", "snapshot", "delete", "flaky-1", "--wait")
    run(cl, "alice", "claim", "delete", "flaky", "--wait")


def test_provisioner_sigkill_between_intent_and_reply_makes_exactly_one_snapshot(cl):
    run(cl, "alice", "claim", "create", "crashy", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    before = set(snapshot_dirs(cl))
    # the provider makes the snapshot, then hangs before it replies: the window a crash leaves
    simfs.inject(cl.provisioner.simfs_root, hang_after_act_next=1, hang_seconds=60, fail_ops=["create_snapshot"])
    run(cl, "alice", "claim", "snapshot", "crashy", "crashy-1")
    wait_for(lambda: (s := snapshot(cl, "alice", "crashy-1"))["op"] and s["op"]["epoch"]
             and set(snapshot_dirs(cl)) - before
             and not simfs.inject(cl.provisioner.simfs_root).get("hang_after_act_next"),
             what="intent committed, the snapshot made, its reply not yet sent")
    first_epoch = snapshot(cl, "alice", "crashy-1")["op"]["epoch"]
    cl.provisioner.kill()  # with its hung provider, as a machine crash would
    assert snapshot(cl, "alice", "crashy-1")["state"] == "PENDING"
    cl.provisioner.start()
    s = wait_for(lambda: (s := snapshot(cl, "alice", "crashy-1"))["state"] == "READY" and s,
                 what="snapshot READY after the restart")
    assert s["attempts"] == 2 and len(s["op_ids"]) == 1
    assert [o["epoch"] for o in s["ops"] if o["result"] == "started"] == [first_epoch, first_epoch + 1]
    made = set(snapshot_dirs(cl)) - before
    assert made == {s["handle"]}, "the retry found the snapshot the killed attempt made: one, not two"
    wait_capabilities(cl)
    run(cl, "alice", "snapshot", "delete", "crashy-1", "--wait")
    run(cl, "alice", "claim", "delete", "crashy", "--wait")


def test_a_snapshot_nobody_recorded_is_an_orphan_and_released(cl):
    """A provider object listed as a snapshot whose ``xce.snapshot`` names no snapshot is an orphan
    (its claim existing does not own it), reported and released after the grace period."""
    run(cl, "alice", "claim", "create", "src", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    c = cl.claim("src")
    with cl.api() as api:
        cluster_id = api.get("/v1/ping").json()["cluster_id"]
    op_id = "s999.create_snapshot.1"
    req = ProviderRequest(op_id=op_id, op="create_snapshot", claim_id=c["id"], handle=c["handle"],
                          tags=owner_tags(cluster_id, c["id"], op_id, **{"xce.snapshot": "999"}))
    [made] = run_provider(simfs.command(), {"root": cl.provisioner.simfs_root}, cluster_id, [req], 30.0)
    assert made.ok and made.handle in snapshot_dirs(cl)
    wait_for(lambda: made.handle not in snapshot_dirs(cl), timeout=30, what="the orphan snapshot released")
    with cl.api() as api:
        trail = api.get("/v1/audit", params={"target": f"object/{made.handle}"}).json()
    assert [r["result"] for r in trail if r["action"] == "orphan"] == ["seen", "released"]
    run(cl, "alice", "claim", "delete", "src", "--wait")
