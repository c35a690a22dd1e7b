"""Node-local standalone claims: a replica per host, each with its own state machine and its ops run by
its host's node agent under the one op discipline; refused where a class cannot hold one."""

from __future__ import annotations

import json
import random

import pytest

from xce.config import ClaimsConfig, parse_config
from xce.errors import Conflict, InvalidRequest
from xce.model import Model
from xce.model import agents
from xce.model import claims
from xce.model.facts import HostRegistered, ProjectDefined, ReplicaPlaced
from xce.model import ops
from xce.model.claims import ClaimSpec, ClaimState, OpResult, ReplicaState, create
from xce.model.identity import Role, User
from xce.model.state import State
from xce.model.transitions import ImpossibleTransition

CONFIG_TEXT = """
[[users]]
name = "admin"
role = "admin"
projects = ["a"]
[[queues]]
name = "default"
[[projects]]
name = "a"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
[[claim_classes]]
name = "bare"
provider = "simfs"
scope = "node"
"""
CONFIG = parse_config(CONFIG_TEXT)
ALICE = User(name="alice", role=Role.USER, projects=["a"])


@pytest.fixture
def model() -> Model:
    m = Model(cluster_id="k")
    m.apply(1, ProjectDefined(time=0, name="a"))
    return m


def test_a_node_scope_class_without_a_host_counter_refuses_standalone_claims(model):
    with pytest.raises(InvalidRequest, match="'bare' is node-scope and draws on no host counter"):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "bare", "1Gi", "RWO"), 1.0)
    assert not model.claims


def test_a_shared_class_is_not_refused(model):
    facts, claim_id = create(model, CONFIG, ALICE, ClaimSpec("cache", "vol", "1Gi", "RWO"), 1.0)
    assert [f.claim_id for f in facts] == [claim_id]


def test_a_node_scope_standalone_claim_needs_its_hosts_or_how_many(model):
    with pytest.raises(InvalidRequest, match="'scratch' is node-scope: its claims live on hosts, one replica on "
                                             "each; say which hosts"):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "scratch", "1Gi", "RWO"), 1.0)
    assert not model.claims


@pytest.mark.parametrize("spec,fragment", [
    (dict(hosts=("h1", "h1")), "names a host twice"),
    (dict(hosts=("h1",), replicas=2), "not both"),
    (dict(replicas=0), "1 to 64 replicas, not 0"),
    (dict(hosts=("Bad Host",)), "host"),
    (dict(hosts=("h1",), reclaim_policy="retain"), "released with their claim"),
    (dict(hosts=("h1",), populate_from="/data/weights"), "the workers do not read paths"),
    (dict(hosts=("h1",), populate_from="snapshot:base"), "a snapshot is copied by a clone"),
])
def test_replica_requests_that_cannot_be_met_are_refused(model, spec, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "scratch", "1Gi", "RWO", **spec), 1.0)


def test_a_shared_class_takes_no_hosts(model):
    with pytest.raises(InvalidRequest, match="'vol' is shared"):
        create(model, CONFIG, ALICE, ClaimSpec("cache", "vol", "1Gi", "RWO", hosts=("h1",)), 1.0)


RETRIES = ClaimsConfig(max_attempts=2, retry_base=0.1, retry_cap=0.2)
GiB = 2**30


