"""Claims on real btrfs through the whole cluster: sizes enforced inside jobs, reclaim policies, used
bytes, and the provisioner SIGKILLed between an op's intent and its reply during a snapshot and
during a resize (exactly one snapshot, one resize, nothing leaked).

The crash window is made the way simfs's ``hang_after_act_next`` makes it: the class's provider is a
wrapper around the real btrfs provider that, when armed for an op, lets btrfs do the work and then
hangs without replying; the test SIGKILLs the provisioner (and the hung provider) there.  Needs root
(a loop-file btrfs filesystem, as ``tests/providers/test_btrfs.py`` makes).
"""

from __future__ import annotations

import json
import os
import sys
import textwrap

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.test_claims import CONFIG
from tests.providers.test_btrfs import loop_btrfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop-file btrfs filesystem needs root")

MiB = 1 << 20
BTRFS_CONFIG = CONFIG + """
[[claim_classes]]
name = "btrfs"
provider = "btrfs"
pools = ["shared"]
"""

# the real provider, run with the request; when the arm file of one of the batch's ops exists it is
# removed, the work is done, ACTED-<op> records this process's pid, and no reply ever comes
HANG_AFTER_ACT = textwrap.dedent("""\
    import json, os, subprocess, sys, time
    arms = sys.argv[1]
    data = sys.stdin.buffer.read()
    ops = {r.get("op") for r in json.loads(data).get("requests", [])}
    armed = [op for op in sorted(ops) if os.path.exists(os.path.join(arms, op))]
    for op in armed:
        os.unlink(os.path.join(arms, op))
    out = subprocess.run([sys.executable, "-m", "xce.providers.btrfs"], input=data, capture_output=True).stdout
    if armed:
        with open(os.path.join(arms, "acted-" + armed[0]), "w") as fh:
            fh.write(str(os.getpid()))
        time.sleep(3600)
    sys.stdout.buffer.write(out)
""")


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    work = tmp_path_factory.mktemp("btrfs-claims")
    arms = work / "arms"
    arms.mkdir()
    wrapper = work / "hang_after_act.py"
    wrapper.write_text(HANG_AFTER_ACT)
    with loop_btrfs(work) as mnt:
        root = mnt / "xce"
        root.mkdir()
        cfg = work / "xce.toml"
        cfg.write_text(BTRFS_CONFIG)
        c = Cluster(str(work), config=str(cfg)).start()
        try:
            command = json.dumps([sys.executable, str(wrapper), str(arms)])
            c.add_provisioner(extra_providers=f'[providers.btrfs]\ncommand = {command}\ntimeout = 60.0\n'
                                              f'[providers.btrfs.config]\nroot = "{root}"\n',
                              extra_roots=(str(root),))
            c.add_worker("host1", slots=4)
            c.btrfs_root, c.arms = root, arms
            wait_for(lambda: (caps := next(k for k in json.loads(c.xce("--json", "claimclass", "list").stdout)
                                           if k["name"] == "btrfs")["capabilities"]) and caps["create_snapshot"],
                     what="the btrfs class's capabilities")
            yield c
        finally:
            c.stop()


def subvolumes(cl, kind: str) -> list[str]:
    """The provider's objects of ``kind`` (volumes, snapshots) on the filesystem, by handle."""
    path = cl.btrfs_root / kind
    return sorted(p.name for p in path.iterdir() if not p.name.startswith(".")) if path.exists() else []


def write_job(cl, claim: str, mib: int, out) -> dict:
    """A job that writes ``mib`` MiB into its claim and says whether the write went through."""
    env = f"$XCE_CLAIM_{claim.upper().replace('-', '_')}"
    script = (f"head -c {mib * MiB} /dev/urandom > {env}/data.bin && sync && echo wrote || "
              f"{{ echo refused; exit 3; }}")
    job = cl.submit("--claim", f"{claim}:rw", "-o", str(out), "--", "sh", "-c", script)
    return cl.wait_state(job, "DONE", "EXIT", timeout=60)


def test_a_job_writing_past_its_claim_fails_inside_the_job_and_a_second_claim_is_unaffected(cl, tmp_path):
    cl.xce("claim", "create", "small", "--class", "btrfs", "--size", "8Mi", "--access", "RWO", "--wait")
    cl.xce("claim", "create", "roomy", "--class", "btrfs", "--size", "32Mi", "--access", "RWO", "--wait")
    over = write_job(cl, "small", 16, tmp_path / "over")
    assert (over["state"], over["exit_code"]) == ("EXIT", 3)
    assert "refused" in (tmp_path / "over").read_text()
    fine = write_job(cl, "roomy", 16, tmp_path / "fine")
    assert (fine["state"], fine["exit_code"]) == ("DONE", 0), (tmp_path / "fine").read_text()
    roomy = wait_for(lambda: (c := cl.claim("roomy"))["used_bytes"] and c["used_bytes"] >= 16 * MiB and c,
                     timeout=60, what="roomy's used bytes from the provider's list")
    assert roomy["used_bytes"] <= 32 * MiB and roomy["state"] == "READY"
    small = cl.claim("small")
    assert small["state"] == "READY" and (small["used_bytes"] or 0) <= 8 * MiB


