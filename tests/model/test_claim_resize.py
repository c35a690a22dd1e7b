"""Resizing a claim: what is refused (and says why), quota, and the expand op's life like a create's."""

from __future__ import annotations

import random

import pytest

from xce.config import parse_config
from xce.errors import Conflict, InvalidRequest, NotFound
from xce.model import Model
from xce.model import capabilities
from xce.model import claims
from xce.model.facts import ClaimPlaced, ClaimResizeReserved, ProjectDefined
from xce.model.claims import ClaimState, ResizeState
from xce.model.identity import Role, User
from xce.model.pools import pool_use

GiB = 2**30
CONFIG = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[projects]]
name = "default"
[[projects]]
name = "team-b"
[[pools]]
name = "p"
capacity = "20Gi"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "offline"
provider = "oldfs"
pools = ["p"]
[[claim_classes]]
name = "plain"
provider = "plainfs"
pools = ["p"]
[[claim_classes]]
name = "silent"
provider = "quietfs"
pools = ["p"]
[[quotas]]
project = "default"
claim_class = "vol"
max_claims = 2
max_bytes = "10Gi"
[claims]
max_attempts = 3
""")
ADMIN = User(name="admin", role=Role.ADMIN, projects=["default"])
ALICE = User(name="alice", role=Role.USER, projects=["default"])
BOB = User(name="bob", role=Role.USER, projects=["team-b"])


class World:
    def __init__(self) -> None:
        self.model = Model(cluster_id="k")
        self.now = 10.0
        self.rng = random.Random(1)
        self.commit([ProjectDefined(time=0, name="default"), ProjectDefined(time=0, name="team-b")])
        self.epoch = self.commit(claims.lease(self.model, claims.SHARED_AGENT, "t", self.tick())[0])[0].epoch
        for cls, caps in (("vol", {"expand": True, "online_expand": True}), ("offline", {"expand": True}),
                          ("plain", None)):
            self.commit(capabilities.report(self.model, CONFIG, claims.SHARED_AGENT, claims.SHARED_AGENT, cls,
                                            CONFIG.claim_class(cls).provider, caps, self.tick()))

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def commit(self, facts):
        for f in facts:
            self.model.apply(self.model.position + 1, f)
        return facts

    def ready(self, name: str, size: str = "2Gi", cls: str = "vol") -> claims.Claim:
        facts, claim_id = claims.create(self.model, CONFIG, ADMIN,
                                        claims.ClaimSpec(name=name, class_name=cls, size=size, access_mode="RWX"),
                                        self.tick())
        self.commit(facts)
        self.commit([ClaimPlaced(time=self.tick(), claim_id=claim_id, pool="p")])
        self.run_op(claim_id, ok=True, handle=f"h{claim_id}")
        claim = self.model.claims[claim_id]
        assert claim.state is ClaimState.READY
        return claim

    def run_op(self, claim_id: int, **result) -> claims.Claim:
        """The agent's intent for the claim's open op, then its report."""
        claim = self.model.claims[claim_id]
        op_id = claim.op.op_id
        self.commit(claims.record_intent(self.model, claims.SHARED_AGENT, self.epoch, op_id, claim_id, self.tick()))
        self.commit(claims.record_result(self.model, CONFIG.claims, claims.SHARED_AGENT, self.epoch,
                                         claims.OpResult(op_id=op_id, claim_id=claim_id,
                                                         **result), self.tick(), self.rng))
        return claim

    def resize(self, name: str, size: str, actor: User = ADMIN) -> claims.Claim:
        facts, claim_id = claims.resize(self.model, CONFIG, actor, name, size, self.tick())
        self.commit(facts)
        return self.model.claims[claim_id]

    def reserve(self, claim: claims.Claim) -> None:
        self.commit([ClaimResizeReserved(time=self.tick(), claim_id=claim.id, size_bytes=claim.resize.size_bytes)])


@pytest.fixture
def w() -> World:
    return World()


def test_a_resize_is_asked_reserved_expanded_and_only_then_the_claim_is_bigger(w):
    claim = w.ready("ckpt")
    w.resize("ckpt", "5Gi", ALICE)
    assert (claim.resize.state, claim.resize.old_bytes, claim.resize.size_bytes) == (ResizeState.REQUESTED, 2 * GiB,
                                                                                     5 * GiB)
    assert claim.state is ClaimState.READY and claim.size_bytes == 2 * GiB and claim.op is None
    assert claims.quota_use(w.model, "default", "vol") == (1, 5 * GiB), "the quota is charged when asked"
    assert pool_use(w.model) == {"p": 2 * GiB}, "the pool only once the scheduler reserved it"
    w.reserve(claim)
    assert claim.resize.state is ResizeState.EXPANDING and claim.op.op_id == f"c{claim.id}.expand.1"
    assert pool_use(w.model) == {"p": 5 * GiB}
    [(_, op, _)] = claims.due_ops(w.model, claims.SHARED_AGENT, w.now)
    assert op.kind is claims.OpKind.EXPAND
    w.run_op(claim.id, ok=False, code="UNAVAILABLE", message="busy", retryable=True)
    assert claim.resize.state is ResizeState.EXPANDING and claim.op.next_retry is not None
    assert claim.last_error == "UNAVAILABLE: busy" and claim.state is ClaimState.READY
    w.run_op(claim.id, ok=True, handle=claim.handle, size_bytes=5 * GiB)
    assert (claim.resize.state, claim.size_bytes, claim.actual_bytes) == (ResizeState.DONE, 5 * GiB, 5 * GiB)
    assert claim.op is None and claim.last_error is None and claim.state is ClaimState.READY
    expands = [o for o in claim.ops if o["op"] == "expand"]
    assert [(o["op_id"], o["attempt"], o["result"]) for o in expands] == [
        (f"c{claim.id}.expand.1", 1, "started"), (f"c{claim.id}.expand.1", 1, "UNAVAILABLE"),
        (f"c{claim.id}.expand.1", 2, "started"), (f"c{claim.id}.expand.1", 2, "ok")], "one op id, every attempt"
    assert [h["state"] for h in claim.resize.history] == ["REQUESTED", "EXPANDING", "DONE"]
    assert {h["state"] for h in claim.history} == {"PENDING", "PREPARING", "READY"}, "the claim stayed READY"
    assert "resize to 5Gi DONE" in claim.history[-1]["reason"]
    w.resize("ckpt", "6Gi")  # the next resize opens the next expand op
    w.reserve(claim)
    assert claim.op.op_id == f"c{claim.id}.expand.2"


def test_a_permanent_failure_leaves_the_claim_ready_at_its_old_size_with_the_error(w):
    claim = w.ready("ckpt")
    w.resize("ckpt", "4Gi")
    w.reserve(claim)
    w.run_op(claim.id, ok=False, code="INVALID_ARGUMENT", message="no", retryable=False)
    assert (claim.state, claim.size_bytes, claim.resize.state) == (ClaimState.READY, 2 * GiB, ResizeState.FAILED)
    assert claim.resize.error == "INVALID_ARGUMENT: no" and claim.last_error == "INVALID_ARGUMENT: no"
    assert "expand failed after 1 attempt: INVALID_ARGUMENT: no; still 2Gi" in claim.history[-1]["reason"]
    assert pool_use(w.model) == {"p": 2 * GiB} and claims.quota_use(w.model, "default", "vol") == (1, 2 * GiB)
    assert claim.op is None
    w.resize("ckpt", "3Gi")  # may be asked again
    assert claim.resize.state is ResizeState.REQUESTED


def test_retries_run_out_after_max_attempts_and_the_claim_keeps_its_size(w):
    claim = w.ready("ckpt")
    w.resize("ckpt", "3Gi")
    w.reserve(claim)
    for _ in range(CONFIG.claims.max_attempts):
        w.run_op(claim.id, ok=False, code="UNAVAILABLE", message="down", retryable=True)
    assert claim.resize.state is ResizeState.FAILED and claim.size_bytes == 2 * GiB
    assert claim.op is None and claim.state is ClaimState.READY


@pytest.mark.parametrize("size, error, fragment", [
    ("2Gi", InvalidRequest, "a resize can only grow it (2Gi asked; shrinking is not supported)"),
    ("1Gi", InvalidRequest, "claim 'ckpt' is 2Gi: a resize can only grow it"),
    ("21Gi", Conflict, "quota exceeded for project default, class vol: at most 10Gi, 2Gi in use, 19Gi asked"),
])
def test_shrinking_the_same_size_and_over_quota_are_refused(w, size, error, fragment):
    w.ready("ckpt")
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        claims.resize(w.model, CONFIG, ADMIN, "ckpt", size, w.tick())


def test_the_quota_counts_a_resize_asked_but_not_done(w):
    w.ready("a", "3Gi")
    w.ready("b", "3Gi")
    w.resize("a", "6Gi")
    with pytest.raises(Conflict, match="at most 10Gi, 9Gi in use, 2Gi asked"):
        claims.resize(w.model, CONFIG, ADMIN, "b", "5Gi", w.tick())
    w.resize("b", "4Gi")  # exactly 10Gi, and no new claim is counted


def test_a_class_that_cannot_expand_is_refused_naming_the_class(w):
    w.ready("p1", cls="plain")
    with pytest.raises(Conflict, match="claim class plain cannot resize claims: its provider plainfs does not expand"):
        claims.resize(w.model, CONFIG, ADMIN, "p1", "3Gi", w.tick())
    w.ready("s1", cls="silent")
    with pytest.raises(Conflict, match="claim class silent cannot resize claims yet: its provider quietfs has not"):
        claims.resize(w.model, CONFIG, ADMIN, "s1", "3Gi", w.tick())


def test_an_offline_only_class_refuses_while_attached_and_attaching_while_resizing(w):
    claim = w.ready("cold", cls="offline")
    w.commit(claims.add_attachment(w.model, ADMIN, "cold", "h1", "rw", w.tick())[0])
    with pytest.raises(Conflict, match="claim class offline can expand claims only offline: claim 'cold' is "
                                       "attached on h1"):
        claims.resize(w.model, CONFIG, ADMIN, "cold", "3Gi", w.tick())
    w.commit(claims.remove_attachment(w.model, ADMIN, "cold", claim.attachments[0].id, w.tick()))
    w.resize("cold", "3Gi")
    with pytest.raises(Conflict, match="is being resized and its class offline expands only offline"):
        claims.add_attachment(w.model, ADMIN, "cold", "h1", "rw", w.tick())
    online = w.ready("hot")
    w.commit(claims.add_attachment(w.model, ADMIN, "hot", "h1", "rw", w.tick())[0])
    w.resize("hot", "3Gi")  # online: attached is fine
    assert online.resize.state is ResizeState.REQUESTED


def test_other_refusals_change_nothing(w):
    claim = w.ready("ckpt")
    with pytest.raises(NotFound):
        claims.resize(w.model, CONFIG, BOB, "ckpt", "3Gi", w.tick())  # another project's claim: not even seen
    w.resize("ckpt", "3Gi")
    with pytest.raises(Conflict, match="already being resized to 3Gi"):
        claims.resize(w.model, CONFIG, ADMIN, "ckpt", "4Gi", w.tick())
    facts, other = claims.create(w.model, CONFIG, ADMIN,
                                 claims.ClaimSpec(name="other", class_name="vol", size="1Gi", access_mode="RWO",
                                                  project="team-b"), w.tick())
    w.commit(facts + [ClaimPlaced(time=w.tick(), claim_id=other, pool="p")])
    w.run_op(other, ok=True, handle="ho")
    with pytest.raises(Conflict, match="claim 'other' cannot grow to 30Gi: its pool p has a capacity of 20Gi"):
        claims.resize(w.model, CONFIG, ADMIN, "other", "30Gi", w.tick(), project="team-b")
    facts, _ = claims.create(w.model, CONFIG, ADMIN, claims.ClaimSpec(name="new", class_name="vol", size="1Gi",
                                                                      access_mode="RWO"), w.tick())
    w.commit(facts)
    with pytest.raises(Conflict, match="claim 'new' is PENDING: only READY claims can be resized"):
        claims.resize(w.model, CONFIG, ADMIN, "new", "3Gi", w.tick())
    assert claim.resize.size_bytes == 3 * GiB


def test_deleting_a_claim_cancels_a_resize_not_in_flight_and_waits_for_one_in_flight(w):
    waiting = w.ready("waiting")
    w.resize("waiting", "3Gi")
    w.commit(claims.delete(w.model, ADMIN, "waiting", w.tick()))
    assert waiting.resize.state is ResizeState.FAILED and "cancelled" in waiting.resize.error
    assert waiting.state is ClaimState.RELEASING and waiting.op.kind is claims.OpKind.RELEASE
    flying = w.ready("flying")
    w.resize("flying", "3Gi")
    w.reserve(flying)
    op_id = flying.op.op_id
    w.commit(claims.record_intent(w.model, claims.SHARED_AGENT, w.epoch, op_id, flying.id, w.tick()))
    w.commit(claims.delete(w.model, ADMIN, "flying", w.tick()))
    assert flying.state is ClaimState.READY and flying.op.kind is claims.OpKind.EXPAND, "the expand answers first"
    w.commit(claims.record_result(w.model, CONFIG.claims, claims.SHARED_AGENT, w.epoch,
                                  claims.OpResult(op_id=op_id, claim_id=flying.id, ok=True,
                                                  size_bytes=3 * GiB), w.tick()))
    assert flying.resize.state is ResizeState.DONE and flying.state is ClaimState.RELEASING


def test_a_deletion_that_waited_for_an_expand_goes_ahead_when_the_attempt_fails_and_waits_for_a_retry(w):
    """Found by the claim state machine: between attempts the expand holds nothing up."""
    claim = w.ready("ckpt")
    w.resize("ckpt", "3Gi")
    w.reserve(claim)
    op_id = claim.op.op_id
    w.commit(claims.record_intent(w.model, claims.SHARED_AGENT, w.epoch, op_id, claim.id, w.tick()))
    w.commit(claims.delete(w.model, ADMIN, "ckpt", w.tick()))
    w.commit(claims.record_result(w.model, CONFIG.claims, claims.SHARED_AGENT, w.epoch,
                                  claims.OpResult(op_id=op_id, claim_id=claim.id, ok=False, code="UNAVAILABLE",
                                                  message="busy", retryable=True), w.tick(), w.rng))
    assert claim.resize.state is ResizeState.FAILED and "cancelled" in claim.resize.error
    assert claim.state is ClaimState.RELEASING and claim.op.kind is claims.OpKind.RELEASE


def test_a_stale_epoch_cannot_report_an_expand(w):
    claim = w.ready("ckpt")
    w.resize("ckpt", "3Gi")
    w.reserve(claim)
    op_id = claim.op.op_id
    w.commit(claims.record_intent(w.model, claims.SHARED_AGENT, w.epoch, op_id, claim.id, w.tick()))
    old = w.epoch
    w.epoch = w.commit(claims.lease(w.model, claims.SHARED_AGENT, "t2", w.tick())[0])[0].epoch
    with pytest.raises(Conflict):
        claims.check_epoch(w.model, claims.SHARED_AGENT, old)
    [(_, op, _)] = claims.due_ops(w.model, claims.SHARED_AGENT, w.now)  # the new epoch re-drives it, same op id
    assert op.op_id == op_id
    w.run_op(claim.id, ok=True, size_bytes=3 * GiB)
    assert claim.resize.state is ResizeState.DONE and claim.size_bytes == 3 * GiB
