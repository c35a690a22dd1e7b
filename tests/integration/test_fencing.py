"""A job must never run twice: a run the controller gives up on is dead before its replacement starts.

The attack of issue 28: a rerunnable training job writes its checkpoint claim (RWO) on one host; that
host's worker is killed (SIGKILL) or cut off (SIGSTOP, then SIGCONT), the host is declared lost, and
the job is run again elsewhere.  Before fencing, run 1 went on under its shepherd while run 2 wrote the
same checkpoint.  Now run 1's shepherd kills it when its lease runs out (no word from the controller
for ``fence_time``), and the controller requeues the job only ``host_timeout + fence_time +
fence_margin`` after it last heard from the host.

The job appends ``HOST TIME`` to a ledger in the claim every 100 ms: the ledger shows whether two hosts
ever wrote at the same time.
"""

from __future__ import annotations

import signal

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import cluster_config

CONFIG = cluster_config(2.0, fence_time=2.0) + """
[[pools]]
name = "shared"
capacity = "1Ti"

[[claim_classes]]
name = "simfs"
provider = "simfs"
pools = ["shared"]
"""

# 60 lines, one every 100 ms: about 6 s of writing, then DONE
LEDGER_JOB = ('i=0; while [ $i -lt 60 ]; do echo "$XCE_HOST $(date +%s.%N)" >> "$XCE_CLAIM_CKPT/ledger"; '
              'i=$((i+1)); sleep 0.1; done')


@pytest.fixture
def cl(tmp_path):
    cfg = tmp_path / "xce.toml"
    cfg.write_text(CONFIG)
    c = Cluster(str(tmp_path), config=str(cfg)).start()
    c.add_provisioner()
    for h in ("h1", "h2"):
        c.add_worker(h, slots=2)
    yield c
    c.stop()


def _ledger(cl: Cluster, claim: dict) -> list[tuple[str, float]]:
    with open(f"{claim['path']}/ledger") as fh:
        return [(host, float(t)) for host, t in (line.split() for line in fh if line.strip())]


def _run_with_its_worker_lost(cl: Cluster, lose, recover) -> None:
    cl.xce("claim", "create", "ckpt", "--class", "simfs", "--size", "1Gi", "--access", "RWO")
    claim = cl.wait_claim("ckpt", "READY")
    job = cl.submit("-r", "--claim", "ckpt:rw", "--", "sh", "-c", LEDGER_JOB)
    first = cl.wait_state(job, "RUN")["hosts"][0]
    other = "h2" if first == "h1" else "h1"
    wait_for(lambda: len(_ledger(cl, claim)) >= 10, what="run 1 writing its ledger")
    lose(cl.workers[first])
    try:
        again = wait_for(lambda: (j := cl.job(job))["run"] == 2 and j["state"] in ("RUN", "DONE") and j,
                         timeout=60, what="the job run again")
        assert again["hosts"] == [other]
    finally:
        recover(cl.workers[first])
    done = cl.wait_state(job, "DONE", timeout=60)
    assert done["run"] == 2
    ledger = _ledger(cl, claim)
    hosts = [h for h, _ in ledger]
    switch = hosts.index(other)
    assert set(hosts[:switch]) == {first} and set(hosts[switch:]) == {other}, \
        f"two hosts wrote the checkpoint in turn: {hosts}"
    last_first = max(t for h, t in ledger if h == first)
    first_other = min(t for h, t in ledger if h == other)
    assert last_first < first_other, f"run 1 wrote at {last_first}, after run 2 began at {first_other}"
    assert hosts.count(other) == 60, "run 2 ran whole"
    assert hosts.count(first) < 60, "run 1 was cut short by its fence"


def test_a_killed_workers_run_is_fenced_before_the_job_runs_again(cl):
    """SIGKILL to the worker: the host stays up, and so does run 1's shepherd, until its lease runs out."""
    _run_with_its_worker_lost(cl, lose=lambda w: w.kill(), recover=lambda w: None)


def test_a_worker_cut_off_past_its_fence_finds_its_run_ended_when_it_returns(cl):
    """SIGSTOP (a partition, as the worker sees it) for longer than the fence: run 1 is fenced, the job
    runs again on the other host, and the worker, woken, re-registers and reports run 1 as fenced,
    which changes nothing."""
    def recover(w):
        w.proc.send_signal(signal.SIGCONT)
        wait_for(lambda: any(h["name"] == w.host and h["state"] == "OK" for h in cl.api().get("/v1/hosts").json()),
                 what=f"{w.host} registered again")

    _run_with_its_worker_lost(cl, lose=lambda w: w.proc.send_signal(signal.SIGSTOP), recover=recover)
