"""How a claim changes: the transition tables of claims and attachments, and the folds.  The only
place a claim's or an attachment's state changes.

States (``ClaimState``)::

    PENDING ──▶ PREPARING ──▶ READY ──▶ RELEASING ──▶ RELEASED
       │            │           │            │
       │            ▼           └──(retain)──┼──────▶ RELEASED (retained: the object is kept)
       └──────────▶ FAILED ◀─────────────────┘
                      └──(delete)──▶ RELEASING / RELEASED

Resizes of a READY claim (``ResizeState``; the claim stays READY and usable)::

    REQUESTED ──▶ EXPANDING ──▶ DONE       (the claim's size is the new one)
        │             │
        └─────────────┴───────▶ FAILED     (refused, out of attempts, or cancelled: the old size stays)

A resize is asked (quota charged), the scheduler reserves its growth in the
claim's pool like a new claim's size (``ClaimResizeReserved``), and that opens
the claim's ``expand`` op, run and retried like any other.

A claim's provider work is an *op* (``create``, ``expand`` or ``release``) with a stable
``op_id`` (``c<claim>.<op>.<n>``), run under the discipline of every op
(``xce.model.ops``).  The scheduler places a PENDING claim in a pool, which
opens its ``create`` op; an agent commits an intent (PENDING →
PREPARING), calls the provider, and reports: success moves the claim on,
a retryable failure schedules the next attempt (same op_id: providers are
idempotent by it), and a permanent failure or the last attempt ends FAILED.
Deleting opens ``release`` (policy ``delete``) or records the object as
retained (policy ``retain``); a claim with attachments waits for the last
one to go first, as Kubernetes' pvc-protection does.

``_set_state`` is the only place a claim's state changes: it checks the
transition table, appends the history entry, and the audit record.  Decide
functions (``create``, ``delete``, ``record_intent``, ``record_result``...)
check requests and return facts; the ``apply_*`` folds are pure and total.
"""

from __future__ import annotations

from xce.model import audit, fairshare, ops
from xce.model.facts import (
    AttachmentAdded, AttachmentRemoved, ClaimCreated, ClaimDeleteRequested, ClaimOpFailed, ClaimOpIntent,
    ClaimOpSucceeded, ClaimPlaced, ClaimPurgeRequested, ClaimResizeRequested, ClaimResizeReserved, ReplicaEvicted,
    ReplicaLost, ReplicaObjectGone, ReplicaOpFailed, ReplicaOpIntent, ReplicaOpSucceeded, ReplicaPlaced, ReplicasAdded,
)
from xce.model.claims import replicas
from xce.model.entities.claims import (
    AccessMode, Attachment, AttachmentState, Claim, ClaimForm, ClaimState, Mode, ReclaimPolicy, Replica, ReplicaState,
    Resize, ResizeState, Scope, name_key,
)
from xce.model.entities.ops import Op, OpKind
from xce.model.state import State
from xce.model.transitions import check
from xce.units import format_size


S = ClaimState
TRANSITIONS: dict[ClaimState, frozenset[ClaimState]] = {
    S.PENDING: frozenset({S.PREPARING, S.FAILED, S.RELEASED, S.READY}),  # READY: a cache (replicas on demand)
    S.PREPARING: frozenset({S.READY, S.FAILED, S.RELEASING}),  # RELEASING: replicas deleted while being made
    S.READY: frozenset({S.RELEASING, S.RELEASED, S.FAILED}),  # FAILED: its host was lost, data kept there
    S.RELEASING: frozenset({S.RELEASED, S.FAILED}),
    S.FAILED: frozenset({S.RELEASING, S.RELEASED}),
    S.RELEASED: frozenset(),
}
A = AttachmentState
# an attachment that ends (detached, failed to attach, fenced, removed by an admin) leaves the claim
ATTACHMENT_TRANSITIONS: dict[AttachmentState, frozenset[AttachmentState]] = {
    A.ATTACHING: frozenset({A.ATTACHED}),
    A.ATTACHED: frozenset({A.DETACHING}),
    A.DETACHING: frozenset(),
}
R = ResizeState
RESIZE_TRANSITIONS: dict[ResizeState, frozenset[ResizeState]] = {
    R.REQUESTED: frozenset({R.EXPANDING, R.FAILED}),  # FAILED: cancelled (the claim is being deleted)
    R.EXPANDING: frozenset({R.DONE, R.FAILED}),
    R.DONE: frozenset(),
    R.FAILED: frozenset(),
}