class World:
    """A model with hosts h1..h3 (10 GiB scratch each) and their node agents' leases."""

    def __init__(self) -> None:
        self.model = Model(cluster_id="k")
        self.now = 1.0
        self.commit([ProjectDefined(time=0, name="a")])
        self.epochs: dict[str, int] = {}
        for h in ("h1", "h2", "h3"):
            self.commit([HostRegistered(time=0, name=h, slots=4, counters={"scratch": 10.0 * GiB})])
            facts, self.epochs[h] = ops.lease(self.model, claims.node_agent(h), h, self.now)
            self.commit(facts)

    def commit(self, facts) -> list:
        for f in facts:
            self.model.apply(self.model.position + 1, f)
        return facts

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def create(self, name: str = "cache", **kw) -> int:
        facts, claim_id = create(self.model, CONFIG, ALICE, ClaimSpec(name, "scratch", "1Gi", "RWO", **kw),
                                 self.tick())
        self.commit(facts)
        return claim_id

    def place(self, claim_id: int, host: str) -> None:
        self.commit([ReplicaPlaced(time=self.tick(), claim_id=claim_id, host=host, counter="scratch",
                                   size_bytes=GiB)])

    def replica(self, claim_id: int, host: str):
        return next(r for r in self.model.claims[claim_id].replicas if r.host == host)

    def take(self, host: str) -> list:
        """What the node agent of ``host`` is handed (each op with its intent, as ``POST .../work``)."""
        facts, work = agents.take(self.model, claims.node_agent(host), self.epochs[host], 100, self.now, 300.0)
        self.commit(facts)
        return work.replica_ops

    def report(self, host: str, claim_id: int, op_id: str, ok: bool = True, **kw) -> list:
        r = OpResult(op_id, claim_id, ok, **kw)
        done = agents.report(self.model, RETRIES, claims.node_agent(host), self.epochs[host], [r], [], self.tick(),
                             random.Random(1))
        assert not done.refused, done.refused
        return self.commit(done.facts)

    def run(self, claim_id: int, host: str, **kw) -> None:
        [o] = [o for o in self.take(host) if o.owner.id == claim_id]
        self.report(host, claim_id, o.op.op_id, handle=f"n{claim_id}-{host}", path=f"/x/{host}", **kw)


@pytest.fixture
def w() -> World:
    return World()


def test_a_claim_on_named_hosts_has_a_pending_replica_on_each_until_placed(w):
    claim_id = w.create(hosts=("h1", "h2"))
    claim = w.model.claims[claim_id]
    assert [(r.host, r.state) for r in claim.replicas] == [("h1", ReplicaState.PENDING), ("h2", ReplicaState.PENDING)]
    assert claim.state is ClaimState.PENDING and not agents.work(w.model, "node:h1", w.now, 10, 300).replica_ops, \
        "nothing to make before its size is reserved"
    assert claim.charged_bytes == 2 * GiB, "each replica holds its size"


def test_replicas_are_made_by_their_own_hosts_agents_and_the_claim_is_ready_with_the_first(w):
    claim_id = w.create(hosts=("h1", "h2"))
    w.place(claim_id, "h1")
    w.place(claim_id, "h2")
    assert w.model.hosts["h1"].counters_used() == {"scratch": GiB}, "its size is reserved on its host"
    assert w.take("h3") == [], "no replica of h3's"
    [op1] = w.take("h1")
    assert op1.op.op_id == f"c{claim_id}.r1.create.1" and op1.runner == "node:h1"
    assert w.replica(claim_id, "h1").state is ReplicaState.PREPARING
    assert w.model.claims[claim_id].state is ClaimState.PREPARING
    stray = agents.report(w.model, RETRIES, "node:h2", w.epochs["h2"], [OpResult(op1.op.op_id, claim_id, True)], [],
                          w.now, random.Random(1))
    assert not stray.facts and "is not node:h2's" in stray.refused[op1.op.op_id], "another host's agent is refused"
    w.report("h1", claim_id, op1.op.op_id, handle="n1", path="/x/h1")
    claim = w.model.claims[claim_id]
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"]
    assert "1 of 2 replicas READY" in claim.history[-1]["reason"]
    assert w.replica(claim_id, "h1").path == "/x/h1"
    assert w.replica(claim_id, "h2").state is ReplicaState.PENDING, "each replica its own machine"
    w.run(claim_id, "h2")
    assert claim.ready_hosts() == ["h1", "h2"] and claim.state is ClaimState.READY


def test_a_failed_replica_leaves_the_others_serving_and_its_error_visible(w):
    claim_id = w.create(hosts=("h1", "h2"))
    w.place(claim_id, "h1")
    w.place(claim_id, "h2")
    w.run(claim_id, "h1")
    [o] = w.take("h2")
    w.report("h2", claim_id, o.op.op_id, ok=False, code="NO_SPACE", message="disk full", retryable=False)
    r2 = w.replica(claim_id, "h2")
    assert r2.state is ReplicaState.FAILED and r2.last_error == "NO_SPACE: disk full" and r2.attempts == 1
    assert w.model.claims[claim_id].state is ClaimState.READY and w.model.claims[claim_id].ready_hosts() == ["h1"]


