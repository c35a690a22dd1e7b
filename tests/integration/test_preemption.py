"""Preemption on a real cluster (issue 34): with every slot held by a low queue's rerunnable job, a job of
a queue that may preempt it has it ended through the kill path and requeued; the preemptor runs, then
the victim runs again."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import make_cluster
from tests.integration.test_job_claims import make_job_cluster

QUEUES = """
[[queues]]
name = "low"
priority = 10

[[queues]]
name = "top"
priority = 90
preemption = "PREEMPTIVE[low]"
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("preempt"), hosts={"host1": 2}, extra=QUEUES)
    yield c
    c.stop()


def test_a_top_job_preempts_the_low_job_holding_every_slot_which_is_requeued_and_runs_again(cl):
    victim = cl.submit("-q", "low", "-n", "2", "-r", "--", "sleep", "300")
    cl.wait_state(victim, "RUN", timeout=60)
    top = cl.submit("-q", "top", "--", "true")
    ran = cl.wait_state(top, "DONE", timeout=90)
    v = cl.job(victim)
    assert v["run"] >= 2 or v["state"] == "PEND"  # requeued: its next run waits or has started
    reasons = [h["reason"] for h in v["history"]]
    assert any(r == f"requeued by preemption for job {top}" for r in reasons), reasons
    wait_for(lambda: cl.job(victim)["state"] == "RUN", timeout=60, what="the victim running again")
    assert cl.job(victim)["start_time"] >= ran["end_time"] - 1
    cl.xce("kill", str(victim))


def test_a_top_job_with_scratch_preempts_the_low_job_holding_the_hosts_scratch(tmp_path):
    """The preemptor's template claim (``--scratch``) needs the host counter the victim holds as well as
    its slots: the victim is chosen and requeued, and the preemptor runs with its scratch."""
    c = make_job_cluster(tmp_path, hosts=("host1",), extra_config=QUEUES)  # 4 slots, 4Gi of scratch
    try:
        victim = c.submit("-q", "low", "-n", "4", "-r", "--scratch", "3Gi", "--", "sleep", "300")
        c.wait_state(victim, "RUN", timeout=60)
        top = c.submit("-q", "top", "--scratch", "2Gi", "--", "sh", "-c", 'test -d "$XCE_SCRATCH"')
        c.wait_state(top, "DONE", timeout=120)
        reasons = [h["reason"] for h in c.job(victim)["history"]]
        assert any(r == f"requeued by preemption for job {top}" for r in reasons), reasons
        c.xce("kill", str(victim))
    finally:
        c.stop()