def _set_state(model: State, claim: Claim, new: ClaimState, time: float, reason: str, by: str) -> None:
    """The one place a claim changes state: checked, recorded in its history and in the audit trail."""
    check(TRANSITIONS, claim.state, new, f"claim {claim.id} ({claim.name})", reason)
    old = claim.state
    claim.state = new
    claim.history.append({"state": new.value, "time": time, "reason": reason})
    audit.record(model, time, by, "claim.state", f"claim/{claim.name}", new.value,
                 f"{old.value} -> {new.value}: {reason}")
    if new is ClaimState.RELEASED:  # its byte-seconds count against its owner's fair share
        fairshare.charge(model, claim.project, claim.owner, time,
                         claim_byte_s=claim.size_bytes * max(0.0, time - claim.created))
    if new is ClaimState.RELEASED and claim.form is ClaimForm.STANDALONE:
        key = name_key(claim.project, claim.name)
        if model.claim_names.get(key) == claim.id:
            del model.claim_names[key]
        model.released_names[key] = max(claim.id, model.released_names.get(key, 0))


def _set_resize_state(model: State, claim: Claim, new: ResizeState, time: float, reason: str, by: str) -> None:
    """The one place a resize changes state: checked, recorded in its history, the claim's and the
    audit trail (the claim's own state does not change: it stays READY throughout)."""
    r = claim.resize
    assert r is not None
    what = f"resize of claim {claim.id} ({claim.name}) to {r.size_bytes} bytes"
    check(RESIZE_TRANSITIONS, r.state, new, what, reason)
    old = r.state
    r.state = new
    r.history.append({"state": new.value, "time": time, "reason": reason})
    claim.history.append({"state": claim.state.value, "time": time,
                          "reason": f"resize to {format_size(r.size_bytes)} {new.value}: {reason}"})
    audit.record(model, time, by, "claim.resize", f"claim/{claim.name}", new.value,
                 f"{old.value} -> {new.value}: {reason}")


def _index(model: State, claim: Claim) -> None:
    if claim.op is not None or any(a.op is not None for a in claim.attachments):
        model.open_ops.add(claim.id)
    else:
        model.open_ops.discard(claim.id)


def _open_op(model: State, claim: Claim, kind: OpKind) -> None:
    claim.op = ops.new_op("c", claim.id, claim.op_counts, kind)
    model.open_ops.add(claim.id)


def _close_op(model: State, claim: Claim) -> None:
    claim.op = None
    _index(model, claim)


def _open_attachment_op(model: State, claim: Claim, a: Attachment, kind: OpKind) -> None:
    a.op = Op(op_id=f"a{a.id}.{kind.value}", kind=kind)
    model.open_ops.add(claim.id)


def _drop_attachment(model: State, claim: Claim, a: Attachment, time: float) -> None:
    claim.attachments = [x for x in claim.attachments if x.id != a.id]
    if (r := claim.replica_on(a.host)) is not None:
        r.last_used = time  # (a cache evicts its least recently used replicas first)
    _index(model, claim)
    _advance_delete(model, claim, time)


def _set_attachment_state(a: Attachment, new: AttachmentState, time: float, reason: str) -> None:
    """The one place an attachment changes state: checked and recorded in its history."""
    check(ATTACHMENT_TRANSITIONS, a.state, new, f"attachment {a.id} on {a.host}", reason)
    a.state = new
    a.history.append({"state": new.value, "time": time, "reason": reason})


def detach(model: State, claim: Claim, a: Attachment, time: float) -> None:
    """Fold helper: the attachment's user is done with it.  Capacity comes back only once it is gone."""
    if a.op is not None and a.op.kind is OpKind.ATTACH:
        if a.op.epoch is not None:  # the attach is in flight: detach once it has answered
            a.detach_requested = True
            return
        _drop_attachment(model, claim, a, time)  # never reached the provider
    elif a.state is AttachmentState.ATTACHED:
        if a.run is None or claim.replicated:  # added by hand, or a replica's host: no provider attach to undo
            _drop_attachment(model, claim, a, time)
        else:
            _set_attachment_state(a, AttachmentState.DETACHING, time, "its user is done with it")
            _open_attachment_op(model, claim, a, OpKind.DETACH)


def _advance_delete(model: State, claim: Claim, time: float) -> None:
    """Carry out a requested deletion once nothing holds the claim (no attachment, no op in flight)."""
    if claim.replicated:
        _advance_replicas_delete(model, claim, time)
        return
    if not claim.delete_requested or claim.attachments or claim.op is not None and claim.op.epoch is not None:
        return
    by = claim.deleted_by or "-"
    if claim.resize is not None and claim.resize.open:  # not in flight (that waits, above): cancelled
        if claim.op is not None and claim.op.kind is OpKind.EXPAND:
            _close_op(model, claim)
        claim.resize.error = "cancelled: the claim is being deleted"
        _set_resize_state(model, claim, ResizeState.FAILED, time, claim.resize.error, by)
    if claim.state is ClaimState.PENDING:  # never reached a provider
        _close_op(model, claim)
        _set_state(model, claim, ClaimState.RELEASED, time, "deleted before it was prepared", by)
    elif claim.state in (ClaimState.READY, ClaimState.FAILED):
        if not claim.data_exists:
            _set_state(model, claim, ClaimState.RELEASED, time, "deleted; no provider object exists", by)
        elif claim.reclaim_policy is ReclaimPolicy.RETAIN:
            claim.retained = True
            _set_state(model, claim, ClaimState.RELEASED, time,
                       f"deleted; reclaim policy retain keeps {claim.handle or 'the object'}", by)
        else:
            _set_state(model, claim, ClaimState.RELEASING, time, "deleted; releasing the provider object", by)
            _open_op(model, claim, OpKind.RELEASE)


