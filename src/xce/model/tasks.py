"""Tasks of a multi-host job: what ``blaunch`` (``xce launch``) inside a running job may start on the
job's hosts, and what the workers' reports of them mean.

A job proves it is the job with its run's secret: the first host's worker makes a random one for each
run, writes it to the run's environment file (``XCE_JOB_TOKEN``: never a command line, a log or a
fact) and reports only its sha256 with the run's start (``JobStarted.task_key``).  A launch is
accepted for that run only, on that job's own hosts, while it runs; it is a fact
(``TaskLaunched``) before any worker acts on it, and the host's worker starts it with its work poll
(``tasks_for``), in the run's sandbox there.  A task's end (``TaskEnded``) is what ``blaunch`` waits
for; a failed task ends the job unless it was launched with ``keep_going``.  The run's end ends its
tasks: a worker that polls with tasks of a run that is not running any more is told to end them
(``runs_over``).

A task lives no longer than its ``blaunch``: a signal blaunch gets (SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1, SIGUSR2) is passed on to its task (``signal_task``), and a task whose blaunch stopped asking
for it (killed, even by SIGKILL: the controller's ``launchers`` lease lapsed) is killed
(``launchers_lost``), each an order of the run for that task only (``JobSignalRequested.task``).
"""

from __future__ import annotations

import hmac
from signal import SIGKILL
from typing import Any

from xce.config import ControllerConfig
from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unauthenticated
from xce.model.entities.jobs import RUNNING, Job
from xce.model.facts import Fact, JobKillRequested, JobSignalRequested, TaskEnded, TaskLaunched
from xce.model.identity import hash_token
from xce.model.jobs import kept_environment
from xce.model.state import State

__all__ = ["MAX_TASKS", "apply_task_ended", "apply_task_launched", "job_for_secret", "launch", "launchers_lost",
           "live_tasks", "refused", "report_ended", "runs_over", "signal_task", "task_key", "task_of", "tasks_for"]

MAX_TASKS = 10_000  # tasks one run may launch (each is a fact and a line of the job's document)


def task_key(secret: str) -> str:
    """What the model keeps of a run's secret: its sha256, as of a token."""
    return hash_token(secret)


def refused(job_id: int) -> Unauthenticated:
    """The one refusal of a caller that is not the running job ``job_id`` (its credential is not that
    run's secret): it tells nothing of another user's job (no such job, not running, or the wrong secret:
    the same words)."""
    return Unauthenticated(f"not the job {job_id}: blaunch runs inside a running job (its XCE_JOB_TOKEN)")


def job_for_secret(model: State, job_id: int, secret: str) -> Job:
    """The running job ``job_id`` whose current run's secret is ``secret``."""
    job = model.jobs.get(job_id)
    if job is None or not job.task_key or job.state not in RUNNING:
        raise refused(job_id)
    if not hmac.compare_digest(job.task_key, task_key(secret)):
        raise refused(job_id)
    return job


def launch(model: State, job: Job, host: str, command: str, cwd: str, keep_going: bool, now: float,
           env: dict[str, str] | None = None, site: ControllerConfig | None = None, stdin: bool = False) -> list[Fact]:
    """``blaunch HOST CMD`` inside ``job``: a task on one of the job's own hosts, in blaunch's environment
    (as LSF's: ``mpirun``'s daemons find their launcher on the caller's ``PATH``), kept as a job's is."""
    if host not in job.alloc_slots:
        raise Forbidden(f"host {host} is not one of job {job.display_id}'s hosts ({' '.join(job.hosts)})")
    if not command.strip():
        raise InvalidRequest("a task needs a command")
    if len(job.tasks) >= MAX_TASKS:
        raise Conflict(f"job {job.display_id} launched {MAX_TASKS} tasks in this run: no more")
    return [TaskLaunched(time=now, job_id=job.id, run=job.run, task=len(job.tasks) + 1, host=host, command=command,
                         cwd=cwd, keep_going=keep_going, env=kept_environment(env or {}, site), stdin=stdin)]


def task_of(job: Job, task: int) -> dict[str, Any]:
    if not 1 <= task <= len(job.tasks):
        raise NotFound(f"job {job.display_id} has no task {task} in this run")
    return job.tasks[task - 1]


