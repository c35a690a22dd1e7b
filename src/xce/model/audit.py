"""The audit trail: every mutating request and every refused one, as facts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from xce.model.facts import AuditRecorded

if TYPE_CHECKING:
    from xce.model.state import Model


@dataclass
class AuditRecord:
    seq: int
    time: float
    user: str
    action: str
    target: str
    result: str
    detail: str = ""


def apply_audit_recorded(model: Model, f: AuditRecorded) -> None:
    model.audit.append(AuditRecord(seq=len(model.audit) + 1, time=f.time, user=f.user,
                                   action=f.action, target=f.target, result=f.result,
                                   detail=f.detail))


def query(model: Model, since: float | None = None, user: str | None = None,
          limit: int | None = None) -> list[AuditRecord]:
    out = [r for r in model.audit
           if (since is None or r.time >= since) and (user is None or r.user == user)]
    return out[-limit:] if limit else out
