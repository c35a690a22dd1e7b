"""The plan applier (``xce.controller.applier``) on plain data: a model folded from facts, a ``Plan`` built by hand.

The scheduler plans on a snapshot; by the time its plan is applied the model
may have moved on.  Each test makes the model move between "snapshot" and
apply, and checks that exactly the decisions that still hold are committed.
"""

from __future__ import annotations

import random

import pytest

from xce.controller.applier import ApplyResult, apply_plan
from xce.config import parse_config
from xce.model import Model
from xce.model import claims
from xce.model.facts import (
    ClaimCreated, ClaimDeleteRequested, ClaimPlaced, ClaimResizeReserved, HostRegistered, HostStateChanged,
    JobAllocated, JobFinished, ProjectDefined, QueueDefined, ReplicaEvicted,
)
from xce.model import agents, job_claims, jobs
from xce.model.claims import ClaimState
from xce.model.identity import Role, User
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import Job, JobSpec, JobState
from xce.scheduler.plan import Allocation, Eviction, Placement, Plan, ReplicaPlacement

GiB = 2**30
CONFIG_TEXT = """
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
[[resources]]
name = "license"
scope = "cluster"
amount = 1
[[pools]]
name = "p"
capacity = "10Gi"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
[[claim_classes]]
name = "cached"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["ROX"]
[[apps]]
name = "small"
claims = [{ name = "kv-cache", claim_class = "vol", size = "1Gi" }]
[[apps]]
name = "big"
claims = [{ name = "kv-cache", claim_class = "vol", size = "6Gi" }]
"""
CONFIG = parse_config(CONFIG_TEXT)
ADMIN = User(name="admin", role=Role.ADMIN, projects=["default"])


class World:
    def __init__(self) -> None:
        self.model = Model(cluster_id="k")
        self.now = 100.0
        self.commit([ProjectDefined(time=0, name="default"), QueueDefined(time=0, name="default", priority=30),
                     HostRegistered(time=0, name="h1", slots=4, counters={"mem": 8.0 * GiB, "scratch": 50.0 * GiB}),
                     HostRegistered(time=0, name="h2", slots=4, counters={"mem": 8.0 * GiB, "scratch": 50.0 * GiB})])

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def commit(self, facts):
        for f in facts:
            self.model.apply(self.model.position + 1, f)
        return facts

    def submit(self, rerunnable: bool = False, **claims) -> Job:
        facts, job_id = job_claims.submit(self.model, ADMIN, JobSpec(command=["run"], rerunnable=rerunnable),
                                          JobClaimsSpec(**claims), self.tick(), CONFIG)
        self.commit(facts)
        return self.model.jobs[job_id]

    def standalone(self, name: str, size: str = "1Gi", ready: bool = True) -> claims.Claim:
        facts, claim_id = claims.create(self.model, CONFIG, ADMIN,
                                        claims.ClaimSpec(name=name, class_name="vol", size=size, access_mode="RWX"),
                                        self.tick())
        self.commit(facts)
        if ready:
            epoch = self.commit(claims.lease(self.model, claims.SHARED_AGENT, "t", self.tick())[0])[0].epoch
            self.commit([ClaimPlaced(time=self.tick(), claim_id=claim_id, pool="p")])
            op_id = self.model.claims[claim_id].op.op_id
            self.commit(claims.record_intent(self.model, claims.SHARED_AGENT, epoch, op_id, claim_id, self.tick()))
            self.commit(claims.record_result(self.model, CONFIG.claims, claims.SHARED_AGENT, epoch,
                                             claims.OpResult(op_id=op_id, claim_id=claim_id, ok=True,
                                                             handle="h"), self.tick()))
            assert self.model.claims[claim_id].state is ClaimState.READY
        return self.model.claims[claim_id]

    def apply(self, *decisions: Allocation | Placement) -> ApplyResult:
        """Apply a plan of these decisions and commit what the applier returns."""
        plan = Plan(position=self.model.position,
                    allocations=tuple(d for d in decisions if isinstance(d, Allocation)),
                    placements=tuple(d for d in decisions if isinstance(d, Placement)))
        outcome = apply_plan(self.model, plan, self.tick(), CONFIG)
        self.facts = outcome.facts
        self.commit(outcome.facts)
        return outcome.result


