"""Claims: data and volumes as resources with a lifecycle.

General layout::

    lifecycle   how it changes: the transition tables of claims and attachments, the only
                functions that change their state (each writing history), and the folds
    decide      what requests may do: create (quota, pools), find, delete, purge, attach
    replicas    a node-local claim's replicas, one per host: their table, setter and ops' book
    agents      what claim agents do with claims' ops (the ``xce.model.ops`` discipline): where
                they are, who runs them, their facts; typed results

What a claim is (its enums, ``Claim``, ``Attachment``, ``Resize``, names) is plain data at the
model's bottom, ``xce.model.entities.claims`` (its ``Op``: ``entities.ops``), re-exported here.
Jobs meet claims in one place only: ``xce.model.job_claims``.
"""

from xce.model.claims.agents import (
    CLAIM_OPS, OpResult, check_epoch, due_ops, held_ops, holds, lease, next_due, record_intent, record_result,
    retry_delay,
)
from xce.model.claims.decide import (
    CLAIM_SOURCE, ClaimSpec, add_attachment, check_fits_a_pool, check_quota, class_or_404, create, delete, evict, live_by_name, quota_left,
    listing_match, may_see, purge, quota_use, remove_attachment, resize, visible, visible_by_id, warm,
)
from xce.model.claims.lifecycle import (
    ATTACHMENT_TRANSITIONS, RESIZE_TRANSITIONS, TRANSITIONS, apply_attachment_added,
    apply_attachment_removed, apply_claim_created, apply_claim_delete_requested, apply_claim_op_failed,
    apply_claim_op_intent, apply_claim_op_succeeded, apply_claim_placed, apply_claim_purge_requested,
    apply_claim_resize_requested, apply_claim_resize_reserved, apply_replica_op_failed, apply_replica_op_intent,
    apply_replica_evicted, apply_replica_lost, apply_replica_object_gone, apply_replica_op_succeeded, apply_replica_placed, apply_replicas_added,
    begin_stage_out, detach, keep_data, release_template, replicas_host_returned,
)
from xce.agentnames import SHARED_AGENT, node_agent
from xce.model.claims.replicas import REPLICA_OPS, REPLICA_TRANSITIONS
from xce.model.entities.claims import (
    LIVE, RESERVED_NAMES, TEMPLATE_NAME, AccessMode, Attachment, AttachmentState, Claim, ClaimForm, ClaimState,
    ContentSource, Mode, ReclaimPolicy, Replica, ReplicaState, Resize, ResizeState, Scope, name_key, template_name,
)
from xce.model.entities.ops import Op, OpKind

__all__ = [
    "ATTACHMENT_TRANSITIONS", "CLAIM_OPS", "CLAIM_SOURCE", "LIVE", "REPLICA_OPS", "REPLICA_TRANSITIONS", "RESERVED_NAMES",
    "RESIZE_TRANSITIONS", "SHARED_AGENT",
    "TEMPLATE_NAME", "TRANSITIONS",
    "ContentSource",
    "AccessMode", "Attachment", "AttachmentState", "Claim", "ClaimForm", "ClaimSpec", "ClaimState", "Mode", "Op",
    "OpKind", "OpResult", "ReclaimPolicy", "Replica", "ReplicaState", "Resize", "ResizeState", "Scope",
    "add_attachment", "apply_attachment_added",
    "apply_attachment_removed", "apply_claim_created", "apply_claim_delete_requested", "apply_claim_op_failed",
    "apply_claim_op_intent", "apply_claim_op_succeeded", "apply_claim_placed", "apply_claim_purge_requested",
    "apply_claim_resize_requested", "apply_claim_resize_reserved", "apply_replica_op_failed",
    "apply_replica_evicted", "apply_replica_lost", "apply_replica_object_gone", "apply_replica_op_intent", "apply_replica_op_succeeded", "apply_replica_placed",
    "apply_replicas_added",
    "begin_stage_out", "check_epoch", "check_fits_a_pool", "check_quota", "quota_left", "class_or_404", "create", "delete",
    "detach", "due_ops", "evict", "held_ops", "holds", "keep_data", "lease", "listing_match", "live_by_name", "may_see", "name_key",
    "next_due", "node_agent", "purge",
    "quota_use", "record_intent", "record_result", "release_template", "replicas_host_returned", "remove_attachment", "resize", "retry_delay",
    "template_name", "visible", "visible_by_id", "warm",
]
