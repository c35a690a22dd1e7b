"""How a snapshot changes: its transition table and the folds.  The only place its state changes.

States (``SnapshotState``)::

    PENDING ──▶ READY ──▶ RELEASING ──▶ RELEASED
       │                      │            ▲
       ├──────▶ FAILED ◀──────┘            │
       │          └──(delete)──▶ RELEASING / RELEASED
       └──(deleted before it was taken)────┘

A snapshot's provider work is an op (``create_snapshot`` or
``delete_snapshot``) with a stable op_id (``s<snapshot>.<op>.<n>``), run by the
provisioner under the discipline of every op (``xce.model.ops``): an intent
committed before the provider is called, fenced results, retries with backoff
(same op_id: providers are idempotent by it), every attempt kept in ``ops``.

``_set_state`` is the only place a snapshot's state changes: it checks the
table, appends the history entry and the audit record.
"""

from __future__ import annotations

from xce.model import audit, ops
from xce.model.facts import (
    SnapshotCreated, SnapshotDeleteRequested, SnapshotOpFailed, SnapshotOpIntent, SnapshotOpSucceeded,
)
from xce.model.entities.claims import name_key
from xce.model.entities.ops import Op, OpKind
from xce.model.entities.snapshots import Snapshot, SnapshotState
from xce.model.state import State
from xce.model.transitions import check


S = SnapshotState
TRANSITIONS: dict[SnapshotState, frozenset[SnapshotState]] = {
    S.PENDING: frozenset({S.READY, S.FAILED, S.RELEASED}),
    S.READY: frozenset({S.RELEASING}),
    S.RELEASING: frozenset({S.RELEASED, S.FAILED}),
    S.FAILED: frozenset({S.RELEASING, S.RELEASED}),
    S.RELEASED: frozenset(),
}


def _set_state(model: State, snap: Snapshot, new: SnapshotState, time: float, reason: str, by: str) -> None:
    """The one place a snapshot changes state: checked, recorded in its history and the audit trail."""
    check(TRANSITIONS, snap.state, new, f"snapshot {snap.id} ({snap.name})", reason)
    old = snap.state
    snap.state = new
    snap.history.append({"state": new.value, "time": time, "reason": reason})
    audit.record(model, time, by, "snapshot.state", f"snapshot/{snap.name}", new.value,
                 f"{old.value} -> {new.value}: {reason}")
    if new is SnapshotState.RELEASED:
        key = name_key(snap.project, snap.name)
        if model.snapshot_names.get(key) == snap.id:
            del model.snapshot_names[key]


def _open_op(model: State, snap: Snapshot, kind: OpKind) -> None:
    snap.op = ops.new_op("s", snap.id, snap.op_counts, kind)
    model.open_snapshot_ops.add(snap.id)


def _close_op(model: State, snap: Snapshot) -> None:
    snap.op = None
    model.open_snapshot_ops.discard(snap.id)


def _advance_delete(model: State, snap: Snapshot, time: float) -> None:
    """Carry out a requested deletion once no op is in flight."""
    if not snap.delete_requested or snap.op is not None and snap.op.epoch is not None:
        return
    by = snap.deleted_by or "-"
    if snap.state is SnapshotState.PENDING:
        if snap.data_exists:  # an attempt reached the provider and waits for its retry: that answers first
            return
        _close_op(model, snap)  # its create_snapshot never reached a provider
        _set_state(model, snap, SnapshotState.RELEASED, time, "deleted before it was taken", by)
    elif snap.state in (SnapshotState.READY, SnapshotState.FAILED):
        if not snap.data_exists:
            _set_state(model, snap, SnapshotState.RELEASED, time, "deleted; no provider object exists", by)
        else:
            _set_state(model, snap, SnapshotState.RELEASING, time, f"deleted by {by}", by)
            _open_op(model, snap, OpKind.DELETE_SNAPSHOT)