def on(job: Job, host: str = "h1", slots: int = 1, mem: float = 0.0, license: float = 0.0,
       pools: dict[str, str] | None = None) -> Allocation:
    """The scheduler's decision for ``job``'s next run (made on the model as it is now)."""
    return Allocation(job_id=job.id, run=job.run, hosts=(host,), slots={host: slots},
                      counters={host: {"mem": mem}} if mem else {}, cluster={"license": license} if license else {},
                      pools=pools or {})


@pytest.fixture
def w() -> World:
    return World()


def test_accepted_decisions_allocate_the_next_run_and_make_template_claims_with_fresh_distinct_ids(w):
    data = w.standalone("data")
    a = w.submit(app="small", claims=("data",))
    b = w.submit(app="small", scratch="1Gi", claims=("data",))
    first_claim, first_attachment = w.model.next_claim_id, w.model.next_attachment_id
    result = w.apply(on(a, pools={"kv-cache": "p"}), on(b, "h2", pools={"kv-cache": "p"}))
    assert result.accepted == [a.id, b.id] and result.rejected == {}
    kinds = [(type(f).__name__, getattr(f, "job_id", None), getattr(f, "claim_id", None)) for f in w.facts]
    assert kinds == [("JobAllocated", a.id, None), ("ClaimCreated", a.id, first_claim),
                     ("JobAllocated", b.id, None), ("ClaimCreated", b.id, first_claim + 1),
                     ("ClaimCreated", b.id, first_claim + 2)], "each run's template claims follow its JobAllocated"
    allocated = {f.job_id: f for f in w.facts if isinstance(f, JobAllocated)}
    assert allocated[a.id].run == allocated[b.id].run == 1
    assert allocated[a.id].attachments == [{"attachment_id": first_attachment, "claim_id": data.id, "host": "h1",
                                            "mode": "rw"}]
    assert allocated[b.id].attachments == [{"attachment_id": first_attachment + 1, "claim_id": data.id, "host": "h2",
                                            "mode": "rw"}]
    assert sorted(x.id for x in data.attachments) == [first_attachment, first_attachment + 1]
    assert [c.name for c in job_claims.run_claims(w.model, a)] == [f"j{a.id}.1:kv-cache"]
    assert [(c.id, c.kind, c.pool, c.host) for c in job_claims.run_claims(w.model, b)] == [
        (first_claim + 1, "scratch", None, "h2"), (first_claim + 2, "kv-cache", "p", None)]
    assert a.state is JobState.PEND and a.allocated and a.hosts == ["h1"] and b.hosts == ["h2"]
    assert w.model.next_claim_id == first_claim + 3
    # the next plan's claims never reuse an id
    c = w.submit(app="small")
    w.apply(on(c, pools={"kv-cache": "p"}))
    assert [f.claim_id for f in w.facts if isinstance(f, ClaimCreated)] == [first_claim + 3]


def test_a_requeued_job_is_allocated_its_next_run(w):
    job = w.submit(rerunnable=True)
    w.apply(on(job))
    w.commit(jobs.kill(w.model, ADMIN, job.id, w.tick(), requeue=True))
    assert job.run == 1 and not job.allocated
    result = w.apply(on(job))
    assert result.accepted == [job.id] and job.run == 2


def test_a_decision_for_a_job_that_changed_since_the_snapshot_is_rejected(w):
    killed, held, allocated, requeued, fine = (w.submit(rerunnable=True) for _ in range(5))
    stale = [on(j) for j in (killed, held, allocated, requeued, fine)]  # the plan, made on the snapshot
    stale.append(Allocation(job_id=99, run=0, hosts=("h1",), slots={"h1": 1}, counters={}))
    # ... and meanwhile:
    w.commit(jobs.kill(w.model, ADMIN, killed.id, w.tick()))
    w.commit(jobs.hold(w.model, ADMIN, held.id, w.tick()))
    w.apply(on(allocated, "h2"))
    w.apply(on(requeued, "h2"))
    w.commit(jobs.kill(w.model, ADMIN, requeued.id, w.tick(), requeue=True))  # PEND again, but its run is 1 now
    result = w.apply(*stale)
    stale_ids = (killed.id, held.id, allocated.id, requeued.id, 99)
    assert result.rejected == {j: "job changed since the scheduler's view" for j in stale_ids}
    assert result.accepted == [fine.id]
    assert [f.job_id for f in w.facts] == [fine.id]
    assert (killed.state, held.state, allocated.hosts, requeued.allocated) == (JobState.EXIT, JobState.PSUSP,
                                                                               ["h2"], False)