def test_a_claim_whose_every_replica_failed_is_failed(w):
    claim_id = w.create(hosts=("h1",))
    w.place(claim_id, "h1")
    for attempt in (1, 2):
        [o] = w.take("h1")
        [failed] = w.report("h1", claim_id, o.op.op_id, ok=False, code="IO", message="broken", retryable=True)
        w.now = failed.next_retry or w.now
    assert w.replica(claim_id, "h1").state is ReplicaState.FAILED
    assert w.model.claims[claim_id].state is ClaimState.FAILED


def test_deleting_releases_every_replica_through_its_hosts_agent_and_gives_the_counters_back(w):
    claim_id = w.create(hosts=("h1", "h2", "h3"))
    for h in ("h1", "h2", "h3"):
        w.place(claim_id, h)
    w.run(claim_id, "h1")
    [in_flight] = w.take("h2")  # h2's create is in flight; h3's was never attempted
    w.commit(claims.delete(w.model, ALICE, "cache", w.tick()))
    claim = w.model.claims[claim_id]
    assert claim.state is ClaimState.RELEASING
    assert w.replica(claim_id, "h3").state is ReplicaState.RELEASED, "no object was ever made there"
    assert w.model.hosts["h3"].counters_used() == {}
    assert w.replica(claim_id, "h1").state is ReplicaState.RELEASING
    [release] = w.take("h1")
    assert release.op.op_id == f"c{claim_id}.r1.release.1"
    w.report("h2", claim_id, in_flight.op.op_id, handle="n2", path="/x/h2")  # answers: then released too
    assert w.replica(claim_id, "h2").state is ReplicaState.RELEASING
    w.report("h1", claim_id, release.op.op_id)
    assert claim.state is ClaimState.RELEASING, "h2's release is still to run"
    w.run(claim_id, "h2")
    assert claim.state is ClaimState.RELEASED
    assert all(r.state is ReplicaState.RELEASED for r in claim.replicas)
    assert all(not h.counters_used() for h in w.model.hosts.values())
    assert "cache" not in [c.name for c in w.model.claims.values() if c.live]


def test_the_scheduler_s_hosts_get_new_replicas_and_only_as_many_as_asked(w):
    claim_id = w.create(replicas=2)
    claim = w.model.claims[claim_id]
    assert claim.replicas == [] and claim.replicas_to_place == 2 and claim.charged_bytes == 2 * GiB
    w.place(claim_id, "h2")
    w.place(claim_id, "h2")  # a second replica on one host: nothing
    w.place(claim_id, "h3")
    w.place(claim_id, "h1")  # a third: nothing
    assert [r.host for r in claim.replicas] == ["h2", "h3"] and claim.replicas_to_place == 0
    assert not w.model.hosts["h1"].counters_used()
    w.run(claim_id, "h3")
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h3"]


def test_a_restarted_node_agent_re_drives_a_replica_create_by_the_same_op_id(w):
    claim_id = w.create(hosts=("h1",))
    w.place(claim_id, "h1")
    [o] = w.take("h1")
    facts, w.epochs["h1"] = ops.lease(w.model, "node:h1", "h1 again", w.tick())
    w.commit(facts)
    [again] = w.take("h1")
    assert again.op.op_id == o.op.op_id and again.op.attempts == 2
    w.report("h1", claim_id, again.op.op_id, handle="n", path="/p")
    assert w.model.claims[claim_id].state is ClaimState.READY


def test_replicas_survive_a_snapshot_exactly(w):
    claim_id = w.create(hosts=("h1", "h2"))
    w.place(claim_id, "h1")
    w.run(claim_id, "h1")
    w.place(claim_id, "h2")
    w.take("h2")
    restored = State.from_snapshot(json.loads(w.model.snapshot_json()))
    assert restored.claims[claim_id] == w.model.claims[claim_id]
    assert restored.open_replica_ops == w.model.open_replica_ops == {claim_id}
    assert restored.to_snapshot() == w.model.to_snapshot()


