"""Changing and ordering pending jobs through the CLI and LSF's commands, on a real cluster (a controller
and two workers on loopback): ``xce mod``/``bmod`` (queue, run limit, priority, an array's limit),
``-Q`` requeue exit values (a serving job that exits 3 is started again), ``-sp``, ``-b`` and ``-x``."""

from __future__ import annotations

import time

import pytest

from tests.helpers import Cluster, wait_for
from tests.integration.conftest import make_cluster

QUEUES = """
[[queues]]
name = "short"
priority = 30
run_limit = "10"
max_run_limit = "30"

[[queues]]
name = "serve"
priority = 30
requeue_exit_values = "3"
max_job_requeue = 5
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("controls"), hosts={"host1": 2, "host2": 2}, extra=QUEUES)
    yield c
    c.stop()


def test_mod_changes_the_queue_and_run_limit_of_a_pending_job(cl):
    job_id = cl.submit("-H", "--", "true")  # held: it stays pending while it is changed
    r = cl.xce("mod", "-q", "short", "-W", "20", "-sp", "9", str(job_id))
    assert r.stdout.strip() == f"Parameters of job <{job_id}> are being changed"
    job = cl.job(job_id)
    assert (job["queue"], job["run_limit"], job["user_priority"]) == ("short", 1200.0, 9)
    refused = cl.xce("mod", "-W", "45", str(job_id), ok=False)
    assert refused.returncode == 1 and "over queue 'short''s maximum 0:30" in refused.stderr
    usage = cl.xce("mod", str(job_id), ok=False)
    assert usage.returncode == 2 and "nothing to change" in usage.stderr
    cl.xce("release", str(job_id))
    cl.wait_state(job_id, "DONE")
    late = cl.xce("mod", "-q", "default", str(job_id), ok=False)
    assert late.returncode == 1 and "only a pending job" in late.stderr


def elements(cl: Cluster, array_id: int) -> list[dict]:
    with cl.api() as c:
        return c.get("/v1/jobs", params={"array": array_id}).json()


def test_an_arrays_limit_is_changed_later_and_counts_its_running_elements(cl, tmp_path):
    gate = tmp_path / "go"
    array_id = cl.submit("-J", "sweep[1-6]%1", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    wait_for(lambda: sum(j["state"] == "RUN" for j in elements(cl, array_id)) == 1, what="one element running")
    cl.xce("mod", "-J", "%3", str(array_id))
    wait_for(lambda: sum(j["state"] == "RUN" for j in elements(cl, array_id)) == 3, what="three elements running")
    assert "array limit: at most 3 elements" in cl.xce("job", "why", f"{array_id}[6]").stdout
    gate.touch()
    for j in elements(cl, array_id):
        cl.wait_state(j["id"], "DONE")


def test_a_serving_job_that_exits_3_is_started_again_and_ends_when_it_exits_0(cl, tmp_path):
    runs = tmp_path / "runs"
    script = f"echo run >> {runs}; [ $(wc -l < {runs}) -ge 3 ] && exit 0; exit 3"
    job_id = cl.submit("-q", "serve", "--shell", "--", script)
    job = cl.wait_state(job_id, "DONE", timeout=60)
    assert (job["run"], job["requeues"]) == (3, 2)
    assert [h["reason"] for h in job["history"] if h["state"] == "PEND"][1:] == \
        ["exit code 3 is a requeue exit value: requeued"] * 2
    own = cl.submit("-Q", "4", "--", "sh", "-c", "exit 3")  # its own -Q replaces the queue's
    assert cl.wait_state(own, "EXIT")["run"] == 1


def test_an_exclusive_job_runs_alone_and_a_late_begin_time_waits(cl, tmp_path):
    gate = tmp_path / "go"
    lone = cl.submit("-x", "--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done")
    host = cl.wait_state(lone, "RUN")["hosts"][0]
    others = [cl.submit("--", "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.05; done") for _ in range(2)]
    for j in others:
        assert cl.wait_state(j, "RUN")["hosts"][0] != host
    later = cl.submit("-b", time.strftime("%H:%M", time.localtime(time.time() + 3 * 3600)), "--", "true")
    why = wait_for(lambda: (w := cl.xce("job", "why", str(later)).stdout) and "begin time (-b)" in w and w,
                   what="the begin-time reason")
    assert "not reached" in why and cl.job(later)["state"] == "PEND"
    gate.touch()
    for j in (lone, *others):
        cl.wait_state(j, "DONE")
    cl.xce("kill", str(later))


def test_a_pre_exec_that_fails_on_one_host_sends_the_job_to_the_other_and_post_exec_runs_after_it(cl, tmp_path):
    log = tmp_path / "log"
    job_id = cl.submit("-E", f'[ "$XCE_HOST" = host2 ] && echo "pre on $XCE_HOST" >> {log}',
                       "-Ep", f'echo "post $LSB_JOBEXIT_STAT" >> {log}; exit 4',
                       "--", "sh", "-c", f"echo job >> {log}; exit 0")
    job = cl.wait_state(job_id, "DONE", "EXIT", timeout=60)
    assert job["state"] == "DONE" and job["hosts"] == ["host2"], job
    # both hosts idle, host1 comes first: its pre-exec failed there, and the job was never sent back
    assert (job["pre_exec_failures"], job["avoid_hosts"], job["run"]) == (1, ["host1"], 2)
    assert read(log) == ["pre on host2", "job", "post 0"]
    assert job["post_exec_exit"] == 4
    handler = cl.submit("-w", f"post_err({job_id})", "--", "true")
    cl.wait_state(handler, "DONE")
    assert "Post-exec" in cl.xce("job", "show", str(job_id)).stdout


def read(path) -> list[str]:
    with open(path) as fh:
        return fh.read().splitlines()
