"""Model entities as API JSON.  The shapes here are stable API (``--json`` prints them)."""

from __future__ import annotations

import time
from typing import Any, Callable

import xce
from xce.agentnames import node_host
from xce.config import Config
from xce.controller.core import Controller
from xce.controller.leadership import Peer
from xce.model import agents, dispatch
from xce.model.audit import AuditRecord
from xce.model.claims.replicas import must_exist
from xce.model.claims import CLAIM_SOURCE, Attachment, Claim, ClaimState, Op, OpKind, Replica, ResizeState, live_by_name
from xce.model.hosts import HostState
from xce.model.identity import Token, User
from xce.model import gpus, job_claims, status
from xce.model.entities.jobs import RUNNING
from xce.model.jobs import Job, JobState
from xce.model.jobs import orders as run_orders
from xce.model import Model
from xce.model.orphans import Orphan, claim_orphans
from xce.model.pools import pool_use
from xce.model.snapshots import Snapshot
from xce.records import Usage
from xce.transfers import TransferSite
from xce.wire import AgentOp, Dispatch, TaskDispatch


def submitted_json(doc: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    """``POST /v1/jobs``'s answer: the job's document, and ``warnings`` when there are any
    (``jobs.submission_warnings``)."""
    return {**doc, "warnings": warnings} if warnings else doc


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
        "shell": job.shell, "script": job.script, "submit_dir": job.submit_dir, "note": job.run_note or None,
        "dependency": job.dependency, "terminate_orphan": job.terminate_orphan,
        "run_limit": job.run_limit, "run_estimate": job.run_estimate,
        "user_priority": job.user_priority, "begin_time": job.begin_time, "exclusive": job.exclusive,
        "requeue_exit": job.requeue_exit, "requeues": job.requeues, "avoid_hosts": job.avoid_hosts,
        "pre_exec": job.pre_exec, "post_exec": job.post_exec, "pre_exec_failures": job.pre_exec_failures,
        "post_exec_exit": job.post_exec_exit, "gpu": job.gpu, "gpus": {h: job_gpus(model, job, h) for h in job.run_gpus},
        "rendezvous": job.rendezvous or None,
        "tasks": [{k: t[k] for k in TASK_FIELDS} for t in job.tasks],  # (not its environment)
    }


TASK_FIELDS = ("task", "host", "command", "ended", "exit_code", "signal", "reason")


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
            "cpu_hours": u.cpu_seconds / 3600, "gpu_hours": u.gpu_seconds / 3600, "claims": u.claims,
            "claim_byte_hours": u.claim_byte_seconds / 3600}


def fairshare_json(enabled: bool, half_life: float,
                   rows: list[tuple[str, str | None, float, float, int, float]]) -> dict[str, Any]:
    return {"enabled": enabled, "half_life": half_life,
            "rows": [{"project": p, "user": u, "share": share, "usage": usage, "running_slots": held,
                      "priority": prio} for p, u, share, usage, held, prio in rows]}


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
               used_bytes: int | None = None, transfer: dict[str, Any] | None = None,
               replica_transfers: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A claim as the API shows it.  ``reason`` is the scheduler's word on an unplaced claim (and
    ``resize_reason`` on a resize waiting for room); ``used_bytes`` what its provider last listed;
    ``transfer`` its own op's latest transfer reading, ``replica_transfers`` its replicas' (by host)."""
    op = claim.op
    waiting = claim.waiting()
    if reason and (claim.state is ClaimState.PENDING and not claim.placed
                   or claim.replicas_waiting and waiting is None):
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
        "replicas": [replica_json(r, (replica_transfers or {}).get(r.host)) for r in claim.replicas],
        "replicas_ready": len(claim.ready_hosts()),
        "replicas_to_place": claim.replicas_to_place, "cache": claim.cache,
        "snapshot_on_preempt": claim.snapshot_on_preempt,
    }


def replica_json(r: Replica, progress: dict[str, Any] | None = None) -> dict[str, Any]:
    """One host's copy of a node-local claim (``wire.ReplicaDoc``); ``progress``: its worker's latest
    reading of the transfer filling it (a reading, not a fact: ``controller/observed.py``)."""
    return {"host": r.host, "state": r.state.value, "placed": r.placed, "handle": r.handle, "path": r.path,
            "attempts": r.attempts, "last_error": r.last_error, "op": op_summary(r.op), "history": r.history,
            "last_used": r.last_used, "progress": progress}


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
        "preempted": {"job_id": snap.job_id, "run": snap.run} if snap.job_id is not None else None,
    }


def orphan_json(o: Orphan, now: float) -> dict[str, Any]:
    return {"kind": "provider_object", "handle": o.handle, "class": o.class_name, "provider": o.provider,
            "claim_id": o.claim_id, "tags": o.tags, "size_bytes": o.size_bytes, "first_seen": o.first_seen,
            "age": round(now - o.first_seen, 1), "retain": o.retain, "object_kind": o.kind, "host": o.host}


# ---------------------------------------------------------------- service, catalog, identities

def health_json(serving: bool) -> dict[str, Any]:
    return {"ok": True, "leader": serving}


def ping_json(ctl: Controller, actor: User) -> dict[str, Any]:
    """Who answers and as whom: the controller's version, cluster, leadership and log position."""
    return {"version": xce.__version__, "cluster_id": ctl.model.cluster_id, "leader": ctl.is_leader,
            "leader_epoch": ctl.epoch, "log_position": ctl.committed, "store": ctl.store.backend,
            "user": actor.name, "role": actor.role.value, "url": ctl.url,
            "standbys": sorted(p.url for p in ctl.peers if p.role == "standby")}


