"""Snapshots and clones in the model: their lifecycle through intents and fenced results, retries,
deletion, quota, refusals, names per project, and snapshot orphans."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from xce.config import ClaimsConfig, parse_config
from xce.errors import Conflict, InvalidRequest, NotFound
from xce.model import Model
from xce.model import claims
from xce.model.facts import ClaimPlaced, ProjectDefined
from xce.model import snapshots
from xce.model.claims import ClaimSpec, ClaimState, OpResult
from xce.model.identity import Role, User
from xce.model.orphans import due_for_release, inventory
from xce.model import capabilities
from xce.model.snapshots import TRANSITIONS, SnapshotResult, SnapshotState
from xce.model.transitions import ImpossibleTransition

CONFIG = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["a"]
[[queues]]
name = "default"
[[projects]]
name = "a"
[[projects]]
name = "b"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "snap"
provider = "btrfs"
pools = ["p"]
[[claim_classes]]
name = "plain"
provider = "old"
pools = ["p"]
[[claim_classes]]
name = "local"
provider = "simfs"
scope = "node"
counter = "scratch"
[[quotas]]
project = "a"
claim_class = "snap"
max_claims = 3
max_bytes = "5Gi"
""")
ALICE = User(name="alice", role=Role.USER, projects=["a"])
BOB = User(name="bob", role=Role.USER, projects=["b"])
ADMIN = User(name="admin", role=Role.ADMIN, projects=["a"])
RETRIES = ClaimsConfig(max_attempts=2, retry_base=0.1, retry_cap=0.2)
CAN = {"create_snapshot": True, "clone": True, "expand": False, "online_expand": False,
       "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}
CANNOT = {**CAN, "create_snapshot": False, "clone": False}
GiB = 2**30


class World:
    def __init__(self, class_capabilities: dict | None = None) -> None:
        self.model = Model(cluster_id="k")
        self.now = 1.0
        self.commit([ProjectDefined(time=0, name="a"), ProjectDefined(time=0, name="b")])
        facts, self.epoch = claims.lease(self.model, claims.SHARED_AGENT, "h", self.now)
        self.commit(facts)
        caps = {"snap": CAN, "plain": CANNOT} if class_capabilities is None else class_capabilities
        for cls, can in caps.items():
            self.commit(capabilities.report(self.model, CONFIG, claims.SHARED_AGENT, claims.SHARED_AGENT, cls,
                                            CONFIG.claim_class(cls).provider, can, self.now))

    def commit(self, facts) -> None:
        for f in facts:
            self.model.apply(self.model.position + 1, f)

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def claim(self, name: str, cls: str = "snap", size: str = "1Gi", actor: User = ALICE) -> int:
        facts, claim_id = claims.create(self.model, CONFIG, actor, ClaimSpec(name, cls, size, "RWO"), self.tick())
        self.commit(facts)
        self.commit([ClaimPlaced(time=self.tick(), claim_id=claim_id, pool="p")])
        self.run_claim_op(claim_id, handle=f"v{claim_id}")
        return claim_id

    def run_claim_op(self, claim_id: int, handle: str | None = None) -> None:
        op = self.model.claims[claim_id].op
        self.commit(claims.record_intent(self.model, claims.SHARED_AGENT, self.epoch, op.op_id, claim_id, self.tick()))
        self.commit(claims.record_result(self.model, RETRIES, claims.SHARED_AGENT, self.epoch,
                                         OpResult(op.op_id, claim_id, ok=True, handle=handle, size_bytes=None),
                                         self.tick()))

    def snapshot(self, claim: str, name: str, actor: User = ALICE) -> int:
        facts, snapshot_id = snapshots.create(self.model, CONFIG, actor, claim, name, self.tick())
        self.commit(facts)
        return snapshot_id

    def due(self) -> list[str]:
        return [op.op_id for _, op in snapshots.due_ops(self.model, claims.SHARED_AGENT, self.now)]

    def intend(self, snapshot_id: int) -> str:
        op = self.model.snapshots[snapshot_id].op
        self.commit(snapshots.record_intent(self.model, claims.SHARED_AGENT, self.epoch, op.op_id, snapshot_id,
                                            self.tick()))
        return op.op_id

    def report(self, snapshot_id: int, ok: bool = True, **kw) -> None:
        op_id = self.model.snapshots[snapshot_id].op.op_id
        self.commit(snapshots.record_result(self.model, RETRIES, claims.SHARED_AGENT, self.epoch,
                                            SnapshotResult(op_id, snapshot_id, ok,
                                                           **kw), self.tick(), random.Random(1)))

    def take(self, claim: str, name: str, actor: User = ALICE) -> int:
        sid = self.snapshot(claim, name, actor)
        self.intend(sid)
        self.report(sid, handle=f"s-{name}", size_bytes=GiB)
        return sid

    def restored(self) -> Model:
        return Model.from_snapshot(json.loads(json.dumps(self.model.to_snapshot())))


def states(snap) -> list[str]:
    return [h["state"] for h in snap.history]


def test_a_snapshot_is_taken_through_an_intent_and_a_fenced_result():
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    snap = w.model.snapshots[sid]
    assert (snap.state, snap.project, snap.owner, snap.claim_name, snap.size_bytes) == (
        SnapshotState.PENDING, "a", "alice", "data", GiB)
    assert w.due() == [f"s{sid}.create_snapshot.1"]
    op_id = w.intend(sid)
    assert w.due() == [] and snap.data_exists
    with pytest.raises(Conflict, match="stale_epoch|not started by epoch"):
        snapshots.record_result(w.model, RETRIES, claims.SHARED_AGENT, w.epoch + 1, SnapshotResult(op_id, sid, True),
                                w.now)
    with pytest.raises(Conflict, match="not node:h1's"):
        snapshots.record_result(w.model, RETRIES, "node:h1", w.epoch, SnapshotResult(op_id, sid, True), w.now)
    w.report(sid, handle="s1-abc", size_bytes=GiB)
    assert (snap.state, snap.handle, snap.op) == (SnapshotState.READY, "s1-abc", None)
    assert states(snap) == ["PENDING", "READY"]
    assert [o["result"] for o in snap.ops] == ["started", "ok"]
    assert w.restored() == w.model


def test_retryable_failures_retry_with_the_same_op_id_then_fail_for_good():
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    op_id = w.intend(sid)
    w.report(sid, ok=False, code="UNAVAILABLE", message="busy", retryable=True)
    snap = w.model.snapshots[sid]
    assert snap.state is SnapshotState.PENDING and snap.op.next_retry is not None and snap.last_error
    w.now = snap.op.next_retry
    assert w.due() == [op_id], "the retry keeps its op id"
    w.intend(sid)
    w.report(sid, ok=False, code="UNAVAILABLE", message="busy", retryable=True)  # max_attempts = 2
    assert snap.state is SnapshotState.FAILED and not snap.data_exists
    assert "create_snapshot failed after 2 attempts" in snap.history[-1]["reason"]
    facts, _ = snapshots.delete(w.model, ALICE, "s1", w.tick())
    w.commit(facts)
    assert snap.state is SnapshotState.RELEASED and "s1" not in [s.name for s in w.model.snapshots.values()
                                                                   if s.live]


def test_delete_releases_through_delete_snapshot_and_frees_the_name():
    w = World()
    w.claim("data")
    sid = w.take("data", "s1")
    facts, _ = snapshots.delete(w.model, ALICE, "s1", w.tick())
    w.commit(facts)
    snap = w.model.snapshots[sid]
    assert snap.state is SnapshotState.RELEASING and w.due() == [f"s{sid}.delete_snapshot.1"]
    assert snapshots.delete(w.model, ALICE, "s1", w.tick())[0] == [], "deleting again while on its way changes nothing"
    w.intend(sid)
    w.report(sid)
    assert snap.state is SnapshotState.RELEASED and not snap.data_exists
    assert snapshots.visible(w.model, ALICE, "s1").id == sid, "a released snapshot is still shown by name"
    sid2 = w.take("data", "s1")
    assert sid2 != sid and snapshots.visible(w.model, ALICE, "s1").id == sid2
    assert w.restored() == w.model


def test_deleting_a_snapshot_not_yet_taken_needs_no_provider():
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    w.commit(snapshots.delete(w.model, ALICE, "s1", w.tick())[0])
    assert w.model.snapshots[sid].state is SnapshotState.RELEASED and w.due() == []
    # in flight: the deletion waits for the provider's answer, then deletes what it made
    sid = w.snapshot("data", "s2")
    w.intend(sid)
    w.commit(snapshots.delete(w.model, ALICE, "s2", w.tick())[0])
    assert w.model.snapshots[sid].state is SnapshotState.PENDING
    w.report(sid, handle="s2-x", size_bytes=GiB)
    assert w.model.snapshots[sid].state is SnapshotState.RELEASING and w.due() == [f"s{sid}.delete_snapshot.1"]


def test_deleting_a_snapshot_between_attempts_waits_for_the_next_attempt_then_deletes_what_it_made():
    """Found by the claim state machine: a failed attempt may have made the snapshot, so the deletion
    waits for the retry's answer and then deletes through the provider, never dropping the object."""
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    w.intend(sid)
    w.report(sid, ok=False, code="UNAVAILABLE", message="busy", retryable=True)
    assert w.model.snapshots[sid].data_exists, "a failed attempt may have left an object"
    w.commit(snapshots.delete(w.model, ALICE, "s1", w.tick())[0])
    snap = w.model.snapshots[sid]
    assert (snap.state, snap.delete_requested, snap.op.kind) == (SnapshotState.PENDING, True,
                                                                 claims.OpKind.CREATE_SNAPSHOT)
    w.intend(sid)
    w.report(sid, handle="s1-x", size_bytes=GiB)
    assert snap.state is SnapshotState.RELEASING and w.due() == [f"s{sid}.delete_snapshot.1"]


def test_snapshots_outlive_their_claim_but_a_claim_waits_for_one_being_taken():
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    with pytest.raises(Conflict, match="being taken"):
        claims.delete(w.model, ALICE, "data", w.tick())
    w.intend(sid)
    w.report(sid, handle="s1-x", size_bytes=GiB)
    w.commit(claims.delete(w.model, ALICE, "data", w.tick()))
    w.run_claim_op(w.model.claims[1].id)
    assert w.model.claims[1].state is ClaimState.RELEASED
    assert w.model.snapshots[sid].state is SnapshotState.READY
    facts, clone_id = snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy", None, None, None), w.tick(),
                                      from_snapshot="s1")
    w.commit(facts)
    clone = w.model.claims[clone_id]
    assert clone.source == {"kind": "snapshot", "id": sid, "name": "s1", "handle": "s1-x"}
    assert (clone.class_name, clone.size_bytes, clone.access_mode.value, clone.project) == ("snap", GiB, "RWO", "a")


