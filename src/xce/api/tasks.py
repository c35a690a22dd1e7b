"""Routes a running job calls to start tasks on its hosts (``blaunch``, ``xce launch``) and wait for them.

A job is no user: it proves it is the job with its run's secret as the bearer token (``XCE_JOB_TOKEN``
in its environment, ``xce.model.tasks``), which reaches these routes only and acts as the job's user
in the audit trail.  No user token reaches them: a user cannot slip a task into a running job.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any, Callable

from fastapi import APIRouter, Path, Query, Request
from pydantic import BaseModel, Field

from xce.api import schemas
from xce.api.commands import mutate
from xce.api.deps import Ctl, Monitor
from xce.api.responses import JSONResponse
from xce.api.schemas import Strict
from xce.api.views import task_input_json, task_json, task_output_json
from xce.controller.peeks import TASK_INPUT, TASK_OUTPUT, answer_limit
from xce.errors import Conflict, Unauthenticated, Unavailable
from xce.model import Model, tasks
from xce.controller.core import Controller
from xce.controller.hosts import HostMonitor
from xce.model.entities.jobs import Job, JobState
from xce.model.facts import Fact
from xce.model.identity import Role, User
from xce.names import NAME_PATTERN
from xce.wire import JOB_SECRET_PREFIX

JobId = Annotated[int, Path(ge=1, le=2**63 - 1)]
# seconds a call waits for its job's run to be reported started: the job's command may call blaunch
# before its worker's report of the start is committed (and the run's secret known)
START_WAIT = 30.0
RELAY_LIMIT = 1 << 20  # bytes of a task's output one answer carries at most (its stdout and stderr together)
RELAY_WAIT = 20.0  # seconds a read of a task's output is held for output, at most (and a third of the lease)
ANSWER_MARGIN = 5.0  # seconds the worker has to answer past that


class LaunchRequest(Strict):
    host: Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
    command: Annotated[str, Field(min_length=1, max_length=128 * 1024)]  # one command line, for /bin/sh -c
    cwd: Annotated[str, Field(max_length=4096)] = ""  # where blaunch was called
    keep_going: bool = False  # the task's failure does not end the job
    stdin: bool = False  # blaunch sends its standard input (POST .../input); else the task reads nothing (-n)
    env: Annotated[dict[Annotated[str, Field(max_length=1024)], Annotated[str, Field(max_length=128 * 1024)]],
                   Field(max_length=4096)] = Field(default_factory=dict)  # blaunch's environment


class TaskOut(BaseModel):
    """A task of the job's current run."""

    task: int
    host: str
    ended: bool = Field(description="its process ended (exit_code, signal and reason say how)")
    exit_code: int | None
    signal: int | None
    reason: str
    running: bool = Field(description="the job's run is still going (else the task ends with it)")


class TaskOutputOut(BaseModel):
    """What a task wrote since the offsets asked (base64), relayed from its host; ``eof``: all of it."""

    out: str = Field(description="its stdout from the offset asked, base64")
    err: str = Field(description="its stderr from the offset asked, base64")
    eof: bool = Field(description="the task ended and this is the last of its output")


class InputRequest(Strict):
    offset: Annotated[int, Field(ge=0, le=2**62)]  # where ``data`` begins in blaunch's standard input
    data: Annotated[str, Field(max_length=512 * 1024)] = ""  # base64
    eof: bool = False  # the input ends after ``data``


class InputOut(BaseModel):
    accepted: int = Field(description="bytes of the input the task's host has taken so far (send from there)")
    closed: bool = Field(description="the task takes no more input (it ended)")


class SignalRequest(Strict):
    signal: Annotated[int, Field(ge=1, le=64)]


def relay_limit(max_body_bytes: int) -> int:
    """Bytes of output one answer may carry: ``RELAY_LIMIT``, or less (``controller.peeks.answer_limit``)."""
    return answer_limit(RELAY_LIMIT, max_body_bytes)


def _of_the_run(request: Request, job_id: int, run: int, act: Callable[[Model, Job], tuple[list[Fact], Any]]):
    """``act``'s decision for the job's run ``run`` only: a new run of the job (its new secret) is another caller."""
    def decide(model: Model) -> tuple[list[Fact], Any]:
        current, _ = _the_job(request, model, job_id)
        if current.run != run:
            raise tasks.refused(job_id)
        return act(model, current)
    return decide


