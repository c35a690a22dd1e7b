"""Tasks of multi-host jobs (``xce.model.tasks``) and the submission check of claims against hosts,
on models built from facts (``tests.model.test_job_claims.World``)."""

from __future__ import annotations

import pytest

from xce.errors import Conflict, Forbidden, InvalidRequest, Unauthenticated
from xce.model import dispatch, jobs, tasks
from xce.model.facts import JobFinished, JobKillRequested, TaskEnded, TaskLaunched
from xce.model.job_claims import JobClaimsSpec
from xce.model import job_claims
from xce.model.jobs import JobSpec, JobState
from tests.model.test_job_claims import ALICE, CONFIG, World

SECRET = "s3cret-of-the-run"


@pytest.fixture
def w() -> World:
    return World()


def running(w: World, hosts=("h1", "h2"), secret: str = SECRET):
    job = w.submit()
    w.allocate(job, hosts)
    w.make_ready(job)
    w.commit(jobs.report_started(w.model, hosts[0], job.id, job.run, 4242, w.tick(), "/ws", "", "",
                                 rendezvous="127.0.0.1:4000", task_key=tasks.task_key(secret)))
    assert job.state is JobState.RUN and job.rendezvous == "127.0.0.1:4000"
    return job


def launch(w: World, job, host: str = "h2", keep_going: bool = False, secret: str = SECRET) -> int:
    found = tasks.job_for_secret(w.model, job.id, secret)
    facts = tasks.launch(w.model, found, host, "hostname", "/tmp", keep_going, w.tick(), {"PATH": "/x"})
    w.commit(facts)
    return facts[0].task


def test_the_run_secret_proves_the_job_and_nothing_else(w):
    job = running(w)
    assert tasks.job_for_secret(w.model, job.id, SECRET) is job
    other = running(w, secret="the-other-run")
    for job_id, secret in ((job.id, "wrong"), (other.id, SECRET), (999, SECRET)):
        with pytest.raises(Unauthenticated, match=f"not the job {job_id}"):
            tasks.job_for_secret(w.model, job_id, secret)
    assert "s3cret" not in repr(job)  # only its sha256 is kept


def test_a_task_only_on_the_jobs_own_hosts(w):
    job = running(w)
    with pytest.raises(Forbidden, match="host h3 is not one of job .*'s hosts"):
        tasks.launch(w.model, job, "h3", "hostname", "", False, w.tick())
    assert launch(w, job, "h2") == 1 and launch(w, job, "h1") == 2
    assert job.tasks[0]["host"] == "h2" and job.tasks[0]["env"] == {"PATH": "/x"}


def test_a_tasks_environment_is_kept_as_a_jobs(w):
    job = running(w)
    facts = tasks.launch(w.model, job, "h2", "true", "", False, w.tick(),
                         {"XCE_JOB_TOKEN": SECRET, "XCE_TOKEN": "x", "KEEP": "1"}, CONFIG.controller)
    assert facts[0].env == {"KEEP": "1"}


def test_the_host_is_given_its_tasks_and_the_runs_orders(w):
    job = running(w)
    launch(w, job, "h2")
    work = dispatch.work_for(w.model, "h2")
    assert [(j.id, t["task"]) for j, t in work.tasks] == [(job.id, 1)] and not work.start
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick()))
    work = dispatch.work_for(w.model, "h2")
    assert work.orders == [job] and not work.tasks  # (a run ordered ended starts no more tasks)
    assert dispatch.work_for(w.model, "h2", {(job.id, job.run): job.order_seq}).orders == []


def test_a_failed_task_ends_the_job_unless_keep_going(w):
    job = running(w)
    launch(w, job, "h2", keep_going=True)
    launch(w, job, "h2")
    facts = tasks.report_ended(w.model, "h2", job.id, job.run, 1, w.tick(), 3, None)
    assert [type(f) for f in facts] == [TaskEnded]
    w.commit(facts)
    facts = tasks.report_ended(w.model, "h2", job.id, job.run, 2, w.tick(), None, 9)
    assert [type(f) for f in facts] == [TaskEnded, JobKillRequested]
    assert facts[1].by == f"task 2 on h2 (signal 9)"
    w.commit(facts)
    assert job.kill_requested and job.tasks[1]["signal"] == 9
    assert tasks.report_ended(w.model, "h2", job.id, job.run, 2, w.tick(), None, 9) == []  # a repeated report
    with pytest.raises(Conflict):
        tasks.report_ended(w.model, "h1", job.id, job.run, 1, w.tick(), 0, None)  # not h1's task


