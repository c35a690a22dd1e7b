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
    audit, capabilities, catalog, claims, dependencies, history, hosts, identity, job_changes, job_claims, jobs, ops,
    orphans, preempt_snapshots, snapshots, tasks,
)
from xce.model.facts import (
    AgentLeased, AttachmentAdded, AttachmentRemoved, AuditRecorded, ClaimCreated, ClaimDeleteRequested, ClaimOpFailed,
    ClaimOpIntent, ClaimOpSucceeded, ClaimPlaced, ClaimPurgeRequested, ClaimResizeRequested, ClaimResizeReserved,
    ClassCapabilitiesReported, ClusterInitialized, Fact, HostRegistered, HostRemoved, HostStateChanged, JobAllocated,
    JobFinished, JobHeld, JobKillRequested, JobModified, JobProcessEnded, JobReleased, JobRequeued, JobResumed,
    JobSignalRequested, JobStarted, JobSubmitted, JobSuspended, OrphanResolved, OrphanSeen, ProjectDefined, ProjectRemoved, QueueDefined,
    RecordsRetired, ReplicaEvicted, ReplicaLost, ReplicaObjectGone, ReplicaOpFailed, ReplicaOpIntent, ReplicaOpSucceeded, ReplicaPlaced, ReplicasAdded,
    SnapshotCreated, SnapshotDeleteRequested, SnapshotOpFailed, SnapshotOpIntent, SnapshotOpSucceeded, TaskEnded,
    TaskLaunched, TokenIssued, TokenRevoked, UserDefined, UserDisabled,
)
from xce.model.entities.identity import User
from xce.model.state import State

def _host_registered(model: State, f: HostRegistered) -> None:
    """A worker (re)registers; its replicas on a host declared lost are checked now that it is back."""
    hosts.apply_host_registered(model, f)
    claims.replicas_host_returned(model, f.name, f.time)


FOLDS: dict[type[Fact], Callable[[State, Any], None]] = {
    ClusterInitialized: lambda m, f: setattr(m, "cluster_id", f.cluster_id),
    UserDefined: identity.apply_user_defined,
    TokenIssued: identity.apply_token_issued,
    TokenRevoked: identity.apply_token_revoked,
    UserDisabled: identity.apply_user_disabled,
    QueueDefined: catalog.apply_queue_defined,
    ProjectDefined: catalog.apply_project_defined,
    ProjectRemoved: catalog.apply_project_removed,
    JobSubmitted: jobs.apply_job_submitted,
    AuditRecorded: audit.apply_audit_recorded,
    HostRegistered: _host_registered,
    HostStateChanged: hosts.apply_host_state_changed,
    HostRemoved: hosts.apply_host_removed,
    JobAllocated: job_claims.apply_job_allocated,  # facts about a run: its claims too
    JobStarted: jobs.apply_job_started,
    JobFinished: job_claims.apply_job_finished,
    JobRequeued: job_claims.apply_job_requeued,
    JobKillRequested: jobs.apply_job_kill_requested,
    JobSignalRequested: jobs.apply_job_signal_requested,
    JobSuspended: jobs.apply_job_suspended,
    JobResumed: jobs.apply_job_resumed,
    JobHeld: jobs.apply_job_held,
    JobReleased: jobs.apply_job_released,
    JobModified: job_changes.apply_job_modified,
    JobProcessEnded: job_claims.apply_job_process_ended,
    TaskLaunched: tasks.apply_task_launched,
    TaskEnded: tasks.apply_task_ended,
    ClaimCreated: job_claims.apply_claim_created,  # a run's template claims join their run
    ClaimPlaced: claims.apply_claim_placed,
    ClaimOpIntent: claims.apply_claim_op_intent,
    ClaimOpSucceeded: claims.apply_claim_op_succeeded,
    ClaimOpFailed: claims.apply_claim_op_failed,
    ReplicaPlaced: claims.apply_replica_placed,
    ReplicasAdded: claims.apply_replicas_added,
    ReplicaEvicted: claims.apply_replica_evicted,
    ReplicaLost: claims.apply_replica_lost,
    ReplicaObjectGone: claims.apply_replica_object_gone,
    ReplicaOpIntent: claims.apply_replica_op_intent,
    ReplicaOpSucceeded: claims.apply_replica_op_succeeded,
    ReplicaOpFailed: claims.apply_replica_op_failed,
    ClaimDeleteRequested: claims.apply_claim_delete_requested,
    ClaimPurgeRequested: claims.apply_claim_purge_requested,
    ClaimResizeRequested: claims.apply_claim_resize_requested,
    ClaimResizeReserved: claims.apply_claim_resize_reserved,
    AttachmentAdded: claims.apply_attachment_added,
    AttachmentRemoved: claims.apply_attachment_removed,
    AgentLeased: ops.apply_agent_leased,
    ClassCapabilitiesReported: capabilities.apply_class_capabilities,
    SnapshotCreated: snapshots.apply_snapshot_created,
    SnapshotOpIntent: snapshots.apply_snapshot_op_intent,
    SnapshotOpSucceeded: preempt_snapshots.apply_snapshot_op_succeeded,  # (a preempted run is told)
    SnapshotOpFailed: preempt_snapshots.apply_snapshot_op_failed,
    SnapshotDeleteRequested: snapshots.apply_snapshot_delete_requested,
    OrphanSeen: orphans.apply_orphan_seen,
    OrphanResolved: orphans.apply_orphan_resolved,
    RecordsRetired: history.apply_records_retired,
}


class Model(State):
    """The controller's whole state, and the one way it changes: ``apply``."""

    def apply(self, position: int, fact: Fact) -> None:
        fold = FOLDS.get(type(fact))
        if fold is None:  # a registered fact with no fold is a programming error
            raise TypeError(f"no fold for fact {fact.TYPE}")
        if self.audit_outbox is not None:
            self.audit_outbox.folding(position)
        fold(self, fact)
        self.position = position

    def _rebuild_indexes(self) -> None:
        super()._rebuild_indexes()
        dependencies.rebuild(self)  # judged by the model's rules, which live above ``State``

    def user_for_token_hash(self, token_hash: str, now: float) -> User | None:
        """Who the token stands for at ``now``: None when unknown, revoked, expired or its user disabled."""
        try:
            return identity.authenticate(self, token_hash, now)
        except Unauthenticated:
            return None