async def _ask_worker(ctl: Controller, host: str, hold: float, kind: str, **question: Any) -> dict[str, Any] | None:
    """A question about a task for ``host``'s worker, which may hold it ``hold`` seconds (for output, or room
    for input); its answer, or None when the worker did not answer (``ANSWER_MARGIN`` past the hold)."""
    ask = ctl.peeks.ask(host, kind, wait=hold, **question)
    if ask is None:
        raise Unavailable(f"host {host} has too many output reads and input writes waiting: try again", code="busy")
    try:
        return await asyncio.wait_for(asyncio.shield(ask.answer), hold + ANSWER_MARGIN)
    except TimeoutError:
        return None
    finally:
        ctl.peeks.forget(host, ask)


def _secret(request: Request) -> str:
    """The run's secret the caller presents: refused at once if it is none (a user's token, nothing),
    before any wait for a run's start."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip().startswith(JOB_SECRET_PREFIX):
        raise Unauthenticated("not a job's secret: blaunch runs inside a job (its XCE_JOB_TOKEN)")
    return credentials.strip()


def _the_job(request: Request, model: Model, job_id: int) -> tuple[Job, User]:
    """The job the caller proves it is, and its user (the actor its requests are audited as)."""
    ctl = request.app.state.controller
    if not ctl.serving:
        raise ctl.not_leader()
    job = tasks.job_for_secret(model, job_id, _secret(request))
    user = model.users.get(job.user) or User(name=job.user, role=Role.USER)
    request.state.actor = user
    return job, user


async def _started(ctl: Controller, monitor: HostMonitor, job_id: int) -> None:
    """Until the job's dispatched run is reported started (or ``START_WAIT``): only then is its secret known."""
    deadline = time.monotonic() + START_WAIT
    await ctl.read_barrier()
    while (job := ctl.model.jobs.get(job_id)) is not None and job.state is JobState.PEND and job.allocated \
            and (left := deadline - time.monotonic()) > 0 and not monitor.tasks.closing:
        await monitor.tasks.wait(left)
        await ctl.read_barrier()


router = APIRouter(tags=["tasks"], responses=schemas.ERRORS)


@router.post("/v1/jobs/{job_id}/tasks", response_model=TaskOut, status_code=201)
async def launch(job_id: JobId, body: LaunchRequest, request: Request, ctl: Ctl, monitor: Monitor):
    """Start a task on one of the job's own hosts, in its run's sandbox there."""
    _secret(request)  # (no wait for a caller that is no job)
    await _started(ctl, monitor, job_id)
    job, user = _the_job(request, ctl.model, job_id)
    run = job.run

    def act(model: Model, current: Job):
        facts = tasks.launch(model, current, body.host, body.command, body.cwd, body.keep_going, time.time(),
                             body.env, ctl.config.controller, body.stdin)
        return facts, facts[0].task  # type: ignore[attr-defined]

    number = await mutate(request, user, f"job/{job_id}", _of_the_run(request, job_id, run, act))
    monitor.launchers.heard_from((job_id, run, number))  # its lease begins
    return JSONResponse(task_json(job, ctl.model.jobs[job_id].tasks[number - 1]), status_code=201)


@router.get("/v1/jobs/{job_id}/tasks/{task}", response_model=TaskOut)
async def task_state(job_id: JobId, request: Request, ctl: Ctl, monitor: Monitor,
                     task: Annotated[int, Path(ge=1, le=tasks.MAX_TASKS)],
                     wait: float = Query(0, ge=0, le=60, description="seconds to wait for the task's end")):
    """A task of the job's run; with ``wait``, once it ended (or the wait is over)."""
    await ctl.read_barrier()
    job, _ = _the_job(request, ctl.model, job_id)
    deadline = time.monotonic() + wait
    with monitor.launchers.asking_for((job_id, job.run, task)):
        while not tasks.task_of(job, task)["ended"] and (left := deadline - time.monotonic()) > 0 \
                and not monitor.tasks.closing:
            await monitor.tasks.wait(left)
            await ctl.read_barrier()
            job, _ = _the_job(request, ctl.model, job_id)  # (the run may have ended meanwhile: refused then)
    return JSONResponse(task_json(job, tasks.task_of(job, task)))


