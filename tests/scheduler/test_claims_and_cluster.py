"""The scheduler with claims, template-claim counters and cluster-scope counters, on plain cluster views."""

from __future__ import annotations

from types import MappingProxyType

from xce.scheduler.core import schedule
from xce.scheduler.view import ClaimUse, ClaimView, ClusterView, HostView, JobView, PoolView


def host(name: str, slots: int = 4, counters: dict[str, float] | None = None) -> HostView:
    c = MappingProxyType(dict(counters or {}))
    return HostView(name=name, slots_free=slots, attrs=MappingProxyType({}), counters_total=c, counters_free=c)


def job(id: int, slots: int = 1, resreq: str = "", claims=(), node_counters=None) -> JobView:
    return JobView(id=id, run=0, queue="q", priority=1, slots=slots, resreq=resreq, claims=tuple(claims),
                   node_counters=MappingProxyType(dict(node_counters or {})))


def use(name: str, access: str = "RWX", state: str = "READY", reachable=None, on=(), holders=(), mode="rw"):
    return ClaimUse(claim_id=hash(name) % 1000, name=name, mode=mode, access_mode=access, state=state,
                    reachable=frozenset(reachable) if reachable is not None else None,
                    attached_hosts=frozenset(on), holder_jobs=tuple(holders))


def plan(hosts, jobs, **kw):
    return schedule(ClusterView(position=1, hosts=tuple(hosts), pending=tuple(jobs), **kw))


HOSTS = [host("h1"), host("h2"), host("h3")]


def test_a_claim_reachable_from_one_host_takes_its_jobs_there():
    p = plan(HOSTS, [job(1, claims=[use("c", reachable={"h3"})])])
    assert p.allocations[0].hosts == ("h3",)


def test_a_claim_reachable_from_nowhere_usable_says_so():
    p = plan(HOSTS, [job(1, claims=[use("c", reachable={"h9"})])])
    assert p.pending_reasons[1] == "claim c is reachable only from h9: no such host matches"


def test_a_claim_not_ready_holds_the_job_with_its_state():
    p = plan(HOSTS, [job(1, claims=[use("c", state="PREPARING")])])
    assert p.pending_reasons[1] == "waiting for claim c (PREPARING)"


def test_rwop_serves_one_job_at_a_time_even_within_a_cycle():
    p = plan(HOSTS, [job(1, claims=[use("x", "RWOP")]), job(2, claims=[use("x", "RWOP")])])
    assert [a.job_id for a in p.allocations] == [1]
    assert p.pending_reasons[2] == "claim x (RWOP) in use by job 1"
    p = plan(HOSTS, [job(3, claims=[use("x", "RWOP", holders=(9,))])])
    assert p.pending_reasons[3] == "claim x (RWOP) in use by job 9"


def test_rwo_keeps_every_user_on_one_host_and_one_job_on_one_host():
    full = [host("h1", slots=1), host("h2"), host("h3")]
    p = plan(full, [job(1, claims=[use("r", "RWO")]), job(2, claims=[use("r", "RWO")]),
                    job(3, slots=3, claims=[use("r", "RWO")])])
    hosts = {a.job_id: a.hosts for a in p.allocations}
    assert hosts[1] == ("h1",) and 2 not in hosts  # h1 is full; RWO keeps job 2 waiting for it
    assert 3 not in hosts
    p = plan(HOSTS, [job(4, slots=3, claims=[use("r", "RWO", on={"h2"})])])
    assert p.allocations[0].hosts == ("h2",) and p.allocations[0].slots == {"h2": 3}


def test_template_counters_are_reserved_on_the_first_host():
    hosts = [host("h1", counters={"scratch": 1e9}), host("h2", counters={"scratch": 10e9})]
    p = plan(hosts, [job(1, node_counters={"scratch": 5e9}), job(2, node_counters={"scratch": 6e9})])
    a = {x.job_id: x for x in p.allocations}
    assert a[1].hosts == ("h2",) and a[1].counters == {"h2": {"scratch": 5e9}}
    assert 2 not in a and p.pending_reasons[2].startswith("no matching host has 5.588Gi scratch free")


def test_cluster_counters_are_shared_by_every_host():
    p = plan(HOSTS, [job(1, resreq="rusage[lic=1]"), job(2, resreq="rusage[lic=1]"), job(3)],
             cluster_free=MappingProxyType({"lic": 1.0}))
    a = {x.job_id: x for x in p.allocations}
    assert a[1].cluster == {"lic": 1.0} and a[1].counters == {}
    assert 2 not in a and 3 in a
    assert p.pending_reasons[2] == "cluster resource lic: 0 free, 1 needed"


def test_claims_go_to_the_pool_with_room():
    p = schedule(ClusterView(position=1, hosts=(), pending=(),
                          pools=(PoolView("a", 100, 10), PoolView("b", 100, 50)),
                          pending_claims=(ClaimView(1, "x", 40, ("a", "b")), ClaimView(2, "y", 40, ("a", "b")))))
    assert [(c.claim_id, c.pool) for c in p.placements] == [(1, "b")]
    assert p.claim_reasons[2] == "no pool has room for 40B: a has 10B free, b has 10B free"


def test_standalone_placements_see_the_pool_room_the_cycles_allocations_took():
    """A shared template claim allocated in this cycle takes pool room first: a standalone claim that
    no longer fits waits for the next cycle, with the room left as its reason."""
    gib = 2**30
    templated = JobView(id=1, run=0, queue="q", priority=1, slots=1, resreq="",
                        pool_needs=(("scratch", ("p",), 6 * gib),))
    p = plan(HOSTS, [templated], pools=(PoolView(name="p", capacity=10 * gib, free=10 * gib),),
             pending_claims=(ClaimView(id=7, name="ckpt", size=6 * gib, pools=("p",)),))
    assert [a.job_id for a in p.allocations] == [1] and dict(p.allocations[0].pools) == {"scratch": "p"}
    assert p.placements == ()
    assert p.claim_reasons[7] == "no pool has room for 6Gi: p has 4Gi free"


def test_a_resize_is_reserved_in_its_claims_pool_before_new_claims_or_waits_with_a_reason():
    from xce.scheduler.view import ResizeView

    gib = 2**30
    p = schedule(ClusterView(position=1, hosts=(), pending=(), pools=(PoolView("p", 10 * gib, 5 * gib),),
                          pending_claims=(ClaimView(9, "new", 2 * gib, ("p",)),),
                          pending_resizes=(ResizeView(3, "grow", "p", 8 * gib, 4 * gib),
                                           ResizeView(4, "huge", "p", 12 * gib, 6 * gib),
                                           ResizeView(5, "nopool", None, 3 * gib, gib))))
    assert [(r.claim_id, r.pool, r.size, r.grow) for r in p.resizes] == [(3, "p", 8 * gib, 4 * gib),
                                                                         (5, None, 3 * gib, gib)]
    assert p.resize_reasons == {4: "pool p has no room for 6Gi more: 1Gi free"}
    assert p.placements == () and p.claim_reasons[9] == "no pool has room for 2Gi: p has 1Gi free", \
        "the reserved growth is not handed to a new claim in the same cycle"
