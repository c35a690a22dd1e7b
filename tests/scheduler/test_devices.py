"""GPUs as devices in ``schedule(view)``: concrete ids, never two exclusive jobs on one GPU, sharing
only between ``j_exclusive=no`` jobs, ``gmodel``/``gmem``, ``num`` per host, and the reasons."""

from __future__ import annotations

import random
from types import MappingProxyType

from xce.jobspec_gpu import GpuRequest, parse_gpu
from xce.scheduler.core import schedule
from xce.scheduler.plan import Plan
from xce.scheduler.view import ClusterView, GpuView, HostView, JobView

GiB = 2**30


def gpu_host(name: str, n: int = 4, slots: int = 16, model: str = "NVIDIA A100-SXM4-80GB", memory: int = 80 * GiB,
             held: dict[int, tuple[bool, int, int]] | None = None) -> HostView:
    """``held``: id -> (exclusive, sharers, gmem_used)."""
    held = held or {}
    gpus = tuple(GpuView(id=i, model=model, memory=memory, exclusive=held.get(i, (False, 0, 0))[0],
                         sharers=held.get(i, (False, 0, 0))[1], gmem_used=held.get(i, (False, 0, 0))[2])
                 for i in range(n))
    return HostView(name=name, slots_free=slots, attrs=MappingProxyType({}), counters_total=MappingProxyType({}),
                    counters_free=MappingProxyType({}), gpus=gpus)


def gjob(id: int, gpu: str | None, slots: int = 1, resreq: str = "") -> JobView:
    return JobView(id=id, run=0, queue="normal", priority=50, slots=slots, resreq=resreq,
                   gpu=parse_gpu(gpu) if gpu is not None else None)


def plan_for(hosts: list[HostView], jobs: list[JobView]) -> Plan:
    view = ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs))
    plan = schedule(view)
    check_gpus(view, plan)
    return plan


def check_gpus(view: ClusterView, plan: Plan) -> None:
    """Every plan: each GPU job gets ``num`` distinct existing ids on each of its hosts; no GPU is
    held by an exclusive job and anyone else; shared GPUs' gmem within their memory."""
    jobs = {j.id: j for j in view.pending}
    hosts = {h.name: h for h in view.hosts}
    holders: dict[tuple[str, int], list[GpuRequest]] = {}
    for a in plan.allocations:
        req = jobs[a.job_id].gpu
        if req is None:
            assert not a.gpus
            continue
        assert set(a.gpus) == set(a.hosts)
        for h, ids in a.gpus.items():
            assert len(ids) == len(set(ids)) == req.num
            assert set(ids) <= {g.id for g in hosts[h].gpus}
            for i in ids:
                holders.setdefault((h, i), []).append(req)
    for (h, i), reqs in holders.items():
        g = next(g for g in hosts[h].gpus if g.id == i)
        if any(r.exclusive for r in reqs) or g.exclusive:
            assert len(reqs) == 1 and g.sharers == 0 and not g.exclusive, (h, i, reqs)
        assert g.gmem_used + sum(r.gmem or 0 for r in reqs) <= g.memory or all(r.gmem is None for r in reqs)


def test_two_jobs_get_disjoint_gpus_and_a_third_waits_with_the_reason():
    plan = plan_for([gpu_host("host1", 4)], [gjob(1, "num=2"), gjob(2, "num=2"), gjob(3, "num=2")])
    got = {a.job_id: a.gpus["host1"] for a in plan.allocations}
    assert got == {1: (0, 1), 2: (2, 3)}
    assert plan.pending_reasons[3] == "gpu: 0 of 4 free on host1"


def test_gpus_held_already_are_not_given_again():
    plan = plan_for([gpu_host("host1", 4, held={0: (True, 0, 0), 2: (False, 1, 0)})], [gjob(1, "num=2"), gjob(2, "-")])
    assert [a.gpus["host1"] for a in plan.allocations] == [(1, 3)]
    assert plan.pending_reasons[2] == "gpu: 0 of 4 free on host1"


def test_shared_jobs_share_gpus_exclusive_ones_do_not():
    jobs = [gjob(1, "num=2:j_exclusive=no"), gjob(2, "num=4:j_exclusive=no"), gjob(3, "num=1")]
    plan = plan_for([gpu_host("host1", 4)], jobs)
    got = {a.job_id: a.gpus["host1"] for a in plan.allocations}
    assert got[1] == (0, 1) and got[2] == (0, 1, 2, 3)  # the least shared first
    assert 3 not in got and plan.pending_reasons[3] == "gpu: 0 of 4 free on host1"
    # a shared job never goes onto a GPU an exclusive job holds
    plan = plan_for([gpu_host("host1", 2, held={0: (True, 0, 0)})], [gjob(4, "num=2:j_exclusive=no"),
                                                                   gjob(5, "j_exclusive=no")])
    assert {a.job_id: a.gpus["host1"] for a in plan.allocations} == {5: (1,)}
    assert plan.pending_reasons[4] == "gpu: 1 of 2 shareable on host1"