def controllers_json(ctl: Controller) -> list[dict[str, Any]]:
    """The controllers sharing the store, the leader first; this one as of now rather than as it
    last announced itself."""
    head = ctl.committed
    peers = {p.url: p for p in ctl.peers}
    if ctl.url:
        peers[ctl.url] = Peer(url=ctl.url, role="leader", position=head, age=0.0, holder=ctl.holder)
    out = [{"url": p.url, "role": p.role, "log_position": p.position, "behind": max(0, head - p.position),
            "seen": round(p.age, 3)} for p in peers.values()]
    out.sort(key=lambda c: (c["role"] != "leader", c["url"]))
    return out


def queues_json(model: Model, config: Config) -> list[dict[str, Any]]:
    """Each queue, highest priority first, with its pending and running jobs counted."""
    counts: dict[str, list[int]] = {q: [0, 0] for q in model.queues}
    # from the model's indexes: the live jobs are mostly finished ones waiting to retire
    for job_id in model.waiting_jobs:
        if (c := counts.get(model.jobs[job_id].queue)) is not None:
            c[0] += 1
    for job_id in model.jobs.keys() - model.waiting_jobs - model.finished_jobs.keys():
        job = model.jobs[job_id]
        if job.started and (c := counts.get(job.queue)) is not None:
            c[1] += 1
    configured = {q.name: q for q in config.queues}  # (defaults a submission reads)
    return [{"name": q.name, "priority": q.priority, "description": q.description,
             "pending": counts[q.name][0], "running": counts[q.name][1],
             "stage_class": getattr(configured.get(q.name), "stage_class", None)}
            for q in sorted(model.queues.values(), key=lambda q: (-q.priority, q.name))]


def apps_json(config: Config) -> list[dict[str, Any]]:
    return [{"name": a.name, "description": a.description, "stage_class": a.stage_class,
             "claims": [{"name": c.name, "claim_class": c.claim_class, "size": c.size} for c in a.claims]}
            for a in config.apps]


def projects_json(model: Model, actor: User) -> list[dict[str, Any]]:
    """The projects the actor belongs to (admins: all of them), by name."""
    projects = [p for p in model.projects.values() if actor.is_admin or p.name in actor.projects]
    return [{"name": p.name, "description": p.description} for p in sorted(projects, key=lambda p: p.name)]


def users_json(model: Model) -> list[dict[str, Any]]:
    return [user_json(u) for u in sorted(model.users.values(), key=lambda u: u.name)]


def token_created_json(token_id: str, user: str, secret: str, expires: float | None) -> dict[str, Any]:
    """The one answer that carries a token's secret: the one that creates it."""
    return {"token_id": token_id, "user": user, "token": secret, "expires": expires}


