"""What claim agents are handed and what their calls mean, across every kind of op.

Each kind of op keeps its own ``Book`` (``claims.agents``, ``snapshots.agents``) under the one
discipline (``xce.model.ops``); an agent's calls name ops of every kind at once, and this module
decides them whole, so the routes (``xce.api.agents``) only translate HTTP:

- ``work``: the ops due to an agent now (claims' first), the orphans due for release (the
  provisioner's), and for a node agent that asks, the runs its host may start (``dispatch``);
- ``take``: that work, each op with its intent committed in the same decision, so an op is handed
  out once per epoch and its intent is durable before the agent hears of it;
- ``intents``: the intents an agent asks for, each accepted or refused with why;
- ``report``: results of every kind (what each means for the job its claim serves:
  ``job_claims.agent_report``), orphans released, and the readings that count (a claim's bytes
  used, from an op the agent held: ``controller/observed.py`` keeps them, not the log);
- ``inventory``: what a provider listed: orphans seen and gone; ``takes_readings``: whether its
  capacity and used bytes are the class's to keep;
- ``capabilities``: what each class's provider can do, a fact per change.

Every call but the lease names the agent's epoch: one from an older epoch (an agent restarted or
replaced) is refused whole with ``stale_epoch``, so a late call can never change anything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xce.agentnames import SHARED_AGENT, node_host
from xce.errors import Conflict
from xce.model import claims
from xce.model.capabilities import ClassReport, report_classes
from xce.model.claims.replicas import vanished
from xce.model import dispatch, job_claims, ops
from xce.model import snapshots
from xce.model.entities.claims import Claim
from xce.model.entities.jobs import Job
from xce.model.entities.orphans import Orphan
from xce.model.entities.snapshots import Snapshot
from xce.model.facts import Fact, OrphanResolved
from xce.model.ops import OpenOp
from xce.model.orphans import due_for_release
from xce.model.orphans import inventory as orphan_inventory
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimsConfig, Config

__all__ = ["IntentRef", "Reported", "Work", "capabilities", "has_work", "held", "holds_transfer", "intents", "inventory", "next_due",
           "record_intents", "report", "take", "takes_readings", "work"]


@dataclass
class Work:
    """What an agent is handed: its ops due (claims' and attachments', then snapshots'), orphans due for
    release, and (``take`` with ``dispatch``) the runs its host may start now."""

    claim_ops: list[OpenOp[Claim]] = field(default_factory=list)
    replica_ops: list[OpenOp[Claim]] = field(default_factory=list)  # a node-local claim's, on this agent's host
    snapshot_ops: list[OpenOp[Snapshot]] = field(default_factory=list)
    orphans: list[Orphan] = field(default_factory=list)
    dispatch: list[Job] | None = None


BOOKS: tuple[ops.Book[Any, Any], ...] = (claims.CLAIM_OPS, claims.REPLICA_OPS, snapshots.SNAPSHOT_OPS)


def claims_book(model: State, claim_id: int, op_id: str) -> ops.Book[Claim, Any]:
    """Whose op a claim's op id is: one of its replicas' (a node-local claim), or the claim's own or an
    attachment's.  Agents name both by claim and op id."""
    return claims.REPLICA_OPS if claims.REPLICA_OPS.find(model, claim_id, op_id) is not None else claims.CLAIM_OPS


def _releases_orphans(agent: str) -> bool:
    """The provisioner releases shared objects' orphans, each node agent its host's."""
    return agent == SHARED_AGENT or node_host(agent) is not None


def work(model: State, agent: str, now: float, limit: int, orphan_grace: float) -> Work:
    """The ops due to ``agent`` now, at most ``limit`` of them, and the orphans due that it releases
    (the provisioner's, or a node agent's host's)."""
    out = Work(claim_ops=ops.due(claims.CLAIM_OPS, model, agent, now, limit))
    out.replica_ops = ops.due(claims.REPLICA_OPS, model, agent, now, limit - len(out.claim_ops))
    out.snapshot_ops = ops.due(snapshots.SNAPSHOT_OPS, model, agent, now,
                               limit - len(out.claim_ops) - len(out.replica_ops))
    if _releases_orphans(agent):
        out.orphans = due_for_release(model, orphan_grace, now, node_host(agent))[:limit]
    return out


def has_work(model: State, agent: str, now: float, orphan_grace: float) -> bool:
    return bool(any(ops.due(book, model, agent, now, 1) for book in BOOKS)
                or _releases_orphans(agent) and due_for_release(model, orphan_grace, now, node_host(agent)))


def next_due(model: State, agent: str) -> float | None:
    """When the agent's earliest waiting retry falls due, of any kind (None: none waits)."""
    due = [t for t in (ops.next_due(book, model, agent) for book in BOOKS) if t is not None]
    return min(due) if due else None


def held(model: State, agent: str, limit: int) -> Work:
    """The open ops whose intents the agent's current epoch holds, of every kind (``ops.held``)."""
    out = Work(claim_ops=ops.held(claims.CLAIM_OPS, model, agent, limit))
    out.replica_ops = ops.held(claims.REPLICA_OPS, model, agent, limit - len(out.claim_ops))
    out.snapshot_ops = ops.held(snapshots.SNAPSHOT_OPS, model, agent, limit - len(out.claim_ops) - len(out.replica_ops))
    return out


@dataclass(frozen=True)
class IntentRef:
    """An op an agent means to run: a claim's (or attachment's), or with ``snapshot_id`` a snapshot's
    (``claim_id`` is then the claim it is of)."""

    op_id: str
    claim_id: int
    snapshot_id: int | None = None


def holds_transfer(model: State, agent: str, epoch: int, claim_id: int, op_id: str) -> bool:
    """Whether ``agent`` in ``epoch`` holds the open op ``op_id`` of the claim or of one of its replicas:
    whose transfer readings (bytes copied) count."""
    book = claims_book(model, claim_id, op_id)
    o = ops.holder(book, model, agent, epoch, claim_id, op_id)
    return o is not None and (o.part is None or book is claims.REPLICA_OPS)


def record_intents(model: State, agent: str, epoch: int, refs: list[IntentRef],
                   now: float) -> tuple[list[Fact], list[str], dict[str, str]]:
    """The intents of ``refs``' ops for ``agent`` in ``epoch``: (facts, accepted op ids, refused ones: why)."""
    facts: list[Fact] = []
    accepted: list[str] = []
    refused: dict[str, str] = {}
    for ref in refs:
        try:
            if ref.snapshot_id is not None:
                facts += ops.record_intent(snapshots.SNAPSHOT_OPS, model, agent, epoch, ref.op_id, ref.snapshot_id, now)
            else:
                facts += ops.record_intent(claims_book(model, ref.claim_id, ref.op_id), model, agent, epoch,
                                           ref.op_id, ref.claim_id, now)
            accepted.append(ref.op_id)
        except Conflict as e:
            refused[ref.op_id] = e.message
    return facts, accepted, refused


def intents(model: State, agent: str, epoch: int, refs: list[IntentRef],
            now: float) -> tuple[list[Fact], list[str], dict[str, str]]:
    """``POST .../intents``: the agent's epoch checked, then ``record_intents``."""
    ops.check_epoch(model, agent, epoch)
    return record_intents(model, agent, epoch, refs, now)


def take(model: State, agent: str, epoch: int, limit: int, now: float, orphan_grace: float,
         dispatch_runs: bool = False) -> tuple[list[Fact], Work]:
    """The ops due to ``agent`` now, each with its intent.  Decided in the commit order, on the model
    every earlier decision has changed, so an op is handed out once per epoch, and its intent is
    durable before the agent hears of it.  ``dispatch_runs``: also the node agent's host's runs that
    may start (the readiness gate is open), as the worker's own poll would be told."""
    ops.check_epoch(model, agent, epoch)
    out = work(model, agent, now, limit, orphan_grace)
    refs = [IntentRef(o.op.op_id, o.owner.id) for o in out.claim_ops + out.replica_ops]
    refs += [IntentRef(o.op.op_id, o.owner.claim_id, o.owner.id) for o in out.snapshot_ops]
    facts, accepted, _ = record_intents(model, agent, epoch, refs, now)
    taken = set(accepted)
    out.claim_ops = [o for o in out.claim_ops if o.op.op_id in taken]
    out.replica_ops = [o for o in out.replica_ops if o.op.op_id in taken]
    out.snapshot_ops = [o for o in out.snapshot_ops if o.op.op_id in taken]
    host = node_host(agent)
    if dispatch_runs and host is not None:
        out.dispatch = dispatch.work_for(model, host).start
    return facts, out


@dataclass(frozen=True)
class Reported:
    """What an agent's report decided: its facts, why any result was refused, and the readings it
    carried that count: (claim id, bytes used) from ops this agent held in this epoch.  Readings are
    not facts (``controller/observed.py`` says why): the caller keeps them once the facts are durable."""

    facts: list[Fact]
    refused: dict[str, str]
    used: list[tuple[int, int]]


def report(model: State, cfg: ClaimsConfig, agent: str, epoch: int, results: list[claims.OpResult],
           orphans_released: list[str], now: float, rng: random.Random) -> Reported:
    """An agent's report: its results of every kind (a result with ``snapshot_id`` is a snapshot's op),
    and the orphans it released (the provisioner's, a node agent's host's)."""
    ops.check_epoch(model, agent, epoch)
    claim_results: list[claims.OpResult] = []
    replica_results: list[claims.OpResult] = []
    for r in results:
        if r.snapshot_id is None:
            mine = replica_results if claims_book(model, r.claim_id, r.op_id) is claims.REPLICA_OPS else claim_results
            mine.append(r)
    # a claim's used bytes as its op's reply gave them, only for an op this agent holds in this epoch
    # (looked at before the report closes it)
    used = [(r.claim_id, r.used_bytes) for r in claim_results
            if r.ok and r.used_bytes is not None and claims.holds(model, agent, epoch, r.claim_id, r.op_id)]
    facts, refused = job_claims.agent_report(model, cfg, agent, epoch, claim_results, now, rng)
    for r in replica_results:
        try:
            facts += ops.record_result(claims.REPLICA_OPS, model, cfg, agent, epoch, r, now, rng)
        except Conflict as e:
            refused[r.op_id] = e.message
    for r in results:
        if r.snapshot_id is None:
            continue
        result = snapshots.SnapshotResult(op_id=r.op_id, snapshot_id=r.snapshot_id, ok=r.ok, handle=r.handle,
                                          size_bytes=r.size_bytes, message=r.message, code=r.code,
                                          retryable=r.retryable, stderr_tail=r.stderr_tail,
                                          used_bytes=r.used_bytes if r.ok else None)
        try:
            facts += ops.record_result(snapshots.SNAPSHOT_OPS, model, cfg, agent, epoch, result, now, rng)
        except Conflict as e:
            refused[r.op_id] = e.message
    if _releases_orphans(agent):
        facts += [OrphanResolved(time=now, handle=h, how="released") for h in orphans_released
                  if h in model.orphans and model.orphans[h].host == node_host(agent)]
    return Reported(facts, refused, used)


def takes_readings(config: Config, agent: str, class_name: str, provider: str) -> bool:
    """Whether an inventory's readings (the class's capacity, its claims' bytes used) are kept: only the
    provisioner's, from the provider the class names."""
    cls = config.claim_class(class_name)
    return agent == SHARED_AGENT and cls is not None and cls.provider == provider


def inventory(model: State, agent: str, epoch: int, class_name: str, provider: str, objects: list[dict[str, Any]],
              now: float) -> list[Fact]:
    """What the provider of ``class_name`` listed (``orphans.inventory``: orphans seen, and gone); from a
    node agent, its host's node objects, and so also its READY replicas whose object is gone
    (``replicas.vanished``)."""
    ops.check_epoch(model, agent, epoch)
    host = node_host(agent)
    facts = orphan_inventory(model, class_name, provider, objects, now, host)
    if host is not None:
        facts += vanished(model, host, class_name,
                                          {str(o.get("handle")) for o in objects if o.get("handle")}, now)
    return facts


def capabilities(model: State, config: Config, agent: str, epoch: int, reports: list[ClassReport],
                 now: float) -> tuple[list[Fact], dict[str, str]]:
    """What each class's provider can do (``capabilities.report_classes``: a fact per change)."""
    ops.check_epoch(model, agent, epoch)
    return report_classes(model, config, agent, reports, now)
