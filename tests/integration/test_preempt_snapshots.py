"""Preemption that checkpoints first, on a real cluster (controller, provisioner with simfs, a worker):
a rerunnable job of queue ``low`` keeps a counter in an RWO claim made with ``--snapshot-on-preempt`` and
saves it when told to stop (SIGTERM); a ``high`` job (``PREEMPTIVE[low]``) takes its slots; the victim is
requeued, its claim snapshotted before it is attached again, and its second run resumes from the
counter the first one saved, which the snapshot holds too.  Another user sees none of it, and the option
is refused where it cannot hold."""

from __future__ import annotations

import json
import os

import httpx
import pytest

from tests.helpers import wait_for
from tests.integration.conftest import make_cluster
from xce.providers import simfs

EXTRA = """
[claims]
retry_base = 1.0
retry_cap = 4.0

[[users]]
name = "alice"
projects = ["team-a"]

[[users]]
name = "bob"
projects = ["team-b"]

[[projects]]
name = "team-a"

[[projects]]
name = "team-b"

[[queues]]
name = "low"
priority = 10

[[queues]]
name = "high"
priority = 90
preemption = "PREEMPTIVE[low]"

[[pools]]
name = "shared"
capacity = "1Ti"

[[claim_classes]]
name = "simfs"
provider = "simfs"
pools = ["shared"]

[[claim_classes]]
name = "local"
provider = "simfs"
scope = "node"
counter = "scratch"
"""

# run 1 counts, and saves the count when it is told to stop; run 2 finds it and says where it resumes
JOB = ('D="$XCE_CLAIM_CKPT"; if [ -f "$D/counter" ]; then echo "resumed from $(cat "$D/counter")" > "$D/resumed"; '
       'exit 0; fi; n=0; trap \'echo $n > "$D/counter"; exit 143\' TERM INT; '
       'while :; do n=$((n+1)); echo $n > "$D/progress"; sleep 0.1; done')


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("preempt-snap"), extra=EXTRA)
    c.add_provisioner()
    c.add_worker("host1", slots=2)
    with c.api() as api:
        c.tokens = {u: api.post("/v1/tokens", json={"user": u}).json()["token"] for u in ("alice", "bob")}

    def capable():
        with c.api() as api:
            return any(k["name"] == "simfs" and k["capabilities"] for k in api.get("/v1/claimclasses").json())
    wait_for(capable, what="the provisioner's report of simfs's capabilities")
    yield c
    c.stop()


def as_user(cl, user: str) -> dict[str, str]:
    return {"XCE_TOKEN": cl.tokens[user]}


def read(path: str) -> str:
    with open(path) as fh:
        return fh.read().strip()