# ---------------------------------------------------------------- replicas of a node-local claim


def _settle(model: State, claim: Claim, time: float, reason: str, by: str) -> None:
    """A node-local claim's state follows its replicas' (``replicas``): READY while one is READY (until
    it is deleted), RELEASED once all are, FAILED once none can be used or made, RELEASING while a
    deletion releases them, and PENDING or PREPARING while they are being made.  A cache is READY
    until it is deleted, whatever its replicas: it makes them where its jobs go.  A READY claim stays
    READY while its replicas on lost hosts wait for them, or are being checked once they are back."""
    states = {r.state for r in claim.replicas}
    making = claim.replicas_to_place > 0 or bool(states & {ReplicaState.PENDING, ReplicaState.PREPARING})
    if claim.cache and not claim.delete_requested:
        want = ClaimState.READY
    elif states <= {ReplicaState.RELEASED} and claim.replicas_to_place == 0:
        want = ClaimState.RELEASED
    elif not claim.delete_requested and (ReplicaState.READY in states or claim.state is ClaimState.READY and states & {
            ReplicaState.LOST, ReplicaState.PENDING, ReplicaState.PREPARING}):
        want = ClaimState.READY  # (a READY claim whose replicas' hosts were lost stays so while they are checked)
    elif claim.delete_requested:
        want = ClaimState.RELEASING if states - {ReplicaState.RELEASED, ReplicaState.FAILED} else ClaimState.FAILED
    elif making:
        want = ClaimState.PENDING if claim.state is ClaimState.PENDING and ReplicaState.PREPARING not in states \
            else ClaimState.PREPARING
    else:
        want = ClaimState.FAILED
    if want is not claim.state:
        ready = len(claim.ready_hosts())
        if want is ClaimState.READY and claim.replicas:
            reason += f" ({ready} of {len(claim.replicas)} replicas READY)"
        _set_state(model, claim, want, time, reason, by)


def _advance_replicas_delete(model: State, claim: Claim, time: float) -> None:
    """A node-local claim's deletion: each replica whose op is not in flight goes (released by its host's
    agent if an object may exist); one in flight goes once its agent has answered."""
    if not claim.delete_requested or claim.attachments:
        return
    by = claim.deleted_by or "-"
    claim.replicas_to_place = 0
    for r in claim.replicas:
        if r.state in (ReplicaState.RELEASED, ReplicaState.RELEASING) or r.op is not None and r.op.epoch is not None:
            continue
        _release_replica(model, claim, r, time, "deleted", by)
    _settle(model, claim, time, "deleted", by)


def _release_replica(model: State, claim: Claim, r: Replica, time: float, reason: str, by: str) -> None:
    """A replica goes (its op not in flight: the caller checks): released by its host's agent if an
    object may exist there; an op waiting for its first attempt or its retry is closed."""
    if r.op is not None:
        replicas.close_op(model, claim, r)
    if not r.data_exists:
        replicas.set_state(model, claim, r, ReplicaState.RELEASED, time, f"{reason}; no object exists", by)
    else:
        replicas.set_state(model, claim, r, ReplicaState.RELEASING, time, f"{reason}; releasing it", by)
        replicas.open_op(model, claim, r, OpKind.RELEASE)


def _add_replica(claim: Claim, host: str, time: float, reason: str) -> Replica:
    """A new PENDING replica on ``host``, numbered after every earlier one (its op ids are its own)."""
    r = Replica(no=len(claim.replicas) + 1, host=host, created=time,
                history=[{"state": ReplicaState.PENDING.value, "time": time, "reason": reason}])
    claim.replicas.append(r)
    return r


def apply_replicas_added(model: State, f: ReplicasAdded) -> None:
    """``xce claim warm``: a PENDING replica on each host that holds none (the decision checked it)."""
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.delete_requested or not claim.live or claim.state is ClaimState.FAILED:
        return
    for host in f.hosts:
        if claim.replica_on(host) is None:
            _add_replica(claim, host, f.time, f"added by {f.by}")
    _settle(model, claim, f.time, f"replicas added by {f.by}", f.by)