def test_a_replica_transition_its_table_forbids_stops_the_fold(w):
    claim_id = w.create(hosts=("h1",))
    claim = w.model.claims[claim_id]
    with pytest.raises(ImpossibleTransition):
        claims.replicas.set_state(w.model, claim, claim.replicas[0], ReplicaState.READY, w.tick(), "skipping", "-")


def test_a_replicas_node_object_is_owned_while_it_exists_and_an_orphan_once_released(w):
    from xce.model.orphans import inventory
    claim_id = w.create(hosts=("h1", "h2"))
    w.place(claim_id, "h1")
    w.place(claim_id, "h2")
    w.run(claim_id, "h1")
    [in_flight] = w.take("h2")

    def listed(handle: str, op_id: str) -> list:
        return inventory(w.model, "scratch", "simfs", [{"handle": handle, "tags": {
            "xce.cluster": "k", "xce.claim": str(claim_id), "xce.op": op_id}}], w.tick())

    made = f"n{claim_id}-h1"
    assert listed(made, f"c{claim_id}.r1.create.1") == [], "READY on h1: owned"
    assert listed("half-made", in_flight.op.op_id) == [], "its create in flight on h2: owned"
    [seen] = listed("stray", f"c{claim_id}.r9.create.1")
    assert seen.handle == "stray" and seen.claim_id == claim_id
    w.commit(claims.delete(w.model, ALICE, "cache", w.tick()))
    [release] = w.take("h1")
    w.report("h1", claim_id, release.op.op_id)
    [gone] = listed(made, f"c{claim_id}.r1.create.1")
    assert gone.handle == made, "released: an object still listed is an orphan"


def test_a_populated_replica_is_ready_only_once_its_host_filled_it_and_one_that_cannot_be_is_failed(w):
    claim_id = w.create(hosts=("h1", "h2"), populate_from="https://example.org/weights/")
    claim = w.model.claims[claim_id]
    assert claim.populate_from == "https://example.org/weights/"
    w.place(claim_id, "h1")
    w.place(claim_id, "h2")
    w.run(claim_id, "h1")
    r1 = w.replica(claim_id, "h1")
    assert r1.state is ReplicaState.PREPARING and claim.state is ClaimState.PREPARING, "made, not filled yet"
    [populate] = w.take("h1")
    assert populate.op.op_id == f"c{claim_id}.r1.populate.1" and populate.runner == "node:h1"
    w.report("h1", claim_id, populate.op.op_id, message="1 file")
    assert r1.state is ReplicaState.READY and r1.handle == f"n{claim_id}-h1", "the create's handle kept"
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"]
    assert r1.history[-1]["reason"].startswith("populated from https://example.org/weights/ on attempt 1")
    w.run(claim_id, "h2")
    [o] = w.take("h2")
    w.report("h2", claim_id, o.op.op_id, ok=False, code="NOT_FOUND", message="no such object", retryable=False)
    r2 = w.replica(claim_id, "h2")
    assert r2.state is ReplicaState.FAILED and r2.last_error == "NOT_FOUND: no such object"
    assert "its data is incomplete" in r2.history[-1]["reason"]
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"], "h1 serves on"
    w.commit(claims.delete(w.model, ALICE, "cache", w.tick()))
    assert r2.state is ReplicaState.RELEASING, "its object exists: released by its host"


def test_warm_adds_a_replica_placed_and_made_like_the_first_and_refuses_a_host_that_holds_one(w):
    claim_id = w.create(hosts=("h1",))
    w.place(claim_id, "h1")
    w.run(claim_id, "h1")
    with pytest.raises(Conflict, match="has a replica on h1 already \\(READY\\)"):
        claims.warm(w.model, CONFIG, ALICE, "cache", ("h1",), w.tick())
    facts, _ = claims.warm(w.model, CONFIG, ALICE, "cache", ("h3",), w.tick())
    w.commit(facts)
    claim = w.model.claims[claim_id]
    assert claim.unplaced_hosts() == ["h3"] and claim.state is ClaimState.READY, "h1 serves while h3 is made"
    assert claim.charged_bytes == 2 * GiB
    w.place(claim_id, "h3")
    [o] = w.take("h3")
    assert o.op.op_id == f"c{claim_id}.r2.create.1"
    w.report("h3", claim_id, o.op.op_id, handle="n3", path="/x/h3")
    assert claim.ready_hosts() == ["h1", "h3"]


