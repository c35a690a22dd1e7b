"""Claim agents' side of claims: where a claim's ops are, who runs them, and the facts that record
them.  The discipline (leases and epochs, due ops, intents, fenced results, retries) is every op's:
``xce.model.ops``; this module is the claims' ``Book`` for it, and the entry points that name claims.

A claim's own op (create, stage-in, populate, expand, stage-out, release) is run by the agent of
its scope: the provisioner, or ``node:HOST`` for a node-scope claim on HOST; an attachment's
(attach, detach) by the node agent of the attachment's host, unless the claim is shared.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.model import ops
from xce.model.entities.claims import Attachment, Claim, Replica
from xce.model.entities.ops import Op, OpKind
from xce.model.entities.snapshots import Snapshot
from xce.model.facts import ClaimOpFailed, ClaimOpIntent, ClaimOpSucceeded, Fact
from xce.model.ops import OpenOp, check_epoch, lease, retry_delay
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig

__all__ = [
    "CLAIM_OPS", "OpResult", "check_epoch", "due_ops", "held_ops", "holds", "lease", "next_due", "record_intent",
    "record_result", "retry_delay", "snapshot_first",
]


@dataclass(frozen=True)
class OpResult:
    """What an agent reports about one op: success with what the provider made, or an error.  A
    report may carry snapshots' results too (``snapshot_id``; ``claim_id`` is then the claim the
    snapshot is of): ``xce.model.agents.report`` hands those to the snapshots' book."""

    op_id: str
    claim_id: int
    ok: bool
    handle: str | None = None
    size_bytes: int | None = None
    reachable_hosts: list[str] | None = None  # None: every host
    host_labels: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    message: str = ""
    code: str = ""
    retryable: bool = True
    stderr_tail: str = ""
    snapshot_id: int | None = None
    used_bytes: int | None = None  # what the claim (or snapshot) holds, as the provider's reply said


class ClaimOps:
    """The claims' ``ops.Book``: ``model.open_ops`` indexes the claims with an open op."""

    noun = "claim"
    owner_field = "claim_id"
    intent_fact = ClaimOpIntent
    failure_fact = ClaimOpFailed

    def open(self, model: State) -> Iterator[OpenOp[Claim]]:
        for claim_id in sorted(model.open_ops):
            claim = model.claims[claim_id]
            gated = snapshot_first(model, claim) is not None
            for op, attachment in claim.open_ops():
                if gated and op.kind is OpKind.ATTACH and op.epoch is None:
                    continue  # the snapshot first (a preempted run's), then the next attachment
                yield OpenOp(claim, op, attachment, claim.agent_for(attachment))

    def find(self, model: State, owner_id: int, op_id: str) -> OpenOp[Claim] | None:
        claim = model.claims.get(owner_id)
        found = claim.find_op(op_id) if claim is not None else None
        if claim is None or found is None:
            return None
        op, attachment = found
        return OpenOp(claim, op, attachment, claim.agent_for(attachment))

    def success_fact(self, result: OpResult, message: str, now: float) -> Fact:
        r = result
        return ClaimOpSucceeded(time=now, claim_id=r.claim_id, op_id=r.op_id, handle=r.handle,
                                size_bytes=r.size_bytes, reachable_hosts=r.reachable_hosts,
                                host_labels=dict(r.host_labels), path=r.path, message=message)


CLAIM_OPS = ClaimOps()


def snapshot_first(model: State, claim: Claim) -> Snapshot | None:
    """The snapshot an attachment of ``claim`` waits for (None: none): one opened because a run that
    had the claim attached was preempted (``xce.model.preempt_snapshots``), while it is being made.
    READY, FAILED for good or deleted, it holds nothing back."""
    if claim.snapshot_before_attach is None:
        return None
    snap = model.snapshots.get(claim.snapshot_before_attach)
    return snap if snap is not None and snap.being_made else None


def due_ops(model: State, agent: str, now: float,
            limit: int = 1000) -> list[tuple[Claim, Op, Attachment | None]]:
    """Claim and attachment ops this agent should run now (``ops.due``)."""
    return [(o.owner, o.op, o.part) for o in ops.due(CLAIM_OPS, model, agent, now, limit)
            if not isinstance(o.part, Replica)]  # (none is: replicas' ops are their own book's)


def held_ops(model: State, agent: str, limit: int = 1000) -> list[tuple[Claim, Op, Attachment | None]]:
    """Open claim and attachment ops whose intent this agent's current epoch holds (``ops.held``)."""
    return [(o.owner, o.op, o.part) for o in ops.held(CLAIM_OPS, model, agent, limit)
            if not isinstance(o.part, Replica)]


def next_due(model: State, agent: str) -> float | None:
    return ops.next_due(CLAIM_OPS, model, agent)


def holds(model: State, agent: str, epoch: int, claim_id: int, op_id: str) -> bool:
    """The claim's own op ``op_id`` is open and its intent is ``agent``'s in ``epoch``: whose readings
    of it (bytes copied, bytes used) count."""
    o = ops.holder(CLAIM_OPS, model, agent, epoch, claim_id, op_id)
    return o is not None and o.part is None


def record_intent(model: State, agent: str, epoch: int, op_id: str, claim_id: int, now: float) -> list[Fact]:
    return ops.record_intent(CLAIM_OPS, model, agent, epoch, op_id, claim_id, now)


def record_result(model: State, cfg: ClaimsConfig, agent: str, epoch: int, result: OpResult, now: float,
                  rng: random.Random | None = None) -> list[Fact]:
    """An agent's report on one claim or attachment op (``ops.record_result``: fenced by agent and epoch)."""
    return ops.record_result(CLAIM_OPS, model, cfg, agent, epoch, result, now, rng)
