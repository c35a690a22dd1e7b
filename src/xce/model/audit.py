"""The audit trail: every mutating request, every refusal, every claim transition and orphan event.

Where records come from: facts.  A request's record (or a refusal's) is an
``AuditRecorded`` fact; a claim's transition or an orphan event is recorded by
the fold of the fact that caused it.  Every fold writes its lines through
``record``, the one seam.

Where they go: not into the model.  The trail grows with traffic, not with
live state, so it lives in the store's audit table (``Store.query_audit``)
and never in memory or in a snapshot.  ``record`` appends to the model's
``audit_outbox``, a transient list that is neither snapshotted nor compared:

- the controller folds a batch's facts into the model *before* it appends
  them (``controller/commit.py``), so after folding a batch it takes the
  outbox and hands those records to ``Store.append`` with the facts: one
  transaction, so an acknowledged request always has its record and a batch
  that did not commit has none (the model that folded it is thrown away);
- each record carries the log position of its fact and its index among that
  fact's records, a key the store keeps unique.  Replaying the log at
  start-up folds the tail again and so derives its records again; the
  controller hands them to ``Store.backfill_audit``, which skips every
  position the trail already holds.  Replay therefore never duplicates a
  record, and the tail of a state directory written before the trail moved
  to the store gets its records exactly once;
- a model with no outbox (``None``: tests, tools folding facts) records nothing.

Folds stay pure and deterministic: the same facts give the same records.
"""

from __future__ import annotations

from xce.model.entities.audit import AuditOutbox
from xce.model.facts import AuditRecorded
from xce.model.state import State
from xce.records import AuditRecord


__all__ = ["AuditOutbox", "AuditRecord", "apply_audit_recorded", "record"]

DETAIL_MAX = 512


def record(model: State, time: float, user: str, action: str, target: str, result: str, detail: str = "") -> None:
    """The one way a fold adds to the audit trail (a request's record, a claim's transition...)."""
    box = model.audit_outbox
    if box is None:
        return
    box.add(AuditRecord(time=time, user=user, action=action, target=target, result=result,
                        detail=detail[:DETAIL_MAX], position=box.position, index=box.index))
    box.index += 1


def apply_audit_recorded(model: State, f: AuditRecorded) -> None:
    record(model, f.time, f.user, f.action, f.target, f.result, f.detail)
