"""Routes for worker daemons (``/v1/hosts/{host}/...``) and the host list.

Only the daemon identity bound to a host may speak for it (and admins for
any): the provisioner's identity, bound to no host, may not
(``identity.speaks_for_host``).  Workers register (with what they still run, so the controller
can reconcile), heartbeat, long-poll for work, and report starts and exits.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from xce.api.responses import JSONResponse
from pydantic import Field

from xce.api.commands import mutate
from xce.api.schemas import Id, Int64, Strict
from xce.api.auth import agent_identity, authenticated, recheck
from xce.controller.core import Controller
from xce.controller.hosts import HostMonitor
from xce.errors import Conflict, InvalidRequest
from xce.model import Model
from xce.model.hosts import HostState
from xce.model.identity import User, speaks_for_host
from xce.model import dispatch, job_claims
from xce.model.pools import pool_use
from xce.model.jobs import Job
from xce.model.jobs import orders as run_orders
from xce.names import NAME_PATTERN

HostName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
Counters = dict[Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)],
                Annotated[float, Field(ge=0, allow_inf_nan=False)]]


class RunRef(Strict):
    job_id: Id
    run: Int64


class RegisterRequest(Strict):
    slots: Annotated[int, Field(ge=0, le=100_000)]
    attrs: dict[Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)], Annotated[str, Field(max_length=256)]] = Field(default_factory=dict)
    counters: Counters = Field(default_factory=dict)
    boot_id: Annotated[str, Field(max_length=64)] = ""
    running: Annotated[list[RunRef], Field(max_length=100_000)] = Field(default_factory=list)


class StartedReport(Strict):
    job_id: Id
    run: Int64
    pid: Annotated[int, Field(ge=0, le=2**31 - 1)]
    workspace: Annotated[str, Field(max_length=4096)] = ""
    stdout: Annotated[str, Field(max_length=4096)] = ""
    stderr: Annotated[str, Field(max_length=4096)] = ""
    publish: Literal["", "bind", "symlink"] = ""


class RunUsage(Strict):
    """What a run used, as its worker measured it (the run's cgroup, else the shepherd's wait4)."""

    max_rss_bytes: Annotated[int, Field(ge=0, le=2**62)] | None = None
    cpu_user_s: Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)] | None = None
    cpu_sys_s: Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False)] | None = None


class FinishedReport(Strict):
    job_id: Id
    run: Int64
    exit_code: Int64 | None = None
    signal: Annotated[int, Field(ge=0, le=255)] | None = None
    reason: Annotated[str, Field(max_length=1024)] = ""
    # the worker no longer knows how the run ended (it restarted, its shepherd died), or the shepherd
    # fenced it (no answer from the controller in time): rerunnable jobs are requeued
    lost: bool = False
    usage: RunUsage | None = None


class ReportsRequest(Strict):
    started: Annotated[list[StartedReport], Field(max_length=10_000)] = Field(default_factory=list)
    finished: Annotated[list[FinishedReport], Field(max_length=10_000)] = Field(default_factory=list)


def dispatch_json(model: Model, job: Job, host: str) -> dict[str, Any]:
    """A run as the worker on ``host`` starts it: its command, its part of the allocation, its claims."""
    return {"job_id": job.id, "run": job.run, "display_id": job.display_id, "user": job.user,
            "name": job.name, "command": job.command, "cwd": job.cwd, "stdout": job.stdout,
            "stderr": job.stderr, "hosts": job.hosts, "slots": job.alloc_slots.get(host, 0),
            "total_slots": sum(job.alloc_slots.values()), "array_index": job.array_index,
            "array_parent": job.array_parent, "queue": job.queue, "project": job.project,
            "claims": job_claims.publish_list(model, job, host), "mem_limit": dispatch.mem_limit(job, host)}


def host_work(model: Model, host: str, seen: dict[tuple[int, int], int] | None = None) -> dict[str, list]:
    """What the worker on ``host`` is to do (``dispatch.work_for``: runs to start, orders it has not
    ``seen``), as its work poll answers it."""
    work = dispatch.work_for(model, host, seen)
    return {"dispatch": [dispatch_json(model, job, host) for job in work.start],
            "orders": [run_orders(job) for job in work.orders]}


def parse_seen(items: list[str]) -> dict[tuple[int, int], int]:
    """``JOB.RUN.SEQ`` items: the newest order of each run the worker has passed on."""
    out: dict[tuple[int, int], int] = {}
    if len(items) > 100_000:
        raise InvalidRequest("seen: at most 100,000 runs")
    for item in items:
        parts = item.split(".")
        if len(parts) != 3 or not all(p.isdigit() and len(p) <= 18 for p in parts):
            raise InvalidRequest(f"seen: expected JOB.RUN.SEQ, got {item[:64]!r}")
        out[(int(parts[0]), int(parts[1]))] = int(parts[2])
    return out


def add_worker_routes(app: FastAPI, ctl: Controller, monitor: HostMonitor) -> None:
    @app.get("/v1/hosts", tags=["hosts"])
    async def list_hosts(_: User = Depends(authenticated)):
        await ctl.read_barrier()
        out = []
        for h in sorted(ctl.model.hosts.values(), key=lambda h: h.name):
            last = monitor.last_seen.get(h.name)
            out.append({"name": h.name, "state": h.state.value, "reason": h.reason, "slots": h.slots,
                        "slots_used": h.slots_used, "attrs": h.attrs, "counters": h.counters,
                        "counters_used": h.counters_used(), "registered": h.registered,
                        "last_heartbeat_age": None if last is None else round(time.monotonic() - last, 1)})
        return JSONResponse(out)

    @app.get("/v1/resources", tags=["hosts"])
    async def list_resources(_: User = Depends(authenticated)):
        """Resource type descriptors with what the cluster has of each and what is in use."""
        await ctl.read_barrier()
        model, config = ctl.model, ctl.config
        hosts = [h for h in model.hosts.values() if h.state is HostState.OK]
        cluster_used = model.cluster_used()
        declared = {r.name for r in config.resources}
        offered = sorted({n for h in hosts for n in h.counters} - declared)
        out = []
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
        for name in offered:  # counters hosts report that the config does not describe
            out.append({"name": name, "layer": "L2", "scope": "host", "unit": "",
                        "total": sum(h.counters.get(name, 0.0) for h in hosts),
                        "used": sum(h.counters_used().get(name, 0.0) for h in hosts),
                        "description": "reported by hosts; not described in the config"})
        pools_used = pool_use(model)
        for p in config.pools:
            out.append({"name": p.name, "layer": "L2", "scope": "pool", "unit": "bytes",
                        "total": p.capacity_bytes, "used": pools_used.get(p.name, 0), "description": p.description})
        return JSONResponse(out)

    @app.post("/v1/hosts/{host}/register", tags=["hosts"])
    async def register(host: HostName, body: RegisterRequest, request: Request,
                       actor: User = Depends(agent_identity)):
        speaks_for_host(actor, host)
        monitor.seen(host)

        def decide(model: Model):
            facts, lost = dispatch.register(model, host, body.slots, body.attrs, body.counters, body.boot_id,
                                            {(r.job_id, r.run) for r in body.running}, time.time())
            return facts, [{"job_id": job_id, "run": run} for job_id, run in lost]

        kill = await mutate(request, actor, f"host/{host}", decide)
        monitor.registered(host)
        # kill: runs this host has that are not its own any more (given up while it was away), to end now;
        # fence: how long its runs' shepherds keep them past the worker's last answered heartbeat
        return JSONResponse({"kill": kill, "fence": monitor.fence})

    @app.post("/v1/hosts/{host}/heartbeat", tags=["hosts"])
    async def heartbeat(host: HostName, actor: User = Depends(agent_identity)):
        speaks_for_host(actor, host)
        h = ctl.model.hosts.get(host)
        if h is None or h.state is not HostState.OK:
            raise Conflict(f"host {host} is not registered or was declared lost: register again",
                           code="reregister")
        monitor.seen(host)
        return JSONResponse({"ok": True, "fence": monitor.fence})

    @app.get("/v1/hosts/{host}/work", tags=["hosts"])
    async def work(host: HostName, request: Request, actor: User = Depends(agent_identity),
                   wait: float = Query(0, ge=0, le=60),
                   seen: list[str] = Query([], description="JOB.RUN.SEQ: the newest order of each run the "
                                           "worker has passed on to its shepherd")):
        speaks_for_host(actor, host)
        if host not in ctl.model.hosts:
            raise Conflict(f"host {host} is not registered: register first", code="reregister")
        monitor.seen(host)
        had = parse_seen(seen)
        await ctl.read_barrier()
        out = host_work(ctl.model, host, had)
        if not out["dispatch"] and not out["orders"] and wait > 0:
            await monitor.work.wait(wait)
            await ctl.read_barrier()
            speaks_for_host(recheck(request), host)  # its token may have been revoked while it waited
            out = host_work(ctl.model, host, had)
        h = ctl.model.hosts.get(host)
        if h is not None and h.state is HostState.OK:
            # an answer is word from the controller, as a heartbeat's is (its runs' lease is renewed from
            # when the poll was sent); not to a host declared lost meanwhile, whose runs are being fenced
            out["fence"] = monitor.fence
        return JSONResponse(out)

    @app.post("/v1/hosts/{host}/reports", tags=["hosts"])
    async def reports(host: HostName, body: ReportsRequest, request: Request,
                      actor: User = Depends(agent_identity)):
        speaks_for_host(actor, host)
        monitor.seen(host)

        started = [dispatch.Started(**s.model_dump()) for s in body.started]
        ended = [dispatch.Ended(**r.model_dump()) for r in body.finished]

        def decide(model: Model):
            facts, kill = dispatch.runs_reported(model, host, started, ended, time.time())
            return facts, [{"job_id": job_id, "run": run} for job_id, run in kill]

        kill = await mutate(request, actor, f"host/{host}", decide)
        return JSONResponse({"kill": kill})
