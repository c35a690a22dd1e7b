"""``schedule(view) -> Plan`` driven with plain, hand-built cluster views: no controller, no I/O."""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from xce.scheduler.core import schedule
from xce.scheduler.plan import Allocation, Plan
from xce.resreq import ResReqError, parse_resreq
from xce.scheduler.view import ClusterView, HostView, JobView

G = 1e9


def host(name: str, slots: int = 8, attrs: dict[str, str] | None = None,
         counters: dict[str, float] | None = None, free: dict[str, float] | None = None) -> HostView:
    counters = counters or {}
    return HostView(name=name, slots_free=slots, attrs=MappingProxyType(dict(attrs or {})),
                    counters_total=MappingProxyType(dict(counters)),
                    counters_free=MappingProxyType(dict(counters if free is None else free)))


def job(id: int, slots: int = 1, resreq: str = "", priority: int = 50, queue: str = "normal", run: int = 0) -> JobView:
    return JobView(id=id, run=run, queue=queue, priority=priority, slots=slots, resreq=resreq)


def plan_for(hosts: list[HostView], jobs: list[JobView], position: int = 7) -> Plan:
    plan = schedule(ClusterView(position=position, hosts=tuple(hosts), pending=tuple(jobs)))
    check_plan(ClusterView(position=position, hosts=tuple(hosts), pending=tuple(jobs)), plan)
    return plan


def check_plan(snap: ClusterView, plan: Plan) -> None:
    """What every plan must satisfy: each job decided once, nothing overcommitted, every pending job explained."""
    allocated = [a.job_id for a in plan.allocations]
    assert len(allocated) == len(set(allocated))
    assert set(allocated).isdisjoint(plan.pending_reasons)
    assert set(allocated) | set(plan.pending_reasons) == {j.id for j in snap.pending}
    assert all(isinstance(r, str) and r.strip() for r in plan.pending_reasons.values())
    by_id = {j.id: j for j in snap.pending}
    hosts = {h.name: h for h in snap.hosts}
    used_slots: dict[str, int] = {}
    used_ctr: dict[str, dict[str, float]] = {}
    for a in plan.allocations:
        j = by_id[a.job_id]
        assert a.run == j.run
        assert list(a.hosts) == list(a.slots) and len(set(a.hosts)) == len(a.hosts)
        assert sum(a.slots.values()) == j.slots and all(n > 0 for n in a.slots.values())
        rusage = parse_resreq(j.resreq).rusage
        for h, n in a.slots.items():
            used_slots[h] = used_slots.get(h, 0) + n
            assert dict(a.counters.get(h, {})) == {c: per * n for c, per in rusage.items()}
            for c, amount in a.counters.get(h, {}).items():
                used_ctr.setdefault(h, {})[c] = used_ctr.get(h, {}).get(c, 0.0) + amount
    for h, n in used_slots.items():
        assert n <= hosts[h].slots_free
    for h, ctr in used_ctr.items():
        for c, amount in ctr.items():
            assert amount <= hosts[h].counters_free[c] + 1e-6


def allocated(plan: Plan) -> dict[int, dict[str, int]]:
    return {a.job_id: dict(a.slots) for a in plan.allocations}


def alloc_of(plan: Plan, job_id: int) -> Allocation:
    return next(a for a in plan.allocations if a.job_id == job_id)


# ---------------------------------------------------------------- order: priority, then FCFS


def test_higher_queue_priority_goes_first_even_if_submitted_later():
    plan = plan_for([host("a", 1)], [job(1, priority=10, queue="low"), job(2, priority=100, queue="high")])
    assert allocated(plan) == {2: {"a": 1}}
    assert plan.pending_reasons[1] == "matching hosts do not have 1 free slot; 1 host(s) match"


def test_fcfs_within_a_priority_whatever_the_snapshot_order():
    jobs = [job(5), job(3), job(9, priority=10), job(4)]
    plan = plan_for([host("a", 2)], jobs)
    assert allocated(plan) == {3: {"a": 1}, 4: {"a": 1}}
    assert set(plan.pending_reasons) == {5, 9}
    assert [a.job_id for a in plan.allocations] == [3, 4]  # decision order is scheduling order


def test_fcfs_across_queues_of_equal_priority_is_by_job_id():
    plan = plan_for([host("a", 1)], [job(2, queue="x"), job(1, queue="y")])
    assert allocated(plan) == {1: {"a": 1}}


