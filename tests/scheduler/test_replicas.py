"""The scheduler with node-local claims: replicas reserved on hosts' counters (named hosts, or the
hosts with the most room), and jobs using such a claim placed only where a replica is READY."""

from __future__ import annotations

from tests.scheduler.test_claims_and_cluster import host, job, plan
from xce.scheduler.view import ClaimUse, ReplicaView

GiB = 2.0**30


def weights(ready) -> ClaimUse:
    return ClaimUse(claim_id=7, name="weights", mode="ro", access_mode="ROX", state="READY",
                    reachable=frozenset(ready), replicated=True)


def test_jobs_using_a_node_local_claim_go_only_where_a_replica_is_ready():
    p = plan([host("h1"), host("h2"), host("h3")], [job(i, claims=[weights({"h2", "h3"})]) for i in (1, 2, 3)])
    assert len(p.allocations) == 3 and {a.hosts[0] for a in p.allocations} <= {"h2", "h3"}, "never h1"


def test_a_job_whose_replica_hosts_are_full_waits_and_says_where_they_are():
    p = plan([host("h1"), host("h2", slots=0), host("h3", slots=0)], [job(1, claims=[weights({"h2", "h3"})])])
    assert not p.allocations
    assert p.pending_reasons[1] == "claim weights: replicas READY on h2, h3; both full"
    p = plan([host("h1"), host("h2", slots=1)], [job(2, slots=2, claims=[weights({"h2"})])])
    assert p.pending_reasons[2] == ("claim weights: replicas READY on h2: matching hosts do not have 2 free slots; "
                                    "1 host(s) match"), "not full: too small"


def test_named_hosts_get_their_replicas_when_they_have_room_on_the_counter():
    hosts = [host("h1", counters={"scratch": 4 * GiB}), host("h2", counters={"scratch": 1 * GiB}),
             host("h3", counters={"scratch": 8 * GiB})]
    p = plan(hosts, [], pending_replicas=(ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch",
                                                      hosts=("h1", "h2")),))
    assert [(r.claim_id, r.host, r.size) for r in p.replicas] == [(5, "h1", 2 * GiB)]
    assert p.claim_reasons[5] == "replicas of 2Gi wait: host h2 has 1Gi scratch free"


def test_chosen_hosts_are_those_with_the_most_room_and_none_twice():
    hosts = [host("h1", counters={"scratch": 4 * GiB}), host("h2", counters={"scratch": 9 * GiB}),
             host("h3", counters={"scratch": 8 * GiB}), host("h4", counters={"scratch": 1 * GiB})]
    p = plan(hosts, [], pending_replicas=(
        ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch", more=2, taken=frozenset({"h2"})),
        ReplicaView(claim_id=6, name="d", size=int(3 * GiB), counter="scratch", more=3)))
    assert [(r.claim_id, r.host) for r in p.replicas] == [(5, "h3"), (5, "h1"), (6, "h2"), (6, "h3")], \
        "5 skips h2 (it has one there); 6 sees what 5 took: h1 has 2 GiB left"
    assert p.claim_reasons[6] == "replicas of 3Gi wait: 1 more host with 3Gi scratch free wanted, none left"
    assert 5 not in p.claim_reasons


def test_replicas_see_the_counters_the_cycles_jobs_took():
    hosts = [host("h1", counters={"scratch": 3 * GiB})]
    p = plan(hosts, [job(1, node_counters={"scratch": 2 * GiB})],
             pending_replicas=(ReplicaView(claim_id=5, name="c", size=int(2 * GiB), counter="scratch",
                                           hosts=("h1",)),))
    assert [a.job_id for a in p.allocations] == [1] and not p.replicas
    assert p.claim_reasons[5] == "replicas of 2Gi wait: host h1 has 1Gi scratch free"


def test_an_unavailable_named_host_is_named():
    p = plan([host("h1", counters={"scratch": 3 * GiB})], [],
             pending_replicas=(ReplicaView(claim_id=5, name="c", size=1, counter="scratch", hosts=("h9",)),))
    assert not p.replicas and p.claim_reasons[5].endswith("host h9 is not available")


def test_a_job_whose_replicas_hosts_were_lost_says_so():
    lost = ClaimUse(claim_id=7, name="weights", mode="ro", access_mode="ROX", state="READY",
                    reachable=frozenset({"h2"}), replicated=True, lost=frozenset({"h1"}))
    p = plan([host("h1"), host("h2", slots=0)], [job(1, claims=[lost])])
    assert p.pending_reasons[1] == "claim weights: replicas READY on h2 (LOST with h1); full"
