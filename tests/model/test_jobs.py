"""The kill path and the other orders to a run (``xce.model.jobs``), on models built from facts: what each
request decides, how orders are numbered, and what the worker is told (``orders``)."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ADMIN, ALICE, CONFIG, World
from xce.config import parse_config
from xce.errors import Conflict, InvalidRequest
from xce.model.facts import HostRegistered, JobKillRequested, JobSignalRequested, QueueDefined
from xce.model import job_claims, jobs
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import JobSpec, JobState
from xce.units import parse_mem_limit, parse_signal

GRACEFUL_TOML = """
[controller]
terminate_grace = 7.0
[[users]]
name = "admin"
role = "admin"
[[queues]]
name = "default"
[[queues]]
name = "slow"
terminate_grace = 120.0
[[projects]]
name = "default"
"""
GRACEFUL = parse_config(GRACEFUL_TOML)


@pytest.fixture
def w() -> World:
    w = World()
    w.commit([QueueDefined(time=0, name="slow", priority=30)])
    return w


def test_a_kill_orders_the_run_ended_with_its_queues_grace_and_a_second_kill_orders_nothing(w):
    job = w.running()
    facts = w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), config=GRACEFUL))
    assert [(type(f), f.grace) for f in facts] == [(JobKillRequested, 7.0)]
    assert jobs.orders(job) == {"job_id": job.id, "run": 1, "seq": 1, "kill": {"grace": 7.0}, "signals": [],
                                "suspend": False}
    assert jobs.kill(w.model, ADMIN, job.id, w.tick(), config=GRACEFUL) == [], "SIGTERM is sent once"
    # a requeue asked after a kill turns nothing into a second SIGTERM: the grace of the first stands
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), requeue=True, config=GRACEFUL))
    assert (job.kill_requeue, job.kill_grace, job.order_seq) == (True, 7.0, 2)


def test_the_grace_is_the_queues_own_when_it_has_one(w):
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], queue="slow"), w.tick(), GRACEFUL)
    w.commit(facts)
    job = w.model.jobs[job_id]
    w.allocate(job)
    w.start(job)
    assert [f.grace for f in jobs.kill(w.model, ALICE, job_id, w.tick(), config=GRACEFUL)] == [120.0]


def test_signals_are_numbered_orders_kept_per_run_and_only_for_a_running_process(w):
    job = w.running()
    for sig in ("USR1", "SIGUSR2", "10"):
        w.commit(jobs.send_signal(w.model, ALICE, job.id, w.tick(), parse_signal(sig)))
    assert jobs.orders(job)["signals"] == [[1, 10], [2, 12], [3, 10]]
    for _ in range(jobs.MAX_SIGNAL_ORDERS):
        w.commit(jobs.send_signal(w.model, ALICE, job.id, w.tick(), 1))
    assert len(job.signal_orders) == jobs.MAX_SIGNAL_ORDERS and job.signal_orders[-1][0] == job.order_seq
    with pytest.raises(InvalidRequest, match="unknown signal"):
        parse_signal("SIGNOPE")
    pending = w.submit()
    with pytest.raises(Conflict, match="only a running job's processes can be signalled"):
        jobs.send_signal(w.model, ALICE, pending.id, w.tick(), 10)


def test_a_new_run_starts_its_orders_afresh(w):
    job = w.running(rerunnable=True)
    w.commit(jobs.send_signal(w.model, ALICE, job.id, w.tick(), 10))
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), requeue=True, config=GRACEFUL))
    w.commit(jobs.report_finished(w.model, "h1", job.id, 1, w.tick(), None, 15))
    assert job.state is JobState.PEND
    w.allocate(job)
    assert (job.run, job.order_seq, job.signal_orders, job.kill_requested, job.kill_grace) == (2, 0, [], False, None)
    # an order of the old run that comes late changes nothing
    w.commit([JobSignalRequested(time=w.tick(), job_id=job.id, run=1, by="alice", signal=9)])
    assert job.order_seq == 0


def test_stop_and_resume_move_a_running_job_through_ususp_and_a_kill_ends_it_from_there(w):
    job = w.running()
    w.commit(jobs.suspend(w.model, ALICE, job.id, w.tick()))
    assert job.state is JobState.USUSP and jobs.orders(job)["suspend"] is True
    assert jobs.suspend(w.model, ALICE, job.id, w.tick()) == []
    w.commit(jobs.resume(w.model, ALICE, job.id, w.tick()))
    assert job.state is JobState.RUN and jobs.orders(job) == {
        "job_id": job.id, "run": 1, "seq": 2, "kill": None, "signals": [], "suspend": False}
    w.commit(jobs.suspend(w.model, ALICE, job.id, w.tick()))
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), config=GRACEFUL))
    w.commit(jobs.report_finished(w.model, "h1", job.id, 1, w.tick(), None, 9, usage={"max_rss_bytes": 1 << 20,
                                                                                      "cpu_user_s": 0.5,
                                                                                      "cpu_sys_s": 0.1}))
    assert (job.state, job.exit_reason) == (JobState.EXIT, "killed by alice")
    assert job.usage == {"max_rss_bytes": 1 << 20, "cpu_user_s": 0.5, "cpu_sys_s": 0.1}
    assert [h["state"] for h in job.history][-3:] == ["RUN", "USUSP", "EXIT"]
    with pytest.raises(Conflict, match="only a running job can be stopped"):
        jobs.suspend(w.model, ALICE, job.id, w.tick())


def test_a_pending_job_cannot_be_stopped_or_resumed(w):
    job = w.submit()
    with pytest.raises(Conflict):
        jobs.suspend(w.model, ALICE, job.id, w.tick())
    with pytest.raises(Conflict):
        jobs.resume(w.model, ALICE, job.id, w.tick())


def test_a_memory_limit_is_a_size_within_bounds(w):
    assert parse_mem_limit("64Mi") == 64 << 20 and parse_mem_limit(None) is None
    with pytest.raises(InvalidRequest, match="invalid memory limit"):
        parse_mem_limit("lots")
    with pytest.raises(InvalidRequest, match="between 4Mi and 1Pi"):
        jobs.submit(w.model, ALICE, JobSpec(command=["x"], mem_limit=1024), w.tick(), GRACEFUL)
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], mem_limit=64 << 20), w.tick(), GRACEFUL)
    w.commit(facts)
    assert w.model.jobs[job_id].mem_limit == 64 << 20


def test_a_fenced_run_is_requeued_if_rerunnable_and_ends_exit_otherwise(w):
    rerun, plain = w.running(rerunnable=True), w.running()
    why = "fenced: the worker on h1 had no answer from the controller for 30s"
    w.commit(jobs.report_lost(w.model, "h1", rerun.id, 1, w.tick(), why))
    w.commit(jobs.report_lost(w.model, "h1", plain.id, 1, w.tick(), why))
    assert (rerun.state, rerun.pending_reason) == (JobState.PEND, f"{why}: requeued")
    assert (plain.state, plain.exit_reason) == (JobState.EXIT, why)


def _site(controller: str):
    return parse_config(GRACEFUL_TOML.replace("[controller]\n", f"[controller]\n{controller}\n", 1))


def test_the_submitters_environment_goes_with_the_job_minus_private_variables_and_tokens(w):
    token = "xce_0123456789ab_" + "s" * 43
    env = {"A": "1", "SECRET_KEY": "k", "XCE_TOKEN": "t", "xce_token_file": "/t", "HIDDEN": f"Bearer {token}"}
    site = _site('private_env = ["SECRET_*"]')
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], env=env, env_all=True), w.tick(), site)
    assert facts[0].env == {"A": "1"}
    # a site that keeps jobs' environments clean drops a whole environment, not variables named one by one
    clean = _site('job_environment = "clean"')
    assert jobs.submit(w.model, ALICE, JobSpec(command=["x"], env=env, env_all=True), w.tick(), clean)[0][0].env is None
    named = jobs.submit(w.model, ALICE, JobSpec(command=["x"], env={"A": "1"}), w.tick(), clean)[0][0]
    assert named.env == {"A": "1"}
    with pytest.raises(Exception, match="job_environment"):
        _site('job_environment = "some"')


def test_commands_scripts_and_their_default_names(w):
    def submitted(**kw):
        return jobs.submit(w.model, ALICE, JobSpec(**kw), w.tick(), GRACEFUL)[0][0]

    assert submitted(command=["/usr/bin/python3", "x.py"]).name == "python3"
    assert submitted(command=["./train.sh --fast; echo done"], shell=True).name == "train.sh"
    assert submitted(command=[], script="#!/bin/sh\ntrue\n").name == "script"
    assert submitted(command=["x"], name="Snakemake_rule_all___(8a6f-1c2d)").name == "Snakemake_rule_all___(8a6f-1c2d)"
    for bad, says in ((dict(command=[]), "needs a command"), (dict(command=["a", "b"], shell=True), "one non-blank"),
                      (dict(command=["a"], shell=True, script="x"), "not both"),
                      (dict(command=["x"], name="two words"), "invalid job name")):
        with pytest.raises(InvalidRequest, match=says):
            submitted(**bad)


def test_a_finished_job_keeps_no_environment_but_a_requeued_one_does(w):
    """An hour of finished jobs stays live (keep_finished): only a run needs the submitter's variables."""
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], env={"A": "1"}, rerunnable=True), w.tick(),
                                GRACEFUL)
    w.commit(facts)
    job = w.model.jobs[job_id]
    w.allocate(job)
    w.make_ready(job)
    w.start(job)
    w.commit(jobs.kill(w.model, ALICE, job_id, w.tick(), requeue=True, config=GRACEFUL))
    w.commit(jobs.report_finished(w.model, "h1", job_id, job.run, w.tick(), None, 15))
    assert (job.state, job.env) == (JobState.PEND, {"A": "1"})
    w.commit(jobs.kill(w.model, ALICE, job_id, w.tick(), config=GRACEFUL))
    assert (job.state, job.env) == (JobState.EXIT, None)


