"""The scheduler with cache claims: jobs prefer hosts with a READY replica; when none of those has room a
replica starts on a host that has (its slots not held: the job waits for it), other caches' unused
replicas evicted there least recently used first, never one a job uses."""

from __future__ import annotations

from types import MappingProxyType

from tests.scheduler.test_claims_and_cluster import host, job, plan
from xce.scheduler.view import CachedReplica, CacheUse, ClaimUse, HostView, QuotaRoom

GiB = 2.0**30


def cache(ready=(), filling=(), taken=(), claim_id: int = 7, name: str = "weights") -> ClaimUse:
    return ClaimUse(claim_id=claim_id, name=name, mode="ro", access_mode="ROX", state="READY",
                    reachable=frozenset(ready), replicated=True,
                    cache=CacheUse(counter="scratch", size=int(2 * GiB), filling=frozenset(filling),
                                   taken=frozenset(ready) | frozenset(filling) | frozenset(taken)))


def hosts(*free_slots: int, scratch: float = 4 * GiB):
    return [host(f"h{i}", slots=n, counters={"scratch": scratch}) for i, n in enumerate(free_slots, 1)]


def holding(name: str, slots: int, total: float, free: float) -> HostView:
    """A host whose counter ``scratch`` holds replicas already: ``free`` of ``total`` left."""
    return HostView(name=name, slots_free=slots, attrs=MappingProxyType({}),
                    counters_total=MappingProxyType({"scratch": total}),
                    counters_free=MappingProxyType({"scratch": free}))


def test_jobs_go_where_a_replica_is_ready_while_it_has_room_and_start_none():
    p = plan(hosts(4, 4, 4), [job(i, claims=[cache(ready={"h2"})]) for i in (1, 2, 3)])
    assert [a.hosts for a in p.allocations] == [("h2",)] * 3 and not p.replicas


def test_when_the_ready_hosts_are_full_a_replica_starts_on_the_host_with_the_most_free_slots_and_the_job_waits():
    p = plan(hosts(0, 2, 4), [job(1, claims=[cache(ready={"h1"})])])
    assert not p.allocations, "its slots are not held while the replica fills"
    [r] = p.replicas
    assert (r.claim_id, r.host, r.counter, r.size, r.on_demand, r.evict) == (7, "h3", "scratch", 2 * GiB, True, ())
    assert p.pending_reasons[1] == ("claim weights: replicas READY on h1, none with room; a replica starts on h3: "
                                    "waiting for it to be filled")


def test_later_jobs_wait_for_a_filling_replica_while_its_host_has_their_slots_then_start_another():
    jobs = [job(i, slots=2, claims=[cache(ready={"h1"}, filling={"h2"})]) for i in (1, 2, 3)]
    p = plan(hosts(0, 4, 4), jobs)
    assert not p.allocations
    assert p.pending_reasons[1].endswith("waiting for its replica on h2 to be filled")
    assert p.pending_reasons[2].endswith("waiting for its replica on h2 to be filled")
    assert p.pending_reasons[3].endswith("a replica starts on h3: waiting for it to be filled"), "h2's 4 slots promised"
    assert [r.host for r in p.replicas] == ["h3"]


def test_a_host_whose_replica_failed_gets_no_new_one():
    p = plan(hosts(0, 4), [job(1, claims=[cache(ready={"h1"}, taken={"h2"})])])
    assert not p.replicas and p.pending_reasons[1] == "claim weights: replicas READY on h1; full"


def test_room_is_made_by_evicting_other_caches_unused_replicas_least_recently_used_first():
    evictable = (CachedReplica(claim_id=8, host="h2", counter="scratch", size=int(2 * GiB), last_used=50.0),
                 CachedReplica(claim_id=9, host="h2", counter="scratch", size=int(2 * GiB), last_used=10.0),
                 CachedReplica(claim_id=7, host="h3", counter="scratch", size=int(2 * GiB), last_used=1.0))
    p = plan([host("h1", slots=0), holding("h2", 4, total=5 * GiB, free=1 * GiB)],
             [job(1, claims=[cache(ready={"h1"})])], evictable=evictable)
    [r] = p.replicas
    assert (r.host, r.evict) == ("h2", (9,)), "1Gi free, 2Gi wanted: the least recently used one goes"
    assert p.pending_reasons[1].endswith("a replica starts on h2, evicting 1 unused cache replica there: waiting for "
                                         "it to be filled")


