"""Records the store keeps beside the log: the audit trail's records and how they are queried.

Plain data at the bottom of the house: the model writes audit records (its folds fill an outbox
the controller appends with their facts), the store keeps and queries them, the API shows them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit record: who did what to which target, and how it ended (``ok`` or a refusal code).

    ``position`` is the log position of the fact it came with (0 for records migrated from a
    snapshot of format 1, which did not keep it) and ``index`` its place among that fact's records.
    ``seq`` is assigned by the store when the record is written: it only grows, in commit order.
    """

    time: float
    user: str
    action: str
    target: str
    result: str
    detail: str = ""
    position: int = 0
    index: int = 0
    seq: int = 0


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit records to read: all filters optional, newest first, ``before_seq`` to page on.

    ``since`` is inclusive and ``until`` exclusive (seconds since the Unix epoch); ``target`` is a
    prefix (``claim/ckpt``, ``job/12``); ``user``, ``action`` and ``result`` match exactly.
    """

    since: float | None = None
    until: float | None = None
    user: str | None = None
    target: str | None = None
    action: str | None = None
    result: str | None = None
    before_seq: int | None = None
    limit: int = 100