def signal_task(job: Job, task: int, signal: int, now: float) -> list[Fact]:
    """``blaunch`` got ``signal``: to its task, once (nothing when the task has ended already)."""
    t = task_of(job, task)
    if not 1 <= signal <= 64:
        raise InvalidRequest(f"signal {signal} is not a signal number (1-64)")
    if t["ended"]:
        return []
    return [JobSignalRequested(time=now, job_id=job.id, run=job.run, by=f"blaunch of task {task}", signal=signal,
                               task=task)]


def live_tasks(job: Job) -> list[int]:
    """The tasks of ``job``'s run that have not ended and were not killed (their launcher's lease is kept;
    not those of a run being killed: they end with it)."""
    if job.state not in RUNNING or job.kill_requested:
        return []
    return [t["task"] for t in job.tasks if not t["ended"] and not t.get("killed")]


def launchers_lost(model: State, job_id: int, lapsed: list[int], now: float) -> list[Fact]:
    """The launchers (``blaunch``) of these tasks stopped asking for them: each task is killed, once (as
    LSF's tasks end with their blaunch; the task's end then ends the job, unless ``keep_going``)."""
    job = model.jobs.get(job_id)
    if job is None:
        return []
    live = set(live_tasks(job))
    return [JobSignalRequested(time=now, job_id=job.id, run=job.run, signal=SIGKILL, task=task,
                               by=f"task {task}'s launcher (blaunch) gone") for task in lapsed if task in live]


def report_ended(model: State, host: str, job_id: int, run: int, task: int, now: float, exit_code: int | None,
                 signal: int | None, reason: str = "") -> list[Fact]:
    """A worker says a task ended: its end, and the job's end when it failed (unless ``keep_going``)."""
    job = model.jobs.get(job_id)
    if job is None or job.run != run or not 1 <= task <= len(job.tasks) or job.tasks[task - 1]["host"] != host:
        raise Conflict(f"job {job_id} run {run} has no task {task} on {host}")
    t = job.tasks[task - 1]
    if t["ended"]:
        return []  # OBSERVATION: a repeated report
    facts: list[Fact] = [TaskEnded(time=now, job_id=job_id, run=run, task=task, exit_code=exit_code, signal=signal,
                                   reason=reason)]
    failed = exit_code != 0 or signal is not None
    if failed and not t["keep_going"] and job.state in RUNNING and not job.kill_requested:
        why = f"signal {signal}" if signal is not None else f"exit code {exit_code}"
        facts.append(JobKillRequested(time=now, job_id=job_id, run=run, by=f"task {task} on {host} ({why})"))
    return facts


def tasks_for(model: State, host: str, job: Job) -> list[dict[str, Any]]:
    """``job``'s tasks the worker on ``host`` is to start (it starts each once: its task directories)."""
    if job.state not in RUNNING or job.kill_requested:
        return []
    return [t for t in job.tasks if t["host"] == host and not t["ended"]]


def runs_over(model: State, runs: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Of the runs a worker has tasks of, those that are not running any more: their tasks are to end."""
    out = []
    for job_id, run in sorted(runs):
        job = model.jobs.get(job_id)
        if job is None or job.run != run or job.state not in RUNNING:
            out.append((job_id, run))
    return out


def apply_task_launched(model: State, f: TaskLaunched) -> None:
    job = model.jobs.get(f.job_id)
    if job is None or job.run != f.run or f.task != len(job.tasks) + 1:
        return  # OBSERVATION: another run's, or a repeated fact
    job.tasks.append({"task": f.task, "host": f.host, "command": f.command, "cwd": f.cwd, "env": f.env,
                      "keep_going": f.keep_going, "stdin": f.stdin, "ended": False, "exit_code": None, "signal": None, "reason": ""})


def apply_task_ended(model: State, f: TaskEnded) -> None:
    job = model.jobs.get(f.job_id)
    if job is None or job.run != f.run or not 1 <= f.task <= len(job.tasks):
        return  # OBSERVATION: about another run
    job.tasks[f.task - 1].update(ended=True, exit_code=f.exit_code, signal=f.signal, reason=f.reason)