def apply_replica_lost(model: State, f: ReplicaLost) -> None:
    """A READY replica's host was declared lost: no job goes there until the host is back and its
    worker has checked it (``replicas_host_returned``)."""
    claim = model.claims.get(f.claim_id)
    r = claim.replica_on(f.host) if claim is not None else None
    if claim is None or r is None or r.state is not ReplicaState.READY:
        return
    replicas.set_state(model, claim, r, ReplicaState.LOST, f.time, f"host {f.host} lost", "-")
    _settle(model, claim, f.time, f"replica on {f.host} lost with its host", "-")


def apply_replica_object_gone(model: State, f: ReplicaObjectGone) -> None:
    """A READY replica's object was not in its host's listing: a populated claim's is made again under the
    op id that made it and filled again (READY once it is); any other's data, written by jobs, is lost:
    FAILED, and the other replicas serve on."""
    claim = model.claims.get(f.claim_id)
    r = claim.replica_on(f.host) if claim is not None else None
    if claim is None or r is None or r.state is not ReplicaState.READY or r.handle != f.handle or r.op is not None:
        return  # OBSERVATION: it changed since the listing was decided on; nothing to do
    if claim.populate_from is not None and not claim.delete_requested:
        replicas.set_state(model, claim, r, ReplicaState.PREPARING, f.time,
                           f"object {f.handle} gone from {f.host}: made and filled again", "-")
        replicas.redrive_create(model, claim, r)
    else:
        r.data_exists = False
        r.last_error = f"object gone from {f.host}: its data is lost"
        replicas.set_state(model, claim, r, ReplicaState.FAILED, f.time, r.last_error, "-")
    _settle(model, claim, f.time, f"replica on {f.host}: its object is gone", "-")
    _advance_delete(model, claim, f.time)


def replicas_host_returned(model: State, host: str, time: float) -> None:
    """Fold helper: ``host`` registered again.  Each of its LOST replicas is checked by its worker: its
    create re-driven by the op id that made it (the same object if intact, else a new one), then its
    populate if its claim has a source (rclone copies only what is missing)."""
    for claim in model.claims.values():
        r = claim.replica_on(host) if claim.replicated else None
        if r is None or r.state is not ReplicaState.LOST or r.op is not None:
            continue
        replicas.set_state(model, claim, r, ReplicaState.PREPARING, time, f"host {host} back: checking its object",
                           "-")
        replicas.redrive_create(model, claim, r)


def apply_replica_evicted(model: State, f: ReplicaEvicted) -> None:
    """A replica released while its claim lives on (the decision, or the plan applier, checked that no
    job has it attached and no op of it is in flight; the fold ignores it otherwise).  ``make_room``:
    its host's bytes go to the replica that needed them now, before its object is gone."""
    claim = model.claims.get(f.claim_id)
    r = claim.replica_on(f.host) if claim is not None else None
    if claim is None or r is None or r.state is ReplicaState.RELEASING or claim.delete_requested \
            or r.op is not None and r.op.epoch is not None or any(a.host == f.host for a in claim.attachments):
        return
    if f.make_room and (host := model.hosts.get(f.host)) is not None:
        host.held_counters.pop(replicas.held_key(claim), None)
    _release_replica(model, claim, r, f.time, f.reason or f"evicted by {f.by}", f.by)
    _settle(model, claim, f.time, f"replica on {f.host} evicted", f.by)


def _replica_of(model: State, claim_id: int, op_id: str) -> tuple[Claim, Replica, Op] | None:
    """The claim and its replica whose open op is ``op_id`` (None: decided already, or unknown)."""
    claim = model.claims.get(claim_id)
    r = claim.replica_by_op(op_id) if claim is not None else None
    return (claim, r, r.op) if claim is not None and r is not None and r.op is not None else None


def apply_replica_placed(model: State, f: ReplicaPlaced) -> None:
    """A replica's size reserved on its host: a named host's replica, or a new one on a chosen host."""
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.delete_requested or not claim.live:
        return
    r = next((x for x in claim.replicas if x.host == f.host and not x.placed and x.state is ReplicaState.PENDING),
             None)
    if r is None:
        if claim.replica_on(f.host) is not None or claim.replicas_to_place <= 0 and not claim.cache:
            return  # OBSERVATION: the applier re-checks this; nothing to place
        if claim.replicas_to_place > 0:
            claim.replicas_to_place -= 1
            r = _add_replica(claim, f.host, f.time, "host chosen")
        else:  # a cache's, where a job of its waits for it
            r = _add_replica(claim, f.host, f.time, "made on demand: a job waits for it here")
    r.counter = f.counter
    if (host := model.hosts.get(f.host)) is not None:
        host.held_counters[replicas.held_key(claim)] = {f.counter: float(f.size_bytes)}
    r.history.append({"state": r.state.value, "time": f.time,
                      "reason": f"{format_size(f.size_bytes)} reserved on {f.host}'s {f.counter}"})
    replicas.open_op(model, claim, r, OpKind.CREATE)


