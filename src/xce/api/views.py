"""Model entities as API JSON.  The shapes here are stable API (``--json`` prints them)."""

from __future__ import annotations

import dataclasses
from typing import Any

from xce.model.audit import AuditRecord
from xce.model.identity import User
from xce.model.jobs import Job


def job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id, "name": job.name, "user": job.user, "project": job.project,
        "queue": job.queue, "state": job.state.value, "command": job.command,
        "submit_time": job.submit_time, "pending_reason": job.pending_reason,
        "exit_code": job.exit_code, "hosts": job.hosts, "claims": job.claims,
        "slots": job.slots, "resreq": job.resreq, "cwd": job.cwd, "stdout": job.stdout,
        "stderr": job.stderr, "rerunnable": job.rerunnable,
    }


def user_json(user: User) -> dict[str, Any]:
    return {"name": user.name, "role": user.role.value, "projects": user.projects,
            "host": user.host, "created": user.created}


def audit_json(rec: AuditRecord) -> dict[str, Any]:
    return dataclasses.asdict(rec)
