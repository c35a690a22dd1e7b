"""Snapshots and clones on real btrfs, end to end: a claim class backed by the btrfs provider in the
provisioner's config, a job writing a claim, a snapshot taken while it is attached and written,
and a clone whose job reads exactly the snapshot's data while the original keeps changing.

Needs root (a loop-file btrfs filesystem, as ``tests/providers/test_btrfs.py`` makes).
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.test_claims import CONFIG
from tests.providers.test_btrfs import loop_btrfs

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop-file btrfs filesystem needs root")

BTRFS_CONFIG = CONFIG + """
[[claim_classes]]
name = "btrfs"
provider = "btrfs"
pools = ["shared"]
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    work = tmp_path_factory.mktemp("btrfs-cluster")
    with loop_btrfs(work) as mnt:
        root = mnt / "xce"
        root.mkdir()
        cfg = work / "xce.toml"
        cfg.write_text(BTRFS_CONFIG)
        c = Cluster(str(work), config=str(cfg)).start()
        try:
            # no command: a provider named btrfs* runs this interpreter's ``-m xce.providers.btrfs``
            c.add_provisioner(extra_providers=f'[providers.btrfs]\ntimeout = 60.0\n'
                                              f'[providers.btrfs.config]\nroot = "{root}"\n',
                              extra_roots=(str(root),))
            c.add_worker("host1", slots=4)
            c.btrfs_root = root

            def known():
                with c.api() as api:
                    caps = {k["name"]: k["capabilities"] for k in api.get("/v1/claimclasses").json()}
                return caps["btrfs"] is not None and caps["btrfs"]
            caps = wait_for(known, what="the btrfs class's capabilities")
            assert caps["create_snapshot"] and caps["clone"]
            yield c
        finally:
            c.stop()


def read(path) -> str:
    with open(path) as fh:
        return fh.read()


def test_a_clone_of_a_snapshot_taken_under_a_writing_job_reads_exactly_that_data(cl, tmp_path):
    cl.xce("claim", "create", "train", "--class", "btrfs", "--size", "64Mi", "--access", "RWX", "--wait")
    flags = tmp_path / "flags"
    flags.mkdir(mode=0o777)
    writer = ('echo step-1 > "$XCE_CLAIM_TRAIN/ckpt"; touch {f}/written; '
              'while [ ! -e {f}/snapped ]; do sleep 0.05; done; i=0; '
              'while [ ! -e {f}/stop ]; do i=$((i+1)); echo "step-$((i+1))" > "$XCE_CLAIM_TRAIN/ckpt"; '
              'touch {f}/changed; sleep 0.05; done').format(f=flags)
    job = cl.submit("--claim", "train:rw", "-o", str(tmp_path / "writer.out"), "--", "sh", "-c", writer)
    cl.wait_state(job, "RUN")
    wait_for(lambda: (flags / "written").exists(), what="the job wrote its first checkpoint")
    assert cl.claim("train")["attachments"], "the claim is attached to the running job"
    snap = json.loads(cl.xce("--json", "claim", "snapshot", "train", "step1", "--wait").stdout)
    assert snap["state"] == "READY" and snap["handle"].startswith("s")
    data = cl.btrfs_root / "snapshots" / snap["handle"] / "data"
    ro = subprocess.run(["btrfs", "property", "get", str(data), "ro"], capture_output=True, text=True, check=True)
    assert ro.stdout.strip() == "ro=true", "a btrfs snapshot is a read-only subvolume"
    (flags / "snapped").touch()
    wait_for(lambda: (flags / "changed").exists(), what="the original changing after the snapshot")
    cl.xce("claim", "create", "restored", "--from-snapshot", "step1", "--wait")
    restored = cl.claim("restored")
    assert restored["source"]["handle"] == snap["handle"] and restored["size_bytes"] == 64 * 2**20
    out = tmp_path / "reader.out"
    reader = cl.submit("--claim", "restored:rw", "-o", str(out), "--", "sh", "-c",
                       'cat "$XCE_CLAIM_RESTORED/ckpt"; echo edited > "$XCE_CLAIM_RESTORED/ckpt"')
    assert cl.wait_state(reader, "DONE", "EXIT", timeout=60)["state"] == "DONE"
    assert read(out).splitlines() == ["step-1"], "the clone's job read the snapshot's data"
    original = read(os.path.join(cl.claim("train")["path"], "ckpt")).strip()
    assert original.startswith("step-") and original != "step-1", "the original kept changing"
    assert read(data / "ckpt") == "step-1\n", "and the snapshot did not (nor did the clone's edit reach it)"
    (flags / "stop").touch()
    assert cl.wait_state(job, "DONE", "EXIT", timeout=60)["state"] == "DONE"
    for name in ("restored", "train"):
        cl.xce("claim", "delete", name, "--wait")
    cl.xce("snapshot", "delete", "step1", "--wait")
    assert not (cl.btrfs_root / "snapshots" / snap["handle"]).exists()
