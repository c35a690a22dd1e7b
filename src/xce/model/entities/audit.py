"""The audit records folded but not yet handed to the store: the model's transient outbox.

Why the trail is not model state, and how records reach the store: ``xce.model.audit``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xce.records import AuditRecord


@dataclass
class AuditOutbox:
    """Records folded since the controller last took them, keyed by (position, index)."""

    position: int = 0  # the fact being folded (set by ``Model.apply``)
    index: int = 0  # records already made for that fact
    records: list[AuditRecord] = field(default_factory=list)

    def folding(self, position: int) -> None:
        self.position, self.index = position, 0

    def add(self, rec: AuditRecord) -> None:
        self.records.append(rec)

    def take(self) -> list[AuditRecord]:
        out, self.records = self.records, []
        return out