def test_a_runs_end_ends_its_tasks_and_a_new_run_starts_with_none(w):
    job = running(w)
    launch(w, job, "h2")
    assert tasks.runs_over(w.model, {(job.id, job.run)}) == []
    w.commit([JobFinished(time=w.tick(), job_id=job.id, run=job.run, state="EXIT", exit_code=1)])
    assert tasks.runs_over(w.model, {(job.id, job.run), (12345, 1)}) == [(job.id, job.run), (12345, 1)]
    with pytest.raises(Unauthenticated):
        tasks.job_for_secret(w.model, job.id, SECRET)  # over: its secret is worth nothing
    w.commit([TaskLaunched(time=w.tick(), job_id=job.id, run=job.run + 1, task=1, host="h2", command="x")])
    assert len(job.tasks) == 1  # (a fact of another run changes nothing)


def test_an_rwo_claim_is_refused_for_a_job_across_hosts(w):
    w.standalone("rwo", "RWO")
    w.standalone("shared", "RWX")
    w.standalone("ref", "ROX")

    def submit(claim: str, slots: int, resreq: str):
        return job_claims.submit(w.model, ALICE, JobSpec(command=["mpirun"], slots=slots, resreq=resreq),
                                 JobClaimsSpec(claims=(claim,)), w.tick(), CONFIG)

    with pytest.raises(InvalidRequest, match=r"claim 'rwo' is RWO .* a job on 2 hosts \(-n 4 with span\[ptile=2\]\)"):
        submit("rwo", 4, "span[ptile=2]")
    with pytest.raises(InvalidRequest, match="RWO"):
        submit("rwo:ro", 3, "span[ptile=1]")
    for claim, slots, resreq in (("rwo", 2, "span[ptile=2]"), ("rwo", 4, "span[hosts=1]"), ("rwo", 4, ""),
                                 ("shared", 4, "span[ptile=2]"), ("ref", 4, "span[ptile=1]")):
        assert submit(claim, slots, resreq)[0]


def test_a_signal_blaunch_got_goes_to_its_task_only_as_an_order_of_the_run(w):
    job = running(w)
    first, second = launch(w, job), launch(w, job, "h1")
    w.commit(tasks.signal_task(job, second, 15, w.tick()))
    assert jobs.orders(job)["signals"] == [[job.order_seq, 15, second]]  # the task's, not the run's
    assert not job.tasks[second - 1].get("killed")
    w.commit([TaskEnded(time=w.tick(), job_id=job.id, run=job.run, task=first, exit_code=0)])
    assert tasks.signal_task(job, first, 15, w.tick()) == []  # it has ended: nothing to pass on
    with pytest.raises(InvalidRequest, match="signal 99"):
        tasks.signal_task(job, second, 99, w.tick())


def test_a_task_whose_launcher_is_gone_is_killed_once(w):
    job = running(w)
    first, second = launch(w, job), launch(w, job)
    assert tasks.live_tasks(job) == [first, second]
    facts = tasks.launchers_lost(w.model, job.id, [first], w.tick())
    w.commit(facts)
    assert jobs.orders(job)["signals"] == [[job.order_seq, 9, first]] and job.tasks[first - 1]["killed"]
    assert tasks.live_tasks(job) == [second]  # its lease is no longer kept
    assert tasks.launchers_lost(w.model, job.id, [first], w.tick()) == []  # level-triggered: not twice
    # its end (SIGKILL) ends the job, as any failed task's does
    w.commit(tasks.report_ended(w.model, "h2", job.id, job.run, first, w.tick(), None, 9))
    assert job.kill_requested and job.kill_by == f"task {first} on h2 (signal 9)"
    assert tasks.live_tasks(job) == []  # (a run being killed keeps no lease: it ends)