def test_clones_refuse_what_cannot_be_made():
    w = World()
    w.claim("data")
    sid = w.snapshot("data", "s1")
    spec = ClaimSpec("copy", None, None, None)
    with pytest.raises(Conflict, match="only READY snapshots can be cloned"):
        snapshots.clone(w.model, CONFIG, ALICE, spec, w.tick(), from_snapshot="s1")
    w.intend(sid)
    w.report(sid, handle="s1-x", size_bytes=GiB)
    with pytest.raises(InvalidRequest, match="needs at least its size"):
        snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy", None, "512Mi", None), w.tick(), from_snapshot="s1")
    with pytest.raises(InvalidRequest, match="is of class 'snap', not 'plain'"):
        snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy", "plain", None, None), w.tick(), from_snapshot="s1")
    facts, clone_id = snapshots.clone(w.model, CONFIG, ALICE, spec, w.tick(), from_claim="data")
    w.commit(facts)
    assert w.model.claims[clone_id].source["kind"] == "claim"
    with pytest.raises(Conflict, match="being made from it"):
        claims.delete(w.model, ALICE, "data", w.tick())
    with pytest.raises(Conflict, match="only READY claims can be cloned"):
        snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy2", None, None, None), w.tick(), from_claim="copy")
    facts, clone2 = snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy2", None, None, None), w.tick(),
                                    from_snapshot="s1")
    w.commit(facts)
    with pytest.raises(Conflict, match="being made from it"):
        snapshots.delete(w.model, ALICE, "s1", w.tick())