def test_delete_keeps_a_retained_subvolume_until_purged_and_releases_a_deleted_one(cl):
    cl.xce("claim", "create", "keepme", "--class", "btrfs", "--size", "4Mi", "--access", "RWO",
           "--reclaim", "retain", "--wait")
    cl.xce("claim", "create", "dropme", "--class", "btrfs", "--size", "4Mi", "--access", "RWO",
           "--reclaim", "delete", "--wait")
    keep, drop = cl.claim("keepme"), cl.claim("dropme")
    assert {keep["handle"], drop["handle"]} <= set(subvolumes(cl, "volumes"))
    cl.xce("claim", "delete", "dropme", "--wait")
    cl.xce("claim", "delete", "keepme", "--wait")
    assert drop["handle"] not in subvolumes(cl, "volumes"), "reclaim delete: the subvolume is gone"
    assert keep["handle"] in subvolumes(cl, "volumes"), "reclaim retain: the subvolume stays"
    retained = json.loads(cl.xce("--json", "claim", "list", "--retained").stdout)
    assert [c["handle"] for c in retained if c["name"] == "keepme"] == [keep["handle"]]
    cl.xce("claim", "purge", str(keep["id"]))
    wait_for(lambda: keep["handle"] not in subvolumes(cl, "volumes"), what="the purged subvolume released")


def crash_between_intent_and_reply(cl, op: str) -> None:
    """Wait until the armed provider has done ``op`` and hangs; SIGKILL the provisioner and it; start
    a new provisioner (a new epoch, which re-drives the op with the same op_id)."""
    acted = cl.arms / f"acted-{op}"
    wait_for(acted.exists, timeout=60, what=f"the provider to have done {op}")
    cl.provisioner.kill(with_providers=True)
    wait_for(lambda: not os.path.exists(f"/proc/{acted.read_text()}"), what="the hung provider gone")
    cl.provisioner.start()


def test_provisioner_sigkill_between_a_snapshots_intent_and_reply_makes_one_snapshot(cl):
    cl.xce("claim", "create", "ckpt", "--class", "btrfs", "--size", "8Mi", "--access", "RWO", "--wait")
    before = subvolumes(cl, "snapshots")
    (cl.arms / "create_snapshot").touch()
    cl.xce("claim", "snapshot", "ckpt", "before-requeue")
    crash_between_intent_and_reply(cl, "create_snapshot")
    snap = wait_for(lambda: (s := json.loads(cl.xce("--json", "snapshot", "show", "before-requeue").stdout))
                    ["state"] == "READY" and s, timeout=60, what="the snapshot READY")
    made = sorted(set(subvolumes(cl, "snapshots")) - set(before))
    assert made == [snap["handle"]], "exactly one snapshot subvolume, the one the record names"
    attempts = [o for o in snap["ops"] if o["op"] == "create_snapshot"]
    assert len({o["op_id"] for o in attempts}) == 1, "one op id, re-driven by the new epoch"
    cl.xce("snapshot", "delete", "before-requeue", "--wait")
    assert snap["handle"] not in subvolumes(cl, "snapshots")


def test_provisioner_sigkill_between_a_resizes_intent_and_reply_expands_once(cl, tmp_path):
    cl.xce("claim", "create", "grows", "--class", "btrfs", "--size", "8Mi", "--access", "RWO", "--wait")
    volumes = subvolumes(cl, "volumes")
    (cl.arms / "expand").touch()
    cl.xce("claim", "resize", "grows", "24Mi")
    crash_between_intent_and_reply(cl, "expand")
    c = wait_for(lambda: (c := cl.claim("grows"))["resize"] and c["resize"]["state"] == "DONE" and c,
                 timeout=60, what="the resize DONE")
    assert (c["size_bytes"], c["state"]) == (24 * MiB, "READY")
    assert subvolumes(cl, "volumes") == volumes, "no second volume"
    done = write_job(cl, "grows", 16, tmp_path / "out")  # past the old size: the new limit holds it
    assert (done["state"], done["exit_code"]) == ("DONE", 0), (tmp_path / "out").read_text()
