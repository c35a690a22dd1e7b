"""Snapshots on preemption: a run ended by preemption has each RWO claim it had attached with
``--snapshot-on-preempt`` snapshotted after it let go of the claim and before the claim is attached to
any other run (its own next run too).

The order, each step level-triggered from the model::

    end       the victim's end is folded (``JobRequeued``, or ``JobFinished`` when it cannot rerun):
              its attachments detach, and here the snapshot is opened, PENDING, named
              ``<claim>-preempt-<job>-r<run>``, owned by the claim's owner in its project (counted in
              the project's quota and pool like any snapshot), and the claim is marked
              (``Claim.snapshot_before_attach``)
    detached  its ``create_snapshot`` op is not handed to the provisioner while an op of that run's
              attachments of the claim is still open (``xce.model.snapshots.agents``)
    gate      no attach op of the claim is handed out while the snapshot is being made
              (``xce.model.claims.agents.snapshot_first``): a run waiting for it says so
              (``xce job why``: ``claim ckpt: snapshot ckpt-preempt-12-r1 before re-attach (PENDING)``)
    after     READY, or FAILED for good (after the op's retries), or deleted before it was taken: the
              gate opens either way, and the victim's history says which.  A failed snapshot never
              holds the claim back: the claim's data is the claim's, untouched, and a run waiting for it
              must not wait forever.

The snapshot is made in the fold of the run's end, as a requeued job's new staging claim is
(``job_claims.restage_early``): a consequence of a committed fact, its id the model's next, the same on
replay.  A fold refuses nothing, so it is taken even when the project is at its snapshot quota (it is
counted, and later requests are refused until one is deleted): a preempted run's checkpoint is what the
option asked to keep.
"""

from __future__ import annotations

from typing import Any, Callable

from xce.model import jobs, snapshots
from xce.model.entities.claims import AccessMode, ClaimState
from xce.model.entities.jobs import Job
from xce.model.facts import SnapshotCreated, SnapshotOpFailed, SnapshotOpSucceeded
from xce.model.state import State

__all__ = ["apply_snapshot_op_failed", "apply_snapshot_op_succeeded", "snapshot_name", "take"]

NAME_MAX = 63
SnapshotResultFact = SnapshotOpSucceeded | SnapshotOpFailed


def snapshot_name(model: State, project: str, claim_name: str, job_id: int, run: int) -> str:
    """``<claim>-preempt-<job>-r<run>`` (the claim's name shortened to fit 63 characters); ``.2``,
    ``.3``... after it if a live snapshot of the project has that name."""
    suffix = f"-preempt-{job_id}-r{run}"
    base = claim_name[:NAME_MAX - len(suffix) - 3] + suffix
    name, n = base, 1
    while snapshots.live_by_name(model, project, name) is not None:
        n += 1
        name = f"{base}.{n}"
    return name


def take(model: State, job: Job, time: float) -> None:
    """Fold helper, at the end of a run (its attachments detaching): a snapshot of each claim of the run
    that asks for one, if the run was preempted (``Job.kill_preemptor``)."""
    if job.kill_preemptor is None:
        return
    seen: set[int] = set()
    for claim_id, _attachment_id in job.run_attachments:
        claim = model.claims.get(claim_id)
        if claim is None or claim_id in seen or not claim.snapshot_on_preempt \
                or claim.access_mode is not AccessMode.RWO:
            continue
        seen.add(claim_id)
        if claim.state is not ClaimState.READY or claim.handle is None or claim.delete_requested:
            why = "being deleted" if claim.delete_requested else claim.state.value
            jobs.note(job, time, f"claim {claim.name}: no snapshot after preemption (it is {why})")
            continue
        name = snapshot_name(model, claim.project, claim.name, job.id, job.run)
        snapshot_id = model.next_snapshot_id
        snapshots.apply_snapshot_created(model, SnapshotCreated(
            time=time, snapshot_id=snapshot_id, name=name, project=claim.project, owner=claim.owner,
            claim_id=claim.id, claim_name=claim.name, class_name=claim.class_name, size_bytes=claim.charged_bytes,
            access_mode=claim.access_mode.value, pool=claim.pool, job_id=job.id, run=job.run))
        if snapshot_id in model.snapshots:
            claim.snapshot_before_attach = snapshot_id
            jobs.note(job, time, f"claim {claim.name}: snapshot {name} before it is attached again "
                                 f"(preempted for job {job.kill_preemptor})")


def _told(model: State, snapshot_id: int, time: float) -> None:
    """The victim's history says how its snapshot ended, once it has (READY, or FAILED for good)."""
    snap = model.snapshots.get(snapshot_id)
    if snap is None or snap.job_id is None or snap.being_made:
        return
    job = model.jobs.get(snap.job_id)
    if job is None:
        return
    if snap.state is snapshots.SnapshotState.READY:
        jobs.note(job, time, f"claim {snap.claim_name}: snapshot {snap.name} of run {snap.run} taken (READY)")
    elif snap.state is snapshots.SnapshotState.FAILED:
        jobs.note(job, time, f"claim {snap.claim_name}: snapshot {snap.name} of run {snap.run} FAILED "
                             f"({snap.last_error}); the claim is attached again without it")


def _telling(fold: Callable[[State, Any], None]) -> Callable[[State, SnapshotResultFact], None]:
    """``fold`` (the snapshots' own fold of an op's result), then the victim told if its snapshot ended."""
    def told_after(model: State, f: SnapshotResultFact) -> None:
        before = model.snapshots.get(f.snapshot_id)
        was_made = before is not None and before.being_made
        fold(model, f)
        if was_made:
            _told(model, f.snapshot_id, f.time)
    return told_after


apply_snapshot_op_succeeded = _telling(snapshots.apply_snapshot_op_succeeded)
apply_snapshot_op_failed = _telling(snapshots.apply_snapshot_op_failed)