def transfers_json(site: TransferSite, actor: User) -> dict[str, Any]:
    """The schemes and remotes the actor may stage from and to (``xce transfers list``): a user sees the
    public schemes and the remotes their projects may use, with those of their projects that may; an
    admin every remote and every project it lists.  Never a credential."""
    remotes = []
    for r in site.remotes:
        projects = list(r.projects) if actor.is_admin else [p for p in actor.projects if r.allows(p)]
        if projects:
            remotes.append({**r.public(), "projects": projects})
    schemes = [{"scheme": s, "via": "public", "projects": ["*"]} for s in site.public_schemes]
    for remote in remotes:
        schemes += [{"scheme": s, "via": remote["name"], "projects": remote["projects"]} for s in remote["schemes"]]
    # every remote's name, details aside: xce submit reads NAME:path as a remote (which the controller
    # then refuses with the reason) rather than as a relative path, whoever submits it
    return {"schemes": schemes, "remotes": remotes, "remote_names": [r.name for r in site.remotes]}


# ---------------------------------------------------------------- claims' catalog

def claim_classes_json(config: Config, known: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim classes; ``capabilities`` is what the class's provider said it can do (``known``),
    None while no agent has asked it (it can do none of them until then)."""
    return [{"name": c.name, "provider": c.provider, "scope": c.scope, "pools": c.pools,
             "access_modes": c.access_modes, "reclaim_policy": c.reclaim_policy, "parameters": c.parameters,
             "allowed_parameters": c.allowed_parameters, "description": c.description,
             "capabilities": dict(known[c.name].flags) if c.name in known else None}
            for c in config.claim_classes]


def pools_json(config: Config, rooms: dict[str, Any], snapshots: dict[str, int]) -> list[dict[str, Any]]:
    """Each pool's room (``controller.observed.rooms``) and what its snapshots reserve."""
    return [{"name": p.name, "capacity_bytes": rooms[p.name].capacity, "configured_bytes": rooms[p.name].configured,
             "used_bytes": rooms[p.name].reserved, "snapshot_bytes": snapshots.get(p.name, 0),
             "free_bytes": rooms[p.name].free, "available_bytes": rooms[p.name].available,
             "data_bytes": rooms[p.name].used, "description": p.description} for p in config.pools]


def orphans_json(model: Model, grace: float, now: float) -> list[dict[str, Any]]:
    """Provider objects no claim owns (released after ``grace`` unless retained), then claims left
    without a reason to live (``model.orphans.claim_orphans``)."""
    out = [orphan_json(o, now) for o in model.orphans.values()]
    for o in out:
        o["releases_in"] = None if o["retain"] else max(0.0, round(grace - o["age"], 1))
    out += [{"kind": "claim", "claim_id": claim.id, "name": claim.name, "class": claim.class_name,
             "state": claim.state.value, "project": claim.project, "reason": why,
             "age": round(now - claim.created, 1)} for claim, why in claim_orphans(model)]
    return out


# ---------------------------------------------------------------- hosts

def hosts_json(model: Model, last_seen: dict[str, float], now: float) -> list[dict[str, Any]]:
    """The hosts by name; ``last_heartbeat_age`` from ``last_seen`` (monotonic times, ``now`` on that clock)."""
    out = []
    for h in sorted(model.hosts.values(), key=lambda h: h.name):
        last = last_seen.get(h.name)
        out.append({"name": h.name, "state": h.state.value, "reason": h.reason, "slots": h.slots,
                    "slots_used": h.slots_used, "attrs": h.attrs, "counters": h.counters,
                    "counters_used": h.counters_used(), "registered": h.registered, "gpus": gpus.use_json(h),
                    "last_heartbeat_age": None if last is None else round(now - last, 1)})
    return out


def resources_json(model: Model, config: Config) -> list[dict[str, Any]]:
    """Resource type descriptors with what the cluster's hosts in service have of each and what is in
    use: each one the config describes, each counter hosts offer that it does not, then each pool."""
    hosts = [h for h in model.hosts.values() if h.state is HostState.OK]
    cluster_used = model.cluster_used()
    out: list[dict[str, Any]] = []
    for r in config.resources:
        if r.layer == "L1":
            values = sorted({h.attrs[r.name] for h in hosts if r.name in h.attrs})
            out.append({"name": r.name, "layer": "L1", "scope": "host", "unit": r.unit, "values": values,
                        "description": r.description})
            continue
        if r.scope == "cluster":
            total, used = r.amount_value, cluster_used.get(r.name, 0.0)
        elif r.name == "slots":
            total, used = float(sum(h.slots for h in hosts)), float(sum(h.slots_used for h in hosts))
        else:
            total = sum(h.counters.get(r.name, 0.0) for h in hosts)
            used = sum(h.counters_used().get(r.name, 0.0) for h in hosts)
        out.append({"name": r.name, "layer": "L2", "scope": r.scope, "unit": r.unit, "total": total,
                    "used": used, "description": r.description})
    declared = {r.name for r in config.resources}
    for name in sorted({n for h in hosts for n in h.counters} - declared):  # counters the config does not describe
        out.append({"name": name, "layer": "L2", "scope": "host", "unit": "",
                    "total": sum(h.counters.get(name, 0.0) for h in hosts),
                    "used": sum(h.counters_used().get(name, 0.0) for h in hosts),
                    "description": "reported by hosts; not described in the config"})
    pools_used = pool_use(model)
    out += [{"name": p.name, "layer": "L2", "scope": "pool", "unit": "bytes", "total": p.capacity_bytes,
             "used": pools_used.get(p.name, 0), "description": p.description} for p in config.pools]
    return out


def runs_json(runs: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """Runs a worker is to end (``kill``)."""
    return [{"job_id": job_id, "run": run} for job_id, run in runs]


def dispatch_json(model: Model, job: Job, host: str) -> Dispatch:
    """A run as the worker on ``host`` starts it: its command, its part of the allocation, its claims."""
    return Dispatch(job_id=job.id, run=job.run, display_id=job.display_id, user=job.user, name=job.name,
                    command=job.command, cwd=job.cwd, stdout=job.stdout, stderr=job.stderr, hosts=job.hosts,
                    slots=job.alloc_slots.get(host, 0), total_slots=sum(job.alloc_slots.values()),
                    array_index=job.array_index, array_parent=job.array_parent, queue=job.queue,
                    project=job.project, claims=job_claims.publish_list(model, job, host),
                    mem_limit=dispatch.mem_limit(job, host), alloc_slots=job.alloc_slots, shell=job.shell,
                    script=job.script, submit_dir=job.submit_dir, env=job.env, run_limit=job.run_limit,
                    warn_signal=job.warn_signal, warn_time=job.warn_time, limit_grace=job.limit_grace,
                    pre_exec=job.pre_exec, post_exec=job.post_exec, gpus=job_gpus(model, job, host),
                    gpu_mode=str((job.gpu or {}).get("mode", "")))


def job_gpus(model: Model, job: Job, host: str) -> list[dict[str, Any]]:
    """The GPUs the job's run holds on ``host``: {id, uuid, model} each."""
    ids = job.run_gpus.get(host)
    if not ids:
        return []
    h = model.hosts.get(host)
    known = {g["id"]: g for g in h.gpus} if h is not None else {}
    return [{"id": i, "uuid": known.get(i, {}).get("uuid", ""), "model": known.get(i, {}).get("model", "")}
            for i in ids]


def host_work_json(model: Model, host: str, work: dispatch.HostWork) -> dict[str, Any]:
    """A worker's work poll's answer: runs to start, and orders of its runs it has not seen (the
    route adds ``fence`` when the answer is word from the controller: ``with_fence``)."""
    return {"dispatch": [dispatch_json(model, job, host) for job in work.start],
            "orders": [run_orders(job) for job in work.orders],
            "tasks": [task_dispatch_json(model, job, task, host) for job, task in work.tasks]}


def task_dispatch_json(model: Model, job: Job, task: dict[str, Any], host: str) -> TaskDispatch:
    """A task as the worker on ``host`` starts it: in its run's sandbox there (``dispatch_json``)."""
    return TaskDispatch(run=dispatch_json(model, job, host), task=task["task"], command=task["command"],
                        cwd=task["cwd"], env=task["env"], rendezvous=job.rendezvous,
                        stdin=bool(task.get("stdin")))


def with_fence(answer: dict[str, Any], fence: float | None) -> dict[str, Any]:
    """``answer`` with the fence time a worker's runs' lease is renewed by (None: not renewed)."""
    return answer if fence is None else {**answer, "fence": fence}


# ---------------------------------------------------------------- claim agents

def agent_op_json(model: Model, config: Config, claim: Claim, op: Op,
                  attachment: Attachment | Replica | None) -> AgentOp:
    """One op as an agent runs it: what the provider (or the agent itself) needs, owner tags included.
    A replica's op is its host's: its handle and path are the replica's (its op id says which)."""
    cls = config.claim_class(claim.class_name)
    handle, path = (attachment.handle, attachment.path) if isinstance(attachment, Replica) else (claim.handle,
                                                                                                  claim.path)
    out = AgentOp(
        op_id=op.op_id, op=op.kind.value, attempt=op.attempts + 1, claim_id=claim.id, claim_name=claim.name,
        class_name=claim.class_name, scope=claim.scope, provider=cls.provider if cls else None,
        # an expand asks for the resize's size: the claim keeps its old one until the provider grew it
        size_bytes=claim.resize.size_bytes if op.kind is OpKind.EXPAND and claim.resize else claim.size_bytes,
        access_mode=claim.access_mode.value, params=claim.params,
        handle=handle if op.kind is not OpKind.CREATE else None,
        host=attachment.host if attachment is not None else claim.host, path=path,
        tags={"xce.cluster": model.cluster_id, "xce.claim": str(claim.id), "xce.op": op.op_id,
              "xce.reclaim": claim.reclaim_policy.value, "xce.project": claim.project, "xce.owner": claim.owner})
    if op.kind is OpKind.CREATE and claim.source is not None:  # a clone: the provider copies its source
        out["source_handle"] = claim.source["handle"]
    if isinstance(attachment, Replica) and (expected := must_exist(claim, attachment, op)) is not None:
        out["must_exist"] = expected  # a lost host's replica, with data only jobs wrote: checked, not remade
    if op.kind in (OpKind.STAGE_IN, OpKind.STAGE_OUT):  # done by the node agent itself, as the job's user
        job = model.jobs.get(claim.job_id) if claim.job_id is not None else None
        out["user"] = job.user if job is not None else claim.owner
        out["items"] = claim.stage_in if op.kind is OpKind.STAGE_IN else claim.stage_out
    if op.kind is OpKind.POPULATE:  # the provisioner copies the source into the claim's volume; a replica's
        out["source"] = claim.populate_from  # host's worker into the replica, as the claim's owner
        if isinstance(attachment, Replica):
            out["user"] = claim.owner
            if claim.populate_from is not None and claim.populate_from.startswith(CLAIM_SOURCE):
                src = live_by_name(model, claim.project, claim.populate_from.removeprefix(CLAIM_SOURCE))
                if src is not None and src.path:  # (a shared claim: its data is reachable from every host)
                    out["source"] = src.path
    return out


def snapshot_op_json(model: Model, config: Config, snap: Snapshot, op: Op) -> AgentOp:
    """A snapshot's op as the provisioner runs it.  ``claim_id`` is the claim it is (or was) of:
    providers derive the snapshot's handle from it and the op_id.  ``create_snapshot`` names the
    claim's volume; ``delete_snapshot`` the snapshot."""
    cls = config.claim_class(snap.class_name)
    claim = model.claims.get(snap.claim_id)
    handle = (claim.handle if claim is not None else None) if op.kind is OpKind.CREATE_SNAPSHOT else snap.handle
    return AgentOp(
        op_id=op.op_id, op=op.kind.value, attempt=op.attempts + 1, claim_id=snap.claim_id, snapshot_id=snap.id,
        claim_name=snap.claim_name, class_name=snap.class_name, scope="shared",
        provider=cls.provider if cls else None, size_bytes=snap.size_bytes, access_mode=snap.access_mode,
        params=claim.params if claim is not None else {}, handle=handle, host=None, path=None,
        tags={"xce.cluster": model.cluster_id, "xce.claim": str(snap.claim_id), "xce.snapshot": str(snap.id),
              "xce.op": op.op_id, "xce.project": snap.project, "xce.owner": snap.owner})


def agent_orphan_json(o: Orphan) -> dict[str, Any]:
    """An orphan due for release, as its agent releases it (by its handle, tagged op id; a node object
    with its host)."""
    return {"handle": o.handle, "class_name": o.class_name, "provider": o.provider, "claim_id": o.claim_id,
            "op_id": f"orphan.{o.handle}", "tags": o.tags, "host": o.host}


def agent_work_json(model: Model, config: Config, agent: str, work: agents.Work, held: bool = False) -> dict[str, Any]:
    """An agent's work as it runs it.  ``held``: ops under way, each with the attempt its intent
    counted already (a new intent counts the next)."""
    ops: list[AgentOp] = [agent_op_json(model, config, o.owner, o.op, o.part)
                          for o in work.claim_ops + work.replica_ops]
    ops += [snapshot_op_json(model, config, o.owner, o.op) for o in work.snapshot_ops]
    if held:
        for item, under_way in zip(ops, [*work.claim_ops, *work.replica_ops, *work.snapshot_ops]):
            item["attempt"] = under_way.op.attempts
    out: dict[str, Any] = {"ops": ops, "orphans": [agent_orphan_json(o) for o in work.orphans]}
    host = node_host(agent)
    if work.dispatch is not None and host is not None:
        out["dispatch"] = [dispatch_json(model, job, host) for job in work.dispatch]
    return out


def lease_json(agent: str, epoch: int, cluster_id: str, scan_interval: float) -> dict[str, Any]:
    return {"agent": agent, "epoch": epoch, "cluster_id": cluster_id, "orphan_scan_interval": scan_interval}


def intents_json(accepted: list[str], refused: dict[str, str]) -> dict[str, Any]:
    """Which intents were recorded, and why the others were refused (op id -> reason)."""
    return {"accepted": accepted, "refused": refused}


def agent_reports_json(refused: dict[str, str], work: dict[str, Any] | None) -> dict[str, Any]:
    """A report's answer: why any result was not taken, and with ``take`` the work taken with it."""
    return {"refused": refused} if work is None else {"refused": refused, "work": work}


def no_agent_work_json() -> dict[str, Any]:
    """A long poll that found nothing to take."""
    return {"ops": [], "orphans": []}


def progress_json(taken: int) -> dict[str, Any]:
    """How many readings were taken (those of ops this agent holds in this epoch)."""
    return {"taken": taken}


def capabilities_json(changed: int, refused: dict[str, str]) -> dict[str, Any]:
    return {"changed": changed, "refused": refused}


def inventory_json(new_orphans: int) -> dict[str, Any]:
    return {"new_orphans": new_orphans}


def host_removed_json(name: str) -> dict[str, Any]:
    """``DELETE /v1/hosts/{host}``'s answer."""
    return {"name": name, "removed": True}


def registered_json(kill: list[dict[str, Any]], fence: float) -> dict[str, Any]:
    """A registration's answer: runs the host has that are not its own any more (given up while it was
    away), to end now; and how long its runs' shepherds keep them past its last answered heartbeat."""
    return {"kill": kill, "fence": fence}


def heartbeat_json(fence: float) -> dict[str, Any]:
    return {"ok": True, "fence": fence}


def kill_json(kill: list[dict[str, Any]]) -> dict[str, Any]:
    """A run report's answer: runs to end now."""
    return {"kill": kill}


def peek_json(job_id: int, host: str, reply: dict[str, Any]) -> dict[str, Any]:
    """A running job's output as its worker read it (``bpeek``): ``data`` (base64) from ``offset``, and the
    output's ``size`` so far."""
    return {"job_id": job_id, "host": host, "offset": reply["offset"], "size": reply["size"], "data": reply["data"]}


def task_json(job: Job, task: dict[str, Any]) -> dict[str, Any]:
    """A task of a multi-host job (``blaunch``): where it runs, how it ended; ``running``: its job's run goes on."""
    return {"task": task["task"], "host": task["host"], "ended": task["ended"], "exit_code": task["exit_code"],
            "signal": task["signal"], "reason": task["reason"], "running": job.state in RUNNING}


def task_output_json(reply: dict[str, Any], eof: bool) -> dict[str, Any]:
    """A task's output relayed from its worker: what its stdout and stderr had from the offsets asked."""
    return {"out": reply.get("data", ""), "err": reply.get("err_data", ""), "eof": eof}


def task_input_json(accepted: int, closed: bool) -> dict[str, Any]:
    """What a task's worker took of its blaunch's input: up to ``accepted``; ``closed``: its end passed on."""
    return {"accepted": accepted, "closed": closed}


def error_json(code: str, message: str, **more: Any) -> dict[str, Any]:
    """Every refusal and failure: ``{"error": {"code", "message"}}`` (a standby's adds ``leader``)."""
    return {"error": {"code": code, "message": message, **more}}