def test_plan_carries_position_and_current_run():
    plan = plan_for([host("a")], [job(1, run=3)], position=42)
    assert plan.position == 42
    assert plan.allocations == (Allocation(job_id=1, run=3, hosts=("a",), slots={"a": 1}, counters={}),)


# ---------------------------------------------------------------- no head-of-line blocking


def test_a_big_job_that_does_not_fit_does_not_block_smaller_later_jobs():
    plan = plan_for([host("a", 4)], [job(1, slots=8, priority=100), job(2, slots=2), job(3, slots=2), job(4)])
    assert allocated(plan) == {2: {"a": 2}, 3: {"a": 2}}
    assert plan.pending_reasons[1] == "matching hosts do not have 8 free slots; 1 host(s) match"
    assert plan.pending_reasons[4] == "matching hosts do not have 1 free slot; 1 host(s) match"


def test_a_job_of_a_shape_that_failed_waits_but_other_shapes_still_run():
    plan = plan_for([host("a", 3)], [job(1, slots=2), job(2, slots=2), job(3, slots=2), job(4)])
    assert allocated(plan) == {1: {"a": 2}, 4: {"a": 1}}
    assert plan.pending_reasons[2] == plan.pending_reasons[3]


# ---------------------------------------------------------------- -n: spread, span[hosts=1], span[ptile=K]


def test_slots_spread_over_hosts_in_host_order():
    plan = plan_for([host("a", 4), host("b", 4), host("c", 4)], [job(1, slots=6)])
    a = alloc_of(plan, 1)
    assert a.hosts == ("a", "b") and dict(a.slots) == {"a": 4, "b": 2}


def test_spread_skips_full_hosts_and_fills_partly_free_ones():
    plan = plan_for([host("a", 0), host("b", 1), host("c", 8)], [job(1, slots=3), job(2, slots=6)])
    assert allocated(plan) == {1: {"b": 1, "c": 2}, 2: {"c": 6}}


def test_span_hosts_1_needs_one_host_with_all_slots():
    plan = plan_for([host("a", 4), host("b", 4)], [job(1, slots=6, resreq="span[hosts=1]"), job(2, slots=6)])
    assert allocated(plan) == {2: {"a": 4, "b": 2}}
    assert plan.pending_reasons[1] == "span[hosts=1]: no single matching host has 6 free slots; 2 host(s) match"

    plan = plan_for([host("a", 4), host("b", 8)], [job(1, slots=6, resreq="span[hosts=1]")])
    assert allocated(plan) == {1: {"b": 6}}


def test_span_ptile_puts_k_slots_per_host():
    hosts = [host("a", 2), host("b", 1), host("c", 4), host("d", 2)]
    plan = plan_for(hosts, [job(1, slots=6, resreq="span[ptile=2]")])
    assert allocated(plan) == {1: {"a": 2, "c": 2, "d": 2}}


def test_span_ptile_last_host_takes_the_remainder():
    plan = plan_for([host("a", 4), host("b", 1), host("c", 4)], [job(1, slots=5, resreq="span[ptile=4]")])
    assert allocated(plan) == {1: {"a": 4, "b": 1}}


def test_span_ptile_not_enough_hosts():
    plan = plan_for([host("a", 2), host("b", 1), host("c", 2)], [job(1, slots=6, resreq="span[ptile=2]")])
    assert allocated(plan) == {}
    assert plan.pending_reasons[1] == "span[ptile=2]: not enough matching hosts with 6 free slots; 3 host(s) match"


def test_span_ptile_larger_than_the_job():
    # -n 2 with ptile=4: the job fits on one host with 2 free slots
    plan = plan_for([host("a", 2)], [job(1, slots=2, resreq="span[ptile=4]"), job(2, slots=2, resreq="span[ptile=4]")])
    assert allocated(plan) == {1: {"a": 2}}


# ---------------------------------------------------------------- select[]


HOSTS = [
    host("a", attrs={"zone": "a", "fs": "lustre", "cpu_speed": "2.4", "gpumodel": "h100"}, counters={"gpu": 8}),
    host("b", attrs={"zone": "b", "fs": "nfs", "cpu_speed": "3.2"}),
    host("c", attrs={"zone": "c", "fs": "lustre", "cpu_speed": "2.0", "memsize": "256G"}),
    host("d", attrs={"zone": "b", "fs": "lustre", "cpu_speed": "fast"}),
]


