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


def record(model: Model, time: float, user: str, action: str, target: str, result: str, detail: str = "") -> None:
    """The one way a fold adds to the audit trail (a request's record, a claim's transition...)."""
    model.audit.append(AuditRecord(seq=len(model.audit) + 1, time=time, user=user, action=action, target=target,
                                   result=result, detail=detail[:512]))


def apply_audit_recorded(model: Model, f: AuditRecorded) -> None:
    record(model, f.time, f.user, f.action, f.target, f.result, f.detail)


def query(model: Model, since: float | None = None, user: str | None = None,
          limit: int | None = None) -> list[AuditRecord]:
    out = [r for r in model.audit
           if (since is None or r.time >= since) and (user is None or r.user == user)]
    return out[-limit:] if limit else out