def apply_snapshot_created(model: State, f: SnapshotCreated) -> None:
    model.next_snapshot_id = max(model.next_snapshot_id, f.snapshot_id + 1)
    key = name_key(f.project, f.name)
    if f.snapshot_id in model.snapshots or key in model.snapshot_names:
        return  # ids and live names are unique: the decide functions never make it otherwise
    snap = Snapshot(id=f.snapshot_id, name=f.name, project=f.project, owner=f.owner, claim_id=f.claim_id,
                    claim_name=f.claim_name, class_name=f.class_name, size_bytes=f.size_bytes,
                    access_mode=f.access_mode, created=f.time, pool=f.pool, job_id=f.job_id, run=f.run)
    why = f"job {f.job_id} run {f.run} was preempted" if f.job_id is not None else f"asked for by {f.owner}"
    snap.history.append({"state": SnapshotState.PENDING.value, "time": f.time,
                         "reason": f"snapshot of claim {f.claim_name}: {why}"})
    model.snapshots[snap.id] = snap
    model.snapshot_names[key] = snap.id
    audit.record(model, f.time, f.owner, "snapshot.state", f"snapshot/{f.name}", SnapshotState.PENDING.value,
                 f"created: snapshot of claim {f.claim_name} ({f.class_name}, {f.size_bytes} bytes)")
    _open_op(model, snap, OpKind.CREATE_SNAPSHOT)


def _open_op_of(model: State, snapshot_id: int, op_id: str) -> tuple[Snapshot, Op] | None:
    snap = model.snapshots.get(snapshot_id)
    if snap is None or snap.op is None or snap.op.op_id != op_id:
        return None  # decided already, or unknown
    return snap, snap.op


def apply_snapshot_op_intent(model: State, f: SnapshotOpIntent) -> None:
    if (found := _open_op_of(model, f.snapshot_id, f.op_id)) is None:
        return
    snap, op = found
    snap.ops.append(ops.fold_intent(op, f.agent, f.epoch, f.time))
    if op.kind is OpKind.CREATE_SNAPSHOT:
        snap.data_exists = True  # from here on a provider object may exist: never assume it does not


def apply_snapshot_op_succeeded(model: State, f: SnapshotOpSucceeded) -> None:
    if (found := _open_op_of(model, f.snapshot_id, f.op_id)) is None:
        return
    snap, op = found
    agent = op.agent or "-"
    snap.ops.append(ops.fold_success(op, f.time, f.message))
    snap.last_error, snap.stderr_tail = None, ""
    _close_op(model, snap)
    if op.kind is OpKind.CREATE_SNAPSHOT:
        snap.handle, snap.actual_bytes, snap.used_bytes = f.handle, f.size_bytes, f.used_bytes
        _set_state(model, snap, SnapshotState.READY, f.time, f"taken as {f.handle} on attempt {op.attempts}", agent)
        _advance_delete(model, snap, f.time)
    else:
        snap.data_exists = False
        _set_state(model, snap, SnapshotState.RELEASED, f.time, f"deleted {snap.handle}", agent)


def apply_snapshot_op_failed(model: State, f: SnapshotOpFailed) -> None:
    if (found := _open_op_of(model, f.snapshot_id, f.op_id)) is None:
        return
    snap, op = found
    agent = op.agent or "-"
    error = f"{f.code}: {f.message}"
    snap.ops.append(ops.fold_failure(op, f.time, f.code, f.message, f.retryable, f.next_retry))
    snap.last_error, snap.stderr_tail = error, f.stderr_tail
    if f.next_retry is not None:  # it waits for its retry (``ops.fold_failure``)
        return
    why = f"{op.kind.value} failed after {op.attempts} attempt{'s' if op.attempts != 1 else ''}: {error}"
    _close_op(model, snap)
    if op.kind is OpKind.CREATE_SNAPSHOT:
        # a permanent error means the provider made nothing; a crash on the last attempt may have
        # left an object, which the orphan scan finds by its op_id tag
        snap.data_exists = False
        _set_state(model, snap, SnapshotState.FAILED, f.time, why, agent)
        _advance_delete(model, snap, f.time)
    else:
        _set_state(model, snap, SnapshotState.FAILED, f.time, why + "; the snapshot still exists", agent)


def apply_snapshot_delete_requested(model: State, f: SnapshotDeleteRequested) -> None:
    snap = model.snapshots.get(f.snapshot_id)
    if snap is None or snap.state is SnapshotState.RELEASED:
        return
    snap.delete_requested = True
    snap.deleted_by = f.by
    _advance_delete(model, snap, f.time)