@pytest.mark.parametrize("resreq, hosts", [
    ("select[zone==b]", ["b", "d"]),
    ("zone==b", ["b", "d"]),  # a bare select
    ("select[zone!=b]", ["a", "c"]),
    ("select[fs==lustre && zone!=a]", ["c", "d"]),
    ("select[zone==a || cpu_speed>3]", ["a", "b"]),
    ("select[cpu_speed>=2.4]", ["a", "b"]),  # "fast" is not a number: never matches a numeric comparison
    ("select[cpu_speed<2.4]", ["c"]),
    ("select[memsize>=200G]", ["c"]),
    ("select[defined(gpumodel)]", ["a"]),
    ("select[gpu>=8]", ["a"]),  # a counter
    ("select[!defined(gpumodel) && !(zone==c)]", ["b", "d"]),
])
def test_select_picks_matching_hosts(resreq, hosts):
    jobs = [job(i, resreq=resreq) for i in range(1, 33)]  # 4 hosts x 8 slots
    plan = plan_for(HOSTS, jobs)
    used = sorted({h for a in plan.allocations for h in a.hosts})
    assert used == hosts
    assert len(plan.allocations) == 8 * len(hosts)


def test_no_host_matches_select():
    plan = plan_for(HOSTS, [job(1, resreq="select[zone==z && fs==lustre]"), job(2)])
    assert plan.pending_reasons == {1: "no host matches select[zone==z && fs==lustre]"}
    assert allocated(plan) == {2: {"a": 1}}


def test_no_hosts_at_all():
    plan = plan_for([], [job(1), job(2, resreq="select[zone==a]")])
    assert plan.pending_reasons == {1: "no hosts are available", 2: "no hosts are available"}


# ---------------------------------------------------------------- rusage[]: per slot, reserved within the cycle


def test_rusage_is_per_slot_and_recorded_per_host():
    plan = plan_for([host("a", 2, counters={"mem": 8 * G}), host("b", 8, counters={"mem": 8 * G})],
                    [job(1, slots=4, resreq="rusage[mem=1G]")])
    a = alloc_of(plan, 1)
    assert dict(a.slots) == {"a": 2, "b": 2}
    assert {h: dict(c) for h, c in a.counters.items()} == {"a": {"mem": 2 * G}, "b": {"mem": 2 * G}}


def test_rusage_limits_slots_per_host_when_spreading():
    plan = plan_for([host("a", 8, counters={"mem": 2 * G}), host("b", 8, counters={"mem": 8 * G})],
                    [job(1, slots=4, resreq="rusage[mem=1G]")])
    assert allocated(plan) == {1: {"a": 2, "b": 2}}


def test_rusage_is_reserved_and_exhausted_within_one_cycle_and_the_reason_names_the_counter():
    jobs = [job(i, resreq="rusage[mem=1G]") for i in range(1, 5)] + [job(5)]
    plan = plan_for([host("a", 8, counters={"mem": 3 * G})], jobs)
    assert allocated(plan) == {1: {"a": 1}, 2: {"a": 1}, 3: {"a": 1}, 5: {"a": 1}}
    assert plan.pending_reasons == {
        4: "matching hosts do not have 1 slot with enough mem free (mem=1e+09/slot); 1 host(s) match"}


def test_the_reason_names_the_counter_that_is_short_not_every_counter_asked_for():
    hosts = [host("a", 8, counters={"mem": 64 * G, "gpu": 2}), host("b", 8, counters={"mem": 64 * G, "gpu": 1})]
    jobs = [job(i, slots=1, resreq="rusage[mem=1G,gpu=1]") for i in range(1, 5)]
    plan = plan_for(hosts, jobs)
    assert allocated(plan) == {1: {"a": 1}, 2: {"a": 1}, 3: {"b": 1}}
    reason = plan.pending_reasons[4]
    assert "gpu" in reason and "mem" not in reason
    assert reason == "matching hosts do not have 1 slot with enough gpu free (gpu=1/slot); 2 host(s) match"


def test_span_hosts_1_counter_short():
    hosts = [host("a", 8, counters={"scratch": 300 * G}), host("b", 8, counters={"scratch": 100 * G})]
    plan = plan_for(hosts, [job(1, slots=4, resreq="rusage[scratch=100G] span[hosts=1]")])
    assert plan.pending_reasons[1] == ("span[hosts=1]: no single matching host has 4 slots with enough scratch free "
                                       "(scratch=1e+11/slot); 2 host(s) match")


