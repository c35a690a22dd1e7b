"""Model entities as API JSON.  The shapes here are stable API (``--json`` prints them)."""

from __future__ import annotations

import time
from typing import Any, Callable

from xce.model.audit import AuditRecord
from xce.model.claims import Attachment, Claim, ClaimState, Op, Replica, ResizeState
from xce.model.identity import Token, User
from xce.model import job_claims, status
from xce.model.jobs import Job, JobState
from xce.model import Model
from xce.model.orphans import Orphan
from xce.model.snapshots import Snapshot
from xce.records import Usage


def job_json(model: Model, job: Job, pending_reason: str | None = None,
             progress: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """``pending_reason`` is the scheduler's latest word on a pending job (not a fact); ``progress``
    gives a claim's transfer in flight (``controller.observed``: readings, not facts)."""
    staging = job_claims.staging_claim(model, job)
    reading = progress(staging.id) if progress is not None and staging is not None else None
    reason = status.status_reason(model, job, time.time(), pending_reason,
                                  reading.as_json() if reading is not None else None)
    held = job.start_time - job.alloc_time if job.start_time is not None and job.alloc_time is not None else None
    return {
        "id": job.id, "display_id": job.display_id, "name": job.name, "user": job.user,
        "project": job.project, "queue": job.queue, "state": job.state.value,
        "command": job.command, "submit_time": job.submit_time,
        "start_time": job.start_time, "end_time": job.end_time, "pending_reason": reason,
        "exit_code": job.exit_code, "signal": job.signal, "exit_reason": job.exit_reason,
        "hosts": job.hosts, "claims": job_claims_json(model, job), "slots": job.slots, "resreq": job.resreq,
        "cwd": job.cwd, "stdout": job.stdout, "stderr": job.stderr, "rerunnable": job.rerunnable,
        "array_parent": job.array_parent, "array_index": job.array_index, "run": job.run,
        "app": job.app, "publish": job.publish or None, "history": job.history,
        # how long the run's hosts were held before its process started (staging before allocation keeps it short)
        "alloc_time": job.alloc_time, "held_s": held,
        "mem_limit": job.mem_limit, "usage": job.usage,
    }


def job_brief_json(job: Job) -> dict[str, Any]:
    """A listing's row: what ``xce jobs`` shows, and nothing that costs a lookup (claims, the pending
    reason, the history).  A full page of full documents is ~800 KB for 1,000 jobs."""
    return {"id": job.id, "display_id": job.display_id, "name": job.name, "user": job.user,
            "project": job.project, "queue": job.queue, "state": job.state.value, "slots": job.slots,
            "hosts": job.hosts, "submit_time": job.submit_time, "start_time": job.start_time,
            "end_time": job.end_time}


def job_claims_json(model: Model, job: Job) -> list[dict[str, Any]]:
    """The job's claims as ``xce job show`` lists them (workspace first)."""
    if job.state is JobState.RUN:
        workspace_state = ClaimState.READY.value  # the worker made it before it started the job
    elif job.start_time is not None or job.finished:
        workspace_state = ClaimState.RELEASED.value  # removed with the run's cleanup
    else:
        workspace_state = ClaimState.PENDING.value
    out: list[dict[str, Any]] = [{
        "name": "workspace", "form": "template", "class": "workspace", "mode": "rw", "path": job.workspace,
        "state": workspace_state, "attempts": None, "last_error": None, "env": "XCE_WORKSPACE"}]
    early = job_claims.early_claim(model, job)
    for claim in job_claims.run_claims(model, job) + ([early] if early is not None else []):
        env = job_claims.template_env(claim.kind)
        out.append({"name": claim.name, "form": "template", "class": claim.class_name, "kind": claim.kind,
                    "state": claim.state.value, "mode": "rw", "path": claim.path, "env": env,
                    "host": claim.host, "attempts": claim.op.attempts if claim.op else None,
                    "last_error": claim.last_error, "claim_id": claim.id})
    for ref in job.claim_refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is None:
            continue
        attached = [{"id": a.id, "host": a.host, "state": a.state.value, "path": a.path,
                     "attempts": a.op.attempts if a.op else None, "last_error": a.last_error}
                    for a in claim.attachments if a.job_id == job.id and a.run == job.run]
        out.append({"name": claim.name, "form": "standalone", "class": claim.class_name, "state": claim.state.value,
                    "mode": ref["mode"], "access_mode": claim.access_mode.value, "env": job_claims.env_name(claim.name),
                    "attempts": claim.op.attempts if claim.op else None, "last_error": claim.last_error,
                    "attachments": attached, "claim_id": claim.id})
    return out


def history_json(job: Job, archived: bool) -> dict[str, Any]:
    """A finished job as ``xce hist`` lists it (sacct's columns): ``xce job show`` has every field."""
    run_s = job.end_time - job.start_time if job.start_time is not None and job.end_time is not None else None
    return {
        "id": job.id, "display_id": job.display_id, "name": job.name, "user": job.user, "project": job.project,
        "queue": job.queue, "state": job.state.value, "exit_code": job.exit_code, "signal": job.signal,
        "exit_reason": job.exit_reason, "submit_time": job.submit_time, "start_time": job.start_time,
        "end_time": job.end_time, "run_s": run_s, "slots": job.slots, "hosts": job.hosts, "run": job.run,
        "array_parent": job.array_parent, "array_index": job.array_index, "archived": archived,
        "usage": job.usage,
    }


def usage_json(u: Usage) -> dict[str, Any]:
    return {"project": u.project, "user": u.user or None, "jobs": u.jobs, "slot_hours": u.slot_seconds / 3600,
            "cpu_hours": u.cpu_seconds / 3600, "claims": u.claims, "claim_byte_hours": u.claim_byte_seconds / 3600}


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


def resize_json(claim: Claim, reason: str | None = None) -> dict[str, Any] | None:
    """The claim's latest resize; ``reason`` is the scheduler's word on one waiting for room."""
    r = claim.resize
    if r is None:
        return None
    waiting = None
    if r.state is ResizeState.REQUESTED:
        waiting = reason or "waiting for the scheduler to reserve the growth in its pool"
    elif r.state is ResizeState.EXPANDING:
        waiting = claim.waiting()
    return {"state": r.state.value, "size_bytes": r.size_bytes, "old_bytes": r.old_bytes, "by": r.by,
            "requested": r.requested, "error": r.error, "waiting": waiting, "history": r.history}


def claim_json(claim: Claim, reason: str | None = None, *, resize_reason: str | None = None,
               used_bytes: int | None = None, transfer: dict[str, Any] | None = None) -> dict[str, Any]:
    """A claim as the API shows it.  ``reason`` is the scheduler's word on an unplaced claim (and
    ``resize_reason`` on a resize waiting for room); ``used_bytes`` what its provider last listed."""
    op = claim.op
    waiting = claim.waiting()
    if reason and (claim.state is ClaimState.PENDING and not claim.placed or claim.replicas_waiting and waiting is None):
        waiting = reason
    elif transfer is not None:  # a stage-in or populate in flight: how far it is
        waiting = status.staging_text(claim, transfer)
    elif claim.resize is not None and claim.resize.state is ResizeState.REQUESTED and waiting is None:
        waiting = f"resize to {claim.resize.size_bytes} bytes: " + (resize_reason or "waiting for room")
    return {
        "id": claim.id, "name": claim.name, "form": claim.form.value, "class": claim.class_name,
        "scope": claim.scope, "size_bytes": claim.size_bytes, "actual_bytes": claim.actual_bytes,
        "used_bytes": used_bytes, "resize": resize_json(claim, resize_reason),
        "access_mode": claim.access_mode.value, "reclaim_policy": claim.reclaim_policy.value,
        "state": claim.state.value, "owner": claim.owner, "project": claim.project, "params": claim.params,
        "job_id": claim.job_id, "pool": claim.pool, "host": claim.host, "handle": claim.handle,
        "path": claim.path, "created": claim.created,
        "attempts": op.attempts if op else (claim.ops[-1]["attempt"] if claim.ops else 0),
        "last_error": claim.last_error, "stderr_tail": claim.stderr_tail or None,
        "next_retry": op.next_retry if op else None,
        "op": op_summary(op),
        "op_ids": sorted({o["op_id"] for o in claim.ops} | ({op.op_id} if op else set())),
        "reachable_hosts": claim.reachable_hosts, "host_labels": claim.host_labels,
        "attachments": [attachment_json(a) for a in claim.attachments],
        "delete_requested": claim.delete_requested, "retained": claim.retained,
        "data_exists": claim.data_exists, "waiting": waiting, "source": claim.source,
        "populate_from": claim.populate_from, "transfer": transfer,
        "history": claim.history, "ops": claim.ops,
        # a staging claim's items, as resolved at submission: paths, URLs, REMOTE:path (never credentials)
        "stage_in": claim.stage_in, "stage_out": claim.stage_out,
        "replicas": [replica_json(r) for r in claim.replicas], "replicas_ready": len(claim.ready_hosts()),
        "replicas_to_place": claim.replicas_to_place,
    }


def replica_json(r: Replica) -> dict[str, Any]:
    """One host's copy of a node-local claim (``wire.ReplicaDoc``)."""
    return {"host": r.host, "state": r.state.value, "placed": r.placed, "handle": r.handle, "path": r.path,
            "attempts": r.attempts, "last_error": r.last_error, "op": op_summary(r.op), "history": r.history}


def op_summary(op: Op | None) -> dict[str, Any] | None:
    """An open op as a document shows it (``wire.OpSummary``)."""
    return None if op is None else {"op_id": op.op_id, "op": op.kind.value, "attempts": op.attempts,
                                    "agent": op.agent, "epoch": op.epoch, "next_retry": op.next_retry}


def snapshot_json(snap: Snapshot) -> dict[str, Any]:
    """A snapshot as the API shows it (``xce snapshot show``)."""
    op = snap.op
    return {
        "id": snap.id, "name": snap.name, "project": snap.project, "owner": snap.owner,
        "claim": snap.claim_name, "claim_id": snap.claim_id, "class": snap.class_name,
        "state": snap.state.value, "size_bytes": snap.size_bytes, "actual_bytes": snap.actual_bytes,
        "handle": snap.handle, "created": snap.created,
        "attempts": op.attempts if op else (snap.ops[-1]["attempt"] if snap.ops else 0),
        "last_error": snap.last_error, "stderr_tail": snap.stderr_tail or None,
        "next_retry": op.next_retry if op else None,
        "op": op_summary(op),
        "op_ids": sorted({o["op_id"] for o in snap.ops} | ({op.op_id} if op else set())),
        "delete_requested": snap.delete_requested, "data_exists": snap.data_exists, "waiting": snap.waiting(),
        "history": snap.history, "ops": snap.ops,
    }


def orphan_json(o: Orphan, now: float) -> dict[str, Any]:
    return {"kind": "provider_object", "handle": o.handle, "class": o.class_name, "provider": o.provider,
            "claim_id": o.claim_id, "tags": o.tags, "size_bytes": o.size_bytes, "first_seen": o.first_seen,
            "age": round(now - o.first_seen, 1), "retain": o.retain, "object_kind": o.kind}