def test_a_host_that_lost_its_free_slots_meanwhile_rejects_that_decision_only(w):
    a, b, taker = w.submit(), w.submit(), w.submit()
    plan = [on(a, "h1", slots=2), on(b, "h2", slots=2)]
    w.apply(on(taker, "h1", slots=3))  # meanwhile
    result = w.apply(*plan)
    assert result.rejected == {a.id: "host h1 has no longer 2 free slots"}
    assert result.accepted == [b.id] and b.allocated and not a.allocated and a.id in w.model.pending_jobs


def test_a_host_that_lost_its_counters_meanwhile_rejects_that_decision_only(w):
    a, b, taker = w.submit(), w.submit(), w.submit()
    plan = [on(a, "h1", mem=4 * GiB), on(b, "h2", mem=4 * GiB)]
    w.apply(on(taker, "h1", mem=6 * GiB))
    result = w.apply(*plan)
    assert result.rejected == {a.id: f"host h1 has no longer {4 * GiB:g} mem free"}
    assert result.accepted == [b.id]


def test_a_host_that_went_away_rejects_the_decisions_on_it(w):
    a, b = w.submit(), w.submit()
    w.commit([HostStateChanged(time=w.tick(), name="h1", state="UNAVAIL", reason="no heartbeat")])
    result = w.apply(on(a, "h1"), on(b, "nowhere"))
    assert result.rejected == {a.id: "host h1 is not available", b.id: "host nowhere is not available"}
    assert w.facts == []


def test_two_decisions_competing_for_the_same_slots_or_counters_only_the_first_wins(w):
    a, b, c, d = (w.submit() for _ in range(4))
    result = w.apply(on(a, "h1", slots=3), on(b, "h1", slots=2), on(c, "h2", mem=5 * GiB), on(d, "h2", mem=5 * GiB))
    assert result.accepted == [a.id, c.id]
    assert result.rejected == {b.id: "host h1 has no longer 2 free slots",
                               d.id: f"host h2 has no longer {5 * GiB:g} mem free"}
    assert w.model.hosts["h1"].slots_used == 3 and w.model.hosts["h2"].counters_used() == {"mem": 5.0 * GiB}


def test_cluster_counters_are_rechecked_against_holders_and_the_plan_itself(w):
    a, b, c = w.submit(), w.submit(), w.submit()
    result = w.apply(on(a, license=1), on(b, "h2", license=1))
    assert result.accepted == [a.id] and result.rejected == {b.id: "cluster resource license has no longer 1 free"}
    assert w.apply(on(c, "h2", license=1)).rejected == {c.id: "cluster resource license has no longer 1 free"}
    w.commit(jobs.kill(w.model, ADMIN, a.id, w.tick()))  # a releases the license
    assert w.apply(on(c, "h2", license=1)).accepted == [c.id]


def test_pool_capacity_is_rechecked_for_a_runs_shared_template_claims(w):
    a, b, c = (w.submit(app="big") for _ in range(3))  # 6Gi each in pool p of 10Gi
    result = w.apply(on(a, pools={"kv-cache": "p"}), on(b, pools={"kv-cache": "p"}))
    assert result.accepted == [a.id]
    assert result.rejected == {b.id: "pool p no longer has room for its kv-cache claim"}
    assert w.apply(on(c, pools={"kv-cache": "gone"})).rejected == {c.id: "pool gone no longer has room for its "
                                                                         "kv-cache claim"}
    w.commit(jobs.kill(w.model, ADMIN, a.id, w.tick()))  # its claim goes (never created: nothing to release)
    blocker = w.standalone("blocker", size="5Gi")  # ... and a standalone claim takes room meanwhile
    assert blocker.pool == "p"
    assert w.apply(on(b, pools={"kv-cache": "p"})).rejected == {b.id: "pool p no longer has room for its "
                                                                      "kv-cache claim"}