def test_a_preempted_job_resumes_from_the_checkpoint_its_claim_was_snapshotted_with(cl):
    alice = as_user(cl, "alice")
    r = cl.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "1Gi", "--access", "RWO",
               "--snapshot-on-preempt", "--wait", env=alice)
    shown = cl.xce("claim", "show", "ckpt", env=alice).stdout
    assert "On preemption:   snapshotted before it is attached again (--snapshot-on-preempt)" in shown, shown
    assert json.loads(cl.xce("--json", "claim", "show", "ckpt", env=alice).stdout)["snapshot_on_preempt"] is True
    data = cl.claim("ckpt")["path"]
    victim = cl.submit("-q", "low", "-n", "2", "-r", "--claim", "ckpt", "--", "sh", "-c", JOB, env=alice)
    cl.wait_state(victim, "RUN", timeout=60)
    wait_for(lambda: os.path.exists(f"{data}/progress") and int(read(f"{data}/progress") or 0) >= 3,
             timeout=60, what="run 1 counting")
    # the provider is busy for its first three snapshot attempts: run 2 waits for the snapshot meanwhile
    simfs.inject(cl.provisioner.simfs_root, fail_next=3, fail_code="UNAVAILABLE", fail_message="backend busy",
                 fail_ops=["create_snapshot"])
    top = cl.submit("-q", "high", "-n", "2", "--", "true")
    cl.wait_state(top, "DONE", timeout=90)
    name = f"ckpt-preempt-{victim}-r1"
    gate = f"claim ckpt: snapshot {name} before re-attach (PENDING"
    wait_for(lambda: gate in cl.xce("job", "why", str(victim), env=alice).stdout, timeout=60,
             what="run 2 waiting for the snapshot (xce job why)")
    assert not os.path.exists(f"{data}/resumed"), "run 2 has not started"
    done = cl.wait_state(victim, "DONE", timeout=90)
    assert done["run"] == 2
    saved = int(read(f"{data}/counter"))
    assert saved >= 3, "run 1 saved its count when it was preempted"
    assert read(f"{data}/resumed") == f"resumed from {saved}", "run 2 resumed from run 1's checkpoint"
    reasons = [h["reason"] for h in done["history"]]
    assert f"requeued by preemption for job {top}" in reasons, reasons
    assert any(f"snapshot {name} before it is attached again (preempted for job {top})" in r for r in reasons), reasons
    assert any(f"snapshot {name} of run 1 taken (READY)" in r for r in reasons), reasons
    # the snapshot was taken before run 2 had the claim attached
    snap = json.loads(cl.xce("--json", "snapshot", "show", name, env=alice).stdout)
    assert (snap["state"], snap["claim"], snap["owner"], snap["project"]) == ("READY", "ckpt", "alice", "team-a")
    assert snap["attempts"] == 4, "three busy answers, then taken"
    assert snap["preempted"] == {"job_id": victim, "run": 1}
    shown = cl.xce("snapshot", "show", name, env=alice).stdout
    assert f"Taken for:   job {victim} run 1, preempted" in shown, shown
    taken = next(h["time"] for h in snap["history"] if h["state"] == "READY")
    run2 = [h for h in done["history"] if h.get("run") == 2 and h["state"] == "RUN"]
    assert run2 and run2[0]["time"] >= taken, (run2, snap["history"])
    listed = cl.xce("snapshot", "list", env=alice).stdout
    assert name in listed and "READY" in listed
    # it holds run 1's checkpoint: a claim made from it reads the count run 1 saved
    cl.xce("claim", "create", "restored", "--from-snapshot", name, "--wait", env=alice)
    restored = cl.claim("restored")["path"]
    assert read(f"{restored}/counter") == str(saved)
    assert not os.path.exists(f"{restored}/resumed"), "the snapshot is run 1's, from before run 2"
    # another user sees neither the snapshot nor the claim
    bob = as_user(cl, "bob")
    assert name not in cl.xce("snapshot", "list", env=bob).stdout
    r = cl.xce("snapshot", "show", name, env=bob, ok=False)
    assert r.returncode == 1 and "not found" in r.stderr, r.stderr
    r = cl.xce("claim", "create", "mine", "--from-snapshot", name, env=bob, ok=False)
    assert r.returncode == 1 and "not found" in r.stderr, r.stderr


def test_the_option_is_refused_on_a_claim_that_is_not_rwo_or_cannot_be_snapshotted(cl):
    alice = as_user(cl, "alice")
    r = cl.xce("claim", "create", "shared", "--class", "simfs", "--size", "1Gi", "--access", "RWX",
               "--snapshot-on-preempt", env=alice, ok=False)
    assert r.returncode == 2 and "--snapshot-on-preempt is for RWO claims" in r.stderr, r.stderr  # the CLI's check
    # ... and the controller's, for a client that does not check (the API straight)
    r = httpx.post(f"{cl.ctl.url}/v1/claims", headers={"Authorization": f"Bearer {cl.tokens['alice']}"},
                   json={"name": "shared", "class": "simfs", "size": "1Gi", "access_mode": "RWX",
                         "snapshot_on_preempt": True})
    assert r.status_code == 422 and "snapshot_on_preempt is for RWO claims" in r.text, r.text
    r = cl.xce("claim", "create", "near", "--class", "local", "--size", "1Gi", "--access", "RWO", "--hosts", "host1",
               "--snapshot-on-preempt", env=alice, ok=False)
    assert r.returncode == 1 and "cannot take snapshots: it is node-local" in r.stderr, r.stderr
    names = [c["name"] for c in json.loads(cl.xce("--json", "claim", "list", env=alice).stdout)]
    assert "shared" not in names and "near" not in names