def test_evict_releases_one_replica_refused_while_attached_there_or_for_the_last(w):
    claim_id = w.create(hosts=("h1", "h2"))
    for h in ("h1", "h2"):
        w.place(claim_id, h)
        w.run(claim_id, h)
    facts, _ = claims.add_attachment(w.model, ALICE, "cache", "h1", "rw", w.tick(), job_id=7)
    w.commit(facts)
    with pytest.raises(Conflict, match="attached on h1 by job 7: its replica there is evicted once they are done"):
        claims.evict(w.model, ALICE, "cache", ("h1",), w.tick())
    with pytest.raises(Conflict, match="h1, h2 hold the last replica of claim 'cache': delete the claim instead"):
        claims.evict(w.model, ALICE, "cache", ("h1", "h2"), w.tick())
    facts, _ = claims.evict(w.model, ALICE, "cache", ("h2",), w.tick())
    w.commit(facts)
    claim = w.model.claims[claim_id]
    assert w.replica(claim_id, "h2").state is ReplicaState.RELEASING and claim.state is ClaimState.READY
    assert claim.ready_hosts() == ["h1"] and claim.charged_bytes == 2 * GiB, "charged until its object is gone"
    [release] = w.take("h2")
    w.report("h2", claim_id, release.op.op_id)
    assert w.replica(claim_id, "h2").state is ReplicaState.RELEASED and claim.charged_bytes == GiB
    assert not w.model.hosts["h2"].counters_used(), "its host's counter given back"
    with pytest.raises(Conflict, match="has no replica on h2"):
        claims.evict(w.model, ALICE, "cache", ("h2",), w.tick())
    w.commit(claims.warm(w.model, CONFIG, ALICE, "cache", ("h2",), w.tick())[0])
    assert [(r.no, r.host, r.state) for r in claim.replicas][-1] == (3, "h2", ReplicaState.PENDING), \
        "a new replica, its own op ids"


def test_a_replica_whose_op_is_in_flight_is_not_evicted_until_it_answered(w):
    claim_id = w.create(hosts=("h1", "h2"))
    w.place(claim_id, "h1")
    w.run(claim_id, "h1")
    w.place(claim_id, "h2")
    [o] = w.take("h2")
    with pytest.raises(Conflict, match="in the middle of its create"):
        claims.evict(w.model, ALICE, "cache", ("h2",), w.tick())
    w.report("h2", claim_id, o.op.op_id, ok=False, code="NO_SPACE", message="full", retryable=False)
    w.commit(claims.evict(w.model, ALICE, "cache", ("h2",), w.tick())[0])
    assert w.replica(claim_id, "h2").state is ReplicaState.RELEASED, "a FAILED create made nothing"


@pytest.mark.parametrize("spec,fragment", [
    (dict(cls="scratch", access="ROX"), "a cache is filled from its source: give --source"),
    (dict(cls="scratch", access="RWO", populate_from="https://example.org/w/"), "a cache is read-only"),
    (dict(cls="vol", access="ROX", populate_from="https://example.org/w/"), "--cache is for node-scope classes"),
])
def test_a_cache_is_node_scope_read_only_and_filled_from_a_source(model, spec, fragment):
    with pytest.raises(InvalidRequest, match=fragment):
        create(model, CONFIG, ALICE, ClaimSpec("c", spec["cls"], "1Gi", spec["access"], cache=True,
                                               populate_from=spec.get("populate_from")), 1.0)