def test_a_standalone_claim_reference_that_became_unusable_rejects_the_decision(w):
    data, ckpt = w.standalone("data"), w.standalone("ckpt")
    a, b, fine = w.submit(claims=("data",)), w.submit(claims=("ckpt",)), w.submit()
    plan = [on(a), on(b), on(fine)]
    w.commit(claims.delete(w.model, ADMIN, "data", w.tick()))  # RELEASING, being deleted
    w.commit([ClaimDeleteRequested(time=w.tick(), claim_id=ckpt.id, by="admin")])
    epoch = w.commit(claims.lease(w.model, claims.SHARED_AGENT, "t", w.tick())[0])[0].epoch
    op_id = ckpt.op.op_id  # the provisioner releases ckpt
    w.commit(claims.record_intent(w.model, claims.SHARED_AGENT, epoch, op_id, ckpt.id, w.tick()))
    w.commit(claims.record_result(w.model, CONFIG.claims, claims.SHARED_AGENT, epoch,
                                  claims.OpResult(op_id=op_id, claim_id=ckpt.id, ok=True), w.tick()))
    assert (data.state, ckpt.state) == (ClaimState.RELEASING, ClaimState.RELEASED)
    result = w.apply(*plan)
    assert result.rejected == {a.id: "claim data is being deleted", b.id: "claim ckpt is being deleted"}
    assert result.accepted == [fine.id]
    assert data.attachments == [] and ckpt.attachments == []


def test_claim_placements_are_rechecked_against_pool_capacity(w):
    one, two, gone, odd = (w.standalone(n, size="6Gi", ready=False) for n in ("one", "two", "gone", "odd"))
    w.commit(claims.delete(w.model, ADMIN, "gone", w.tick()))  # deleted before it was placed: RELEASED
    result = w.apply(Placement(one.id, "p", one.size_bytes), Placement(two.id, "p", two.size_bytes),
                     Placement(gone.id, "p", gone.size_bytes), Placement(odd.id, "nowhere", odd.size_bytes))
    assert result.claims_placed == [one.id]
    assert result.claims_rejected == {two.id: "pool p no longer has room",
                                      gone.id: "claim changed since the scheduler's view",
                                      odd.id: "pool nowhere is no longer configured"}
    assert [(type(f), f.claim_id, f.pool) for f in w.facts] == [(ClaimPlaced, one.id, "p")]
    assert one.placed and one.pool == "p" and one.op.kind is claims.OpKind.CREATE and not two.placed
    assert w.apply(Placement(one.id, "p", one.size_bytes)).claims_rejected == {
        one.id: "claim changed since the scheduler's view"}, "placed already"


def test_a_placement_sees_the_pool_room_the_same_plans_allocations_took(w):
    job = w.submit(app="big")  # its kv-cache claim: 6Gi in pool p (10Gi)
    claim = w.standalone("vol", size="6Gi", ready=False)
    result = w.apply(on(job, pools={"kv-cache": "p"}), Placement(claim.id, "p", claim.size_bytes))
    assert result.accepted == [job.id]
    assert result.claims_rejected == {claim.id: "pool p no longer has room"}, "12Gi never go into a 10Gi pool"
    assert not claim.placed


def grant_expand(w: World, online: bool = True) -> None:
    from xce.model import capabilities

    w.commit(capabilities.report(w.model, CONFIG, claims.SHARED_AGENT, claims.SHARED_AGENT, "vol", "simfs",
                                 {"expand": True, "online_expand": online}, w.tick()))


def test_a_resize_that_fits_is_reserved_and_opens_its_expand_op_one_that_does_not_stays_requested(w):
    from xce.model.pools import pool_use
    from xce.scheduler.plan import Reservation

    grant_expand(w)
    small, big = w.standalone("small", size="2Gi"), w.standalone("big", size="4Gi")
    w.commit(claims.resize(w.model, CONFIG, ADMIN, "small", "5Gi", w.tick())[0])
    w.commit(claims.resize(w.model, CONFIG, ADMIN, "big", "8Gi", w.tick())[0])
    assert pool_use(w.model) == {"p": 6 * GiB}, "asked is not reserved"
    plan = Plan(position=w.model.position, resizes=(Reservation(small.id, "p", 5 * GiB, 3 * GiB),
                                                    Reservation(big.id, "p", 8 * GiB, 4 * GiB)))
    outcome = apply_plan(w.model, plan, w.tick(), CONFIG)
    w.commit(outcome.facts)
    assert outcome.result.resizes_reserved == [small.id]
    assert outcome.result.resizes_rejected == {big.id: "pool p no longer has room"}, "9Gi + 4Gi > 10Gi"
    assert [type(f) for f in outcome.facts] == [ClaimResizeReserved]
    assert small.resize.state is claims.ResizeState.EXPANDING and small.op.kind is claims.OpKind.EXPAND
    assert big.resize.state is claims.ResizeState.REQUESTED and big.op is None
    assert pool_use(w.model) == {"p": 9 * GiB} and small.size_bytes == 2 * GiB, "reserved, not yet grown"
    again = apply_plan(w.model, plan, w.tick(), CONFIG).result
    assert again.resizes_rejected[small.id] == "resize changed since the scheduler's view"