def test_a_replica_a_job_of_this_cycle_uses_is_never_evicted():
    other = cache(ready={"h2"}, claim_id=9, name="shards")
    evictable = (CachedReplica(claim_id=9, host="h2", counter="scratch", size=int(4 * GiB), last_used=1.0),)
    p = plan([host("h1", slots=0), holding("h2", 4, total=4 * GiB, free=0)],
             [job(1, claims=[other]), job(2, claims=[cache(ready={"h1"})])], evictable=evictable)
    assert [a.hosts for a in p.allocations] == [("h2",)]
    assert not p.replicas, "shards' replica on h2 is used by job 1: nothing to evict, no room elsewhere"


def test_no_room_on_any_counter_and_nothing_to_evict_keeps_the_job_waiting_where_it_is_ready():
    p = plan(hosts(0, 4, scratch=1 * GiB), [job(1, claims=[cache(ready={"h1"})])])
    assert not p.replicas and p.pending_reasons[1] == "claim weights: replicas READY on h1; full"


def test_a_named_hosts_replica_short_of_room_evicts_caches_unused_replicas_there():
    from xce.scheduler.view import ReplicaView
    evictable = (CachedReplica(claim_id=8, host="h1", counter="scratch", size=int(2 * GiB), last_used=5.0),
                 CachedReplica(claim_id=9, host="h1", counter="scratch", size=int(2 * GiB), last_used=1.0))
    p = plan([holding("h1", 4, total=4 * GiB, free=0)], [], evictable=evictable,
             pending_replicas=(ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch",
                                           hosts=("h1",)),))
    [r] = p.replicas
    assert (r.claim_id, r.host, r.on_demand, r.evict) == (5, "h1", False, (9,)), "the least recently used one"
    p = plan([holding("h1", 4, total=4 * GiB, free=0)], [],
             pending_replicas=(ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch",
                                           hosts=("h1",)),))
    assert not p.replicas and p.claim_reasons[5] == "replicas of 2Gi wait: host h1 has 0B scratch free"


def test_a_replica_on_demand_is_charged_on_the_quota_and_none_starts_when_the_quota_is_short():
    room = QuotaRoom(left=3 * GiB, quota="quota of project a: at most 5Gi, 2Gi in use")
    p = plan(hosts(0, 4, 4), [job(i, claims=[cache(ready={"h1"})]) for i in (1, 2)],
             cache_quotas=MappingProxyType({7: room}))
    # job 2 would wait for job 1's replica on h2 (its slots promised there: 4 for 1) but h2 has 4 free: it waits
    assert [r.host for r in p.replicas] == ["h2"]
    assert p.pending_reasons[2].endswith("waiting for its replica on h2 to be filled")
    big = [job(i, slots=4, claims=[cache(ready={"h1"})]) for i in (1, 2)]
    p = plan(hosts(0, 4, 4), big, cache_quotas=MappingProxyType({7: room}))
    assert [r.host for r in p.replicas] == ["h2"], "3Gi left: one 2Gi replica, not two"
    assert p.pending_reasons[2] == ("claim weights: replicas READY on h1, none with room; no replica starts: quota of "
                                    "project a: at most 5Gi, 2Gi in use, a replica is charged 2Gi")


