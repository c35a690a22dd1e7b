"""Snapshots: read-only point-in-time copies of claims, first-class objects with their own
lifecycle, owner and project; and clones (claims made from a snapshot or a claim).

General layout::

    lifecycle   how it changes: the transition table, the only function that changes its state
                (writing history), the folds
    decide      what requests may do: take one of a claim (quota, capabilities), find, delete,
                and make a claim from a snapshot or a claim (``clone``)
    agents      what the provisioner does with their ops (the ``xce.model.ops`` discipline):
                where they are, their facts; typed results

What a snapshot is (``SnapshotState``, ``Snapshot``) is plain data at the model's bottom,
``xce.model.entities.snapshots``, re-exported here.  Snapshots sit above claims: they name claims,
claims never import them.
"""

from xce.model.entities.snapshots import LIVE, Snapshot, SnapshotState
from xce.model.snapshots.agents import (
    SNAPSHOT_OPS, SnapshotResult, due_ops, held_ops, next_due, record_intent, record_result,
)
from xce.model.snapshots.decide import (
    clone, create, delete, listing_match, live_by_name, visible, visible_by_id,
)
from xce.model.snapshots.lifecycle import (
    TRANSITIONS, apply_snapshot_created, apply_snapshot_delete_requested, apply_snapshot_op_failed,
    apply_snapshot_op_intent, apply_snapshot_op_succeeded,
)

__all__ = [
    "LIVE", "SNAPSHOT_OPS", "TRANSITIONS", "Snapshot", "SnapshotResult", "SnapshotState",
    "apply_snapshot_created", "apply_snapshot_delete_requested", "apply_snapshot_op_failed",
    "apply_snapshot_op_intent", "apply_snapshot_op_succeeded", "clone", "create", "delete", "due_ops", "held_ops",
    "listing_match", "live_by_name", "next_due", "record_intent", "record_result", "visible", "visible_by_id",
]
