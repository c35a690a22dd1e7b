"""Crashes in the middle of claims work: every job and claim converges, nothing starts twice, nothing leaks.

SIGKILL of the worker during node prepare and during stage-out, of the provisioner during attach,
and of the controller between allocation and dispatch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.helpers import children_of, wait_for
from tests.integration.test_job_claims import make_job_cluster, node_objects, read


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_job_cluster(tmp_path_factory.mktemp("crashes"), hosts=("host1",), host_timeout=30.0)
    yield c
    c.stop()


def inject_root(root: str, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "xce.providers.simfs", "inject", "--root", root, *args],
                   check=True, capture_output=True)


def test_worker_sigkill_during_node_prepare(cl, tmp_path):
    w = cl.workers["host1"]
    inject_root(os.path.join(w.work_dir, "simfs"), "--hang-next", "1", "--hang-seconds", "60",
                "--ops", "node_prepare")
    ledger = tmp_path / "starts"
    job = cl.submit("--scratch", "256Mi", "--", "sh", "-c", f'echo "$XCE_RUN" >> {ledger}; test -d "$XCE_SCRATCH"')
    scratch = wait_for(lambda: next((c for c in cl.job(job)["claims"] if c.get("kind") == "scratch"
                                     and c["state"] == "PREPARING"), None), what="node prepare in flight")
    providers = children_of(w.proc.pid)
    w.kill()
    for pid in providers:  # the hung provider goes with its worker, as on a machine crash
        os.killpg(pid, signal.SIGKILL)
    w.start()
    done = cl.wait_state(job, "DONE")
    assert read(ledger).split() == ["1"], "started exactly once"
    c = cl.wait_claim(scratch["name"], "RELEASED")
    assert [o["result"] for o in c["ops"] if o["op"] == "create"] == ["started", "started", "ok"]
    assert done["run"] == 1
    assert not [p for p in node_objects(cl) if os.path.basename(p) == c["handle"]]


def copy_in_progress(dest: str) -> int | None:
    """The process group of a stage copy to ``dest`` running now, if any (not another test's)."""
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    argv = fh.read().split(b"\0")
                    if b"xce-stage" in argv and any(dest.encode() in a for a in argv):
                        return os.getpgid(int(pid))
            except OSError:
                pass
    return None


def test_worker_sigkill_during_stage_out(cl, tmp_path):
    dest = tmp_path / "result.bin"
    w = cl.workers["host1"]
    job = cl.submit("--stage-out", f"result.bin:{dest}", "--", "sh", "-c",
                    'head -c 256M /dev/zero > "$XCE_STAGE/result.bin"')
    copy = wait_for(lambda: copy_in_progress(str(dest)), interval=0.002, what="the stage-out copy running")
    os.killpg(copy, signal.SIGSTOP)  # caught in the middle
    assert cl.job(job)["state"] == "STAGE_OUT"
    w.kill()
    os.killpg(copy, signal.SIGKILL)  # as the machine's crash would
    w.start()
    done = cl.wait_state(job, "DONE", timeout=90)  # 256 MiB copied again, on a busy machine
    assert os.path.getsize(dest) == 256 * 2**20 and done["exit_code"] == 0 and done["run"] == 1
    stage = next(c for c in done["claims"] if c.get("kind") == "stage")
    c = cl.wait_claim(stage["name"], "RELEASED")
    assert [o["result"] for o in c["ops"] if o["op"] == "stage_out"] == ["started", "started", "ok"]
    assert not [p for p in node_objects(cl) if os.path.basename(p) == c["handle"]]


def test_provisioner_sigkill_during_attach(cl, tmp_path):
    cl.xce("claim", "create", "att", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    inject_root(cl.provisioner.simfs_root, "--hang-next", "1", "--hang-seconds", "60", "--ops", "attach")
    job = cl.submit("--claim", "att", "--", "sh", "-c", 'test -d "$XCE_CLAIM_ATT"')
    wait_for(lambda: "ATTACHING" in (cl.job(job)["pending_reason"] or "") and cl.provisioner.children(),
             what="attach in flight")
    assert "waiting for claim att ATTACHING on host1" in cl.job(job)["pending_reason"]
    cl.provisioner.kill()
    cl.provisioner.start()
    assert cl.wait_state(job, "DONE")["run"] == 1
    wait_for(lambda: cl.claim("att")["attachments"] == [], what="detached")


def test_controller_sigkill_between_allocation_and_dispatch(cl, tmp_path):
    w = cl.workers["host1"]
    inject_root(os.path.join(w.work_dir, "simfs"), "--hang-next", "1", "--hang-seconds", "3",
                "--ops", "node_prepare")
    ledger = tmp_path / "starts"
    job = cl.submit("--scratch", "256Mi", "--", "sh", "-c", f'echo "$XCE_RUN" >> {ledger}')
    wait_for(lambda: cl.job(job)["hosts"] and cl.job(job)["state"] == "PEND", what="allocated, not dispatched")
    cl.ctl.kill()
    cl.ctl.start()
    done = cl.wait_state(job, "DONE", timeout=60)
    assert done["run"] == 1 and read(ledger).split() == ["1"], "started exactly once"
    for c in done["claims"][1:]:
        cl.wait_claim(c["name"], "RELEASED")