def test_a_cache_is_ready_with_no_replica_and_stays_ready_when_its_last_is_evicted(w):
    facts, claim_id = create(w.model, CONFIG, ALICE, ClaimSpec("c", "scratch", "1Gi", "ROX", cache=True,
                                                               populate_from="https://example.org/w/"), w.tick())
    w.commit(facts)
    claim = w.model.claims[claim_id]
    assert claim.state is ClaimState.READY and claim.replicas == [] and claim.counter == "scratch"
    w.place(claim_id, "h2")  # (the applier's on-demand placement: a new replica of the cache)
    w.run(claim_id, "h2")
    [populate] = w.take("h2")
    w.report("h2", claim_id, populate.op.op_id)
    assert claim.ready_hosts() == ["h2"]
    w.commit(claims.evict(w.model, ALICE, "c", ("h2",), w.tick())[0])
    assert claim.state is ClaimState.READY, "a cache makes replicas where its jobs go"


def test_a_lost_hosts_replica_is_lost_until_it_is_back_and_its_create_re_driven_by_the_same_op_id(w):
    from xce.model.job_claims import host_lost
    claim_id = w.create(hosts=("h1", "h2"), populate_from="https://example.org/w/")
    for h in ("h1", "h2"):
        w.place(claim_id, h)
        w.run(claim_id, h)
        [populate] = w.take(h)
        w.report(h, claim_id, populate.op.op_id)
    claim = w.model.claims[claim_id]
    made = [o["op_id"] for o in claim.ops if o["host"] == "h2" and o["op"] == "create"][0]
    w.commit(host_lost(w.model, "h2", w.tick()))
    assert w.replica(claim_id, "h2").state is ReplicaState.LOST
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"], "h1 serves; h2 is used by no job"
    w.commit(host_lost(w.model, "h1", w.tick()))
    assert claim.state is ClaimState.READY and claim.ready_hosts() == [], "both lost: READY, waiting for them"
    w.commit([HostRegistered(time=w.tick(), name="h2", slots=4, counters={"scratch": 10.0 * GiB})])
    r2 = w.replica(claim_id, "h2")
    assert r2.state is ReplicaState.PREPARING and r2.op.op_id == made, "the provider finds the same object by it"
    facts, w.epochs["h2"] = ops.lease(w.model, "node:h2", "h2 back", w.tick())
    w.commit(facts)
    w.run(claim_id, "h2")
    [again] = w.take("h2")
    assert again.op.op_id == f"c{claim_id}.r2.populate.2", "refilled: rclone copies only what is missing"
    w.report("h2", claim_id, again.op.op_id)
    assert r2.state is ReplicaState.READY and claim.ready_hosts() == ["h2"]
    assert w.replica(claim_id, "h1").state is ReplicaState.LOST, "h1 is not back"
    w.commit(claims.delete(w.model, ALICE, "cache", w.tick()))
    assert w.replica(claim_id, "h1").state is ReplicaState.RELEASING, "released by h1's worker once it is back"


def test_a_replica_source_may_be_a_ready_shared_claim_of_the_project_which_stays_while_it_is_read(w):
    from xce.model.facts import ClaimPlaced
    facts, shared_id = create(w.model, CONFIG, ALICE, ClaimSpec("corpus", "vol", "1Gi", "RWX"), w.tick())
    w.commit(facts)
    with pytest.raises(Conflict, match="claim 'corpus' is PENDING: only a READY claim is copied"):
        w.create("copy", hosts=("h1",), populate_from="claim:corpus")
    w.commit([ClaimPlaced(time=w.tick(), claim_id=shared_id, pool="p")])
    facts, epoch = ops.lease(w.model, claims.SHARED_AGENT, "p", w.tick())
    w.commit(facts)
    facts, work = agents.take(w.model, claims.SHARED_AGENT, epoch, 10, w.now, 300.0)
    w.commit(facts)
    done = agents.report(w.model, RETRIES, claims.SHARED_AGENT, epoch,
                         [OpResult(work.claim_ops[0].op.op_id, shared_id, True, handle="v", path="/shared/v")], [],
                         w.tick(), random.Random(1))
    w.commit(done.facts)
    with pytest.raises(InvalidRequest, match="a shared claim is copied by a clone"):
        create(w.model, CONFIG, ALICE, ClaimSpec("c2", "vol", "1Gi", "RWX", populate_from="claim:corpus"), w.tick())
    claim_id = w.create("copy", hosts=("h1",), populate_from="claim:corpus")
    assert w.model.claims[claim_id].populate_from == "claim:corpus"
    with pytest.raises(Conflict, match="'corpus' is the source of node-local claim\\(s\\) copy"):
        claims.delete(w.model, ALICE, "corpus", w.tick())


