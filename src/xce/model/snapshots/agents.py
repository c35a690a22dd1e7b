"""The provisioner's side of snapshots: where a snapshot's op is and the facts that record it.

Snapshots are shared storage: their ops (``create_snapshot``, ``delete_snapshot``) are the
provisioner's (``SHARED_AGENT``).  The discipline is every op's, ``xce.model.ops``: an intent is
recorded before the provider is called, a result is accepted only from the agent and epoch that
hold the op's intent, and failures are retried with backoff until ``max_attempts``.  This module is
the snapshots' ``Book`` for it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xce.agentnames import SHARED_AGENT
from xce.model import ops
from xce.model.entities.ops import Op
from xce.model.entities.snapshots import Snapshot
from xce.model.facts import Fact, SnapshotOpFailed, SnapshotOpIntent, SnapshotOpSucceeded
from xce.model.ops import OpenOp
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig

__all__ = ["SNAPSHOT_OPS", "SnapshotResult", "detaching", "due_ops", "held_ops", "next_due", "record_intent", "record_result"]


@dataclass(frozen=True)
class SnapshotResult:
    """What the provisioner reports about one snapshot op."""

    op_id: str
    snapshot_id: int
    ok: bool
    handle: str | None = None
    size_bytes: int | None = None
    message: str = ""
    code: str = ""
    retryable: bool = True
    stderr_tail: str = ""
    used_bytes: int | None = None


class SnapshotOps:
    """The snapshots' ``ops.Book``: ``model.open_snapshot_ops`` indexes the snapshots with an open op."""

    noun = "snapshot"
    owner_field = "snapshot_id"
    intent_fact = SnapshotOpIntent
    failure_fact = SnapshotOpFailed

    def open(self, model: State) -> Iterator[OpenOp[Snapshot]]:
        for snapshot_id in sorted(model.open_snapshot_ops):
            snap = model.snapshots[snapshot_id]
            if snap.op is not None and not detaching(model, snap):
                yield OpenOp(snap, snap.op, None, SHARED_AGENT)

    def find(self, model: State, owner_id: int, op_id: str) -> OpenOp[Snapshot] | None:
        snap = model.snapshots.get(owner_id)
        if snap is None or snap.op is None or snap.op.op_id != op_id:
            return None
        return OpenOp(snap, snap.op, None, SHARED_AGENT)

    def success_fact(self, result: SnapshotResult, message: str, now: float) -> Fact:
        r = result
        return SnapshotOpSucceeded(time=now, snapshot_id=r.snapshot_id, op_id=r.op_id, handle=r.handle,
                                   size_bytes=r.size_bytes, message=message, used_bytes=r.used_bytes)


SNAPSHOT_OPS = SnapshotOps()


def detaching(model: State, snap: Snapshot) -> bool:
    """A preempted run's snapshot waits while an op of that run's attachments of its claim is open (their
    detach: the run's last writes are in before the snapshot is taken; a detach that failed for good
    holds it back no longer)."""
    if snap.job_id is None or not snap.being_made or (snap.op is not None and snap.op.epoch is not None):
        return False
    claim = model.claims.get(snap.claim_id)
    return claim is not None and any((a.job_id, a.run) == (snap.job_id, snap.run) and a.op is not None
                                     for a in claim.attachments)


def due_ops(model: State, agent: str, now: float, limit: int = 1000) -> list[tuple[Snapshot, Op]]:
    """Snapshot ops the provisioner should run now (``ops.due``)."""
    return [(o.owner, o.op) for o in ops.due(SNAPSHOT_OPS, model, agent, now, limit)]


def held_ops(model: State, agent: str, limit: int = 1000) -> list[tuple[Snapshot, Op]]:
    """Open snapshot ops whose intent this agent's current epoch holds (``ops.held``)."""
    return [(o.owner, o.op) for o in ops.held(SNAPSHOT_OPS, model, agent, limit)]


def next_due(model: State, agent: str) -> float | None:
    return ops.next_due(SNAPSHOT_OPS, model, agent)


def record_intent(model: State, agent: str, epoch: int, op_id: str, snapshot_id: int, now: float) -> list[Fact]:
    return ops.record_intent(SNAPSHOT_OPS, model, agent, epoch, op_id, snapshot_id, now)


def record_result(model: State, cfg: ClaimsConfig, agent: str, epoch: int, r: SnapshotResult, now: float,
                  rng: random.Random | None = None) -> list[Fact]:
    """Only the agent that holds the op's intent, in its epoch, may report it (``ops.record_result``)."""
    return ops.record_result(SNAPSHOT_OPS, model, cfg, agent, epoch, r, now, rng)
