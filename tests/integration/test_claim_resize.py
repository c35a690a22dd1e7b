"""Claim resize on a real cluster: online on simfs with a job holding the claim, faults (a provisioner
killed between its intent and the provider's reply, a permanent refusal), used bytes and provider
capacity as the CLI shows them; and on a real btrfs (loop file, as root): a job writes past the old size
once the claim has grown under it."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.test_claims import CONFIG as CLAIMS_CONFIG
from xce.providers import simfs

MiB, GiB = 2**20, 2**30
CONFIG = CLAIMS_CONFIG + """
[[pools]]
name = "backed"
capacity = "1Ti"

[[claim_classes]]
name = "capped"
provider = "simfs-capped"
pools = ["backed"]
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("resize")
    (root / "xce.toml").write_text(CONFIG)
    c = Cluster(str(root), config=str(root / "xce.toml")).start()
    capped = root / "simfs-capped"
    capped.mkdir()
    c.add_provisioner(extra_providers=f'[providers.simfs-capped]\n[providers.simfs-capped.config]\n'
                                      f'root = "{capped}"\ncapacity_bytes = {3 * GiB}\n', extra_roots=(str(capped),))
    c.add_worker("host1", slots=2)
    wait_for(lambda: all(x["capabilities"] for x in json.loads(c.xce("--json", "claimclass", "list").stdout)
                         if x["name"] in ("simfs", "capped")), what="capabilities reported")
    yield c
    c.stop()


@pytest.fixture(autouse=True)
def no_faults_left(cl):
    yield
    simfs.inject(cl.provisioner.simfs_root, clear=True)


def volume_meta(cl, handle: str) -> dict:
    with open(os.path.join(cl.provisioner.simfs_root, "volumes", handle, "meta.json")) as fh:
        return json.load(fh)


def volumes_of(cl, claim_id: int) -> list[str]:
    d = os.path.join(cl.provisioner.simfs_root, "volumes")
    return [v for v in os.listdir(d) if v.startswith(f"v{claim_id}-")]