def _objects(claim_id: int, *handles: str) -> list[dict]:
    return [{"handle": h, "tags": {"xce.cluster": "k", "xce.claim": str(claim_id), "xce.op": f"c{claim_id}.r1.create.1"}}
            for h in handles]


def test_a_hosts_listing_finds_its_node_orphans_which_only_its_agent_releases_after_the_grace(w):
    claim_id = w.create(hosts=("h1",))
    w.place(claim_id, "h1")
    w.run(claim_id, "h1")
    made = f"n{claim_id}-h1"
    stray = {"handle": "n99-stray", "tags": {"xce.cluster": "k", "xce.claim": "99", "xce.op": "c99.r1.create.1"}}
    facts = w.commit(agents.inventory(w.model, "node:h1", w.epochs["h1"], "scratch", "simfs",
                                      [*_objects(claim_id, made), stray], w.tick()))
    assert [(f.handle, f.host) for f in facts] == [("n99-stray", "h1")], "the replica's object is owned"
    orphan = w.model.orphans["n99-stray"]
    assert orphan.host == "h1" and orphan.claim_id == 99
    assert agents.work(w.model, "node:h1", w.now, 10, 300.0).orphans == [], "not before the grace"
    later = w.now + 301
    assert agents.work(w.model, "shared", later, 10, 300.0).orphans == [], "not the provisioner's"
    assert agents.work(w.model, "node:h2", later, 10, 300.0).orphans == [], "not another host's"
    assert [o.handle for o in agents.work(w.model, "node:h1", later, 10, 300.0).orphans] == ["n99-stray"]
    assert agents.has_work(w.model, "node:h1", later, 300.0)
    # another host's listing, or the provisioner's, does not say it is gone
    assert agents.inventory(w.model, "node:h2", w.epochs["h2"], "scratch", "simfs", [], w.tick()) == []
    assert agents.report(w.model, RETRIES, "node:h2", w.epochs["h2"], [], ["n99-stray"], later,
                         random.Random(1)).facts == [], "only its host's agent says it released it"
    done = agents.report(w.model, RETRIES, "node:h1", w.epochs["h1"], [], ["n99-stray"], later, random.Random(1))
    w.commit(done.facts)
    assert "n99-stray" not in w.model.orphans
    assert w.replica(claim_id, "h1").state is ReplicaState.READY, "never touched"


def test_an_object_whose_create_is_in_flight_is_not_an_orphan(w):
    claim_id = w.create(hosts=("h1",))
    w.place(claim_id, "h1")
    [o] = w.take("h1")  # its intent committed: the provider may be making it now
    assert agents.inventory(w.model, "node:h1", w.epochs["h1"], "scratch", "simfs",
                            _objects(claim_id, "half-made"), w.tick()) == []


def _ready(w, claim_id: int, *hosts: str) -> None:
    for h in hosts:
        w.place(claim_id, h)
        w.run(claim_id, h)
        if w.model.claims[claim_id].populate_from is not None:
            [populate] = w.take(h)
            w.report(h, claim_id, populate.op.op_id)


def test_a_ready_replica_whose_object_is_not_listed_is_failed_its_data_lost_and_the_others_serve(w):
    claim_id = w.create(hosts=("h1", "h2"))
    _ready(w, claim_id, "h1", "h2")
    claim = w.model.claims[claim_id]
    w.commit(agents.inventory(w.model, "node:h2", w.epochs["h2"], "scratch", "simfs", [], w.tick()))
    r2 = w.replica(claim_id, "h2")
    assert r2.state is ReplicaState.FAILED and r2.last_error == "object gone from h2: its data is lost"
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"]
    assert not r2.data_exists, "nothing to release"
    # its object listed again (a storage root that listed empty while its disk was not mounted): kept for
    # the claim, never an orphan to release
    assert w.commit(agents.inventory(w.model, "node:h2", w.epochs["h2"], "scratch", "simfs",
                                     _objects(claim_id, f"n{claim_id}-h2"), w.tick())) == []
    assert not w.model.orphans
    assert w.commit(agents.inventory(w.model, "node:h1", w.epochs["h1"], "scratch", "simfs",
                                     _objects(claim_id, f"n{claim_id}-h1"), w.tick())) == [], "listed: kept"


