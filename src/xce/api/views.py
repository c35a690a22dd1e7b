"""Model entities as API JSON.  The shapes here are stable API (``--json`` prints them)."""

from __future__ import annotations

import time
from typing import Any

from xce.model.audit import AuditRecord
from xce.model.claims import Attachment, Claim, ClaimState
from xce.model.identity import Token, User
from xce.model import job_claims
from xce.model.jobs import Job, JobState
from xce.model.state import Model
from xce.model.orphans import Orphan


def job_json(model: Model, job: Job, pending_reason: str | None = None) -> dict[str, Any]:
    """``pending_reason`` is the scheduler's latest word on a pending job (not a fact)."""
    reason = job.pending_reason or pending_reason
    if job.state is JobState.PEND and job.allocated:
        reason = job_claims.blocking(model, job, time.time()) or reason  # the readiness gate names the claim
    if reason is None and job.state is JobState.PEND:
        reason = "waiting for the next scheduling cycle"
    if job.phase == "stage-out":
        reason = job_claims.blocking_stage_out(model, job, time.time())
    return {
        "id": job.id, "display_id": job.display_id, "name": job.name, "user": job.user,
        "project": job.project, "queue": job.queue, "state": job.state.value,
        "command": job.command, "submit_time": job.submit_time,
        "start_time": job.start_time, "end_time": job.end_time, "pending_reason": reason,
        "exit_code": job.exit_code, "signal": job.signal, "exit_reason": job.exit_reason,
        "hosts": job.hosts, "claims": job_claims.claims_json(model, job), "slots": job.slots, "resreq": job.resreq,
        "cwd": job.cwd, "stdout": job.stdout, "stderr": job.stderr, "rerunnable": job.rerunnable,
        "array_parent": job.array_parent, "array_index": job.array_index, "run": job.run,
        "phase": job.phase, "app": job.app, "publish": job.publish or None,
    }


def user_json(user: User) -> dict[str, Any]:
    return {"name": user.name, "role": user.role.value, "projects": user.projects,
            "host": user.host, "created": user.created, "disabled": user.disabled}


def token_json(tok: Token, now: float) -> dict[str, Any]:
    """A token as listed: what it is and whether it works; never its secret nor its hash."""
    return {"token_id": tok.token_id, "user": tok.user, "created": tok.created, "expires": tok.expires,
            "expired": tok.expired(now), "revoked": tok.revoked, "revoked_time": tok.revoked_time}


def audit_json(rec: AuditRecord) -> dict[str, Any]:
    """An audit record; ``position`` is the log position of the fact it came with (0: from before
    the trail moved to the store's table)."""
    return {"seq": rec.seq, "time": rec.time, "user": rec.user, "action": rec.action, "target": rec.target,
            "result": rec.result, "detail": rec.detail, "position": rec.position}


def attachment_json(a: Attachment) -> dict[str, Any]:
    return {"id": a.id, "host": a.host, "mode": a.mode, "job_id": a.job_id, "run": a.run, "state": a.state.value,
            "path": a.path, "created": a.created, "by": a.by}


def claim_json(claim: Claim, reason: str | None = None) -> dict[str, Any]:
    """A claim as the API shows it.  ``reason`` is the scheduler's word on an unplaced claim."""
    op = claim.op
    waiting = claim.waiting()
    if reason and claim.state is ClaimState.PENDING and not claim.placed:
        waiting = reason
    return {
        "id": claim.id, "name": claim.name, "form": claim.form.value, "class": claim.class_name,
        "scope": claim.scope, "size_bytes": claim.size_bytes, "actual_bytes": claim.actual_bytes,
        "access_mode": claim.access_mode.value, "reclaim_policy": claim.reclaim_policy.value,
        "state": claim.state.value, "owner": claim.owner, "project": claim.project, "params": claim.params,
        "job_id": claim.job_id, "pool": claim.pool, "host": claim.host, "handle": claim.handle,
        "path": claim.path, "created": claim.created,
        "attempts": op.attempts if op else (claim.ops[-1]["attempt"] if claim.ops else 0),
        "last_error": claim.last_error, "stderr_tail": claim.stderr_tail or None,
        "next_retry": op.next_retry if op else None,
        "op": None if op is None else {"op_id": op.op_id, "op": op.kind.value, "attempts": op.attempts,
                                        "agent": op.agent, "epoch": op.epoch, "next_retry": op.next_retry},
        "op_ids": sorted({o["op_id"] for o in claim.ops} | ({op.op_id} if op else set())),
        "reachable_hosts": claim.reachable_hosts, "host_labels": claim.host_labels,
        "attachments": [attachment_json(a) for a in claim.attachments],
        "delete_requested": claim.delete_requested, "retained": claim.retained,
        "data_exists": claim.data_exists, "waiting": waiting,
        "history": claim.history, "ops": claim.ops,
    }


def orphan_json(o: Orphan, now: float) -> dict[str, Any]:
    return {"kind": "provider_object", "handle": o.handle, "class": o.class_name, "provider": o.provider,
            "claim_id": o.claim_id, "tags": o.tags, "size_bytes": o.size_bytes, "first_seen": o.first_seen,
            "age": round(now - o.first_seen, 1), "retain": o.retain}