def test_a_quota_with_room_for_none_starts_none_and_says_why():
    room = QuotaRoom(left=1 * GiB, quota="quota of project a, class local: at most 2Gi, 1Gi in use")
    p = plan(hosts(0, 4), [job(1, claims=[cache(ready={"h1"})])], cache_quotas=MappingProxyType({7: room}))
    assert not p.replicas and not p.allocations
    assert "no replica starts: quota of project a, class local: at most 2Gi, 1Gi in use" in p.pending_reasons[1]
    waiting = plan(hosts(0, 4), [job(1, claims=[cache(ready={"h1"}, filling={"h2"})])],
                   cache_quotas=MappingProxyType({7: room}))
    assert waiting.pending_reasons[1].endswith("waiting for its replica on h2 to be filled"), "charged already"


def test_a_caches_first_replica_is_charged_already_so_it_starts_on_a_full_quota():
    room = QuotaRoom(left=0, quota="quota of project a: at most 2Gi, 2Gi in use", prepaid=True)
    p = plan(hosts(0, 4, 4), [job(i, slots=4, claims=[cache()]) for i in (1, 2)],
             cache_quotas=MappingProxyType({7: room}))
    assert [r.host for r in p.replicas] == ["h2"], "the first: charged from the cache's creation"
    assert "no replica starts: quota of project a" in p.pending_reasons[2], "a second would be charged 2Gi more"


def test_hosts_chosen_for_replicas_are_made_room_on_by_evicting_caches_unused_replicas_when_too_few_have_it():
    from xce.scheduler.view import ReplicaView
    evictable = (CachedReplica(claim_id=8, host="h2", counter="scratch", size=int(2 * GiB), last_used=5.0),
                 CachedReplica(claim_id=9, host="h3", counter="scratch", size=int(1 * GiB), last_used=1.0))
    want = (ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch", more=2),)
    p = plan([holding("h1", 4, total=4 * GiB, free=3 * GiB), holding("h2", 4, total=4 * GiB, free=0),
              holding("h3", 4, total=4 * GiB, free=1 * GiB)], [], evictable=evictable, pending_replicas=want)
    assert [(r.host, r.evict) for r in p.replicas] == [("h1", ()), ("h3", (9,))], \
        "h1 has room; h3 once cache 9's replica goes (one eviction as for h2, and h3 has more room already)"
    assert 5 not in p.claim_reasons
    p = plan([holding("h1", 4, total=4 * GiB, free=3 * GiB), holding("h2", 4, total=4 * GiB, free=0)], [],
             pending_replicas=want)
    assert [r.host for r in p.replicas] == ["h1"]
    assert p.claim_reasons[5] == "replicas of 2Gi wait: 1 more host with 2Gi scratch free wanted, none left"


def test_a_jobs_scratch_short_everywhere_evicts_caches_unused_replicas_on_one_host_and_the_job_waits_for_them():
    evictable = (CachedReplica(claim_id=8, host="h1", counter="scratch", size=int(2 * GiB), last_used=5.0),
                 CachedReplica(claim_id=9, host="h2", counter="scratch", size=int(1 * GiB), last_used=9.0),
                 CachedReplica(claim_id=10, host="h2", counter="scratch", size=int(1 * GiB), last_used=1.0))
    two = [holding("h1", 4, total=4 * GiB, free=1 * GiB), holding("h2", 4, total=4 * GiB, free=1 * GiB)]
    p = plan(two, [job(1, node_counters={"scratch": 3 * GiB}), job(2, node_counters={"scratch": 3 * GiB})],
             evictable=evictable)
    assert not p.allocations, "it waits for the releases"
    assert [(e.claim_id, e.host, e.job_id) for e in p.evictions] == [(8, "h1", 1), (10, "h2", 2), (9, "h2", 2)], \
        "job 1: one eviction on h1; job 2: h2's, least recently used first (h1's is job 1's already)"
    assert p.pending_reasons[1] == ("no matching host has 3Gi scratch free for its template claims; evicting 1 "
                                    "unused cache replica on h1 for its template claims: it goes there once they "
                                    "are released")
    p = plan(two, [job(1, node_counters={"scratch": 4 * GiB})],
             evictable=evictable[:1])
    assert not p.evictions and p.pending_reasons[1].endswith("; 2 host(s) match"), "not even with all of them"
