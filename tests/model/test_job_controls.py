"""The everyday controls of a pending job, on models built from facts: ``-Q`` requeue exit values
(``xce.exitvalues``, ``jobs.requeue_by_exit``), ``-sp``, ``-b``, ``-x`` at submission and in the
scheduler's view, and ``xce mod`` (``xce.model.job_changes``)."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ADMIN, ALICE, World
from xce.config import parse_config
from xce.controller.view import build_view
from xce.errors import Conflict, InvalidRequest, NotFound
from xce.model import dependencies, job_changes, jobs
from xce.model.entities.identity import Role, User
from xce.model.facts import QueueDefined
from xce.model.job_changes import JobChanges
from xce.model.jobs import JobSpec, JobState

SITE = parse_config("""
[controller]
max_user_priority = 10
[[users]]
name = "admin"
role = "admin"
[[queues]]
name = "default"
[[queues]]
name = "serve"
requeue_exit_values = "3 EXCLUDE(9)"
max_job_requeue = 2
[[queues]]
name = "short"
run_limit = "30"
max_run_limit = "1:00"
[[projects]]
name = "default"
""")
BOB = User(name="bob", role=Role.USER, projects=["default"])


@pytest.fixture
def w() -> World:
    w = World()
    w.commit([QueueDefined(time=0, name="serve", priority=30), QueueDefined(time=0, name="short", priority=30)])
    return w


def submit(w: World, actor: User = ALICE, name: str | None = None, **spec):
    facts, job_id = jobs.submit(w.model, actor, JobSpec(command=["x"], name=name, **spec), w.tick(), SITE)
    w.commit(facts)
    return w.model.jobs[job_id]


def run_and_exit(w: World, job, code: int, host: str = "h1"):
    w.allocate(job, (host,), with_templates=False)
    w.start(job)
    w.commit(jobs.report_finished(w.model, host, job.id, job.run, w.tick(), code, None))


# ---------------------------------------------------------------- -Q


def test_a_run_that_exits_with_a_requeue_value_waits_again_and_a_plain_failure_ends_exit(w):
    job = submit(w, requeue_exit="3")
    run_and_exit(w, job, 3)
    assert (job.state, job.requeues, job.pending_reason) == \
        (JobState.PEND, 1, "exit code 3 is a requeue exit value: requeued")
    run_and_exit(w, job, 1)
    assert (job.state, job.exit_reason) == (JobState.EXIT, "nonzero exit code 1")


def test_the_queues_values_apply_with_its_requeue_limit_and_exclude_keeps_the_next_run_off_that_host(w):
    job = submit(w, queue="serve")
    assert job.requeue_exit == "3 EXCLUDE(9)" and job.max_requeue == 2
    run_and_exit(w, job, 9, "h1")
    assert job.state is JobState.PEND and job.avoid_hosts == ["h1"]
    view = build_view(w.model, SITE)
    assert next(v for v in view.pending if v.id == job.id).avoid == frozenset({"h1"})
    run_and_exit(w, job, 3, "h2")
    assert job.state is JobState.PEND and job.requeues == 2
    run_and_exit(w, job, 3, "h2")  # the third: max_job_requeue 2 reached
    assert job.state is JobState.EXIT and "requeued 2 times already (max_job_requeue 2)" in job.exit_reason


def test_a_jobs_own_q_replaces_its_queues_and_a_killed_run_is_never_requeued_by_exit_value(w):
    job = submit(w, queue="serve", requeue_exit="4")
    assert job.requeue_exit == "4"
    w.allocate(job, with_templates=False)
    w.start(job)
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), config=SITE))
    w.commit(jobs.report_finished(w.model, "h1", job.id, job.run, w.tick(), 4, None))
    assert job.state is JobState.EXIT and job.exit_reason.startswith("killed by")
    with pytest.raises(InvalidRequest, match="-Q: requeue exit values '300'"):
        submit(w, requeue_exit="300")


# ---------------------------------------------------------------- -sp, -b, -x


def test_user_priority_defaults_to_half_the_maximum_and_only_an_admin_goes_beyond_it(w):
    assert submit(w).user_priority == 5
    assert submit(w, user_priority=10).user_priority == 10
    with pytest.raises(InvalidRequest, match="over the site's maximum 10"):
        submit(w, user_priority=11)
    assert submit(w, ADMIN, user_priority=50).user_priority == 50


def test_the_view_holds_the_highest_priority_jobs_first_when_it_holds_only_some(w):
    low = [submit(w) for _ in range(3)]
    high = submit(w, user_priority=9)
    assert w.model.pending_priorities == {5: 3, 9: 1}
    view = build_view(w.model, SITE, depth=2)
    assert [v.id for v in view.pending] == [low[0].id, high.id]  # (in id order; the scheduler sorts)
    w.allocate(high, with_templates=False)
    assert w.model.pending_priorities == {5: 3}


def test_a_job_is_not_planned_before_its_begin_time_and_says_so(w):
    job = submit(w, begin_time=w.now + 3600)
    assert w.model.begin_waiting == {job.id: job.begin_time}
    assert [v.id for v in build_view(w.model, SITE, now=w.now).pending] == []
    assert [v.id for v in build_view(w.model, SITE, now=w.now + 3601).pending] == [job.id]
    from xce.model.status import status_reason
    assert status_reason(w.model, job, w.now).startswith("begin time (-b) ")
    assert status_reason(w.model, job, w.now + 3601) == "waiting for the next scheduling cycle"


def test_an_exclusive_job_closes_its_host_to_others_in_the_view(w):
    lone = submit(w, exclusive=True)
    other = submit(w)
    w.allocate(lone, ("h1",), with_templates=False)
    hosts = {h.name: h for h in build_view(w.model, SITE).hosts}
    assert (hosts["h1"].slots_free, hosts["h1"].idle) == (0, False)
    assert (hosts["h2"].slots_free, hosts["h2"].idle) == (8, True)
    assert [v.exclusive for v in build_view(w.model, SITE).pending if v.id == other.id] == [False]


# ---------------------------------------------------------------- xce mod


def modify(w: World, job, actor: User = ALICE, **changes):
    return w.commit(job_changes.modify(w.model, actor, job.id, JobChanges(**changes), w.tick(), SITE))


def test_mod_changes_queue_limit_slots_resreq_name_and_priority_of_a_pending_job(w):
    job = submit(w, name="train")
    modify(w, job, queue="short", slots=2, resreq="select[x86]", name="train2", user_priority=8)
    assert (job.queue, job.slots, job.resreq, job.name, job.user_priority) == \
        ("short", 2, "select[x86]", "train2", 8)
    assert job.run_limit == 1800.0  # it had none: the new queue's default
    modify(w, job, run_limit="45")
    assert job.run_limit == 2700.0
    with pytest.raises(InvalidRequest, match="over queue 'short''s maximum 1:00"):
        modify(w, job, run_limit="2:00")
    assert w.model.pending_priorities == {8: 1}


def test_mod_checks_as_submission_does_and_only_for_the_owner_of_a_waiting_job(w):
    job = submit(w)
    with pytest.raises(NotFound, match="not found"):  # another's job: as if there were none
        modify(w, job, BOB, slots=2)
    with pytest.raises(InvalidRequest, match="bad resource requirement"):
        modify(w, job, resreq="select[")
    with pytest.raises(InvalidRequest, match="nothing to change"):
        modify(w, job)
    with pytest.raises(InvalidRequest, match="cannot depend on itself"):
        modify(w, job, dependency=f"done({job.id})")
    w.allocate(job, with_templates=False)
    with pytest.raises(Conflict, match="only a pending job"):
        modify(w, job, slots=2)


def test_mod_replaces_a_dependency_and_takes_one_away(w):
    first, second = submit(w), submit(w)
    job = submit(w, dependency=f"done({first.id})")
    assert job.id in w.model.dependency_blocked and job.id in w.model.dependents[first.id]
    modify(w, job, dependency=f"done({second.id})")
    assert first.id not in w.model.dependents and job.id in w.model.dependents[second.id]
    assert "done(" in dependencies.unmet(w.model, job.dependency_tree)
    modify(w, job, dependency="")
    assert job.dependency is None and job.id not in w.model.dependency_blocked
    assert [v.id for v in build_view(w.model, SITE).pending if v.id == job.id] == [job.id]


def test_mod_of_an_array_changes_every_waiting_element_and_its_limit_counts_the_running_ones(w):
    array = submit(w, name="sweep[1-4]")
    elements = [w.model.jobs[array.id + i] for i in range(4)]
    w.allocate(elements[0], with_templates=False)
    modify(w, array, whole_array=True, slots=2)
    assert [e.slots for e in elements] == [1, 2, 2, 2]  # the allocated one keeps its run's
    modify(w, array, array_limit=2)
    assert [e.array_limit for e in elements] == [2, 2, 2, 2]
    assert w.model.array_busy == {array.id: {elements[0].id}}
    assert len(build_view(w.model, SITE).pending) == 1  # one more may hold hosts
    modify(w, elements[2], user_priority=9)  # an element alone
    assert [e.user_priority for e in elements] == [5, 5, 9, 5]
    with pytest.raises(InvalidRequest, match="not an array"):
        modify(w, submit(w), array_limit=3)


# ---------------------------------------------------------------- -E and -Ep


def test_a_failed_pre_exec_requeues_the_job_off_that_host_until_the_retry_limit(w):
    job = submit(w, pre_exec="test -e /ready")
    for n in range(1, jobs.MAX_PREEXEC_RETRY):
        host = f"h{n % 2 + 1}"
        w.allocate(job, (host,), with_templates=False)
        w.start(job)
        w.commit(jobs.report_finished(w.model, host, job.id, job.run, w.tick(), 1, None, pre_exec_failed=True))
        assert job.state is JobState.PEND and host in job.avoid_hosts and job.pre_exec_failures == n
        assert job.pending_reason == f"pre-exec failed on {host} (exit code 1): requeued to another host"
    w.allocate(job, ("h1",), with_templates=False)
    w.start(job)
    w.commit(jobs.report_finished(w.model, "h1", job.id, job.run, w.tick(), 1, None, pre_exec_failed=True))
    assert job.state is JobState.EXIT and job.exit_reason == "pre-exec failed on h1 (exit code 1), 5 times"


def test_a_failed_post_exec_keeps_the_jobs_state_and_satisfies_post_err(w):
    job = submit(w, post_exec="false")
    on_err = submit(w, dependency=f"post_err({job.id})")
    on_done = submit(w, dependency=f"post_done({job.id})")
    w.allocate(job, with_templates=False)
    w.start(job)
    w.commit(jobs.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None, post_exec_exit=1))
    assert (job.state, job.post_exec_exit) == (JobState.DONE, 1)
    assert on_err.id not in w.model.dependency_blocked
    assert w.model.dependency_blocked[on_done.id] == dependencies.Verdict.NEVER
