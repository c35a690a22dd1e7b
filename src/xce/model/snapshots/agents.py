"""The provisioner's side of snapshots: the ops due, intents and results.

Snapshots are shared storage: their ops are the provisioner's (``SHARED_AGENT``).
The discipline is the claims' (``xce.model.claims.agents``): an intent is
recorded before the provider is called, a result is accepted only from the
agent and epoch that hold the op's intent, and failures are retried with
backoff until ``max_attempts``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xce.errors import Conflict
from xce.model import facts as F
from xce.model.claims.agents import retry_delay
from xce.agentnames import SHARED_AGENT
from xce.model.entities.ops import Op
from xce.model.entities.snapshots import Snapshot
from xce.model.facts import Fact
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig


def due_ops(model: State, agent: str, now: float, limit: int = 1000) -> list[tuple[Snapshot, Op]]:
    """Snapshot ops the provisioner should run now (as ``claims.due_ops``)."""
    if agent != SHARED_AGENT:
        return []
    epoch = model.agent_epochs.get(agent)
    out = []
    for snapshot_id in sorted(model.open_snapshot_ops):
        if len(out) >= limit:
            break
        snap = model.snapshots[snapshot_id]
        op = snap.op
        if op is None or op.epoch is not None and op.epoch == epoch:
            continue
        if op.next_retry is not None and op.next_retry > now:
            continue
        out.append((snap, op))
    return out


def held_ops(model: State, agent: str, limit: int = 1000) -> list[tuple[Snapshot, Op]]:
    """Open snapshot ops whose intent this agent's current epoch holds (as ``claims.held_ops``)."""
    epoch = model.agent_epochs.get(agent)
    out = []
    for snapshot_id in sorted(model.open_snapshot_ops):
        op = model.snapshots[snapshot_id].op
        if op is not None and op.agent == agent and op.epoch is not None and op.epoch == epoch:
            out.append((model.snapshots[snapshot_id], op))
        if len(out) >= limit:
            break
    return out


def next_due(model: State, agent: str) -> float | None:
    if agent != SHARED_AGENT:
        return None
    times = [op.next_retry for sid in model.open_snapshot_ops
             if (op := model.snapshots[sid].op) is not None and op.next_retry is not None]
    return min(times) if times else None


def record_intent(model: State, agent: str, epoch: int, op_id: str, snapshot_id: int, now: float) -> list[Fact]:
    snap = model.snapshots.get(snapshot_id)
    if snap is None or snap.op is None or snap.op.op_id != op_id:
        raise Conflict(f"op {op_id} is not open on snapshot {snapshot_id}", code="op_gone")
    if agent != SHARED_AGENT:
        raise Conflict(f"op {op_id} of snapshot {snapshot_id} is not {agent}'s to run", code="op_gone")
    if snap.op.epoch == epoch:
        return []  # already recorded for this epoch
    return [F.SnapshotOpIntent(time=now, snapshot_id=snapshot_id, op_id=op_id, agent=agent, epoch=epoch)]


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


def record_result(model: State, cfg: ClaimsConfig, agent: str, epoch: int, r: SnapshotResult, now: float,
                  rng: random.Random | None = None) -> list[Fact]:
    """Only the agent that holds the op's intent, in its epoch, may report it."""
    snap = model.snapshots.get(r.snapshot_id)
    if snap is None or snap.op is None or snap.op.op_id != r.op_id:
        return []  # OBSERVATION: decided already (a duplicate report): nothing to do
    op = snap.op
    if op.agent != agent:
        raise Conflict(f"op {r.op_id} of snapshot {r.snapshot_id} is not {agent}'s: its intent is "
                       f"{op.agent or 'not recorded'}", code="not_your_op")
    if op.epoch != epoch:
        raise Conflict(f"op {r.op_id} was not started by epoch {epoch}", code="stale_epoch")
    if r.ok:
        return [F.SnapshotOpSucceeded(time=now, snapshot_id=r.snapshot_id, op_id=r.op_id, handle=r.handle,
                                      size_bytes=r.size_bytes, message=r.message[:1024], used_bytes=r.used_bytes)]
    next_retry = None
    if r.retryable and op.attempts < cfg.max_attempts:
        next_retry = now + retry_delay(cfg, op.attempts, rng or random.Random())
    return [F.SnapshotOpFailed(time=now, snapshot_id=r.snapshot_id, op_id=r.op_id, code=r.code or "ERROR",
                               message=r.message[:2048], retryable=r.retryable, next_retry=next_retry,
                               stderr_tail=r.stderr_tail[-2048:])]
