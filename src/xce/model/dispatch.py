"""A worker's side of jobs: what it is to do when it polls (the runs to start on its host, the
orders of its runs it has not passed on yet), and what its registration and reports mean.

A run is started by the worker of its first host, once it is allocated and its readiness gate is
open (``job_claims.blocker``: every template claim READY, every attachment ATTACHED); until then
it stays PEND, holding its hosts.  A running run's orders (kill, signals, stop, resume) are
numbered (``Job.order_seq``); the worker says which number it has passed on for each run, so an
order is answered until the worker has it and never again: a poll never spins on an order, nor
re-delivers one.  The worker's poll (``GET /v1/hosts/HOST/work``) and a node agent's report
(``POST /v1/agents/node:HOST/reports``) both answer with this.

A worker (re)registers with the runs it still has (``register``): the controller reconciles them
(``jobs.reconcile_host``).  It reports runs started and ended (``runs_reported``): a start the
controller refuses is a run to kill, an end it decided already is nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from xce.errors import Conflict, InvalidRequest
from xce.model import job_claims, jobs, tasks
from xce.model.entities.jobs import RUNNING, Job, JobState
from xce.model.facts import Fact, HostRegistered
from xce.model.state import State

__all__ = ["Ended", "HostWork", "Started", "TaskEnd", "mem_limit", "register", "runs_reported", "work_for"]


@dataclass(frozen=True)
class HostWork:
    start: list[Job] = field(default_factory=list)  # runs to start on the host: their gate is open
    orders: list[Job] = field(default_factory=list)  # running runs with an order the worker has not seen
    tasks: list[tuple[Job, dict[str, Any]]] = field(default_factory=list)  # tasks to start on the host (blaunch)

    @property
    def empty(self) -> bool:
        return not self.start and not self.orders and not self.tasks


def work_for(model: State, host: str, seen: dict[tuple[int, int], int] | None = None) -> HostWork:
    """What the worker on ``host`` is to do; ``seen``: (job, run) -> the newest order it passed on."""
    h = model.hosts.get(host)
    if h is None:
        return HostWork()
    seen = seen or {}
    out = HostWork()
    for key in h.held_slots:
        job = model.jobs.get(int(key))
        if job is None or not job.hosts:
            continue
        if job.tasks:  # blaunch: a task on any of its hosts, and the run's orders go to its tasks there too
            out.tasks.extend((job, t) for t in tasks.tasks_for(model, host, job))
            if job.hosts[0] != host and job.state in RUNNING and job.order_seq > seen.get((job.id, job.run), 0) \
                    and any(t["host"] == host for t in job.tasks):
                out.orders.append(job)
        if job.hosts[0] != host:
            continue
        if job.state is JobState.PEND and job_claims.blocker(model, job) is None:  # the readiness gate
            out.start.append(job)
        elif job.state in RUNNING and job.order_seq > seen.get((job.id, job.run), 0):
            out.orders.append(job)
    return out


def mem_limit(job: Job, host: str) -> int | None:
    """The run's memory limit on ``host``: ``-M``, else the ``mem`` it reserved there (``rusage[mem=]``)."""
    if job.mem_limit is not None:
        return job.mem_limit
    reserved = job.alloc_counters.get(host, {}).get("mem")
    return int(reserved) if reserved else None


def register(model: State, host: str, slots: int, attrs: dict[str, str], counters: dict[str, float], boot_id: str,
             running: set[tuple[int, int]], now: float, gpus: list[dict[str, Any]] | None = None,
             ) -> tuple[list[Fact], list[tuple[int, int]]]:
    """A worker (re)registers, with the runs it still has: its ``HostRegistered``, the runs it lost
    ended or requeued, and the runs it has that are not its own any more (given up while it was
    away), to kill: ``(facts, runs to kill)``.  ``gpus``: its GPUs, {id, uuid, model, memory} each
    (ids unique: ``InvalidRequest`` otherwise)."""
    ids = [g["id"] for g in gpus or ()]
    if len(set(ids)) != len(ids):
        raise InvalidRequest(f"host {host} reports GPU ids {ids}: each GPU's id once")
    facts, lost = jobs.reconcile_host(model, host, running, now)
    facts.insert(0, HostRegistered(time=now, name=host, slots=slots, attrs=dict(attrs), counters=dict(counters),
                                   boot_id=boot_id, gpus=sorted((dict(g) for g in gpus or ()),
                                                                key=lambda g: int(g["id"]))))
    return facts, lost


@dataclass(frozen=True)
class Started:
    """A worker's word that a run's process started."""

    job_id: int
    run: int
    pid: int
    workspace: str = ""
    stdout: str = ""
    stderr: str = ""
    publish: str = ""  # how the run's claims were published: "bind", "symlink"
    note: str = ""  # what it noted starting the run (a submission directory missing on its host)
    rendezvous: str = ""  # ADDR:PORT reserved for the run on its first host
    task_key: str = ""  # sha256 of the run's secret (``tasks.task_key``)


@dataclass(frozen=True)
class TaskEnd:
    """A worker's word that a task of a run (``blaunch``) ended."""

    job_id: int
    run: int
    task: int
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Ended:
    """A worker's word that a run's process ended; ``lost``: it no longer knows how (it restarted, its
    shepherd died), or the shepherd fenced it (no answer from the controller in time)."""

    job_id: int
    run: int
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    lost: bool = False
    usage: dict[str, Any] | None = None  # max_rss_bytes, cpu_user_s, cpu_sys_s
    pre_exec_failed: bool = False  # its -E failed: the command never ran
    post_exec_exit: int | None = None  # its -Ep's exit code, when it ran


def runs_reported(model: State, host: str, started: list[Started], ended: list[Ended],
                  now: float, tasks_ended: Sequence[TaskEnd] = ()) -> tuple[list[Fact], list[tuple[int, int]]]:
    """A worker's reports: the facts of each, and the runs it started that are not its to run (the
    controller gave them up, or never dispatched them there), to kill."""
    facts: list[Fact] = []
    kill: list[tuple[int, int]] = []
    for s in started:
        try:
            facts += jobs.report_started(model, host, s.job_id, s.run, s.pid, now, s.workspace, s.stdout, s.stderr,
                                         s.publish, s.note, s.rendezvous, s.task_key)
        except Conflict:
            kill.append((s.job_id, s.run))
    for e in ended:
        try:
            if e.lost:
                facts += job_claims.report_lost(model, host, e.job_id, e.run, now, e.reason, e.usage)
            else:
                facts += job_claims.report_finished(model, host, e.job_id, e.run, now, e.exit_code, e.signal,
                                                    e.reason, e.usage, e.pre_exec_failed, e.post_exec_exit)
        except Conflict:
            pass  # OBSERVATION: a report about a run the controller already decided: nothing to do
    for t in tasks_ended:
        try:
            facts += tasks.report_ended(model, host, t.job_id, t.run, t.task, now, t.exit_code, t.signal, t.reason)
        except Conflict:
            pass  # OBSERVATION: a task of a run that is over
    return facts, kill