def test_classes_that_cannot_snapshot_or_clone_are_refused_naming_the_class():
    w = World()
    w.claim("old", cls="plain")
    with pytest.raises(Conflict, match="claim class 'plain' cannot take snapshots: its provider 'old' says "
                                       "create_snapshot: false"):
        w.snapshot("old", "s1")
    with pytest.raises(Conflict, match="claim class 'plain' cannot make claims from a snapshot or a claim"):
        snapshots.clone(w.model, CONFIG, ALICE, ClaimSpec("copy", None, None, None), w.tick(), from_claim="old")
    unknown = World(class_capabilities={})
    unknown.claim("data")
    with pytest.raises(Conflict, match="has not reported what it can do"):
        unknown.snapshot("data", "s1")
    local = claims.class_or_404(CONFIG, "local")
    with pytest.raises(Conflict, match="node-local"):
        capabilities.require(w.model, local, "create_snapshot")


def test_snapshot_bytes_count_in_the_project_quota_but_not_as_claims():
    w = World()
    w.claim("data", size="2Gi")
    w.take("data", "s1")  # charged the claim's size: 2Gi, 4Gi in all
    assert claims.quota_use(w.model, "a", "snap") == (1, 4 * GiB)
    with pytest.raises(Conflict, match="quota exceeded for project a, class snap: at most 5Gi, 4Gi in use, 2Gi asked"):
        w.snapshot("data", "s2")
    w.claim("small", size="512Mi")  # a claim still fits: the snapshot is not counted as one
    w.commit(snapshots.delete(w.model, ALICE, "s1", w.tick())[0])
    w.intend(1)
    w.report(1)
    assert claims.quota_use(w.model, "a", "snap") == (2, 2 * GiB + GiB // 2)
    w.snapshot("data", "s2")


def test_names_are_per_project_and_nobody_sees_another_projects_snapshots():
    w = World()
    w.claim("data")
    w.take("data", "s1")
    for attempt in (lambda: snapshots.create(w.model, CONFIG, BOB, "data", "mine", w.now),
                    lambda: snapshots.visible(w.model, BOB, "s1"),
                    lambda: snapshots.visible(w.model, BOB, "s1", project="a"),
                    lambda: snapshots.delete(w.model, BOB, "s1", w.now),
                    lambda: snapshots.clone(w.model, CONFIG, BOB, ClaimSpec("x", None, None, None), w.now,
                                            from_snapshot="s1"),
                    lambda: snapshots.clone(w.model, CONFIG, BOB, ClaimSpec("x", None, None, None), w.now,
                                            from_claim="data")):
        with pytest.raises(NotFound):
            attempt()
    with pytest.raises(Conflict, match="already exists in project 'a'"):
        w.snapshot("data", "s1")
    assert snapshots.visible(w.model, ADMIN, "s1").project == "a"


def test_a_snapshot_object_with_no_snapshot_record_is_an_orphan():
    w = World()
    w.claim("data")
    sid = w.take("data", "s1")
    tags = {"xce.cluster": "k", "xce.claim": "1", "xce.snapshot": str(sid), "xce.op": f"s{sid}.create_snapshot.1"}
    listed = [{"handle": "v1", "tags": {"xce.cluster": "k", "xce.claim": "1", "xce.op": "c1.create.1"}},
              {"handle": "s-s1", "kind": "snapshot", "tags": tags},
              {"handle": "s1-stray", "kind": "snapshot", "tags": {**tags, "xce.snapshot": "99", "xce.op": "s99.x"}},
              {"handle": "s1-inflight", "kind": "snapshot",
               "tags": {**tags, "xce.snapshot": "2", "xce.op": "s2.create_snapshot.1"}}]
    sid2 = w.snapshot("data", "s2")  # its create_snapshot is open: its object is owned by the op id
    assert sid2 == 2
    facts = inventory(w.model, "snap", "btrfs", listed, w.tick())
    assert [(f.handle, f.kind) for f in facts] == [("s1-stray", "snapshot")]
    w.commit(facts)
    assert [o.handle for o in due_for_release(w.model, 0.0, w.tick())] == ["s1-stray"]


def test_the_transition_table_forbids_what_no_decision_makes():
    assert SnapshotState.READY not in TRANSITIONS[SnapshotState.RELEASED]
    w = World()
    w.claim("data")
    sid = w.take("data", "s1")
    from xce.model.snapshots.lifecycle import _set_state
    with pytest.raises(ImpossibleTransition):
        _set_state(w.model, w.model.snapshots[sid], SnapshotState.PENDING, w.now, "nonsense", "-")


def test_a_snapshot_is_reserved_in_its_claims_pool_less_if_its_provider_reports_it_holds_less():
    from xce.model.pools import pool_use, snapshot_use

    w = World()
    w.claim("data")
    assert pool_use(w.model) == {"p": GiB}
    full = w.take("data", "full")  # a provider that reports nothing of its usage: the claim's size
    assert w.model.snapshots[full].pool == "p" and snapshot_use(w.model) == {"p": GiB}
    sid = w.snapshot("data", "cow")
    assert pool_use(w.model) == {"p": 3 * GiB}, "reserved from the moment it is asked for"
    w.intend(sid)
    w.report(sid, handle="s-cow", size_bytes=GiB, used_bytes=300)  # copy-on-write: it holds 300 bytes
    assert pool_use(w.model) == {"p": 2 * GiB + 300}
    assert w.restored() == w.model
    with pytest.raises(Conflict, match="no room for a snapshot of claim 'data'"):
        snapshots.create(w.model, CONFIG, ALICE, "data", "more", w.tick(), free={"p": GiB - 1})
    facts, _ = snapshots.create(w.model, CONFIG, ALICE, "data", "more", w.tick(), free={"p": GiB})
    assert facts[0].pool == "p"


def test_a_project_has_at_most_max_snapshots_per_project():
    limited = dataclasses.replace(CONFIG, claims=dataclasses.replace(CONFIG.claims, max_snapshots_per_project=2))
    w = World()
    w.claim("data", size="1Mi")
    s1 = w.take("data", "s1")
    w.take("data", "s2")
    with pytest.raises(Conflict, match="max_snapshots_per_project"):
        snapshots.create(w.model, limited, ALICE, "data", "s3", w.tick())
    w.commit(snapshots.delete(w.model, ALICE, "s1", w.tick())[0])
    with pytest.raises(Conflict, match="max_snapshots_per_project"):  # being deleted: it holds its room yet
        snapshots.create(w.model, limited, ALICE, "data", "s3", w.tick())
    w.intend(s1)
    w.report(s1)
    assert w.model.snapshots[s1].state is SnapshotState.RELEASED
    assert snapshots.create(w.model, limited, ALICE, "data", "s3", w.tick())[0]
