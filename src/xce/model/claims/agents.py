"""Claim agents' side of the model: leases and epochs, the ops due to an agent, intents, results.

An agent (the provisioner, or ``node:HOST`` in a worker) takes a lease (a new
epoch), fetches its due ops, commits an intent for each before acting, and
reports each result.  A result is accepted only from the agent that holds the
op's intent, in the intent's epoch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.errors import Conflict
from xce.model import facts as F
from xce.model.entities.claims import Attachment, Claim
from xce.model.entities.ops import Op
from xce.model.facts import Fact
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig


def lease(model: State, agent: str, holder: str, now: float) -> tuple[list[Fact], int]:
    """A (re)started agent takes a new epoch; reports from older epochs are refused from now on."""
    epoch = model.agent_epochs.get(agent, 0) + 1
    return [F.AgentLeased(time=now, agent=agent, epoch=epoch, holder=holder)], epoch


def check_epoch(model: State, agent: str, epoch: int) -> None:
    current = model.agent_epochs.get(agent)
    if current != epoch:
        raise Conflict(f"stale epoch {epoch} for agent {agent}: the current epoch is {current}",
                       code="stale_epoch")


def due_ops(model: State, agent: str, now: float,
            limit: int = 1000) -> list[tuple[Claim, Op, Attachment | None]]:
    """Ops this agent should run now: never intended, or intended by an older epoch (the agent
    restarted: re-drive with the same op_id), and not waiting for a retry."""
    epoch = model.agent_epochs.get(agent)
    out = []
    for claim_id in sorted(model.open_ops):
        claim = model.claims[claim_id]
        for op, attachment in claim.open_ops():
            if claim.agent_for(attachment) != agent:
                continue
            if op.epoch is not None and op.epoch == epoch:
                continue  # in flight with the current agent
            if op.next_retry is not None and op.next_retry > now:
                continue
            out.append((claim, op, attachment))
        if len(out) >= limit:
            break
    return out[:limit]


def held_ops(model: State, agent: str, limit: int = 1000) -> list[tuple[Claim, Op, Attachment | None]]:
    """Open ops whose intent this agent's current epoch holds: what an agent that may have missed the
    answer that handed them out runs (those it is not running already: op ids tell)."""
    epoch = model.agent_epochs.get(agent)
    out = []
    for claim_id in sorted(model.open_ops):
        claim = model.claims[claim_id]
        for op, attachment in claim.open_ops():
            if op.agent == agent and op.epoch is not None and op.epoch == epoch:
                out.append((claim, op, attachment))
        if len(out) >= limit:
            break
    return out[:limit]


def next_due(model: State, agent: str) -> float | None:
    """When the earliest waiting retry of this agent falls due (to bound its long-poll)."""
    times = [op.next_retry for cid in model.open_ops for op, a in model.claims[cid].open_ops()
             if op.next_retry is not None and model.claims[cid].agent_for(a) == agent]
    return min(times) if times else None


def record_intent(model: State, agent: str, epoch: int, op_id: str, claim_id: int, now: float) -> list[Fact]:
    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    if found is None:
        raise Conflict(f"op {op_id} is not open on claim {claim_id}", code="op_gone")
    if claim.agent_for(found[1]) != agent:
        raise Conflict(f"op {op_id} of claim {claim_id} is not {agent}'s to run", code="op_gone")
    if found[0].epoch == epoch:
        return []  # already recorded for this epoch
    return [F.ClaimOpIntent(time=now, claim_id=claim_id, op_id=op_id, agent=agent, epoch=epoch)]


def retry_delay(cfg: ClaimsConfig, attempt: int, rng: random.Random) -> float:
    base = min(cfg.retry_cap, cfg.retry_base * 2 ** max(0, attempt - 1))
    return base * rng.uniform(1 - cfg.retry_jitter, 1 + cfg.retry_jitter)


@dataclass(frozen=True)
class OpResult:
    """What an agent reports about one op: success with what the provider made, or an error."""

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


def record_result(model: State, cfg: ClaimsConfig, agent: str, epoch: int, result: OpResult, now: float,
                  rng: random.Random | None = None) -> list[Fact]:
    """An agent's report on one op.  Only the agent that holds the op's intent may report it: the same
    agent *and* the same epoch (epochs are per agent, so every agent has an epoch 1: the epoch alone
    would let one host's worker report another's op)."""
    r = result
    claim = model.claims.get(r.claim_id)
    found = claim.find_op(r.op_id) if claim is not None else None
    if found is None:
        return []  # OBSERVATION: decided already (a duplicate report): nothing to do
    op = found[0]
    if op.agent != agent:
        raise Conflict(f"op {r.op_id} of claim {r.claim_id} is not {agent}'s: its intent is "
                       f"{op.agent or 'not recorded'}", code="not_your_op")
    if op.epoch != epoch:
        raise Conflict(f"op {r.op_id} was not started by epoch {epoch}", code="stale_epoch")
    if r.ok:
        return [F.ClaimOpSucceeded(time=now, claim_id=r.claim_id, op_id=r.op_id, handle=r.handle,
                                   size_bytes=r.size_bytes, reachable_hosts=r.reachable_hosts,
                                   host_labels=dict(r.host_labels), path=r.path, message=r.message[:1024])]
    next_retry = None
    if r.retryable and op.attempts < cfg.max_attempts:
        next_retry = now + retry_delay(cfg, op.attempts, rng or random.Random())
    return [F.ClaimOpFailed(time=now, claim_id=r.claim_id, op_id=r.op_id, code=r.code or "ERROR",
                            message=r.message[:2048], retryable=r.retryable, next_retry=next_retry,
                            stderr_tail=r.stderr_tail[-2048:])]
