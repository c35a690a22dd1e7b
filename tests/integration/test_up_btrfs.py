"""``xce up --btrfs-loop`` / ``--btrfs``: a claim class on a real btrfs filesystem in the local cluster.

``--btrfs-loop`` makes a loop-file btrfs under the state dir, mounts it, and
``xce down`` unmounts it and frees the loop device.  Needs root (as the btrfs
provider's own tests do); the refusals are checked without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.helpers import XCE, cli, wait_for
from tests.providers.test_btrfs import loop_btrfs
from xce import localcluster

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a loop-file btrfs filesystem needs root")


def start_up(state_dir: str, *flags: str) -> tuple[subprocess.Popen, list[str]]:
    """``xce up --hosts 1 FLAGS``; its first lines of output once it is up (the btrfs line included)."""
    proc = subprocess.Popen(XCE + ["up", "--hosts", "1", "--slots", "2", "--state-dir", state_dir,
                                   "--listen", "127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:  # ends when it is up (the btrfs line is the last) or has exited
        lines.append(line.rstrip("\n"))
        if line.startswith("  btrfs:") or line.startswith("xce up:"):
            break
    assert proc.poll() is None and lines[0].startswith("xce cluster up"), "\n".join(lines) + proc.stdout.read()
    return proc, lines


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@needs_root
def test_up_btrfs_loop_a_claim_becomes_ready_a_job_writes_it_and_down_unmounts_and_detaches(tmp_path):
    state = str(tmp_path / "cluster")
    env = {"XCE_CONFIG": os.path.join(state, "client.toml"), "XCE_URL": "", "XCE_TOKEN": ""}
    mnt, image = os.path.join(state, "btrfs", "mnt"), os.path.join(state, "btrfs", "btrfs.img")
    up, lines = start_up(state, "--btrfs-loop", "256Mi")
    try:
        assert lines[-1] == f"  btrfs:  claim class btrfs on {mnt}/xce, a loop-file filesystem ({image}, 256Mi)"
        assert os.path.ismount(mnt)
        classes = {k["name"]: k for k in json.loads(cli(env, "--json", "claimclass", "list").stdout)}
        assert classes["btrfs"]["provider"] == "btrfs" and classes["btrfs"]["scope"] == "shared"
        assert classes["btrfs"]["pools"] == ["btrfs"]
        r = cli(env, "claim", "create", "vol", "--class", "btrfs", "--size", "32Mi", "--access", "RWX", "--wait")
        assert r.returncode == 0, r.stderr
        claim = json.loads(cli(env, "--json", "claim", "show", "vol").stdout)
        assert claim["state"] == "READY" and claim["path"].startswith(f"{mnt}/xce/volumes/")
        job = json.loads(cli(env, "--json", "submit", "--claim", "vol:rw", "--", "sh", "-c",
                             'echo written-by-a-job > "$XCE_CLAIM_VOL/out"').stdout)["id"]
        wait_for(lambda: json.loads(cli(env, "--json", "job", "show", str(job)).stdout)["state"] in ("DONE", "EXIT"),
                 timeout=60, what="the job")
        assert json.loads(cli(env, "--json", "job", "show", str(job)).stdout)["state"] == "DONE"
        with open(os.path.join(claim["path"], "out")) as fh:
            assert fh.read() == "written-by-a-job\n"
        down = cli({}, "down", "--state-dir", state)
        assert down.returncode == 0, down.stderr
        assert up.wait(60) == 0
        rest = up.stdout.read()
        assert f"xce up: unmounted {mnt}" in rest
        assert not os.path.ismount(mnt)
        losetup = subprocess.run(["losetup", "-j", image], capture_output=True, text=True, check=True)
        assert losetup.stdout == "", "xce down left the loop device attached"
        assert os.path.exists(image), "the image stays with the state"
    finally:
        stop(up)
        if os.path.ismount(mnt):
            subprocess.run(["umount", mnt], timeout=60)


@needs_root
def test_up_btrfs_on_a_directory_enables_quotas_and_refuses_a_directory_not_on_btrfs(tmp_path):
    state = str(tmp_path / "cluster")
    r = cli({}, "up", "--hosts", "1", "--state-dir", state, "--listen", "127.0.0.1:0", "--btrfs", str(tmp_path))
    kind = localcluster.fs_type(str(tmp_path))
    assert r.returncode == 1
    assert f"--btrfs {tmp_path}: not on a btrfs filesystem (it is on {kind})" in r.stderr
    with loop_btrfs(tmp_path, quotas=False) as fs:
        root = fs / "xce"
        root.mkdir()
        env = {"XCE_CONFIG": os.path.join(state, "client.toml"), "XCE_URL": "", "XCE_TOKEN": ""}
        up, lines = start_up(state, "--btrfs", str(root))
        try:
            assert lines[-1] == f"  btrfs:  claim class btrfs on {root}, its filesystem"
            r = cli(env, "claim", "create", "v", "--class", "btrfs", "--size", "8Mi", "--access", "RWO", "--wait")
            assert r.returncode == 0, r.stderr
            assert json.loads(cli(env, "--json", "claim", "show", "v").stdout)["path"].startswith(f"{root}/volumes/")
            cli(env, "claim", "delete", "v", "--wait")
        finally:
            stop(up)
        assert os.path.ismount(fs), "a filesystem xce up did not mount is not unmounted by it"


def test_up_btrfs_refusals_say_why(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(localcluster.ClusterError, match="need root"):
        localcluster.check_btrfs_root(str(tmp_path))
    with pytest.raises(localcluster.ClusterError, match="--btrfs-loop needs root"):
        localcluster.LoopBtrfs(str(tmp_path), 1 << 30).mount()
    r = cli({}, "up", "--state-dir", str(tmp_path), "--btrfs", str(tmp_path), "--btrfs-loop", "1Gi")
    assert r.returncode == 2 and "not allowed with argument" in r.stderr
    r = cli({}, "up", "--state-dir", str(tmp_path), "--btrfs-loop", "lots")
    assert r.returncode == 2 and "invalid --btrfs-loop size 'lots'" in r.stderr