def test_exclusive_process_mode_keeps_its_gpus():
    plan = plan_for([gpu_host("host1", 2)], [gjob(1, "num=1:mode=exclusive_process"), gjob(2, "num=2:j_exclusive=no")])
    assert [a.job_id for a in plan.allocations] == [1]
    assert "1 of 2 shareable on host1" in plan.pending_reasons[2]


def test_gmodel_and_gmem_choose_the_host():
    hosts = [gpu_host("t4", 4, model="Tesla T4", memory=16 * GiB), gpu_host("h100", 2, model="NVIDIA H100 80GB HBM3")]
    plan = plan_for(hosts, [gjob(1, "num=1:gmodel=H100"), gjob(2, f"num=1:gmem={40 * GiB}"),
                            gjob(3, "num=1:gmodel=TeslaT4"), gjob(4, "gmodel=V100")])
    got = {a.job_id: a.hosts for a in plan.allocations}
    assert got == {1: ("h100",), 2: ("h100",), 3: ("t4",)}
    assert plan.pending_reasons[4].startswith("gpu: no GPU of model V100 on the matching hosts")
    # shared GPUs split their memory by gmem
    plan = plan_for([gpu_host("host1", 1, memory=16 * GiB)],
                    [gjob(5, f"j_exclusive=no:gmem={10 * GiB}"), gjob(6, f"j_exclusive=no:gmem={10 * GiB}"),
                     gjob(7, f"j_exclusive=no:gmem={6 * GiB}")])
    assert sorted(a.job_id for a in plan.allocations) == [5, 7]


def test_num_is_per_host_for_multi_host_jobs():
    hosts = [gpu_host("a", 4, slots=2), gpu_host("b", 4, slots=2), gpu_host("c", 1, slots=8)]
    plan = plan_for(hosts, [gjob(1, "num=3", slots=4, resreq="span[ptile=2]")])
    (a,) = plan.allocations
    assert a.hosts == ("a", "b") and a.gpus == {"a": (0, 1, 2), "b": (0, 1, 2)}


def test_hosts_without_gpus_and_plain_jobs_beside_gpu_jobs():
    plain = HostView(name="cpu1", slots_free=8, attrs=MappingProxyType({}), counters_total=MappingProxyType({}),
                     counters_free=MappingProxyType({}))
    plan = plan_for([plain], [gjob(1, "num=1"), gjob(2, None)])
    assert [a.job_id for a in plan.allocations] == [2]
    assert plan.pending_reasons[1] == "gpu: cpu1 has no GPUs"
    # slots short is said as slots, not as GPUs
    plan = plan_for([gpu_host("host1", 4, slots=1)], [gjob(3, "num=1", slots=2)])
    assert "free slot" in plan.pending_reasons[3] and plan.pending_reasons[3].endswith("(with 1 GPU free: 1 of them)")
    # GPUs free where its slots are not, slots free where no GPU is: said as slots on the GPU hosts
    plan = plan_for([gpu_host("host1", 4, slots=0), plain], [gjob(4, "num=1")])
    assert plan.pending_reasons[4].endswith("(with 1 GPU free: 1 of them)")
    plan = plan_for([gpu_host("host1", 4)], [gjob(5, "num=1", resreq="select[zone==z]")])
    assert plan.pending_reasons[5] == "no host matches select[zone==z]"


def test_rusage_ngpus_physical_is_not_a_counter():
    plan = plan_for([gpu_host("host1", 2)], [gjob(1, "num=2", resreq="rusage[ngpus_physical=2]")])
    assert plan.allocations[0].gpus == {"host1": (0, 1)} and not plan.allocations[0].counters


def test_random_mixes_never_overcommit_a_gpu():
    rnd = random.Random(5)
    for _ in range(40):
        hosts = [gpu_host(f"h{i}", rnd.choice((1, 2, 4, 8)), slots=rnd.choice((1, 4, 16)),
                          held={0: (rnd.random() < 0.3, 0, 0)}) for i in range(rnd.randint(1, 5))]
        jobs = [gjob(j, rnd.choice(("num=1", "num=2", "num=2:j_exclusive=no", "num=1:j_exclusive=no",
                                    "num=3:mode=exclusive_process", None)), slots=rnd.choice((1, 2, 4)),
                     resreq=rnd.choice(("", "span[hosts=1]", "span[ptile=1]")))
                for j in range(1, rnd.randint(2, 30))]
        plan_for(hosts, jobs)