def test_resize_online_while_a_job_holds_the_claim(cl, tmp_path):
    cl.xce("claim", "create", "live", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    gate, out = tmp_path / "gate", tmp_path / "out"
    job = cl.submit("--claim", "live:rw", "-o", str(out), "--", "sh", "-c",
                    f'while [ ! -e {gate} ]; do sleep 0.05; done; echo still here > "$XCE_CLAIM_LIVE/after"')
    cl.wait_state(job, "RUN")
    wait_for(lambda: [a["state"] for a in cl.claim("live")["attachments"]] == ["ATTACHED"], what="attached")
    r = cl.xce("claim", "resize", "live", "3Gi", "--wait")
    assert r.stdout.splitlines()[-1].startswith("claim live: resize to 3Gi DONE"), r.stdout
    c = cl.claim("live")
    assert (c["state"], c["size_bytes"], c["resize"]["state"]) == ("READY", 3 * GiB, "DONE")
    assert volume_meta(cl, c["handle"])["size_bytes"] == 3 * GiB and len(volumes_of(cl, c["id"])) == 1
    gate.touch()
    assert cl.wait_state(job, "DONE")["exit_code"] == 0
    assert open(os.path.join(c["path"], "after")).read() == "still here\n"
    shown = cl.xce("claim", "show", "live").stdout
    assert "Resize:" in shown and "1Gi -> 3Gi DONE" in shown


def test_shrinking_is_refused_with_a_clear_error(cl):
    cl.xce("claim", "create", "firm", "--class", "simfs", "--size", "2Gi", "--access", "RWO", "--wait")
    r = cl.xce("claim", "resize", "firm", "1Gi", ok=False)
    assert r.returncode == 1
    assert "claim 'firm' is 2Gi: a resize can only grow it (1Gi asked; shrinking is not supported)" in r.stderr


def test_provisioner_sigkill_between_intent_and_reply_expands_once(cl):
    cl.xce("claim", "create", "cut", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    simfs.inject(cl.provisioner.simfs_root, hang_next=1, hang_seconds=60, fail_ops=["expand"])
    cl.xce("claim", "resize", "cut", "2Gi")
    wait_for(lambda: (c := cl.claim("cut"))["op"] and c["op"]["op"] == "expand" and c["op"]["epoch"]
             and cl.provisioner.children() and not simfs.inject(cl.provisioner.simfs_root).get("hang_next"),
             what="expand intent committed and the provider hanging")
    first_epoch = cl.claim("cut")["op"]["epoch"]
    cl.provisioner.kill()
    c = cl.claim("cut")
    assert (c["state"], c["size_bytes"], c["resize"]["state"]) == ("READY", GiB, "EXPANDING")
    cl.provisioner.start()
    c = wait_for(lambda: (c := cl.claim("cut"))["resize"]["state"] == "DONE" and c, what="expanded")
    expands = [o for o in c["ops"] if o["op"] == "expand"]
    assert len({o["op_id"] for o in expands}) == 1, "one expand op, re-driven with its op id"
    assert [o["epoch"] for o in expands if o["result"] == "started"] == [first_epoch, first_epoch + 1]
    assert c["size_bytes"] == 2 * GiB and volume_meta(cl, c["handle"])["size_bytes"] == 2 * GiB
    assert len(volumes_of(cl, c["id"])) == 1, "no second object"


def test_a_crash_after_the_provider_acted_is_retried_to_one_expand(cl):
    cl.xce("claim", "create", "acted", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    simfs.inject(cl.provisioner.simfs_root, crash_after_act_next=1, fail_ops=["expand"])
    cl.xce("claim", "resize", "acted", "2Gi", "--wait")
    c = cl.claim("acted")
    assert [o["result"] for o in c["ops"] if o["op"] == "expand" and o["result"] != "started"] == [
        "PROVIDER_FAILED", "ok"]
    assert volume_meta(cl, c["handle"])["size_bytes"] == 2 * GiB


def test_a_permanent_failure_leaves_the_claim_ready_at_its_old_size_with_the_error_shown(cl):
    cl.xce("claim", "create", "stays", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    simfs.inject(cl.provisioner.simfs_root, fail_next=1, fail_retryable=False, fail_code="INVALID_ARGUMENT",
                 fail_message="tier full", fail_ops=["expand"])
    r = cl.xce("claim", "resize", "stays", "2Gi", "--wait", ok=False)
    assert r.returncode == 1
    assert r.stdout.splitlines()[-1] == ("claim stays: resize to 2Gi FAILED; INVALID_ARGUMENT: tier full; "
                                         "the claim is still 1Gi and READY")
    c = cl.claim("stays")
    assert (c["state"], c["size_bytes"], c["last_error"]) == ("READY", GiB, "INVALID_ARGUMENT: tier full")
    assert volume_meta(cl, c["handle"])["size_bytes"] == GiB
    shown = cl.xce("claim", "show", "stays").stdout
    assert "INVALID_ARGUMENT: tier full" in shown and "1Gi -> 2Gi FAILED" in shown
    assert "expand failed after 1 attempt" in shown  # in the history


def test_used_bytes_and_the_providers_capacity_show_in_the_cli(cl):
    cl.xce("claim", "create", "full", "--class", "capped", "--size", "1Gi", "--access", "RWO", "--wait")
    with open(os.path.join(cl.claim("full")["path"], "data.bin"), "wb") as fh:
        fh.write(b"x" * (5 * MiB))
    c = wait_for(lambda: (c := cl.claim("full"))["used_bytes"] == 5 * MiB and c, what="used bytes listed")
    table = cl.xce("claim", "list").stdout.splitlines()
    header, row = table[0].split(), next(line for line in table if " full " in line).split()
    assert header[4:6] == ["SIZE", "USED"] and row[4:6] == ["1Gi", "5Mi"]
    assert "5Mi used" in cl.xce("claim", "show", "full").stdout
    # simfs-capped reports 3Gi of capacity: its pool (1Ti configured) shows what the backend has
    wait_for(lambda: "backed (2Gi free of 3Gi)" in cl.xce("claimclass", "list").stdout, what="capacity reported")
    r = cl.xce("claim", "create", "toobig", "--class", "capped", "--size", "3Gi", "--access", "RWO")
    assert "toobig" in r.stdout
    c = wait_for(lambda: (c := cl.claim("toobig"))["waiting"] and "no pool has room" in c["waiting"] and c,
                 what="the scheduler counts on the reported capacity")
    assert c["state"] == "PENDING"
    cl.xce("claim", "delete", "toobig", "--wait")
    with cl.api() as api:
        metrics = api.get("/metrics").text
    assert 'xce_claim_used_bytes{class="capped",pool="backed"} 5.24288e+06' in metrics


# ---------------------------------------------------------------------------
# btrfs


@pytest.fixture(scope="module")
def btrfs_cluster(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("mounting a loop-file btrfs filesystem needs root (CI runs these tests as root)")
    from tests.providers.test_btrfs import loop_btrfs

    root = tmp_path_factory.mktemp("resize-btrfs")
    config = CLAIMS_CONFIG + '\n[[claim_classes]]\nname = "fast"\nprovider = "btrfs"\npools = ["shared"]\n'
    (root / "xce.toml").write_text(config)
    with loop_btrfs(root) as mnt:
        store = mnt / "xce"
        store.mkdir()
        c = Cluster(str(root), config=str(root / "xce.toml")).start()
        try:
            c.add_provisioner(extra_providers=f'[providers.btrfs]\n[providers.btrfs.config]\nroot = "{store}"\n',
                              extra_roots=(str(store),))
            c.add_worker("host1", slots=2)
            wait_for(lambda: next(x for x in json.loads(c.xce("--json", "claimclass", "list").stdout)
                                  if x["name"] == "fast")["capabilities"], what="btrfs capabilities reported")
            yield c
        finally:
            c.stop()


def test_on_btrfs_a_job_writes_past_the_old_size_once_its_claim_has_grown_under_it(btrfs_cluster, tmp_path):
    cl = btrfs_cluster
    cl.xce("claim", "create", "grow", "--class", "fast", "--size", "16Mi", "--access", "RWO", "--wait")
    gate, out = tmp_path / "gate", tmp_path / "out"
    write = f"{sys.executable} -c 'import os,sys; f=open(sys.argv[1],\"ab\"); f.write(os.urandom(int(sys.argv[2]))); f.flush(); os.fsync(f.fileno())'"
    script = (f'{write} "$XCE_CLAIM_GROW/a" {24 * MiB} 2>/dev/null && echo before: wrote || echo before: refused; '
              f'rm -f "$XCE_CLAIM_GROW/a"; sync; '
              f'while [ ! -e {gate} ]; do sleep 0.05; done; '
              f'{write} "$XCE_CLAIM_GROW/b" {24 * MiB} && echo after: wrote')
    job = cl.submit("--claim", "grow:rw", "-o", str(out), "--", "sh", "-c", script)
    cl.wait_state(job, "RUN")
    wait_for(lambda: out.exists() and "before:" in out.read_text(), what="the first write")
    assert "before: refused" in out.read_text(), "16Mi holds no 24Mi"
    assert [a["state"] for a in cl.claim("grow")["attachments"]] == ["ATTACHED"]
    r = cl.xce("claim", "resize", "grow", "64Mi", "--wait")
    assert "resize to 64Mi DONE" in r.stdout.splitlines()[-1]
    gate.touch()
    done = cl.wait_state(job, "DONE", "EXIT")
    assert (done["state"], done["exit_code"]) == ("DONE", 0), out.read_text()
    assert out.read_text().splitlines()[-1] == "after: wrote"
    c = wait_for(lambda: (c := cl.claim("grow"))["used_bytes"] and c["used_bytes"] >= 24 * MiB and c,
                 what="btrfs used bytes listed")
    assert (c["size_bytes"], c["state"]) == (64 * MiB, "READY")