def apply_replica_op_intent(model: State, f: ReplicaOpIntent) -> None:
    if (found := _replica_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, r, op = found
    claim.ops.append(dict(ops.fold_intent(op, f.agent, f.epoch, f.time), host=r.host))
    r.attempts = op.attempts
    if op.kind is OpKind.CREATE:
        r.data_exists = True  # from here on an object may exist on the host: never assume it does not
        if r.state is ReplicaState.PENDING:
            replicas.set_state(model, claim, r, ReplicaState.PREPARING, f.time, f"{f.agent} creating (op {op.op_id})",
                               f.agent)
            _settle(model, claim, f.time, f"{f.agent} creating its replica", f.agent)


def apply_replica_op_succeeded(model: State, f: ReplicaOpSucceeded) -> None:
    if (found := _replica_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, r, op = found
    agent = op.agent or "-"
    claim.ops.append(dict(ops.fold_success(op, f.time, f.message), host=r.host))
    r.last_error = None
    replicas.close_op(model, claim, r)
    if op.kind is OpKind.CREATE:
        r.handle, r.path = f.handle, f.path
        if claim.populate_from is not None and not claim.delete_requested:
            # still PREPARING: READY once its host's worker has copied every byte in
            r.history.append({"state": r.state.value, "time": f.time, "reason": f"created {f.handle} on attempt "
                              f"{op.attempts}; populating from {claim.populate_from}"})
            replicas.open_op(model, claim, r, OpKind.POPULATE)
            return
        r.last_used = f.time
        replicas.set_state(model, claim, r, ReplicaState.READY, f.time, f"created {f.handle} on attempt "
                           f"{op.attempts}", agent)
        _settle(model, claim, f.time, f"replica on {r.host} READY", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.POPULATE:
        r.last_used = f.time
        replicas.set_state(model, claim, r, ReplicaState.READY, f.time, f"populated from {claim.populate_from} on "
                           f"attempt {op.attempts}" + (f": {f.message}" if f.message else ""), agent)
        _settle(model, claim, f.time, f"replica on {r.host} READY", agent)
        _advance_delete(model, claim, f.time)
    else:
        r.data_exists = False
        replicas.set_state(model, claim, r, ReplicaState.RELEASED, f.time, f"released {r.handle}", agent)
        _settle(model, claim, f.time, f"replica on {r.host} released", agent)


def apply_replica_op_failed(model: State, f: ReplicaOpFailed) -> None:
    if (found := _replica_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, r, op = found
    agent = op.agent or "-"
    r.last_error = f"{f.code}: {f.message}"
    claim.ops.append(dict(ops.fold_failure(op, f.time, f.code, f.message, f.retryable, f.next_retry), host=r.host))
    if f.next_retry is not None:  # it waits for its retry; a deletion need not wait for that
        _advance_delete(model, claim, f.time)
        return
    replicas.close_op(model, claim, r)
    why = f"{op.kind.value} failed after {op.attempts} attempt{'s' if op.attempts != 1 else ''}: {r.last_error}"
    if op.kind is OpKind.CREATE and f.code == replicas.DATA_LOST:  # a lost host's replica, checked on its return
        r.data_exists = False
        r.last_error = f"object gone while {r.host} was lost: its data is lost"
        replicas.set_state(model, claim, r, ReplicaState.FAILED, f.time, r.last_error, agent)
    elif op.kind is OpKind.CREATE:  # a permanent error made nothing (a crash's leftover: the orphan scan's)
        r.data_exists = False
        replicas.set_state(model, claim, r, ReplicaState.FAILED, f.time, why, agent)
    elif op.kind is OpKind.POPULATE:  # the object exists, its data is incomplete: the other replicas serve on
        replicas.set_state(model, claim, r, ReplicaState.FAILED, f.time, why + "; its data is incomplete", agent)
    else:
        replicas.set_state(model, claim, r, ReplicaState.FAILED, f.time, why + "; the data still exists", agent)
    _settle(model, claim, f.time, f"replica on {r.host}: {why}", agent)
    _advance_delete(model, claim, f.time)


def _add(model: State, claim: Claim, time: float, reason: str, detail: str) -> bool:
    """A new claim enters the model, PENDING (False: its id, or a standalone claim's name in its
    project, is taken; nothing changes but the id counter, so the id is never handed out again)."""
    model.next_claim_id = max(model.next_claim_id, claim.id + 1)
    key = name_key(claim.project, claim.name)
    if claim.id in model.claims or claim.form is ClaimForm.STANDALONE and key in model.claim_names:
        return False  # ids and live names are unique: the decide functions never make it otherwise
    claim.history.append({"state": ClaimState.PENDING.value, "time": time, "reason": reason})
    model.claims[claim.id] = claim
    if claim.form is ClaimForm.STANDALONE:
        model.claim_names[key] = claim.id
    audit.record(model, time, claim.owner, "claim.state", f"claim/{claim.name}", ClaimState.PENDING.value, detail)
    return True


def begin_stage_out(model: State, claim: Claim, time: float) -> None:
    """Fold helper: the job's process ended; its staging claim copies out before it is released."""
    claim.delete_requested, claim.deleted_by = True, claim.owner
    _set_state(model, claim, ClaimState.RELEASING, time, f"job {claim.job_id} ended: staging out", claim.owner)
    _open_op(model, claim, OpKind.STAGE_OUT)


def keep_data(model: State, claim: Claim, time: float, reason: str) -> None:
    """Fold helper: the claim's data must stay (nothing that holds data goes without a record)."""
    claim.keep = True
    claim.delete_requested = False
    if claim.op is not None and claim.op.epoch is None:
        _close_op(model, claim)
    if claim.state is not ClaimState.FAILED:
        _set_state(model, claim, ClaimState.FAILED, time, reason, "-")


def release_template(model: State, claim: Claim, time: float, reason: str) -> None:
    """Fold helper: the run is over; its template claim goes (after any op in flight has answered)."""
    if claim.delete_requested:
        return
    claim.delete_requested, claim.deleted_by = True, claim.owner
    claim.history.append({"state": claim.state.value, "time": time, "reason": reason})
    _advance_delete(model, claim, time)


def apply_claim_created(model: State, f: ClaimCreated) -> bool:
    """A new claim, PENDING (False: its id or name was taken, which no decision makes).  A standalone
    claim waits for the scheduler to place it; a run's template claim comes placed, its create op open."""
    # a run's template claim comes placed with its allocation; an early one (a shared staging claim made
    # at submission) waits for the scheduler to place it, as a standalone claim does
    template = f.form == ClaimForm.TEMPLATE and f.run is not None and not f.early
    claim = Claim(id=f.claim_id, name=f.name, form=ClaimForm(f.form), class_name=f.class_name, scope=Scope(f.scope),
                  size_bytes=f.size_bytes, access_mode=AccessMode(f.access_mode),
                  reclaim_policy=ReclaimPolicy(f.reclaim_policy),
                  owner=f.owner, project=f.project, created=f.time, params=dict(f.params), job_id=f.job_id,
                  run=f.run, kind=f.kind, host=f.host, pool=f.pool, placed=template,
                  stage_in=[list(x) for x in f.stage_in], stage_out=[list(x) for x in f.stage_out],
                  source=dict(f.source) if f.source is not None else None, populate_from=f.populate_from,
                  early=f.early, replicas_to_place=f.replicas_to_place, cache=f.cache,
                  counter=f.counter, snapshot_on_preempt=f.snapshot_on_preempt,
                  replicas=[Replica(no=i, host=h, created=f.time,
                                    history=[{"state": ReplicaState.PENDING.value, "time": f.time,
                                              "reason": "created"}])
                            for i, h in enumerate(f.replica_hosts, 1)])
    if f.form == ClaimForm.TEMPLATE and f.run is not None:
        reason = f"created for job {f.job_id} run {f.run}" + (f" on {f.host}" if f.host else "") + \
            (" at submission, to stage in before its hosts are allocated" if f.early else "")
        detail = f"created: template {f.kind} {f.class_name} for job {f.job_id}"
    else:
        reason, detail = "created", f"created: {f.form} {f.class_name} {f.size_bytes} bytes {f.access_mode}"
        if f.source is not None:
            reason = f"created from {f.source['kind']} {f.source['name']}"
            detail += f" from {f.source['kind']} {f.source['name']} ({f.source['handle']})"
        if f.populate_from is not None:
            reason = f"created, to be populated from {f.populate_from}"
            detail += f" populated from {f.populate_from}"
        if f.replica_hosts or f.replicas_to_place:
            where = ", ".join(f.replica_hosts) or f"{f.replicas_to_place} hosts the scheduler chooses"
            reason = f"created, a replica on each of {where}"
            detail += f" replicas on {where}"
    if not _add(model, claim, f.time, reason, detail):
        return False
    if claim.cache:
        _settle(model, claim, f.time, "a cache: its replicas are made where its jobs go", f.owner)
    if template:
        _open_op(model, claim, OpKind.CREATE)
    return True


def apply_claim_placed(model: State, f: ClaimPlaced) -> None:
    claim = model.claims.get(f.claim_id)
    # folds are total: a placement of a node-local claim (its replicas are placed host by host) opens nothing
    if claim is None or claim.state is not ClaimState.PENDING or claim.placed or claim.replicated:
        return
    claim.placed = True
    claim.pool = f.pool
    claim.host = f.host
    _open_op(model, claim, OpKind.CREATE)


def _open_op_of(model: State, claim_id: int, op_id: str) -> tuple[Claim, Op, Attachment | None] | None:
    """The claim and its open op ``op_id`` a fact is about (None: decided already, or unknown)."""
    claim = model.claims.get(claim_id)
    if claim is None:
        return None
    found = claim.find_op(op_id)
    return (claim, *found) if found is not None else None


def apply_claim_op_intent(model: State, f: ClaimOpIntent) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    claim.ops.append(dict(ops.fold_intent(op, f.agent, f.epoch, f.time), host=a.host if a else None))
    if a is None and op.kind is OpKind.CREATE:
        claim.data_exists = True  # from here on a provider object may exist: never assume it does not
        if claim.state is ClaimState.PENDING:
            _set_state(model, claim, ClaimState.PREPARING, f.time, f"{f.agent} creating (op {op.op_id})", f.agent)


def apply_claim_op_succeeded(model: State, f: ClaimOpSucceeded) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    agent = op.agent or "-"
    claim.ops.append(dict(ops.fold_success(op, f.time, f.message), host=a.host if a else None))
    if a is not None:
        a.op, a.last_error = None, None
        _index(model, claim)
        if op.kind is OpKind.ATTACH:
            a.path = f.path
            _set_attachment_state(a, AttachmentState.ATTACHED, f.time, f"attached: {f.path}")
            if a.detach_requested:
                detach(model, claim, a, f.time)
        else:
            _drop_attachment(model, claim, a, f.time)
        return
    claim.last_error, claim.stderr_tail = None, ""
    _close_op(model, claim)
    if op.kind is OpKind.CREATE:
        claim.handle = f.handle
        claim.actual_bytes = f.size_bytes
        claim.reachable_hosts = list(f.reachable_hosts) if f.reachable_hosts is not None else None
        claim.host_labels = dict(f.host_labels)
        claim.path = f.path
        if claim.stage_in:
            _open_op(model, claim, OpKind.STAGE_IN)  # still PREPARING: READY once the files are in
            return
        if claim.populate_from is not None:
            _open_op(model, claim, OpKind.POPULATE)  # still PREPARING: READY once the data is complete
            return
        _set_state(model, claim, ClaimState.READY, f.time, f"created {f.handle} on attempt {op.attempts}", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_IN:
        _set_state(model, claim, ClaimState.READY, f.time, f"staged in {len(claim.stage_in)} item(s)", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.POPULATE:
        _set_state(model, claim, ClaimState.READY, f.time, f"populated from {claim.populate_from} on attempt "
                   f"{op.attempts}" + (f": {f.message}" if f.message else ""), agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.EXPAND:
        r = claim.resize
        if r is not None and r.state is ResizeState.EXPANDING:
            claim.size_bytes = r.size_bytes
            claim.actual_bytes = f.size_bytes if f.size_bytes is not None else r.size_bytes
            _set_resize_state(model, claim, ResizeState.DONE, f.time, f"expanded on attempt {op.attempts} "
                              f"(provider size {format_size(claim.actual_bytes)})", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_OUT:
        claim.history.append({"state": claim.state.value, "time": f.time,
                              "reason": f"staged out {len(claim.stage_out)} item(s); releasing"})
        _open_op(model, claim, OpKind.RELEASE)
    else:
        claim.data_exists = False
        if claim.state is ClaimState.RELEASED:  # a purged retained object
            claim.retained = False
            claim.history.append({"state": claim.state.value, "time": f.time,
                                  "reason": f"retained object {claim.handle} released (purged)"})
        else:
            _set_state(model, claim, ClaimState.RELEASED, f.time, f"released {claim.handle}", agent)


def apply_claim_op_failed(model: State, f: ClaimOpFailed) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    agent = op.agent or "-"
    error = f"{f.code}: {f.message}"
    claim.ops.append(dict(ops.fold_failure(op, f.time, f.code, f.message, f.retryable, f.next_retry),
                          host=a.host if a else None))
    if a is not None:
        a.last_error = error
    else:
        claim.last_error, claim.stderr_tail = error, f.stderr_tail
    if f.next_retry is not None:  # it waits for its retry (``ops.fold_failure``)
        if op.kind is OpKind.EXPAND:
            # OBSERVATION: a deletion waited for this attempt; between attempts nothing holds it up
            # (the resize is cancelled; the object is released whatever size it reached)
            _advance_delete(model, claim, f.time)
        return
    why = f"{op.kind.value} failed after {op.attempts} attempt{'s' if op.attempts != 1 else ''}: {error}"
    if a is not None:
        a.op = None
        _index(model, claim)
        claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"{a.host}: {why}"})
        if op.kind is OpKind.ATTACH:
            _drop_attachment(model, claim, a, f.time)  # nothing is attached
        # a detach that failed for good stays DETACHING (its host may still write): fenced only
        # when the host is declared lost, or removed by an admin
        return
    _close_op(model, claim)
    if op.kind is OpKind.CREATE:
        # a permanent error from the provider means it made nothing; a crash on the last attempt
        # may have left an object, which the orphan scan finds by its op_id tag
        claim.data_exists = False
        _set_state(model, claim, ClaimState.FAILED, f.time, why, agent)
        _advance_delete(model, claim, f.time)
    elif op.kind in (OpKind.STAGE_IN, OpKind.POPULATE):  # the object exists, its data is incomplete
        _set_state(model, claim, ClaimState.FAILED, f.time, why, agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.EXPAND:  # the provider made nothing bigger: the claim is as it was
        r = claim.resize
        if r is not None and r.state is ResizeState.EXPANDING:
            r.error = error
            _set_resize_state(model, claim, ResizeState.FAILED, f.time,
                              why + f"; still {format_size(max(claim.size_bytes, claim.actual_bytes or 0))}", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_OUT:
        claim.keep = True
        claim.delete_requested = False
        _set_state(model, claim, ClaimState.FAILED, f.time, why + "; the data is kept", agent)
    elif claim.state is ClaimState.RELEASED:  # a purge that failed: still retained
        claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"purge failed: {why}"})
    else:
        _set_state(model, claim, ClaimState.FAILED, f.time, why + "; the data still exists", agent)


def apply_claim_resize_requested(model: State, f: ClaimResizeRequested) -> None:
    """A resize asked of a READY shared claim with no resize open (the decide function checks that;
    the fold ignores anything else)."""
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.state is not ClaimState.READY or claim.delete_requested or claim.scope \
            is not Scope.SHARED or claim.resize is not None and claim.resize.open or f.size_bytes <= 0:
        return
    reason = f"asked by {f.by}: from {format_size(claim.charged_bytes)} to {format_size(f.size_bytes)}"
    claim.resize = Resize(size_bytes=f.size_bytes, old_bytes=claim.charged_bytes, by=f.by, requested=f.time,
                          history=[{"state": ResizeState.REQUESTED.value, "time": f.time, "reason": reason}])
    claim.history.append({"state": claim.state.value, "time": f.time,
                          "reason": f"resize to {format_size(f.size_bytes)} REQUESTED: {reason}"})
    audit.record(model, f.time, f.by, "claim.resize", f"claim/{claim.name}", ResizeState.REQUESTED.value, reason)


def apply_claim_resize_reserved(model: State, f: ClaimResizeReserved) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None:
        return
    r = claim.resize
    if r is None or r.state is not ResizeState.REQUESTED or r.size_bytes != f.size_bytes or claim.op is not None:
        return
    reason = f"{format_size(f.size_bytes - r.old_bytes)} more reserved" + (f" in pool {claim.pool}" if claim.pool
                                                                           else "")
    _set_resize_state(model, claim, ResizeState.EXPANDING, f.time, reason, "-")
    _open_op(model, claim, OpKind.EXPAND)


def apply_claim_delete_requested(model: State, f: ClaimDeleteRequested) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.state is ClaimState.RELEASED:
        return
    claim.delete_requested = True
    claim.deleted_by = f.by
    _advance_delete(model, claim, f.time)


def apply_claim_purge_requested(model: State, f: ClaimPurgeRequested) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None or not claim.retained or claim.op is not None:
        return
    claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"purge requested by {f.by}"})
    _open_op(model, claim, OpKind.RELEASE)


def apply_attachment_added(model: State, f: AttachmentAdded) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None:
        return
    # a node-local claim's data is on the host already, in its READY replica there (the plan applier places
    # its jobs nowhere else): nothing for a provider to attach
    replica = next((r for r in claim.replicas if r.host == f.host and r.state is ReplicaState.READY), None)
    if replica is not None:
        replica.last_used = f.time
    state = AttachmentState.ATTACHING if f.run is not None and not claim.replicated else AttachmentState.ATTACHED
    a = Attachment(id=f.attachment_id, host=f.host, mode=Mode(f.mode), created=f.time, by=f.by, job_id=f.job_id,
                   run=f.run, state=state, path=replica.path if replica is not None else None,
                   history=[{"state": state.value, "time": f.time, "reason": f"added by {f.by}"}])
    claim.attachments.append(a)
    if state is AttachmentState.ATTACHING:  # a job's: the provider makes the claim reachable on the host first
        _open_attachment_op(model, claim, a, OpKind.ATTACH)
    model.next_attachment_id = max(model.next_attachment_id, f.attachment_id + 1)


def apply_attachment_removed(model: State, f: AttachmentRemoved) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None:
        return
    a = next((x for x in claim.attachments if x.id == f.attachment_id), None)
    if a is None:
        return
    claim.history.append({"state": claim.state.value, "time": f.time,
                          "reason": f"attachment #{a.id} on {a.host} removed by {f.by}"})
    _drop_attachment(model, claim, a, f.time)