def test_the_snapshot_offers_requested_resizes_with_their_growth_and_the_observed_pool_room(w):
    from xce.controller.observed import Observed
    from xce.controller.view import build_view

    grant_expand(w)
    claim = w.standalone("vol", size="2Gi")
    w.commit(claims.resize(w.model, CONFIG, ADMIN, "vol", "3Gi", w.tick())[0])
    snap = build_view(w.model, CONFIG)
    assert [(r.claim_id, r.pool, r.size, r.grow) for r in snap.pending_resizes] == [(claim.id, "p", 3 * GiB, GiB)]
    assert [(p.name, p.capacity, p.free) for p in snap.pools] == [("p", 10 * GiB, 8 * GiB)]
    seen = Observed()
    seen.report_capacity("vol", 6 * GiB, 3 * GiB, w.now)  # the backend is smaller than the config says
    assert [(p.capacity, p.free) for p in build_view(w.model, CONFIG, seen).pools] == [(6 * GiB, 3 * GiB)]
    seen.report_capacity("vol", None, None, w.now)  # no reading: the configured capacity again
    assert [(p.capacity, p.free) for p in build_view(w.model, CONFIG, seen).pools] == [(10 * GiB, 8 * GiB)]
    seen.report_capacity("vol", 20 * GiB, None, w.now)  # the config is the cap
    assert [(p.capacity, p.free) for p in build_view(w.model, CONFIG, seen).pools] == [(10 * GiB, 8 * GiB)]


# ---------------------------------------------------------------- node-local claims' replicas


def replicated(w: World, name: str = "cache", hosts: tuple[str, ...] = (), replicas: int | None = None) -> claims.Claim:
    spec = claims.ClaimSpec(name=name, class_name="scratch", size="10Gi", access_mode="RWO", hosts=hosts,
                            replicas=replicas)
    facts, claim_id = claims.create(w.model, CONFIG, ADMIN, spec, w.tick())
    w.commit(facts)
    return w.model.claims[claim_id]


def apply_replicas(w: World, *placements: ReplicaPlacement, allocations: tuple[Allocation, ...] = ()) -> ApplyResult:
    outcome = apply_plan(w.model, Plan(position=w.model.position, allocations=allocations, replicas=placements),
                         w.tick(), CONFIG)
    w.facts = outcome.facts
    w.commit(outcome.facts)
    return outcome.result


def make_ready(w: World, claim: claims.Claim, host: str) -> None:
    epoch = w.commit(claims.lease(w.model, claims.node_agent(host), host, w.tick())[0])[0].epoch
    facts, work = agents.take(w.model, claims.node_agent(host), epoch, 10, w.now, 300.0)
    w.commit(facts)
    [op] = [o for o in work.replica_ops if o.owner.id == claim.id]
    w.commit(agents.report(w.model, CONFIG.claims, claims.node_agent(host), epoch,
                           [claims.OpResult(op.op.op_id, claim.id, True, handle=f"n-{host}", path=f"/n/{host}")], [],
                           w.tick(), random.Random(1)).facts)


def test_replica_placements_are_rechecked_against_the_hosts_counters_and_the_plans_allocations(w):
    cache = replicated(w, hosts=("h1", "h2"))
    job = w.submit(scratch="45Gi")
    result = apply_replicas(w, ReplicaPlacement(cache.id, "h1", "scratch", 10 * GiB),
                            ReplicaPlacement(cache.id, "h2", "scratch", 10 * GiB),
                            allocations=(Allocation(job_id=job.id, run=job.run, hosts=("h2",), slots={"h2": 1},
                                                    counters={"h2": {"scratch": 45.0 * GiB}}),))
    assert result.accepted == [job.id]
    assert result.claims_placed == [cache.id]
    assert result.claims_rejected == {cache.id: f"host h2 has no longer {10 * GiB} bytes of scratch free"}
    assert [(r.host, r.placed) for r in cache.replicas] == [("h1", True), ("h2", False)]
    assert w.model.hosts["h1"].counters_used() == {"scratch": 10.0 * GiB}