def test_a_populated_ready_replica_whose_object_is_not_listed_is_made_and_filled_again(w):
    claim_id = w.create(hosts=("h1",), populate_from="https://example.org/w/")
    _ready(w, claim_id, "h1")
    w.commit(agents.inventory(w.model, "node:h1", w.epochs["h1"], "scratch", "simfs", [], w.tick()))
    r1 = w.replica(claim_id, "h1")
    assert r1.state is ReplicaState.PREPARING and r1.op.op_id == f"c{claim_id}.r1.create.1"
    w.run(claim_id, "h1")
    [populate] = w.take("h1")
    w.report("h1", claim_id, populate.op.op_id)
    assert r1.state is ReplicaState.READY


def test_a_lost_hosts_replica_with_no_source_must_find_its_object_and_is_failed_if_it_is_gone(w):
    from xce.model.job_claims import host_lost
    claim_id = w.create(hosts=("h1", "h2"))
    _ready(w, claim_id, "h1", "h2")
    claim = w.model.claims[claim_id]
    w.commit(host_lost(w.model, "h2", w.tick()))
    w.commit([HostRegistered(time=w.tick(), name="h2", slots=4, counters={"scratch": 10.0 * GiB})])
    r2 = w.replica(claim_id, "h2")
    [check] = w.take("h2")
    assert claims.replicas.must_exist(claim, r2, check.op) == f"n{claim_id}-h2", "checked, not made anew"
    w.report("h2", claim_id, check.op.op_id, ok=False, code="DATA_LOST", retryable=False,
             message=f"object n{claim_id}-h2 is gone from h2: its data is lost")
    assert r2.state is ReplicaState.FAILED and r2.last_error == "object gone while h2 was lost: its data is lost"
    assert r2.history[-1]["reason"] == r2.last_error
    assert claim.state is ClaimState.READY and claim.ready_hosts() == ["h1"], "h1 serves on"


def test_a_populated_lost_replica_is_made_again_rather_than_checked(w):
    from xce.model.job_claims import host_lost
    claim_id = w.create(hosts=("h1",), populate_from="https://example.org/w/")
    _ready(w, claim_id, "h1")
    w.commit(host_lost(w.model, "h1", w.tick()))
    w.commit([HostRegistered(time=w.tick(), name="h1", slots=4, counters={"scratch": 10.0 * GiB})])
    [redo] = w.take("h1")
    assert claims.replicas.must_exist(w.model.claims[claim_id], w.replica(claim_id, "h1"), redo.op) is None


QUOTA = parse_config(CONFIG_TEXT + '[[quotas]]\nproject = "a"\nclaim_class = "scratch"\nmax_bytes = "3Gi"\n')


def test_a_cache_is_charged_its_size_once_per_replica_its_first_from_its_creation(w):
    facts, claim_id = create(w.model, QUOTA, ALICE, ClaimSpec("c", "scratch", "1Gi", "ROX", cache=True,
                                                               populate_from="https://example.org/w/"), w.tick())
    w.commit(facts)
    assert claims.quota_left(w.model, QUOTA, "a", "scratch") == (2 * GiB, "quota of project a, class scratch: at "
                                                                          "most 3Gi, 1Gi in use")
    w.commit(claims.warm(w.model, QUOTA, ALICE, "c", ("h1", "h2"), w.tick())[0])  # the first is paid for
    assert claims.quota_left(w.model, QUOTA, "a", "scratch")[0] == GiB
    with pytest.raises(Conflict, match="quota exceeded for project a, class scratch: at most 3Gi, 2Gi in use, "
                                       "2Gi asked"):
        claims.warm(w.model, QUOTA, ALICE, "c", ("h3", "h4"), w.tick())
    w.commit(claims.warm(w.model, QUOTA, ALICE, "c", ("h3",), w.tick())[0])
    assert claims.quota_left(w.model, QUOTA, "a", "scratch")[0] == 0
