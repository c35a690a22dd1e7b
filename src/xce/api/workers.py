"""Routes for worker daemons (``/v1/hosts/{host}/...``) and the host list.

Only the daemon identity bound to a host may speak for it (and admins for
any): the provisioner's identity, bound to no host, may not
(``identity.speaks_for_host``).  Workers register (with what they still run, so the controller
can reconcile), heartbeat, long-poll for work, and report starts and exits.  What a run to start
looks like on the wire is ``xce.wire.Dispatch`` (``views.dispatch_json`` makes it).
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Query, Request
from starlette.responses import Response
from pydantic import Field

from xce.api import schemas
from xce.api.auth import admin, agent_identity, authenticated, recheck
from xce.api.commands import mutate
from xce.api.deps import Ctl, Monitor
from xce.api.responses import JSONResponse
from xce.api.schemas import Id, Int64, Strict
from xce.api.views import (heartbeat_json, host_removed_json, host_work_json, hosts_json, kill_json, registered_json,
                           resources_json, runs_json, with_fence)
from xce.errors import Conflict, InvalidRequest
from xce.controller.peeks import MAX_WAITING
from xce.model import Model
from xce.model import dispatch, hosts, tasks
from xce.model.hosts import HostState
from xce.model.identity import User, speaks_for_host
from xce.names import NAME_PATTERN

HostName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
Counters = dict[Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)],
                Annotated[float, Field(ge=0, allow_inf_nan=False)]]


class RunRef(Strict):
    job_id: Id
    run: Int64


AttrName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
AttrValue = Annotated[str, Field(max_length=256)]


class GpuIn(Strict):
    """One GPU as its worker found it (NVML, or configured: ``xce worker --gpus``)."""

    id: Annotated[int, Field(ge=0, le=1023)]
    uuid: Annotated[str, Field(max_length=128)] = ""
    model: Annotated[str, Field(max_length=128)] = ""
    memory: Annotated[int, Field(ge=0, le=2**50)] = 0  # bytes


class RegisterRequest(Strict):
    slots: Annotated[int, Field(ge=0, le=100_000)]
    attrs: dict[AttrName, AttrValue] = Field(default_factory=dict)
    counters: Counters = Field(default_factory=dict)
    gpus: Annotated[list[GpuIn], Field(max_length=1024)] = Field(default_factory=list)
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
    note: Annotated[str, Field(max_length=8192)] = ""
    rendezvous: Annotated[str, Field(max_length=300)] = ""
    task_key: Annotated[str, Field(pattern="^([0-9a-f]{64})?$")] = ""


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
    pre_exec_failed: bool = False  # its -E failed: the command never ran (requeued elsewhere)
    post_exec_exit: Annotated[int, Field(ge=0, le=255)] | None = None  # its -Ep's exit code, when it ran


class TaskEndReport(Strict):
    job_id: Id
    run: Int64
    task: Annotated[int, Field(ge=1, le=2**31 - 1)]
    exit_code: Int64 | None = None
    signal: Annotated[int, Field(ge=0, le=255)] | None = None
    reason: Annotated[str, Field(max_length=1024)] = ""


class ReportsRequest(Strict):
    started: Annotated[list[StartedReport], Field(max_length=10_000)] = Field(default_factory=list)
    finished: Annotated[list[FinishedReport], Field(max_length=10_000)] = Field(default_factory=list)
    tasks_finished: Annotated[list[TaskEndReport], Field(max_length=10_000)] = Field(default_factory=list)


def host_work(model: Model, host: str, seen: dict[tuple[int, int], int] | None = None,
              task_runs: set[tuple[int, int]] | None = None) -> dict[str, Any]:
    """What the worker on ``host`` is to do (``dispatch.work_for``: runs to start, orders it has not
    ``seen``, tasks to start; of the runs it has ``task_runs`` of, those over), as its work poll answers it."""
    out = host_work_json(model, host, dispatch.work_for(model, host, seen))
    out["over"] = runs_json(tasks.runs_over(model, task_runs or set()))
    return out


def parse_runs(items: list[str]) -> set[tuple[int, int]]:
    """``JOB.RUN`` items: the runs a worker has tasks of."""
    if len(items) > 100_000:
        raise InvalidRequest("tasks: at most 100,000 runs")
    out = set()
    for item in items:
        parts = item.split(".")
        if len(parts) != 2 or not all(p.isdigit() and len(p) <= 18 for p in parts):
            raise InvalidRequest(f"tasks: expected JOB.RUN, got {item[:64]!r}")
        out.add((int(parts[0]), int(parts[1])))
    return out


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


router = APIRouter(tags=["hosts"], responses=schemas.ERRORS)


@router.get("/v1/hosts", response_model=list[schemas.HostOut])
async def list_hosts(ctl: Ctl, monitor: Monitor, _: User = Depends(authenticated)):
    await ctl.read_barrier()
    return JSONResponse(hosts_json(ctl.model, monitor.last_seen, time.monotonic()))


@router.get("/v1/resources", response_model=list[schemas.ResourceOut])
async def list_resources(ctl: Ctl, _: User = Depends(authenticated)):
    """Resource type descriptors with what the cluster has of each and what is in use."""
    await ctl.read_barrier()
    return JSONResponse(resources_json(ctl.model, ctl.config))


@router.delete("/v1/hosts/{host}", response_model=schemas.HostRemovedOut)
async def remove_host(host: HostName, request: Request, actor: User = Depends(admin)):
    """An admin removes a host that is gone (``xce host remove``); refused, saying why, while its worker
    heartbeats or anything is held or kept on it (``hosts.remove``)."""
    await mutate(request, actor, f"host/{host}", lambda model: (hosts.remove(model, host, actor.name, time.time()), None))
    return JSONResponse(host_removed_json(host))


@router.post("/v1/hosts/{host}/register", response_model=schemas.RegisteredOut)
async def register(host: HostName, body: RegisterRequest, request: Request, monitor: Monitor,
                   actor: User = Depends(agent_identity)):
    speaks_for_host(actor, host)
    monitor.seen(host)

    def decide(model: Model):
        facts, lost = dispatch.register(model, host, body.slots, body.attrs, body.counters, body.boot_id,
                                        {(r.job_id, r.run) for r in body.running}, time.time(),
                                        [g.model_dump() for g in body.gpus])
        return facts, runs_json(lost)

    kill = await mutate(request, actor, f"host/{host}", decide)
    monitor.registered(host)
    return JSONResponse(registered_json(kill, monitor.fence))


@router.post("/v1/hosts/{host}/heartbeat", response_model=schemas.HeartbeatOut)
async def heartbeat(host: HostName, ctl: Ctl, monitor: Monitor, actor: User = Depends(agent_identity)):
    speaks_for_host(actor, host)
    h = ctl.model.hosts.get(host)
    if h is None or h.state is not HostState.OK:
        raise Conflict(f"host {host} is not registered or was declared lost: register again", code="reregister")
    monitor.seen(host)
    return JSONResponse(heartbeat_json(monitor.fence))


@router.get("/v1/hosts/{host}/peeks", response_model=list[dict[str, int | str]])
async def peeks_asked(host: HostName, ctl: Ctl, monitor: Monitor, actor: User = Depends(agent_identity),
                      wait: float = Query(0, ge=0, le=60),
                      held: list[int] = Query([], max_length=MAX_WAITING,
                                              description="the reads the worker holds already (a task's, "
                                                          "until it has output)")):
    """The output reads this host's worker is asked: ``kind`` ``peek`` (``bpeek``: id, job_id, run, offset,
    limit) or ``task_output`` (blaunch's relay: id, job_id, run, task, out, err, limit, wait)."""
    speaks_for_host(actor, host)
    monitor.seen(host)
    return JSONResponse(await ctl.peeks.asked(host, wait, frozenset(held)))


@router.post("/v1/hosts/{host}/peeks", status_code=204)
async def peek_answered(host: HostName, body: schemas.PeekAnswer, ctl: Ctl, actor: User = Depends(agent_identity)):
    speaks_for_host(actor, host)
    ctl.peeks.answer(host, body.id, body.model_dump())
    return Response(status_code=204)


@router.get("/v1/hosts/{host}/work", response_model=schemas.HostWorkOut)
async def work(host: HostName, request: Request, ctl: Ctl, monitor: Monitor, actor: User = Depends(agent_identity),
               wait: float = Query(0, ge=0, le=60),
               seen: list[str] = Query([], description="JOB.RUN.SEQ: the newest order of each run the "
                                       "worker has passed on to its shepherd"),
               tasks: list[str] = Query([], description="JOB.RUN: the runs the worker has tasks of (blaunch): "
                                        "those over are answered in over")):
    speaks_for_host(actor, host)
    if host not in ctl.model.hosts:
        raise Conflict(f"host {host} is not registered: register first", code="reregister")
    monitor.seen(host)
    had = parse_seen(seen)
    task_runs = parse_runs(tasks)
    await ctl.read_barrier()
    out = host_work(ctl.model, host, had, task_runs)
    # A commit that wakes the waits may be another host's work: this host's poll then waits on for the
    # rest of its time rather than answer empty (one round trip a host for every allocation and end
    # anywhere in the cluster, which cost the controller a third of its requests).
    deadline = time.monotonic() + wait
    while not any(out[k] for k in ("dispatch", "orders", "tasks", "over")) and not monitor.work.closing:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await monitor.work.wait(left)
        await ctl.read_barrier()
        speaks_for_host(recheck(request), host)  # its token may have been revoked while it waited
        out = host_work(ctl.model, host, had, task_runs)
    h = ctl.model.hosts.get(host)
    # an answer is word from the controller, as a heartbeat's is (its runs' lease is renewed from when
    # the poll was sent); not to a host declared lost meanwhile, whose runs are being fenced
    return JSONResponse(with_fence(out, monitor.fence if h is not None and h.state is HostState.OK else None))


@router.post("/v1/hosts/{host}/reports", response_model=schemas.KillOut)
async def reports(host: HostName, body: ReportsRequest, request: Request, monitor: Monitor,
                  actor: User = Depends(agent_identity)):
    speaks_for_host(actor, host)
    monitor.seen(host)
    started = [dispatch.Started(**s.model_dump()) for s in body.started]
    ended = [dispatch.Ended(**r.model_dump()) for r in body.finished]
    tasks_ended = [dispatch.TaskEnd(**t.model_dump()) for t in body.tasks_finished]

    def decide(model: Model):
        facts, kill = dispatch.runs_reported(model, host, started, ended, time.time(), tasks_ended)
        return facts, runs_json(kill)

    return JSONResponse(kill_json(await mutate(request, actor, f"host/{host}", decide)))