def test_chosen_hosts_are_rechecked_no_more_than_asked_and_none_twice(w):
    cache = replicated(w, replicas=1)
    result = apply_replicas(w, ReplicaPlacement(cache.id, "h1", "scratch", 10 * GiB),
                            ReplicaPlacement(cache.id, "h2", "scratch", 10 * GiB))
    assert result.claims_placed == [cache.id] and cache.id in result.claims_rejected
    assert [r.host for r in cache.replicas] == ["h1"] and cache.replicas_to_place == 0
    w.commit(claims.delete(w.model, ADMIN, "cache", w.tick()))
    result = apply_replicas(w, ReplicaPlacement(cache.id, "h2", "scratch", 10 * GiB))
    assert result.claims_rejected == {cache.id: "claim changed since the scheduler's view"}


def test_a_job_using_a_node_local_claim_is_allocated_only_where_a_replica_is_ready(w):
    cache = replicated(w, hosts=("h1", "h2"))
    apply_replicas(w, ReplicaPlacement(cache.id, "h1", "scratch", 10 * GiB),
                   ReplicaPlacement(cache.id, "h2", "scratch", 10 * GiB))
    make_ready(w, cache, "h1")
    a, b = w.submit(claims=("cache",)), w.submit(claims=("cache",))
    result = w.apply(on(a, "h2"), on(b, "h1"))
    assert result.rejected == {a.id: "claim cache has no READY replica on h2 (READY on h1)"}
    assert result.accepted == [b.id]
    [attachment] = cache.attachments
    assert (attachment.host, attachment.state.value, attachment.path, attachment.op) == ("h1", "ATTACHED", "/n/h1",
                                                                                        None), \
        "its data is on the host already: nothing for a provider to attach"


def cached(w: World, name: str, size: str = "30Gi") -> claims.Claim:
    spec = claims.ClaimSpec(name=name, class_name="cached", size=size, access_mode="ROX", cache=True,
                            populate_from="https://example.org/weights/")
    facts, claim_id = claims.create(w.model, CONFIG, ADMIN, spec, w.tick())
    w.commit(facts)
    return w.model.claims[claim_id]


def test_a_cache_s_replica_on_demand_evicts_an_unused_one_and_never_one_a_job_of_the_plan_attaches(w):
    old, new = cached(w, "old"), cached(w, "new")
    assert old.state is ClaimState.READY and not old.replicas, "a cache serves by making replicas where jobs go"
    apply_replicas(w, ReplicaPlacement(old.id, "h1", "scratch", 30 * GiB, on_demand=True),
                   ReplicaPlacement(old.id, "h2", "scratch", 30 * GiB, on_demand=True))
    for h in ("h1", "h2"):
        make_ready(w, old, h)
    assert [r.state.value for r in old.replicas] == ["PREPARING", "PREPARING"], "READY once filled"
    for h in ("h1", "h2"):
        agent = claims.node_agent(h)
        facts, work = agents.take(w.model, agent, w.model.agent_epochs[agent], 10, w.now, 300.0)
        w.commit(facts)
        [populate] = work.replica_ops
        assert populate.op.kind is claims.OpKind.POPULATE
        w.commit(agents.report(w.model, CONFIG.claims, agent, w.model.agent_epochs[agent],
                               [claims.OpResult(populate.op.op_id, old.id, True)], [], w.tick(),
                               random.Random(1)).facts)
    assert old.ready_hosts() == ["h1", "h2"]
    job = w.submit(claims=("old",))
    result = apply_replicas(w, ReplicaPlacement(new.id, "h1", "scratch", 30 * GiB, on_demand=True, evict=(old.id,)),
                            ReplicaPlacement(new.id, "h2", "scratch", 30 * GiB, on_demand=True, evict=(old.id,)),
                            allocations=(on(job, "h2"),))
    assert result.accepted == [job.id]
    assert result.claims_rejected == {new.id: "claim old's replica on h2 is in use now"}, "the plan's job attaches it"
    assert old.replica_on("h1").state is claims.ReplicaState.RELEASING and old.state is ClaimState.READY
    assert [(r.host, r.placed) for r in new.replicas] == [("h1", True)]
    assert w.model.hosts["h1"].counters_used() == {"scratch": 30.0 * GiB}, "the evicted one's bytes went to new's"
    result = apply_replicas(w, ReplicaPlacement(new.id, "h1", "scratch", 30 * GiB, on_demand=True))
    assert result.claims_rejected == {new.id: "claim changed since the scheduler's view"}, "one replica a host"


