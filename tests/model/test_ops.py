"""The one op discipline (``xce.model.ops``), as one suite every kind of op passes: a claim's, a
snapshot's and a node-local claim's replica's (run by its host's node agent).  Intents once per
epoch, results fenced by agent and epoch, re-driven after a restart by the same op id, retries with
backoff until the last attempt."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import pytest

from tests.model.test_snapshots import ALICE, CONFIG, RETRIES, World
from xce.errors import Conflict
from xce.model import claims
from xce.model.facts import ClaimPlaced, ReplicaPlaced
from xce.model import ops
from xce.model import snapshots
from xce.model.claims import ClaimSpec, OpResult
from xce.model.snapshots import SnapshotResult


@dataclass
class Kind:
    """One kind of op owner in a world: its book, the owner whose op is open, and its results."""

    book: Any
    owner_id: int
    result: Callable[..., Any]  # (op_id, ok, **kw) -> the kind's result
    agent: str = claims.SHARED_AGENT  # who runs the op


def claim_op(w: World) -> Kind:
    facts, claim_id = claims.create(w.model, CONFIG, ALICE, ClaimSpec("data", "snap", "1Gi", "RWO"), w.tick())
    w.commit(facts)
    w.commit([ClaimPlaced(time=w.tick(), claim_id=claim_id, pool="p")])  # opens its create
    return Kind(claims.CLAIM_OPS, claim_id, lambda op_id, ok, **kw: OpResult(op_id, claim_id, ok, **kw))


def snapshot_op(w: World) -> Kind:
    w.claim("data")
    snapshot_id = w.snapshot("data", "s1")  # opens its create_snapshot
    return Kind(snapshots.SNAPSHOT_OPS, snapshot_id,
                lambda op_id, ok, **kw: SnapshotResult(op_id, snapshot_id, ok, **kw))


def replica_op(w: World) -> Kind:
    facts, w.epoch = ops.lease(w.model, "node:h1", "h1", w.tick())  # the node agent's epoch (the world's agent)
    w.commit(facts)
    facts, claim_id = claims.create(w.model, CONFIG, ALICE, ClaimSpec("cache", "local", "1Gi", "RWO", hosts=("h1",)),
                                    w.tick())
    w.commit(facts)
    w.commit([ReplicaPlaced(time=w.tick(), claim_id=claim_id, host="h1", counter="scratch", size_bytes=2**30)])
    return Kind(claims.REPLICA_OPS, claim_id, lambda op_id, ok, **kw: OpResult(op_id, claim_id, ok, **kw), "node:h1")


KINDS = {"claim": claim_op, "snapshot": snapshot_op, "replica": replica_op}


@pytest.fixture(params=sorted(KINDS))
def world(request) -> tuple[World, Kind]:
    w = World()
    return w, KINDS[request.param](w)


def open_op(w: World, k: Kind) -> str:
    """The id of the owner's open op (the provisioner's to run)."""
    found = next(o for o in k.book.open(w.model) if o.owner.id == k.owner_id)
    assert found.runner == k.agent and k.book.find(w.model, k.owner_id, found.op.op_id) == found
    return found.op.op_id


def intend(w: World, k: Kind, epoch: int | None = None) -> list:
    facts = ops.record_intent(k.book, w.model, k.agent, epoch or w.epoch, open_op(w, k), k.owner_id, w.tick())
    w.commit(facts)
    return facts


def report(w: World, k: Kind, ok: bool = True, agent: str | None = None, epoch: int | None = None, **kw) -> list:
    facts = ops.record_result(k.book, w.model, RETRIES, agent or k.agent, epoch or w.epoch,
                              k.result(open_op(w, k), ok, **kw), w.tick(), random.Random(1))
    w.commit(facts)
    return facts


def due(w: World, k: Kind, now: float | None = None) -> list[str]:
    return [o.op.op_id for o in ops.due(k.book, w.model, k.agent, w.now if now is None else now)
            if o.owner.id == k.owner_id]


def test_an_intent_is_recorded_once_per_epoch_and_takes_the_op_out_of_the_due_list(world):
    w, k = world
    op_id = open_op(w, k)
    assert due(w, k) == [op_id]
    assert len(intend(w, k)) == 1
    assert intend(w, k) == [], "the same epoch's second intent records nothing"
    assert due(w, k) == [], "in flight with the current epoch"
    assert [o.op.op_id for o in ops.held(k.book, w.model, k.agent)] == [op_id]
    with pytest.raises(Conflict, match="is not node:h9's to run"):
        ops.record_intent(k.book, w.model, "node:h9", 1, op_id, k.owner_id, w.tick())


def test_a_result_is_taken_only_from_the_agent_and_epoch_holding_the_intent(world):
    w, k = world
    intend(w, k)
    with pytest.raises(Conflict, match="not started by epoch"):
        report(w, k, epoch=w.epoch + 1)
    with pytest.raises(Conflict, match="is not node:h9's"):
        report(w, k, agent="node:h9")
    op_id = open_op(w, k)
    assert len(report(w, k, handle="obj")) == 1
    assert ops.record_result(k.book, w.model, RETRIES, k.agent, w.epoch, k.result(op_id, True), w.tick()) == [], \
        "a report of an op decided already is nothing"


def test_a_restarted_agent_re_drives_its_ops_by_the_same_id_and_its_old_epoch_is_fenced(world):
    w, k = world
    intend(w, k)
    op_id, old = open_op(w, k), w.epoch
    facts, w.epoch = ops.lease(w.model, k.agent, "restarted", w.tick())
    w.commit(facts)
    assert due(w, k) == [op_id], "not held by the new epoch: due again, same op id"
    with pytest.raises(Conflict, match="stale epoch"):
        ops.check_epoch(w.model, k.agent, old)
    with pytest.raises(Conflict, match="not started by epoch"):
        report(w, k, epoch=w.epoch)  # the new epoch has no intent for it yet
    intend(w, k)
    with pytest.raises(Conflict, match="not started by epoch"):
        report(w, k, epoch=old)


def test_a_retryable_failure_waits_for_its_retry_and_the_last_attempt_ends_it(world):
    w, k = world
    op_id = open_op(w, k)
    intend(w, k)
    [failed] = report(w, k, ok=False, code="UNAVAILABLE", message="busy", retryable=True)
    assert failed.next_retry is not None and failed.next_retry > w.now
    assert due(w, k) == [], "waiting for its retry"
    assert ops.next_due(k.book, w.model, k.agent) == failed.next_retry
    assert due(w, k, now=failed.next_retry) == [op_id], "then due again, by the same id"
    intend(w, k)
    assert k.book.find(w.model, k.owner_id, op_id).op.attempts == RETRIES.max_attempts
    [last] = report(w, k, ok=False, code="UNAVAILABLE", message="busy", retryable=True)
    assert last.next_retry is None, "out of attempts: failed for good"
    assert k.book.find(w.model, k.owner_id, op_id) is None
