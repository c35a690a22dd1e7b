"""Preemption as a scheduler decision (``xce.scheduler.preemption``) on hand-built views: a job of a
preemptive queue that does not fit has the fewest, lowest-priority, most recently started runs of the
queues it may preempt chosen for it."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from xce.scheduler.core import schedule
from xce.scheduler.view import ClaimUse, ClusterView, HostView, JobView, Policy, RunningView

from tests.scheduler.test_core import check_plan, host

PREEMPTS = MappingProxyType({"high": frozenset({"low", "normal"})})
PRIO = {"low": 10, "normal": 30, "high": 60}


def running(job_id: int, queue: str, start: float, **slots: int) -> RunningView:
    return RunningView(job_id=job_id, run=1, queue=queue, priority=PRIO[queue], start=start,
                       slots=MappingProxyType(slots))


def job(id: int, queue: str = "high", slots: int = 1, resreq: str = "") -> JobView:
    return JobView(id=id, run=0, queue=queue, priority=PRIO[queue], slots=slots, resreq=resreq)


def plan_for(hosts, runs, jobs, preemptable=PREEMPTS):
    view = ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs), running=tuple(runs),
                       policy=Policy(preemptable=preemptable))
    plan = schedule(view)
    check_plan(view, plan)
    return plan


def full(name: str, slots: int = 4):
    return dataclasses.replace(host(name, slots), slots_free=0)


def test_the_lowest_priority_then_most_recently_started_runs_are_chosen_and_no_more_than_needed():
    runs = [running(1, "normal", 100.0, a=2), running(2, "low", 50.0, a=1), running(3, "low", 200.0, a=1),
            running(4, "low", 150.0, b=2), running(5, "normal", 300.0, b=2)]
    plan = plan_for([full("a"), full("b")], runs, [job(10, slots=2, resreq="span[hosts=1]")])
    (p,) = plan.preemptions
    assert p.job_id == 10 and p.victims == ((4, 1),)  # low first, the newest (3 then 4, b's 2 slots alone fit)
    assert plan.pending_reasons[10].startswith("preempting job(s) 4 (queue low)")
    assert plan.allocations == ()


def test_runs_already_picked_or_ending_are_not_taken_again():
    runs = [running(1, "low", 10.0, a=1), running(2, "low", 20.0, a=1),
            dataclasses.replace(running(3, "low", 30.0, a=2), ending=True)]
    plan = plan_for([full("a")], runs, [job(10, slots=2), job(11, slots=1), job(12, slots=1)])
    assert [(p.job_id, p.victims) for p in plan.preemptions] == [(11, ((2, 1),)), (12, ((1, 1),))]
    assert plan.pending_reasons[10] == "waiting for preempted job(s) 3 to end"


def test_a_queue_preempts_only_the_queues_it_names_and_only_lower_ones():
    runs = [running(1, "normal", 10.0, a=4)]
    plan = plan_for([full("a")], runs, [job(10)], preemptable=MappingProxyType({"high": frozenset({"low"})}))
    assert plan.preemptions == () and "preempting" not in plan.pending_reasons[10]
    plan = plan_for([full("a")], runs, [job(10, queue="normal")])  # normal preempts nothing
    assert plan.preemptions == ()


def test_no_preemption_when_the_victims_would_not_free_enough():
    plan = plan_for([full("a")], [running(1, "low", 10.0, a=4)], [job(10, slots=8)])
    assert plan.preemptions == ()


GB = 1e9


def scratch_host(name: str, free: float, slots_free: int = 0) -> HostView:
    return HostView(name=name, slots_free=slots_free, attrs=MappingProxyType({}),
                    counters_total=MappingProxyType({"scratch": 10 * GB}),
                    counters_free=MappingProxyType({"scratch": free}))


def claim_job(id: int, queue: str = "high", claims=(), node_counters=None) -> JobView:
    return JobView(id=id, run=0, queue=queue, priority=PRIO[queue], slots=1, resreq="", claims=tuple(claims),
                   node_counters=MappingProxyType(dict(node_counters or {})))


def plain_plan(hosts, runs, jobs, preemptable=PREEMPTS):
    return schedule(ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs), running=tuple(runs),
                                policy=Policy(preemptable=preemptable)))


def test_a_job_with_template_claims_has_victims_that_free_their_host_counters_too_and_starts_when_they_end():
    # a holds 8 GB of scratch for run 1; b's run 2 is newer but b has no scratch: ending it alone is no use
    hosts = [scratch_host("a", 2 * GB), dataclasses.replace(full("b"), counters_total=MappingProxyType({}))]
    runs = [dataclasses.replace(running(1, "low", 100.0, a=4), counters=MappingProxyType(
        {"a": MappingProxyType({"scratch": 8 * GB})})), running(2, "low", 200.0, b=4)]
    scratch = claim_job(10, node_counters={"scratch": 5 * GB})
    plan = plain_plan(hosts, runs, [scratch])
    (p,) = plan.preemptions
    assert p.victims == ((1, 1),)
    assert plan.pending_reasons[10].startswith("preempting job(s) 1 (queue low)")
    # run 1 ended: its slots and scratch are free again, and the job takes them
    after = plain_plan([scratch_host("a", 10 * GB, slots_free=4), hosts[1]], runs[1:], [scratch])
    (a,) = after.allocations
    assert a.hosts == ("a",) and dict(a.counters["a"]) == {"scratch": 5 * GB}
    assert after.preemptions == ()


def test_no_victims_where_a_claim_keeps_the_job_off_the_hosts_they_would_free():
    runs = [running(1, "low", 100.0, a=4), running(2, "normal", 200.0, b=4)]
    rwo = ClaimUse(claim_id=5, name="ckpt", mode="rw", access_mode="RWO", state="READY", reachable=None,
                   attached_hosts=frozenset({"b"}))
    plan = plain_plan([full("a"), full("b")], runs, [claim_job(10, claims=[rwo])],
                      preemptable=MappingProxyType({"high": frozenset({"low"})}))
    assert plan.preemptions == ()
    assert plan.pending_reasons[10] == "claim ckpt (RWO) is in use on b; full"
    not_ready = dataclasses.replace(rwo, state="PENDING", attached_hosts=frozenset())
    plan = plain_plan([full("a"), full("b")], runs, [claim_job(10, claims=[not_ready])])
    assert plan.preemptions == () and plan.pending_reasons[10].startswith("waiting for claim ckpt (PENDING")
    # the same claim attached where the low run is: that run is ended for it
    plan = plain_plan([full("a"), full("b")], runs, [claim_job(10, claims=[dataclasses.replace(
        rwo, attached_hosts=frozenset({"a"}))])])
    assert [p.victims for p in plan.preemptions] == [((1, 1),)]