def test_evictions_for_a_jobs_template_claims_are_rechecked_and_give_the_bytes_back_at_once(w):
    old = cached(w, "old")
    apply_replicas(w, ReplicaPlacement(old.id, "h1", "scratch", 30 * GiB, on_demand=True),
                   ReplicaPlacement(old.id, "h2", "scratch", 30 * GiB, on_demand=True))
    for h in ("h1", "h2"):
        make_ready(w, old, h)
        agent = claims.node_agent(h)
        facts, work = agents.take(w.model, agent, w.model.agent_epochs[agent], 10, w.now, 300.0)
        w.commit(facts)
        w.commit(agents.report(w.model, CONFIG.claims, agent, w.model.agent_epochs[agent],
                               [claims.OpResult(work.replica_ops[0].op.op_id, old.id, True)], [], w.tick(),
                               random.Random(1)).facts)
    reader = w.submit(claims=("old",))
    outcome = apply_plan(w.model, Plan(position=w.model.position, allocations=(on(reader, "h2"),),
                                       evictions=(Eviction(old.id, "h1", 99), Eviction(old.id, "h2", 99))),
                         w.tick(), CONFIG)
    w.commit(outcome.facts)
    [evicted] = [f for f in outcome.facts if isinstance(f, ReplicaEvicted)]
    assert (evicted.host, evicted.make_room) == ("h1", True), "h2's is attached by the plan's job: kept"
    assert evicted.reason == "least recently used: its room on h1 went to job 99's template claims"
    assert w.model.hosts["h1"].counters_used() == {}, "its bytes free at once, its object released after"
    assert old.replica_on("h1").state is claims.ReplicaState.RELEASING


def test_a_cache_s_replica_on_demand_is_rechecked_against_its_projects_quota(w):
    config = parse_config(CONFIG_TEXT + '[[quotas]]\nproject = "default"\nclaim_class = "cached"\nmax_bytes = "70Gi"\n')
    old, new = cached(w, "old"), cached(w, "new")  # 60Gi charged: each cache its size, from its creation
    outcome = apply_plan(w.model, Plan(position=w.model.position, replicas=(
        ReplicaPlacement(old.id, "h1", "scratch", 30 * GiB, on_demand=True),
        ReplicaPlacement(old.id, "h2", "scratch", 30 * GiB, on_demand=True),
        ReplicaPlacement(new.id, "h2", "scratch", 30 * GiB, on_demand=True))), w.tick(), config)
    w.commit(outcome.facts)
    assert outcome.result.claims_rejected == {old.id: "quota exceeded for project default, class cached: at most "
                                                      "70Gi, 60Gi in use, 30Gi asked"}
    assert [r.host for r in old.replicas] == ["h1"] and [r.host for r in new.replicas] == ["h2"], \
        "each cache's first replica is charged already"
    assert claims.quota_use(w.model, "default", "cached") == (2, 60 * 2**30)


def test_exclusive_jobs_hosts_to_avoid_and_begin_times_are_checked_again(w):
    """-x, a host an earlier run failed on, -b: what the view said may have changed by the time the plan
    is applied (another decision of the same plan, a host taken meanwhile, a clock).  (The fields are set
    as their options set them at submission.)"""
    lone, other, busy_lone = (w.submit() for _ in range(3))
    for j in (lone, busy_lone):
        j.exclusive = True  # (as -x submitted it)
    w.apply(on(w.submit(), "h2"))  # h2 runs a job now
    result = w.apply(on(lone, "h1"), on(other, "h1"), on(busy_lone, "h2"))
    assert result.accepted == [lone.id]
    assert result.rejected == {other.id: "host h1 is held by an exclusive job",
                               busy_lone.id: "host h2 is no longer idle (exclusive, -x)"}
    assert w.apply(on(other, "h1")).rejected == {other.id: "host h1 is held by an exclusive job"}
    avoid, later = w.submit(), w.submit()
    avoid.avoid_hosts = ["h2"]
    later.begin_time = w.now + 3600
    result = w.apply(on(avoid, "h2"), on(later, "h2"))
    assert result.rejected == {avoid.id: "host h2 is one its earlier run failed on",
                               later.id: "its begin time (-b) has not come"}
    assert result.accepted == []


