"""A node-local standalone claim's replicas: their transition table, the one setter of their state,
their ops' ``Book``, and the steps the claim's folds take with them.

States (``ReplicaState``), one machine per replica, on its host::

    PENDING ──▶ PREPARING ──▶ READY ──▶ RELEASING ──▶ RELEASED
       │            │                       │
       │            ├──────────▶ RELEASING  │        (deleted between create attempts: an object may exist)
       ├──────────▶ FAILED ◀────────────────┘
       └──────────▶ RELEASED                          (deleted before its create was attempted)
                      FAILED ──(deleted)──▶ RELEASING / RELEASED
    READY ──(host lost)──▶ LOST ──(host back: its create re-driven by the same op id)──▶ PREPARING
                             └──(deleted, evicted)──▶ RELEASING
    READY ──(its object gone from its host's listing)──▶ PREPARING (populated: made again) | FAILED

A replica is PENDING until the scheduler reserves its size on its host's counter of the claim's
class (``ReplicaPlaced``), which opens its ``create`` op; a claim with a source (``--source``) then
opens its ``populate`` (still PREPARING: READY only once filled; a permanent failure is FAILED with its
error, the object kept until the claim goes).  Its host's node agent (``node:HOST``) runs its ops
(``create``: the provider's ``node_prepare``; ``populate``: rclone, as a stage-in; ``release``) under
the one discipline of every op (``xce.model.ops``): intent before action, op ids
``c<claim>.r<no>.<op>.<n>`` stable across retries and restarts, results fenced by agent and epoch,
failures retried with backoff.  The claim's own state follows from its replicas' (``xce.model.claims.lifecycle``): READY while one is READY.

A READY replica whose host is declared lost is LOST: no job is placed there.  When the host registers
again its replica's ``create`` is opened again *with the op id that made it*: the provider, idempotent by
op id, answers with the same object if it is intact, or makes it anew if it is gone; a populated claim's
``populate`` follows (rclone copies only what is missing: nothing, if it is intact).  READY again only
then.  A replica of a claim with no source cannot be filled again: its data was written by jobs.  Its
re-driven create names the object it expects (``must_exist``): its worker checks its host's listing
first, and a missing object fails it for good (``DATA_LOST``): FAILED, "object gone while host2 was
lost: its data is lost", while the other replicas serve on.  The same holds while the host is up: a
READY replica whose object its worker's orphan scan does not list (``vanished``) is made again if
populated, FAILED if not (``ReplicaObjectGone``).
"""

from __future__ import annotations

from collections.abc import Iterator

from xce.agentnames import node_agent
from xce.model import audit, ops
from xce.model.entities.claims import Claim, Replica, ReplicaState
from xce.model.entities.ops import Op, OpKind
from xce.model.facts import Fact, ReplicaObjectGone, ReplicaOpFailed, ReplicaOpIntent, ReplicaOpSucceeded
from xce.model.ops import OpenOp
from xce.model.state import State
from xce.model.transitions import check

__all__ = ["DATA_LOST", "REPLICA_OPS", "REPLICA_TRANSITIONS", "ReplicaOps", "close_op", "must_exist", "open_op",
           "set_state", "vanished"]

DATA_LOST = "DATA_LOST"  # the error code of a re-driven create whose object is gone (``must_exist``)

R = ReplicaState
REPLICA_TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    R.PENDING: frozenset({R.PREPARING, R.FAILED, R.RELEASED}),
    R.PREPARING: frozenset({R.READY, R.FAILED, R.RELEASING}),
    R.READY: frozenset({R.RELEASING, R.LOST, R.PREPARING, R.FAILED}),
    R.LOST: frozenset({R.PREPARING, R.RELEASING}),
    R.RELEASING: frozenset({R.RELEASED, R.FAILED}),
    R.FAILED: frozenset({R.RELEASING, R.RELEASED}),
    R.RELEASED: frozenset(),
}