def test_slots_short_wins_over_counters_when_slots_alone_would_not_do():
    plan = plan_for([host("a", 2, counters={"mem": 1 * G})], [job(1, slots=4, resreq="rusage[mem=1G]")])
    assert plan.pending_reasons[1] == "matching hosts do not have 4 free slots; 1 host(s) match"


def test_rusage_uses_what_is_free_not_the_total():
    hosts = [host("a", 8, counters={"gpu": 8}, free={"gpu": 1}), host("b", 8, counters={"gpu": 4})]
    plan = plan_for(hosts, [job(1, slots=2, resreq="rusage[gpu=1] span[hosts=1]")])
    assert allocated(plan) == {1: {"b": 2}}


def test_rusage_on_a_counter_no_host_offers():
    plan = plan_for([host("a", counters={"mem": 8 * G})], [job(1, resreq="rusage[gpu=1,lic=2]")])
    assert plan.pending_reasons == {1: "no host offers counter gpu, lic"}


def test_a_host_without_the_counter_is_skipped():
    hosts = [host("a", 8), host("b", 8, counters={"gpu": 2})]
    plan = plan_for(hosts, [job(1, slots=2, resreq="rusage[gpu=1]"), job(2)])
    assert allocated(plan) == {1: {"b": 2}, 2: {"a": 1}}


def test_fractional_per_slot_amounts():
    plan = plan_for([host("a", 8, counters={"lic": 1})], [job(i, resreq="rusage[lic=0.5]") for i in range(1, 4)])
    assert allocated(plan) == {1: {"a": 1}, 2: {"a": 1}}
    assert "lic" in plan.pending_reasons[3]


# ---------------------------------------------------------------- order[]


ORDER_HOSTS = [  # each host has one "token": one job per host, so hosts fill in candidate order
    host("a", 8, attrs={"cpu_speed": "2.4", "rack": "1"}, counters={"mem": 32 * G, "token": 1}),
    host("b", 2, attrs={"cpu_speed": "3.2", "rack": "2"}, counters={"mem": 128 * G, "token": 1}),
    host("c", 4, attrs={"cpu_speed": "2.0", "rack": "1"}, counters={"mem": 64 * G, "token": 1}),
    host("d", 4, attrs={"cpu_speed": "3.2", "rack": "1"}, counters={"mem": 64 * G, "token": 1}),
]


@pytest.mark.parametrize("order, expected", [
    ("", ["a", "b", "c", "d"]),
    ("order[-mem]", ["b", "c", "d", "a"]),  # ties keep host order
    ("order[mem]", ["a", "c", "d", "b"]),
    ("order[cpu_speed]", ["c", "a", "b", "d"]),
    ("order[-cpu_speed]", ["b", "d", "a", "c"]),
    ("order[-cpu_speed, mem]", ["d", "b", "a", "c"]),
    ("order[rack, -mem]", ["c", "d", "a", "b"]),
    ("order[-slots]", ["a", "c", "d", "b"]),
])
def test_order_sorts_candidate_hosts(order, expected):
    plan = plan_for(ORDER_HOSTS, [job(i, resreq=f"rusage[token=1] {order}") for i in range(1, 5)])
    assert [a.hosts[0] for a in plan.allocations] == expected


def test_order_by_an_undefined_value_sorts_as_lowest():
    hosts = [host("a", 1, attrs={"speed": "2"}), host("b", 1), host("c", 1, attrs={"speed": "3"})]
    plan = plan_for(hosts, [job(i, resreq="order[-speed]") for i in (1, 2, 3)])
    assert [a.hosts[0] for a in plan.allocations] == ["c", "a", "b"]


# ---------------------------------------------------------------- bad resreq, reasons, determinism


def test_a_bad_resreq_gives_a_reason_naming_the_problem_and_others_still_run():
    plan = plan_for([host("a")], [job(1, resreq="select[zone==a"), job(2, resreq="rusage[mem=4GB]"),
                                  job(3, resreq="span[hosts=2]"), job(4)])
    assert allocated(plan) == {4: {"a": 1}}
    assert plan.pending_reasons == {
        1: "bad resource requirement: expected ']' to close select[ at column 15",
        2: "bad resource requirement: invalid amount '4GB' for 'mem' (e.g. 2, 500M, 4Gi) at column 12",
        3: "bad resource requirement: only span[hosts=1] is supported at column 12",
    }


def test_every_pending_job_gets_a_reason():
    snap = random_snapshot(random.Random(5), n_hosts=60, n_jobs=400)
    plan = schedule(snap)
    check_plan(snap, plan)
    assert len(plan.pending_reasons) > 100 and len(plan.allocations) > 100  # the test means something


