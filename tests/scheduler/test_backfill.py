"""Backfill with reservations (``xce.scheduler.backfill``) on hand-built views: the top job that does
not fit is planned at the first expected end that frees enough, and lower jobs start now only if
they end before it or leave it what it needs."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from xce.jobspec_gpu import parse_gpu
from xce.scheduler.backfill import clock
from xce.scheduler.core import schedule
from xce.scheduler.plan import Plan
from xce.scheduler.view import ClaimUse, ClusterView, GpuView, HostView, JobView, Policy

from tests.scheduler.test_core import allocated, check_plan, host

NOW = 1_800_000_000.0


def busy(h: HostView, *runs: tuple[float, int]) -> HostView:
    """``h`` with runs on it: (seconds from now to their expected end, slots) each."""
    used = sum(n for _, n in runs)
    return dataclasses.replace(h, slots_free=h.slots_free - used,
                               releases=tuple((NOW + t, n, MappingProxyType({})) for t, n in runs))


def job(id: int, slots: int = 1, limit: float | None = None, resreq: str = "") -> JobView:
    return JobView(id=id, run=0, queue="normal", priority=50, slots=slots, resreq=resreq, run_limit=limit)


def plan_for(hosts: list[HostView], jobs: list[JobView], depth: int = 1) -> Plan:
    view = ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs), now=NOW,
                       policy=Policy(reservation_depth=depth))
    plan = schedule(view)
    check_plan(view, plan)
    return plan


def two_hosts() -> list[HostView]:
    # a: full until +1000 s; b: 2 of 4 slots busy until +300 s
    return [busy(host("a", 4), (1000, 4)), busy(host("b", 4), (300, 2))]


def test_the_top_job_that_does_not_fit_gets_a_reservation_at_the_first_end_that_frees_enough():
    plan = plan_for(two_hosts(), [job(1, slots=8)])
    (r,) = plan.reservations
    assert (r.job_id, r.start, dict(r.slots)) == (1, NOW + 1000, {"a": 4, "b": 4})
    assert plan.pending_reasons[1].startswith(f"planned start {clock(NOW + 1000, NOW)} on a (4 slots), b (4 slots)")


def test_a_small_job_backfills_only_when_it_ends_before_the_reservation():
    plan = plan_for(two_hosts(), [job(1, slots=8), job(2, limit=500), job(3, limit=2000), job(4)])
    assert allocated(plan) == {2: {"b": 1}}
    why = f"would delay job 1's reservation at {clock(NOW + 1000, NOW)} on b"
    assert plan.pending_reasons[3] == why
    assert plan.pending_reasons[4] == why  # no run limit: it may run past any reservation


def test_without_reservations_the_stream_of_small_jobs_goes_first():
    plan = plan_for(two_hosts(), [job(1, slots=8), job(2, limit=500), job(3, limit=2000)], depth=0)
    assert allocated(plan) == {2: {"b": 1}, 3: {"b": 1}}
    assert plan.reservations == ()


def test_a_long_job_may_take_what_the_reservation_leaves_on_its_hosts():
    # the reserved job needs 6 of b's 8 slots; 2 stay spare after its start
    hosts = [busy(host("b", 8), (600, 4))]
    plan = plan_for(hosts, [job(1, slots=6, resreq="span[hosts=1]"), job(2, limit=5000), job(3, limit=5000),
                            job(4, limit=5000), job(5, limit=100)])
    assert plan.reservations[0].start == NOW + 600
    assert allocated(plan) == {2: {"b": 1}, 3: {"b": 1}, 5: {"b": 1}}
    assert plan.pending_reasons[4].startswith("would delay job 1's reservation")


def test_counters_are_held_for_the_reservation_as_slots_are():
    h = dataclasses.replace(host("g", 8, counters={"gpu": 4.0}, free={"gpu": 1.0}), slots_free=4,
                            releases=((NOW + 900, 4, MappingProxyType({"gpu": 3.0})),))
    plan = plan_for([h], [job(1, slots=2, resreq="rusage[gpu=2]"), job(2, limit=3600),
                          job(3, limit=3600, resreq="rusage[gpu=1]")])
    assert plan.reservations[0].start == NOW + 900
    assert allocated(plan) == {2: {"g": 1}}  # a CPU job is not in the GPUs' way
    assert plan.pending_reasons[3] == f"would delay job 1's reservation at {clock(NOW + 900, NOW)} on g"


def test_no_planned_start_when_the_runs_in_the_way_have_no_run_limit():
    hosts = [dataclasses.replace(host("a", 4), slots_free=0), host("b", 2)]  # a's run has no limit
    plan = plan_for(hosts, [job(1, slots=4, resreq="span[hosts=1]"), job(2, limit=60), job(3)])
    assert plan.reservations == ()
    assert plan.pending_reasons[1] == "span[hosts=1]: no single matching host has 4 free slots; 2 host(s) match"
    assert set(allocated(plan)) == {2, 3}  # nothing to delay
    hosts = [busy(host("a", 4), (100, 1)), host("b", 2)]  # a's other three slots' run has no limit
    hosts[0] = dataclasses.replace(hosts[0], slots_free=0)
    plan = plan_for(hosts, [job(1, slots=4, resreq="span[hosts=1]"), job(2, limit=60)])
    assert plan.reservations == () and "; no planned start: too few of its hosts" in plan.pending_reasons[1]


def test_one_reservation_by_default_more_with_depth():
    hosts = [busy(host("a", 4), (1000, 4)), busy(host("b", 4), (2000, 4)), host("c", 1)]
    jobs = [job(1, slots=4, resreq="span[hosts=1]"), job(2, slots=4, resreq="span[hosts=1]"), job(3, limit=1500)]
    easy = plan_for(hosts, jobs, depth=1)
    assert [r.job_id for r in easy.reservations] == [1]
    assert easy.pending_reasons[2].startswith("span[hosts=1]: no single")  # no reservation of its own
    deep = plan_for(hosts, jobs, depth=2)
    assert [(r.job_id, r.start, tuple(r.slots)) for r in deep.reservations] == [(1, NOW + 1000, ("a",)),
                                                                               (2, NOW + 2000, ("b",))]
    assert allocated(deep) == {3: {"c": 1}}


def test_a_job_ending_after_the_reservation_on_other_hosts_is_not_held_back():
    hosts = [busy(host("a", 4), (1000, 4)), host("z", 2)]
    plan = plan_for(hosts, [job(1, slots=4, resreq="span[hosts=1] select[name==a]"), job(2, limit=5000)])
    assert allocated(plan) == {2: {"z": 1}}


def test_a_job_keeps_its_reservation_when_fair_share_would_put_another_first():
    from xce.scheduler.view import FairShare

    share = FairShare(project_shares=MappingProxyType({"a": 1.0, "b": 1.0}), user_shares=MappingProxyType({}),
                      usage=MappingProxyType({("a", "u"): 1e6}))
    jobs = [dataclasses.replace(job(1, slots=8), project="a", user="u"),
            dataclasses.replace(job(2, slots=8), project="b", user="u")]
    view = ClusterView(position=1, hosts=tuple(two_hosts()), pending=tuple(jobs), now=NOW,
                       policy=Policy(reservation_depth=1, fairshare=share))
    assert [r.job_id for r in schedule(view).reservations] == [2]  # b is owed more
    view = dataclasses.replace(view, policy=dataclasses.replace(view.policy, reserved=frozenset({1})))
    assert [r.job_id for r in schedule(view).reservations] == [1]  # ... but 1 had it first


# ---------------------------------------------------------------- GPUs planned in time


def gpu_busy(name: str, gpus: int, slots: int, held: tuple[int, ...], until: float) -> HostView:
    """A host with ``gpus`` GPUs and ``slots`` slots, a run holding the GPUs ``held`` exclusively (and one
    slot each) until ``until`` seconds from now."""
    devices = tuple(GpuView(id=d, model="NVIDIA A100-SXM4-80GB", memory=80 * 2**30, exclusive=d in held)
                    for d in range(gpus))
    return dataclasses.replace(busy(host(name, slots), (until, len(held))), gpus=devices,
                               gpu_releases=((NOW + until, held),))


def gpu_job(id: int, num: int, limit: float | None = None, gpu: str | None = None) -> JobView:
    return dataclasses.replace(job(id, limit=limit), gpu=parse_gpu(gpu or f"num={num}"))


def test_a_gpu_job_gets_a_reservation_and_short_gpu_jobs_backfill_only_when_they_end_before_it():
    hosts = [gpu_busy("g", 4, 8, held=(0, 1, 2), until=1000)]
    jobs = [gpu_job(1, 4, limit=3600), gpu_job(2, 1, limit=2000), gpu_job(3, 1), gpu_job(4, 1, limit=500)]
    plan = plan_for(hosts, jobs)
    (r,) = plan.reservations
    assert (r.job_id, r.start, dict(r.slots)) == (1, NOW + 1000, {"g": 1})
    assert plan.pending_reasons[1].startswith(f"planned start {clock(NOW + 1000, NOW)} on g (reserved;")
    why = f"would delay job 1's reservation at {clock(NOW + 1000, NOW)} on g"
    assert plan.pending_reasons[2] == why
    assert plan.pending_reasons[3] == why  # no run limit: it may run past any reservation
    assert {a.job_id: dict(a.gpus) for a in plan.allocations} == {4: {"g": (3,)}}  # over by the start


def test_without_reservations_the_small_gpu_jobs_take_the_idle_gpu():
    hosts = [gpu_busy("g", 4, 8, held=(0, 1, 2), until=1000)]
    plan = plan_for(hosts, [gpu_job(1, 4, limit=3600), gpu_job(3, 1, limit=2000)], depth=0)
    assert not plan.reservations
    assert allocated(plan) == {3: {"g": 1}}


def test_a_long_gpu_job_takes_the_gpus_the_reservation_leaves():
    # 6 of 8 GPUs busy until +1000: the 4-GPU job is planned on 4 of those, so the 2 idle now stay usable
    hosts = [gpu_busy("g", 8, 16, held=(0, 1, 2, 3, 4, 5), until=1000)]
    jobs = [gpu_job(1, 4, limit=3600), gpu_job(2, 1, limit=5000), gpu_job(3, 1, limit=5000), gpu_job(4, 1, limit=5000)]
    plan = plan_for(hosts, jobs)
    assert [(r.job_id, r.start) for r in plan.reservations] == [(1, NOW + 1000)]
    assert {a.job_id: dict(a.gpus) for a in plan.allocations} == {2: {"g": (6,)}, 3: {"g": (7,)}}
    assert plan.pending_reasons[4].startswith("gpu: 0 of 8 free on g")


def test_a_long_gpu_job_does_not_take_a_gpu_the_reservation_holds():
    # 3 of 4 busy until +1000 and 1 idle: the 4-GPU job needs the idle one too; a 1-GPU job without a
    # reservation in its way (on another host) still starts
    hosts = [gpu_busy("g", 4, 8, held=(0, 1, 2), until=1000), gpu_busy("h", 4, 8, held=(0, 1, 2, 3), until=9000)]
    jobs = [gpu_job(1, 4, limit=3600), gpu_job(2, 1, limit=5000)]
    plan = plan_for(hosts, jobs)
    assert [(r.job_id, r.start, tuple(r.slots)) for r in plan.reservations] == [(1, NOW + 1000, ("g",))]
    assert not plan.allocations
    assert plan.pending_reasons[2] == f"would delay job 1's reservation at {clock(NOW + 1000, NOW)} on g"


def test_shared_gpu_jobs_get_no_reservation_and_keep_off_reserved_gpus_past_the_start():
    hosts = [gpu_busy("g", 4, 8, held=(0, 1, 2), until=1000)]
    plan = plan_for(hosts, [gpu_job(1, 4, limit=3600), gpu_job(2, 1, limit=5000, gpu="num=1:j_exclusive=no")])
    assert [r.job_id for r in plan.reservations] == [1]
    assert not plan.allocations
    plan = plan_for(hosts, [gpu_job(1, 1, limit=3600, gpu="num=4:j_exclusive=no")])
    assert not plan.reservations


def test_a_long_gpu_job_gets_an_idle_gpu_the_reservation_does_not_hold_even_if_a_lower_id_is_idle():
    # 5 of 8 busy until +1000, 5-7 idle: the 7-GPU job holds 0-4 and then 5, 6; a long job gets 7, a short one 5
    hosts = [gpu_busy("g", 8, 16, held=(0, 1, 2, 3, 4), until=1000)]
    jobs = [gpu_job(1, 7, limit=3600), gpu_job(2, 1, limit=5000), gpu_job(3, 1, limit=500)]
    plan = plan_for(hosts, jobs)
    assert [r.job_id for r in plan.reservations] == [1]
    assert {a.job_id: dict(a.gpus) for a in plan.allocations} == {2: {"g": (7,)}, 3: {"g": (5,)}}


GB = 1e9


def scratch_view(*jobs: JobView) -> ClusterView:
    """Host a: 4 slots, 10 GB of scratch; a run holding 2 slots and 8 GB of it until +1000 s."""
    a = HostView(name="a", slots_free=2, attrs=MappingProxyType({}),
                 counters_total=MappingProxyType({"scratch": 10 * GB}),
                 counters_free=MappingProxyType({"scratch": 2 * GB}),
                 releases=((NOW + 1000, 2, MappingProxyType({"scratch": 8 * GB})),))
    return ClusterView(position=1, hosts=(a,), pending=jobs, now=NOW, policy=Policy(reservation_depth=1))


def scratch_job(id: int, scratch: float, limit: float | None = None) -> JobView:
    return dataclasses.replace(job(id, limit=limit), node_counters=MappingProxyType({"scratch": scratch}))


def test_a_job_with_template_claims_is_reserved_their_host_counters_and_lower_jobs_backfill_only_around_them():
    big = scratch_job(1, 9 * GB)  # fits only once the run's 8 GB come back
    plan = schedule(scratch_view(big))
    (r,) = plan.reservations
    assert (r.job_id, r.start, dict(r.slots)) == (1, NOW + 1000, {"a": 1})
    assert plan.pending_reasons[1].startswith(f"planned start {clock(NOW + 1000, NOW)} on a (reserved")
    short = schedule(scratch_view(big, scratch_job(2, 2 * GB, limit=500)))  # over before the reservation
    assert allocated(short) == {2: {"a": 1}} and dict(short.allocations[0].counters["a"]) == {"scratch": 2 * GB}
    long = schedule(scratch_view(big, scratch_job(3, 2 * GB, limit=2000)))  # 1 GB spare then, 2 GB wanted
    assert long.allocations == ()
    assert long.pending_reasons[3] == f"would delay job 1's reservation at {clock(NOW + 1000, NOW)} on a"
    small = schedule(scratch_view(big, scratch_job(4, 1 * GB, limit=2000)))  # what the reservation leaves
    assert allocated(small) == {4: {"a": 1}}
    slots_only = schedule(scratch_view(big, job(5, limit=2000)))  # no scratch: the slots it leaves
    assert allocated(slots_only) == {5: {"a": 1}}


def test_a_job_with_a_claim_is_reserved_on_the_hosts_its_claim_reaches_only():
    hosts = [busy(host("a", 4), (100, 4)), busy(host("b", 4), (1000, 4))]  # a frees first, but the claim is on b
    data = ClaimUse(claim_id=3, name="data", mode="rw", access_mode="RWX", state="READY",
                    reachable=frozenset({"b"}))
    plan = plan_for(hosts, [dataclasses.replace(job(1, slots=2), claims=(data,))])
    (r,) = plan.reservations
    assert (r.start, dict(r.slots)) == (NOW + 1000, {"b": 2})


def test_a_shape_that_got_no_reservation_plans_again_once_a_run_with_a_limit_is_placed():
    # a's other slot is held by a run without a limit: job 1 has nothing to plan with; job 2 (60 s) is
    # placed; job 3, of job 1's shape, has job 2's end to plan with (still too few slots: it says so)
    hosts = [dataclasses.replace(host("a", 2), slots_free=1)]
    plan = plan_for(hosts, [job(1, slots=2, resreq="span[hosts=1]"), job(2, limit=60),
                            job(3, slots=2, resreq="span[hosts=1]")])
    assert allocated(plan) == {2: {"a": 1}}
    assert "no planned start" not in plan.pending_reasons[1]
    assert plan.pending_reasons[3].startswith(plan.pending_reasons[1] + "; no planned start: too few of its hosts")


def test_an_arrays_elements_that_cannot_be_planned_get_the_reason_each_would_get_alone(monkeypatch):
    """The shape's note of a failed reservation changes no reason (nor anything else in the plan)."""
    import xce.scheduler.core as core

    # a and b are full of runs without a limit; c has one slot: no element can be planned, until job 40
    # (50 s) takes c's slot and gives the elements after it an end to plan with
    hosts = [dataclasses.replace(host("a", 4), slots_free=0), dataclasses.replace(host("b", 4), slots_free=0),
             host("c", 1)]
    jobs = [job(i, slots=2) for i in range(1, 40)] + [job(40, limit=50)] + [job(i, slots=2) for i in range(41, 80)]
    noted = plan_for(hosts, jobs, depth=1)
    real = core._reserve_shape

    def forgetful(cycle, rr, job, shape, *rest):
        reason = real(cycle, rr, job, shape, *rest)
        shape.unreserved = None  # every element plans anew, as before the note
        return reason

    monkeypatch.setattr(core, "_reserve_shape", forgetful)
    assert plan_for(hosts, jobs, depth=1) == noted
    assert noted.reservations == () and allocated(noted) == {40: {"c": 1}}
    before, after = ({noted.pending_reasons[i] for i in ids} for ids in (range(1, 40), range(41, 80)))
    assert len(before) == len(after) == 1 and before != after
    assert "; no planned start" in after.pop()
