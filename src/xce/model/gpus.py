"""GPUs as devices: whether a run may hold the GPUs a plan names for it on a host (the applier's
re-check of the scheduler's choice, ``xce.scheduler.devices``), and what a host's GPUs are used for.

A host's GPUs are what its worker reported at registration (``Host.gpus``); the runs holding them
are ``Host.held_gpus``, kept by the job folds (``jobs.apply_job_allocated``, ``_release``).  An
exclusive holder (``j_exclusive=yes``) shares a GPU with no job; shared holders share it with other
shared holders, their ``gmem`` together within its memory.
"""

from __future__ import annotations

from typing import Any

from xce.jobspec_gpu import GpuRequest, model_matches
from xce.model.entities.hosts import Host

# (exclusive, gmem) of each holder of a GPU that a plan being applied gave out already
Taken = dict[int, list[tuple[bool, int]]]


def holders(host: Host, taken: Taken | None = None) -> dict[int, list[tuple[bool, int]]]:
    """Each of the host's GPU ids -> its holders' (exclusive, gmem), held runs' and ``taken``'s."""
    out: dict[int, list[tuple[bool, int]]] = {g["id"]: [] for g in host.gpus}
    for held in host.held_gpus.values():
        for i in held["ids"]:
            out.setdefault(i, []).append((bool(held["exclusive"]), int(held.get("gmem") or 0)))
    for i, more in (taken or {}).items():
        out.setdefault(i, []).extend(more)
    return out


def why_not(host: Host, ids: list[int] | tuple[int, ...], req: GpuRequest | None, taken: Taken | None = None,
            ) -> str | None:
    """Why a run asking ``req`` may not hold GPUs ``ids`` on ``host`` now (None: it may)."""
    if req is None:
        return f"host {host.name}: GPUs {list(ids)} for a job that asks for none" if ids else None
    if len(set(ids)) != req.num or len(ids) != req.num:
        return f"host {host.name}: {len(ids)} GPUs named for a job that asks for {req.num}"
    by_id = {g["id"]: g for g in host.gpus}
    held = holders(host, taken)
    for i in ids:
        g = by_id.get(i)
        if g is None:
            return f"host {host.name} has no GPU {i}"
        if req.gmodel is not None and not model_matches(req.gmodel, g.get("model", "")):
            return f"host {host.name}'s GPU {i} is not a {req.gmodel}"
        on = held.get(i, [])
        if req.exclusive and on:
            return f"host {host.name}'s GPU {i} is in use now"
        if any(excl for excl, _ in on):
            return f"host {host.name}'s GPU {i} is held by an exclusive job now"
        if req.gmem is not None and int(g.get("memory", 0)) - sum(m for _, m in on) < req.gmem:
            return f"host {host.name}'s GPU {i} has no longer {req.gmem} bytes of memory free"
    return None


def took(taken: Taken, ids: list[int] | tuple[int, ...], req: GpuRequest) -> None:
    """Count ``ids`` as held by a run of ``req`` for the rest of a plan's application."""
    for i in ids:
        taken.setdefault(i, []).append((req.exclusive, req.gmem or 0))


def request_of(job_gpu: dict[str, Any] | None) -> GpuRequest | None:
    return GpuRequest.from_json(job_gpu) if job_gpu is not None else None


def use_json(host: Host) -> list[dict[str, Any]]:
    """The host's GPUs with the jobs using each: ``xce hosts``."""
    held = {i: [] for i in (g["id"] for g in host.gpus)}  # type: dict[int, list[int]]
    mode: dict[int, str] = {}
    for job_id, h in sorted(host.held_gpus.items(), key=lambda kv: int(kv[0])):
        for i in h["ids"]:
            held.setdefault(i, []).append(int(job_id))
            mode[i] = "exclusive" if h["exclusive"] else "shared"
    return [{"id": g["id"], "uuid": g.get("uuid", ""), "model": g.get("model", ""), "memory": g.get("memory", 0),
             "jobs": held.get(g["id"], []), "use": mode.get(g["id"], "free")} for g in host.gpus]