@router.get("/v1/jobs/{job_id}/tasks/{task}/output", response_model=TaskOutputOut)
async def task_output(job_id: JobId, request: Request, ctl: Ctl, monitor: Monitor,
                      task: Annotated[int, Path(ge=1, le=tasks.MAX_TASKS)],
                      out: int = Query(0, ge=0, le=2**62, description="from this byte of its stdout"),
                      err: int = Query(0, ge=0, le=2**62, description="from this byte of its stderr"),
                      wait: float = Query(0, ge=0, le=60, description="seconds to wait for output")):
    """A task's output from the offsets given, relayed from its host's worker (``blaunch`` writes it to its
    own stdout and stderr, as LSF's does); with ``wait``, once there is some (or the wait is over).  Each
    ask renews the lease of the task's launcher."""
    await ctl.read_barrier()
    job, _ = _the_job(request, ctl.model, job_id)
    host = tasks.task_of(job, task)["host"]
    with monitor.launchers.asking_for((job_id, job.run, task)):
        # (no answer from its worker, restarting or cut off: nothing yet, asked again)
        reply = await _ask_worker(ctl, host, min(wait, RELAY_WAIT, monitor.launchers.lease / 3), TASK_OUTPUT,
                                  job_id=job_id, run=job.run, task=task, out=out, err=err,
                                  limit=relay_limit(ctl.config.controller.max_body_bytes)) or {}
    if reply.get("error"):
        raise Conflict(f"task {task}'s output on {host}: {reply['error']}", code="no_output")
    eof = bool(reply.get("eof"))
    if reply.get("missing"):  # none there: not started yet, or read to its end (an answer lost on its way)
        await ctl.read_barrier()
        job, _ = _the_job(request, ctl.model, job_id)
        eof = tasks.task_of(job, task)["ended"]
    return JSONResponse(task_output_json(reply, eof))


@router.post("/v1/jobs/{job_id}/tasks/{task}/input", response_model=InputOut)
async def task_input(job_id: JobId, body: InputRequest, request: Request, ctl: Ctl, monitor: Monitor,
                     task: Annotated[int, Path(ge=1, le=tasks.MAX_TASKS)]):
    """blaunch's standard input for its task, from ``offset``: the task's host takes what its task's input
    pipe has room for (held a while when it has none: the task reads slowly) and says how much it has."""
    await ctl.read_barrier()
    job, _ = _the_job(request, ctl.model, job_id)
    host = tasks.task_of(job, task)["host"]
    with monitor.launchers.asking_for((job_id, job.run, task)):
        reply = await _ask_worker(ctl, host, min(RELAY_WAIT, monitor.launchers.lease / 3), TASK_INPUT,
                                  job_id=job_id, run=job.run, task=task, offset=body.offset, data=body.data,
                                  eof=body.eof)
    if reply is None:
        raise Unavailable(f"the worker on {host} did not answer: try again", code="no_answer")
    if reply.get("error"):
        raise Conflict(f"task {task}'s input on {host}: {reply['error']}", code="no_input")
    return JSONResponse(task_input_json(reply.get("offset", body.offset), bool(reply.get("eof"))))


@router.post("/v1/jobs/{job_id}/tasks/{task}/signal", response_model=TaskOut)
async def signal_task(job_id: JobId, body: SignalRequest, request: Request, ctl: Ctl,
                      task: Annotated[int, Path(ge=1, le=tasks.MAX_TASKS)]):
    """A signal blaunch got, to its task (LSF's blaunch passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and
    SIGUSR2 on to its tasks): once, through the run's orders to the task's host."""
    await ctl.read_barrier()
    job, user = _the_job(request, ctl.model, job_id)
    await mutate(request, user, f"job/{job_id}", _of_the_run(
        request, job_id, job.run, lambda _, current: (tasks.signal_task(current, task, body.signal, time.time()), None)))
    return JSONResponse(task_json(ctl.model.jobs[job_id], tasks.task_of(ctl.model.jobs[job_id], task)))
