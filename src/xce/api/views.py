"""Model entities as API JSON.  The shapes here are stable API (``--json`` prints them)."""

from __future__ import annotations

import dataclasses
from typing import Any

from xce.model.audit import AuditRecord
from xce.model.identity import User
from xce.model.jobs import Job, JobState


def job_json(job: Job, pending_reason: str | None = None) -> dict[str, Any]:
    """``pending_reason`` is the scheduler's latest word on a pending job (not a fact)."""
    reason = job.pending_reason or pending_reason
    if reason is None and job.state is JobState.PEND:
        reason = "waiting for the next scheduling cycle"
    return {
        "id": job.id, "display_id": job.display_id, "name": job.name, "user": job.user,
        "project": job.project, "queue": job.queue, "state": job.state.value,
        "command": job.command, "submit_time": job.submit_time,
        "start_time": job.start_time, "end_time": job.end_time, "pending_reason": reason,
        "exit_code": job.exit_code, "signal": job.signal, "exit_reason": job.exit_reason,
        "hosts": job.hosts, "claims": job.claims, "slots": job.slots, "resreq": job.resreq,
        "cwd": job.cwd, "stdout": job.stdout, "stderr": job.stderr, "rerunnable": job.rerunnable,
        "array_parent": job.array_parent, "array_index": job.array_index, "run": job.run,
    }


def user_json(user: User) -> dict[str, Any]:
    return {"name": user.name, "role": user.role.value, "projects": user.projects,
            "host": user.host, "created": user.created}


def audit_json(rec: AuditRecord) -> dict[str, Any]:
    return dataclasses.asdict(rec)
