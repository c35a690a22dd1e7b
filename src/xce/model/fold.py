"""The fold: ``Model.apply(position, fact)`` dispatches on the fact's type to the fold of the concept
that owns that entity; nothing else mutates the model.

``Model`` is the ``State`` (``xce.model.state``: the maps, the indexes, the snapshot) with this
dispatch table, which names a fold of every concept: so it sits above them all, and none of them
imports it.  They take a ``State``; the controller holds a ``Model``.
"""

from __future__ import annotations

from typing import Any, Callable

from xce.errors import Unauthenticated
from xce.model import (
    audit, capabilities, catalog, claims, history, hosts, identity, job_claims, jobs, ops, orphans, snapshots,
)
from xce.model import facts as F
from xce.model.entities.identity import User
from xce.model.state import State

FOLDS: dict[type[F.Fact], Callable[[State, Any], None]] = {
    F.ClusterInitialized: lambda m, f: setattr(m, "cluster_id", f.cluster_id),
    F.UserDefined: identity.apply_user_defined,
    F.TokenIssued: identity.apply_token_issued,
    F.TokenRevoked: identity.apply_token_revoked,
    F.UserDisabled: identity.apply_user_disabled,
    F.QueueDefined: catalog.apply_queue_defined,
    F.ProjectDefined: catalog.apply_project_defined,
    F.ProjectRemoved: catalog.apply_project_removed,
    F.JobSubmitted: jobs.apply_job_submitted,
    F.AuditRecorded: audit.apply_audit_recorded,
    F.HostRegistered: hosts.apply_host_registered,
    F.HostStateChanged: hosts.apply_host_state_changed,
    F.JobAllocated: job_claims.apply_job_allocated,  # facts about a run: its claims too
    F.JobStarted: jobs.apply_job_started,
    F.JobFinished: job_claims.apply_job_finished,
    F.JobRequeued: job_claims.apply_job_requeued,
    F.JobKillRequested: jobs.apply_job_kill_requested,
    F.JobSignalRequested: jobs.apply_job_signal_requested,
    F.JobSuspended: jobs.apply_job_suspended,
    F.JobResumed: jobs.apply_job_resumed,
    F.JobHeld: jobs.apply_job_held,
    F.JobReleased: jobs.apply_job_released,
    F.JobProcessEnded: job_claims.apply_job_process_ended,
    F.ClaimCreated: job_claims.apply_claim_created,  # a run's template claims join their run
    F.ClaimPlaced: claims.apply_claim_placed,
    F.ClaimOpIntent: claims.apply_claim_op_intent,
    F.ClaimOpSucceeded: claims.apply_claim_op_succeeded,
    F.ClaimOpFailed: claims.apply_claim_op_failed,
    F.ReplicaPlaced: claims.apply_replica_placed,
    F.ReplicaOpIntent: claims.apply_replica_op_intent,
    F.ReplicaOpSucceeded: claims.apply_replica_op_succeeded,
    F.ReplicaOpFailed: claims.apply_replica_op_failed,
    F.ClaimDeleteRequested: claims.apply_claim_delete_requested,
    F.ClaimPurgeRequested: claims.apply_claim_purge_requested,
    F.ClaimResizeRequested: claims.apply_claim_resize_requested,
    F.ClaimResizeReserved: claims.apply_claim_resize_reserved,
    F.AttachmentAdded: claims.apply_attachment_added,
    F.AttachmentRemoved: claims.apply_attachment_removed,
    F.AgentLeased: ops.apply_agent_leased,
    F.ClassCapabilitiesReported: capabilities.apply_class_capabilities,
    F.SnapshotCreated: snapshots.apply_snapshot_created,
    F.SnapshotOpIntent: snapshots.apply_snapshot_op_intent,
    F.SnapshotOpSucceeded: snapshots.apply_snapshot_op_succeeded,
    F.SnapshotOpFailed: snapshots.apply_snapshot_op_failed,
    F.SnapshotDeleteRequested: snapshots.apply_snapshot_delete_requested,
    F.OrphanSeen: orphans.apply_orphan_seen,
    F.OrphanResolved: orphans.apply_orphan_resolved,
    F.RecordsRetired: history.apply_records_retired,
}


class Model(State):
    """The controller's whole state, and the one way it changes: ``apply``."""

    def apply(self, position: int, fact: F.Fact) -> None:
        fold = FOLDS.get(type(fact))
        if fold is None:  # a registered fact with no fold is a programming error
            raise TypeError(f"no fold for fact {fact.TYPE}")
        if self.audit_outbox is not None:
            self.audit_outbox.folding(position)
        fold(self, fact)
        self.position = position

    def user_for_token_hash(self, token_hash: str, now: float) -> User | None:
        """Who the token stands for at ``now``: None when unknown, revoked, expired or its user disabled."""
        try:
            return identity.authenticate(self, token_hash, now)
        except Unauthenticated:
            return None