def gpu_job(w: World, gpu: str) -> Job:
    facts, job_id = job_claims.submit(w.model, ADMIN, JobSpec(command=["run"], gpu=gpu), JobClaimsSpec(), w.tick(),
                                      CONFIG)
    w.commit(facts)
    return w.model.jobs[job_id]


def gpus_on(job: Job, ids: tuple[int, ...], host: str = "g1") -> Allocation:
    return Allocation(job_id=job.id, run=job.run, hosts=(host,), slots={host: 1}, counters={}, gpus={host: ids})


def test_the_gpus_a_plan_names_are_checked_again_and_held_until_the_run_ends(w):
    w.commit([HostRegistered(time=0, name="g1", slots=8, gpus=[
        {"id": i, "uuid": f"GPU-{i}", "model": "NVIDIA A100", "memory": 80 * GiB} for i in range(4)])])
    a, b, c = gpu_job(w, "num=2"), gpu_job(w, "num=2"), gpu_job(w, "num=2")
    result = w.apply(gpus_on(a, (0, 1)), gpus_on(b, (1, 2)), gpus_on(c, (2, 3)))  # b collides with a in the plan
    assert result.accepted == [a.id, c.id] and result.rejected[b.id] == "host g1's GPU 1 is in use now"
    assert w.model.hosts["g1"].held_gpus == {str(a.id): {"ids": [0, 1], "exclusive": True, "gmem": None},
                                             str(c.id): {"ids": [2, 3], "exclusive": True, "gmem": None}}
    assert w.model.jobs[a.id].run_gpus == {"g1": [0, 1]}
    shared, small, plain = gpu_job(w, "num=1:j_exclusive=no"), gpu_job(w, "num=1:gmodel=H100"), w.submit()
    result = w.apply(gpus_on(shared, (0,)), gpus_on(b, (0,)), gpus_on(small, (3,), "g1"),
                     Allocation(job_id=plain.id, run=plain.run, hosts=("g1",), slots={"g1": 1}, counters={},
                                gpus={"g1": (3,)}))
    assert result.rejected == {shared.id: "host g1's GPU 0 is held by an exclusive job now",
                               b.id: "host g1: 1 GPUs named for a job that asks for 2",
                               small.id: "host g1's GPU 3 is not a H100",
                               plain.id: "host g1: GPUs [3] for a job that asks for none"}
    assert w.apply(gpus_on(b, (4, 5))).rejected[b.id] == "host g1 has no GPU 4"
    w.commit([JobFinished(time=w.tick(), job_id=a.id, run=a.run, state="DONE", exit_code=0)])
    assert str(a.id) not in w.model.hosts["g1"].held_gpus  # released with the run
    assert w.model.jobs[a.id].run_gpus == {"g1": [0, 1]}  # what the last run held: job show, usage
    assert w.apply(gpus_on(b, (0, 1))).accepted == [b.id]
    # shared holders share, within each GPU's memory
    s1, s2, s3 = (gpu_job(w, f"num=1:j_exclusive=no:gmem={m}Gi") for m in (50, 30, 1))
    result = w.apply(gpus_on(s1, (2,), "g1"), gpus_on(s2, (2,)), gpus_on(s3, (2,)))
    assert result.rejected == {s1.id: "host g1's GPU 2 is held by an exclusive job now",
                               s2.id: "host g1's GPU 2 is held by an exclusive job now",
                               s3.id: "host g1's GPU 2 is held by an exclusive job now"}
    w.commit([JobFinished(time=w.tick(), job_id=c.id, run=c.run, state="DONE", exit_code=0)])
    result = w.apply(gpus_on(s1, (2,)), gpus_on(s2, (2,)), gpus_on(s3, (2,)))
    assert result.accepted == [s1.id, s2.id]  # 50Gi + 30Gi: the GPU's 80Gi
    assert result.rejected[s3.id] == f"host g1's GPU 2 has no longer {GiB} bytes of memory free"
