"""One discipline for every provider op: a claim's, an attachment's, a snapshot's, and each replica's
of a node-local claim.  A fencing or retry fix is made here, once.

An *op* is provider work with a stable id (``Op``, ``xce.model.entities.ops``).  An *agent* (the
provisioner, or ``node:HOST`` in a worker: ``xce.agentnames``) runs the ops that are its own::

    lease    a (re)started agent takes a new epoch (``lease``); every later call carries it and
             one from an older epoch is refused whole (``check_epoch``)
    due      an op is due to the agent that runs it when no intent of the agent's current epoch
             holds it and no retry is waiting (``due``; ``next_due`` bounds a long-poll)
    intent   committed before the provider is called, once per epoch (``record_intent``); its fold
             counts the attempt and hands the op to that agent and epoch (``fold_intent``)
    held     the open ops the agent's current epoch holds: what an agent that lost an answer runs
             again, by the same op id (``held``)
    result   accepted only from the agent *and* epoch that hold the intent (epochs are per agent:
             every agent has an epoch 1); a report of an op decided already is nothing; a failure
             is retried with backoff until ``max_attempts`` (``record_result``); the folds keep
             every attempt (``fold_success``, ``fold_failure``)

Providers are idempotent by op id (DESIGN §6): an op re-driven after a restart, or retried, keeps
its id.  What differs between kinds of op owners is only where their open ops are, who runs them,
and which facts record them: each kind gives a ``Book`` (``xce.model.claims.agents``,
``xce.model.claims.replicas``, ``xce.model.snapshots.agents``); the decisions and fold steps here are
the same for all.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Generic, Protocol, TypeVar

from xce.errors import Conflict
from xce.model.entities.claims import Attachment, Replica
from xce.model.entities.ops import Op, OpKind
from xce.model.facts import AgentLeased, Fact
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig

__all__ = [
    "Book", "OpenOp", "Outcome", "apply_agent_leased", "check_epoch", "due", "fold_failure", "fold_intent",
    "fold_success", "held", "holder", "lease", "new_op", "next_due", "record_intent", "record_result",
    "retry_delay",
]

Owner = TypeVar("Owner")  # a claim, a snapshot (in the functions below)
Owner_co = TypeVar("Owner_co", covariant=True)  # (in the types: a book of claims is a book of owners)
Result = TypeVar("Result", bound="Outcome", contravariant=True)

MESSAGE_MAX = 1024  # a success's message, as kept
ERROR_MAX = 2048  # a failure's message, and the tail of the provider's stderr


@dataclass(frozen=True)
class OpenOp(Generic[Owner_co]):
    """An open op where it lives: its owner (a claim, a snapshot), the part of the owner whose op it
    is (an attachment, a replica; None: the owner's own), and the agent that runs it."""

    owner: Owner_co
    op: Op
    part: Attachment | Replica | None
    runner: str


class Outcome(Protocol):
    """What every agent's report on an op says, whatever the op (each kind adds what it made)."""

    @property
    def op_id(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def code(self) -> str: ...
    @property
    def message(self) -> str: ...
    @property
    def retryable(self) -> bool: ...
    @property
    def stderr_tail(self) -> str: ...


class Book(Protocol[Owner_co, Result]):
    """Where one kind of owner keeps its open ops, and the facts that record them.  The facts of an
    intent and of a failure have the same fields for every kind but the one naming the owner
    (``owner_field``, which names it in the kind's results too); a success says what was made."""

    @property
    def noun(self) -> str:
        """How messages name an owner: "claim", "snapshot"."""
        ...

    @property
    def owner_field(self) -> str:
        """"claim_id", "snapshot_id"."""
        ...

    @property
    def intent_fact(self) -> Callable[..., Fact]:
        """(time, <owner_field>, op_id, agent, epoch) -> the intent's fact."""
        ...

    @property
    def failure_fact(self) -> Callable[..., Fact]:
        """(time, <owner_field>, op_id, code, message, retryable, next_retry, stderr_tail) -> a failure's fact."""
        ...

    def open(self, model: State) -> Iterator[OpenOp[Owner_co]]:
        """Every open op, in owner id order."""
        ...

    def find(self, model: State, owner_id: int, op_id: str) -> OpenOp[Owner_co] | None:
        """The open op ``op_id`` of owner ``owner_id`` (None: decided already, or unknown)."""
        ...

    def success_fact(self, result: Result, message: str, now: float) -> Fact:
        """The fact of a success: what the provider made, as this kind records it."""
        ...


# ---------------------------------------------------------------- agents and their epochs


def lease(model: State, agent: str, holder: str, now: float) -> tuple[list[Fact], int]:
    """A (re)started agent takes a new epoch; reports from older epochs are refused from now on."""
    epoch = model.agent_epochs.get(agent, 0) + 1
    return [AgentLeased(time=now, agent=agent, epoch=epoch, holder=holder)], epoch


def check_epoch(model: State, agent: str, epoch: int) -> None:
    current = model.agent_epochs.get(agent)
    if current != epoch:
        raise Conflict(f"stale epoch {epoch} for agent {agent}: the current epoch is {current}",
                       code="stale_epoch")


def apply_agent_leased(model: State, f: AgentLeased) -> None:
    model.agent_epochs[f.agent] = f.epoch


# ---------------------------------------------------------------- decisions


def due(book: Book[Owner, Any], model: State, agent: str, now: float, limit: int = 1000) -> list[OpenOp[Owner]]:
    """Ops ``agent`` should run now: its own, never intended or intended by an older epoch (the agent
    restarted: it re-drives them with the same op id), and not waiting for a retry."""
    epoch = model.agent_epochs.get(agent)
    out: list[OpenOp[Owner]] = []
    for o in book.open(model):
        if len(out) >= limit:
            break
        if o.runner != agent:
            continue
        if o.op.epoch is not None and o.op.epoch == epoch:
            continue  # in flight with the current agent
        if o.op.next_retry is not None and o.op.next_retry > now:
            continue
        out.append(o)
    return out


def held(book: Book[Owner, Any], model: State, agent: str, limit: int = 1000) -> list[OpenOp[Owner]]:
    """Open ops whose intent this agent's current epoch holds: what an agent that may have missed the
    answer that handed them out runs (those it is not running already: op ids tell)."""
    epoch = model.agent_epochs.get(agent)
    out: list[OpenOp[Owner]] = []
    for o in book.open(model):
        if len(out) >= limit:
            break
        if o.op.agent == agent and o.op.epoch is not None and o.op.epoch == epoch:
            out.append(o)
    return out


def next_due(book: Book[Owner, Any], model: State, agent: str) -> float | None:
    """When the earliest waiting retry of this agent's ops falls due (to bound its long-poll)."""
    times = [o.op.next_retry for o in book.open(model) if o.op.next_retry is not None and o.runner == agent]
    return min(times) if times else None


def holder(book: Book[Owner, Any], model: State, agent: str, epoch: int, owner_id: int,
           op_id: str) -> OpenOp[Owner] | None:
    """The open op if its intent is ``agent``'s in ``epoch`` (None otherwise): whose word about it
    counts, for a report or a reading."""
    o = book.find(model, owner_id, op_id)
    return o if o is not None and o.op.agent == agent and o.op.epoch == epoch else None


def record_intent(book: Book[Any, Any], model: State, agent: str, epoch: int, op_id: str, owner_id: int,
                  now: float) -> list[Fact]:
    """The intent of ``agent`` in ``epoch`` to run an open op of its own (none if it holds it already)."""
    o = book.find(model, owner_id, op_id)
    if o is None:
        raise Conflict(f"op {op_id} is not open on {book.noun} {owner_id}", code="op_gone")
    if o.runner != agent:
        raise Conflict(f"op {op_id} of {book.noun} {owner_id} is not {agent}'s to run", code="op_gone")
    if o.op.epoch == epoch:
        return []  # already recorded for this epoch
    return [book.intent_fact(time=now, op_id=op_id, agent=agent, epoch=epoch, **{book.owner_field: owner_id})]


def retry_delay(cfg: ClaimsConfig, attempt: int, rng: random.Random) -> float:
    base = min(cfg.retry_cap, cfg.retry_base * 2.0 ** max(0, attempt - 1))  # a float power: int ** int is typed Any
    return base * rng.uniform(1 - cfg.retry_jitter, 1 + cfg.retry_jitter)


def record_result(book: Book[Any, Result], model: State, cfg: ClaimsConfig, agent: str, epoch: int, result: Result,
                  now: float, rng: random.Random | None = None) -> list[Fact]:
    """An agent's report on one op.  Only the agent that holds the op's intent may report it: the same
    agent *and* the same epoch (epochs are per agent, so every agent has an epoch 1: the epoch alone
    would let one host's worker report another's op)."""
    owner_id: int = getattr(result, book.owner_field)
    o = book.find(model, owner_id, result.op_id)
    if o is None:
        return []  # OBSERVATION: decided already (a duplicate report): nothing to do
    op = o.op
    if op.agent != agent:
        raise Conflict(f"op {result.op_id} of {book.noun} {owner_id} is not {agent}'s: its intent is "
                       f"{op.agent or 'not recorded'}", code="not_your_op")
    if op.epoch != epoch:
        raise Conflict(f"op {result.op_id} was not started by epoch {epoch}", code="stale_epoch")
    if result.ok:
        return [book.success_fact(result, result.message[:MESSAGE_MAX], now)]
    next_retry = None
    if result.retryable and op.attempts < cfg.max_attempts:
        next_retry = now + retry_delay(cfg, op.attempts, rng or random.Random())
    return [book.failure_fact(time=now, op_id=result.op_id, code=result.code or "ERROR",
                              message=result.message[:ERROR_MAX], retryable=result.retryable, next_retry=next_retry,
                              stderr_tail=result.stderr_tail[-ERROR_MAX:], **{book.owner_field: owner_id})]


# ---------------------------------------------------------------- fold steps (the owners' folds call them)


def new_op(prefix: str, owner_id: int, counts: dict[str, int], kind: OpKind) -> Op:
    """A new op of ``kind`` on an owner, its id ``<prefix><owner>.<kind>.<n>`` (``n``: how many of that
    kind the owner has opened, ``counts`` kept on it): stable across retries and restarts."""
    n = counts.get(kind.value, 0) + 1
    counts[kind.value] = n
    return Op(op_id=f"{prefix}{owner_id}.{kind.value}.{n}", kind=kind)


def fold_intent(op: Op, agent: str, epoch: int, time: float) -> dict[str, Any]:
    """An intent is durable: the attempt counts from here (a crash before the result still counts),
    and the op is that agent's in that epoch.  Returns the attempt's record."""
    op.attempts += 1
    op.agent, op.epoch, op.next_retry = agent, epoch, None
    return {"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "agent": agent, "epoch": epoch,
            "time": time, "result": "started"}


def fold_success(op: Op, time: float, message: str) -> dict[str, Any]:
    """The attempt's record of a success (the owner's fold closes the op)."""
    return {"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "time": time, "result": "ok",
            "message": message}


def fold_failure(op: Op, time: float, code: str, message: str, retryable: bool,
                 next_retry: float | None) -> dict[str, Any]:
    """A failed attempt: with a ``next_retry`` the op waits for it and needs a new intent (no epoch
    holds it); without, it failed for good and the owner's fold closes it.  Returns the attempt's
    record."""
    if next_retry is not None:
        op.epoch = None  # the next attempt needs a new intent
        op.next_retry = next_retry
    return {"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "time": time, "result": code,
            "message": message, "retryable": retryable, "next_retry": next_retry}
