"""Preemption from the view to the facts: a pending job of a preemptive queue has a low queue's run
chosen (the view offers the runs of the queues it may preempt), and the applier ends it through the kill
path, requeued when rerunnable, naming the preemptor; a victim already ending is not asked again."""

from __future__ import annotations

from tests.controller.test_applier import ADMIN, World
from xce.config import parse_config
from xce.controller.applier import apply_plan
from xce.controller.view import build_view
from xce.model import job_claims
from xce.model.facts import JobKillRequested, JobStarted, QueueDefined
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import JobSpec
from xce.scheduler.core import schedule

CONFIG = parse_config("""
[[queues]]
name = "high"
priority = 60
preemption = "PREEMPTIVE[low]"
[[queues]]
name = "low"
priority = 10
[[queues]]
name = "default"
[[projects]]
name = "default"
[[users]]
name = "admin"
role = "admin"
""")


def submit(w: World, queue: str, slots: int = 1, rerunnable: bool = False) -> int:
    facts, job_id = job_claims.submit(w.model, ADMIN, JobSpec(command=["x"], queue=queue, slots=slots,
                                                              rerunnable=rerunnable), JobClaimsSpec(), w.tick(), CONFIG)
    w.commit(facts)
    return job_id


def test_a_high_job_has_the_newest_low_run_ended_for_it_through_the_kill_path():
    w = World()
    w.commit([QueueDefined(time=0, name="low", priority=10), QueueDefined(time=0, name="high", priority=60)])
    runs = []
    for host, rerunnable in (("h1", False), ("h2", True)):  # every slot held by low jobs, h2's started last
        job_id = submit(w, "low", slots=4, rerunnable=rerunnable)
        w.commit(apply_plan(w.model, schedule(build_view(w.model, CONFIG, now=w.now)), w.tick(), CONFIG).facts)
        job = w.model.jobs[job_id]
        assert job.hosts == [host]
        w.commit([JobStarted(time=w.tick(), job_id=job_id, run=job.run, host=host, pid=1)])
        runs.append(job_id)
    urgent = submit(w, "high", slots=2)
    plan = schedule(build_view(w.model, CONFIG, now=w.now))
    assert [(p.job_id, [v for v, _ in p.victims]) for p in plan.preemptions] == [(urgent, [runs[1]])]
    assert plan.pending_reasons[urgent].startswith(f"preempting job(s) {runs[1]} (queue low)")
    facts = apply_plan(w.model, plan, w.tick(), CONFIG).facts
    assert [(type(f), f.job_id, f.requeue, f.by) for f in facts] == [
        (JobKillRequested, runs[1], True, f"preemption for job {urgent}")]
    w.commit(facts)
    again = schedule(build_view(w.model, CONFIG, now=w.now))  # the victim is ending: no second one
    assert again.preemptions == () and again.pending_reasons[urgent] == f"waiting for preempted job(s) {runs[1]} to end"
    assert apply_plan(w.model, plan, w.tick(), CONFIG).facts == []  # asked once: not again
