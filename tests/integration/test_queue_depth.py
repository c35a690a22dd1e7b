"""``[controller] queue_depth``: a cycle plans the first pending jobs only, and no job behind them is
forgotten.  A controller with ``queue_depth = 1`` and one worker with 2 slots."""

from __future__ import annotations

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import cluster_config


@pytest.fixture
def cl(tmp_path):
    cfg = tmp_path / "xce.toml"
    cfg.write_text(cluster_config(2.0).replace("[controller]\n", "[controller]\nqueue_depth = 1\n"))
    c = Cluster(str(tmp_path), config=str(cfg)).start()
    c.add_worker("host1", slots=2)
    yield c
    c.stop()


def test_jobs_behind_a_blocked_head_of_the_queue_still_run_and_say_why_they_wait(cl):
    head = cl.submit("-R", "select[gpu]", "--", "true")  # no host has a gpu: it never runs
    behind = cl.submit("--", "true")  # beyond the depth: a capped cycle never sees it
    assert cl.wait_state(behind, "DONE")["hosts"] == ["host1"], "a job behind the depth was starved"
    stuck = cl.submit("-R", "select[zone==z]", "--", "true")
    # the capped cycles plan only the head; the full pass that a free slot brings says why `stuck` waits
    why = wait_for(lambda: "no host matches" in (r := cl.xce("job", "why", str(stuck)).stdout) and r,
                   what="the full pass's reason for the job behind the depth")
    assert why.strip() == f"Job <{stuck}> PEND: no host matches select[zone==z]"
    assert "gpu" in cl.job(head)["pending_reason"]
    cl.xce("kill", str(head), str(stuck))