def test_a_select_naming_what_no_host_has_is_warned_of_and_what_one_has_is_not(w):
    w.commit([HostRegistered(time=0, name="h3", slots=1, attrs={"zone": "a"}, counters={"gpu": 2.0})])

    def warned(resreq: str) -> list[str]:
        facts, job_id = job_claims.submit(w.model, ALICE, JobSpec(command=["true"], resreq=resreq),
                                          JobClaimsSpec(), w.tick(), CONFIG)
        w.commit(facts)
        return jobs.submission_warnings(w.model, w.model.jobs[job_id])

    assert warned("select[zone==a && gpu>1 && scratch>0]") == [] and warned("") == []
    assert warned("select[zoen==a || (gpu && ssd)]") == [
        "select[] names 'ssd', 'zoen', which no host has (as an attribute or a counter): the job waits until a host "
        "has them (xce hosts lists what hosts have)"]


# ---------------------------------------------------------------- listings


def test_a_user_lists_only_their_own_jobs_whatever_they_ask_for():
    assert jobs.listing_user(ALICE, None, every_user=True, named=True) == ALICE.name
    assert jobs.listing_user(ALICE, ALICE.name, every_user=False, named=False) == ALICE.name
    with pytest.raises(InvalidRequest, match="only their own jobs"):
        jobs.listing_user(ALICE, "bob", every_user=False, named=False)


def test_an_admin_lists_their_own_unless_they_name_a_user_every_user_or_the_jobs():
    assert jobs.listing_user(ADMIN, None, every_user=False, named=False) == ADMIN.name
    assert jobs.listing_user(ADMIN, "bob", every_user=False, named=False) == "bob"
    assert jobs.listing_user(ADMIN, None, every_user=True, named=False) is None
    assert jobs.listing_user(ADMIN, None, every_user=False, named=True) is None


def test_a_listing_filter_narrows_by_each_criterion_given():
    w = World()
    a = w.submit(ALICE)
    everything = jobs.listing_match(None, None, None, None)
    assert everything(a)
    assert jobs.listing_match(ALICE.name, a.queue, {JobState.PEND}, None)(a)
    assert not jobs.listing_match("bob", None, None, None)(a)
    assert not jobs.listing_match(None, "other", None, None)(a)
    assert not jobs.listing_match(None, None, {JobState.RUN}, None)(a)
    assert not jobs.listing_match(None, None, None, a.id + 1)(a)