def test_same_snapshot_same_plan():
    rnd = random.Random(11)
    snap = random_snapshot(rnd, n_hosts=30, n_jobs=300)
    first = schedule(snap)
    assert schedule(snap) == first
    shuffled = list(snap.pending)
    rnd.shuffle(shuffled)
    assert schedule(ClusterView(snap.position, snap.hosts, tuple(shuffled))) == first


def test_the_snapshot_is_not_changed():
    snap = random_snapshot(random.Random(3), n_hosts=10, n_jobs=100)
    before = [(h.slots_free, dict(h.counters_free)) for h in snap.hosts]
    plan = schedule(snap)
    assert plan.allocations
    assert [(h.slots_free, dict(h.counters_free)) for h in snap.hosts] == before


# ---------------------------------------------------------------- against a brute-force reference


def reference_allocations(snap: ClusterView) -> dict[int, dict[str, int]]:
    """The scheduling rules written as plainly as possible, O(jobs x hosts): first fit in candidate order."""
    free_slots = {h.name: h.slots_free for h in snap.hosts}
    free_ctr = {h.name: dict(h.counters_free) for h in snap.hosts}

    def order_value(h: HostView, name: str) -> float:
        if name == "slots":
            return float(h.slots_free)
        if name in h.counters_free:
            return h.counters_free[name]
        try:
            return float(h.attrs[name])
        except (KeyError, ValueError):
            return float("-inf")

    def fits(h: str, rusage, want: int) -> int:
        k = min(free_slots[h], want)
        for c, per in rusage.items():
            k = min(k, int(free_ctr[h].get(c, 0.0) // per))
        return max(k, 0)

    out = {}
    for j in sorted(snap.pending, key=lambda j: (-j.priority, j.id)):
        try:
            rr = parse_resreq(j.resreq)
        except ResReqError:
            continue
        cands = [h for h in snap.hosts if rr.select.matches(h.attrs, h.counters_free)]
        for name, descending in reversed(rr.order):
            cands.sort(key=lambda h: order_value(h, name), reverse=descending)
        per_host = j.slots if rr.span_hosts == 1 else (rr.ptile or 0)
        placed, remaining = {}, j.slots
        for h in cands:
            need = min(per_host, remaining) if per_host else remaining
            k = fits(h.name, rr.rusage, need)
            if k == 0 or (per_host and k < need):
                continue
            placed[h.name] = k
            remaining -= k
            if remaining == 0:
                break
        if remaining == 0:
            for h, k in placed.items():
                free_slots[h] -= k
                for c, per in rr.rusage.items():
                    free_ctr[h][c] -= per * k
            out[j.id] = placed
    return out


RESREQS = ["", "select[zone==a]", "select[zone!=a] rusage[mem=4G]", "rusage[mem=2G,gpu=1]",
           "select[defined(gpumodel)] rusage[gpu=1] span[hosts=1]", "span[ptile=2]", "span[ptile=4] rusage[mem=1G]",
           "select[cpu_speed>=2.4] order[-mem]", "order[cpu_speed] rusage[mem=8G]", "span[hosts=1] order[-slots]",
           "select[zone==b || zone==c] rusage[scratch=50G]", "rusage[lic=1]", "select[zone==a"]


def random_snapshot(rnd: random.Random, n_hosts: int, n_jobs: int) -> ClusterView:
    hosts = []
    for i in range(n_hosts):
        counters = {"mem": float(rnd.choice((8, 16, 64))) * G, "scratch": float(rnd.choice((0, 100, 400))) * G}
        attrs = {"zone": rnd.choice("abc"), "cpu_speed": rnd.choice(("2.0", "2.4", "3.2", "n/a"))}
        if rnd.random() < 0.3:
            attrs["gpumodel"] = "h100"
            counters["gpu"] = float(rnd.choice((2, 4, 8)))
        if rnd.random() < 0.1:
            counters["lic"] = 3.0
        free = {k: v * rnd.choice((1, 1, 0.5, 0)) for k, v in counters.items()}
        hosts.append(host(f"h{i:03d}", rnd.choice((0, 1, 2, 4, 8, 16)), attrs, counters, free))
    jobs = [job(i, slots=rnd.choice((1, 1, 1, 2, 3, 4, 8, 12)), resreq=rnd.choice(RESREQS),
                priority=rnd.choice((10, 50, 50, 100)), run=rnd.randint(0, 2))
            for i in rnd.sample(range(1, 10 * n_jobs), n_jobs)]
    return ClusterView(position=rnd.randint(1, 1000), hosts=tuple(hosts), pending=tuple(jobs))


@pytest.mark.parametrize("seed", range(60))
def test_same_allocations_as_the_brute_force_reference(seed):
    rnd = random.Random(seed)
    snap = random_snapshot(rnd, n_hosts=rnd.randint(1, 40), n_jobs=rnd.randint(1, 300))
    plan = schedule(snap)
    check_plan(snap, plan)
    assert allocated(plan) == reference_allocations(snap)


def test_same_allocations_as_the_reference_when_most_jobs_differ_in_amounts():
    # many shapes (each its own cursor) sharing the hosts that earlier shapes filled
    for seed in range(40):
        rnd = random.Random(1000 + seed)
        base = random_snapshot(rnd, n_hosts=rnd.randint(5, 40), n_jobs=1)
        jobs = []
        for i in range(1, rnd.randint(50, 400)):
            parts = [rnd.choice(["", "select[zone!=c]", "order[-mem]"]),
                     f"rusage[mem={rnd.randint(1, 40) * 250}M" + (f",gpu={rnd.randint(1, 3)}]" if rnd.random() < 0.2 else "]"),
                     rnd.choice(["", "", "span[hosts=1]", f"span[ptile={rnd.randint(1, 4)}]"])]
            jobs.append(job(i, slots=rnd.randint(1, 10), resreq=" ".join(parts), priority=rnd.choice((1, 2))))
        snap = ClusterView(position=1, hosts=base.hosts, pending=tuple(jobs))
        plan = schedule(snap)
        check_plan(snap, plan)
        assert allocated(plan) == reference_allocations(snap), seed


def test_a_plan_says_whether_it_left_a_slot_free():
    """What the scheduling loop reads to decide on a full pass beyond the queue depth."""
    assert plan_for([host("h1", slots=2)], [job(1)]).room_left
    assert not plan_for([host("h1", slots=2)], [job(1), job(2), job(3)]).room_left
    blocked = plan_for([host("h1", slots=2)], [job(1, resreq="select[gpu]")])
    assert blocked.room_left and not blocked.allocations


# ---------------------------------------------------------------- -sp, -x and hosts a job must avoid


def test_user_priority_orders_jobs_within_a_queue_and_queue_priority_still_comes_first():
    hosts = [host("h1", slots=1)]
    jobs = [job(1), JobView(id=2, run=0, queue="normal", priority=50, slots=1, resreq="", user_priority=9),
            JobView(id=3, run=0, queue="urgent", priority=60, slots=1, resreq="", user_priority=1)]
    assert [a.job_id for a in plan_for(hosts, jobs).allocations] == [3]
    assert [a.job_id for a in plan_for([host("h1", slots=2)], jobs).allocations] == [3, 2]


def idle(name: str, slots: int = 8) -> HostView:
    return HostView(name=name, slots_free=slots, attrs=MappingProxyType({}), counters_total=MappingProxyType({}),
                    counters_free=MappingProxyType({}), idle=True)


def test_an_exclusive_job_goes_only_to_an_idle_host_and_nothing_joins_it_there():
    lone = JobView(id=2, run=0, queue="normal", priority=50, slots=2, resreq="", exclusive=True)
    plan = plan_for([host("busy"), idle("free")], [job(1), lone, job(3)])
    by_job = {a.job_id: a.hosts for a in plan.allocations}
    # job 1 took a slot of "busy" (listed first); the exclusive job takes "free" whole; job 3 joins "busy"
    assert by_job == {1: ("busy",), 2: ("free",), 3: ("busy",)}
    plan = plan_for([idle("free")], [job(1), lone])  # job 1 came first: the host is no longer idle
    assert plan.pending_reasons[2] == "exclusive (-x): no matching host is idle (every one runs other jobs)"


def test_a_job_never_goes_to_a_host_it_must_avoid_and_says_so():
    avoid = JobView(id=1, run=1, queue="normal", priority=50, slots=1, resreq="", avoid=frozenset({"h1"}))
    assert [a.hosts for a in plan_for([host("h1"), host("h2")], [avoid]).allocations] == [("h2",)]
    plan = plan_for([host("h1")], [avoid])
    assert "not on h1 (its earlier run there failed)" in plan.pending_reasons[1]