def set_state(model: State, claim: Claim, replica: Replica, new: ReplicaState, time: float, reason: str,
              by: str) -> None:
    """The one place a replica changes state: checked, recorded in its history and the audit trail.
    A RELEASED replica gives its host's counter back."""
    check(REPLICA_TRANSITIONS, replica.state, new, f"replica of claim {claim.id} ({claim.name}) on {replica.host}",
          reason)
    old = replica.state
    replica.state = new
    replica.history.append({"state": new.value, "time": time, "reason": reason})
    audit.record(model, time, by, "claim.replica", f"claim/{claim.name}@{replica.host}", new.value,
                 f"{old.value} -> {new.value}: {reason}")
    if new is ReplicaState.RELEASED and (host := model.hosts.get(replica.host)) is not None:
        host.held_counters.pop(held_key(claim), None)


def held_key(claim: Claim) -> str:
    """A replica's entry in its host's ``held_counters`` (beside the jobs', keyed by job id)."""
    return f"claim:{claim.id}"


def open_op(model: State, claim: Claim, replica: Replica, kind: OpKind) -> None:
    replica.op = ops.new_op(f"c{claim.id}.r", replica.no, replica.op_counts, kind)
    model.open_replica_ops.add(claim.id)


def redrive_create(model: State, claim: Claim, replica: Replica) -> None:
    """Open the replica's create again under the op id of the one that made it (its host is back: the
    provider answers with that object if it is intact, else makes it again)."""
    n = replica.op_counts.get(OpKind.CREATE.value, 1)
    replica.op = Op(op_id=f"c{claim.id}.r{replica.no}.{OpKind.CREATE.value}.{n}", kind=OpKind.CREATE)
    model.open_replica_ops.add(claim.id)


def must_exist(claim: Claim, replica: Replica, op: Op) -> str | None:
    """The object a replica's create must find rather than make (None: it may make it): a re-driven
    create (its host is back) of a claim with no source, whose data only its jobs wrote."""
    if op.kind is OpKind.CREATE and replica.handle is not None and claim.populate_from is None:
        return replica.handle
    return None


def vanished(model: State, host: str, class_name: str, listed: set[str], now: float) -> list[Fact]:
    """What ``host``'s listing of ``class_name``'s node objects says of its READY replicas: each whose
    object it does not list is gone (its worker takes the listing and reports it with no op result
    between them, so a replica READY here had its object before the listing was taken)."""
    return [ReplicaObjectGone(time=now, claim_id=claim.id, host=host, handle=r.handle)
            for claim in model.claims.values() if claim.replicated and claim.class_name == class_name
            for r in claim.replicas
            if r.host == host and r.state is ReplicaState.READY and r.op is None and r.handle is not None
            and r.handle not in listed]


def close_op(model: State, claim: Claim, replica: Replica) -> None:
    replica.op = None
    if not any(r.op is not None for r in claim.replicas):
        model.open_replica_ops.discard(claim.id)


class ReplicaOps:
    """The replicas' ``ops.Book``: ``model.open_replica_ops`` indexes the claims with a replica whose op
    is open.  A replica's op is named by its claim and op id (the op id says which replica)."""

    noun = "claim"
    owner_field = "claim_id"
    intent_fact = ReplicaOpIntent
    failure_fact = ReplicaOpFailed

    def open(self, model: State) -> Iterator[OpenOp[Claim]]:
        for claim_id in sorted(model.open_replica_ops):
            claim = model.claims[claim_id]
            for r in claim.replicas:
                if r.op is not None:
                    yield OpenOp(claim, r.op, r, node_agent(r.host))

    def find(self, model: State, owner_id: int, op_id: str) -> OpenOp[Claim] | None:
        claim = model.claims.get(owner_id)
        r = claim.replica_by_op(op_id) if claim is not None else None
        if claim is None or r is None or r.op is None:
            return None
        return OpenOp(claim, r.op, r, node_agent(r.host))

    def success_fact(self, result: ops.Outcome, message: str, now: float) -> Fact:
        return ReplicaOpSucceeded(time=now, claim_id=getattr(result, "claim_id"), op_id=result.op_id,
                                  handle=getattr(result, "handle", None),
                                  size_bytes=getattr(result, "size_bytes", None),
                                  path=getattr(result, "path", None), message=message)


REPLICA_OPS = ReplicaOps()
