"""Jobs: the one module that owns a job's states and transitions.

States (``JobState``) follow LSF, plus Slurm's stage-out state::

    PEND ◀──▶ PSUSP            held by its owner or an admin, and released
     │ ▲
     │ └──────────────┐ requeue (-r and a lost host, xce requeue, a claim that failed)
     ▼                │
    RUN ──▶ STAGE_OUT ──▶ DONE (exit 0, and its stage-out succeeded) │ EXIT (anything else)
     │ ▲ └────────────────▶ DONE │ EXIT
     ▼ │
    USUSP                       xce stop / xce resume: its processes frozen (and it may end so)

A job in STAGE_OUT has ended its process; its staging claim copies files out,
and that decides DONE or EXIT.  ``_set_state`` is the only place a job's state
changes: it checks ``TRANSITIONS`` and appends the job's history.  Decide
functions check requests and return facts; the ``apply_*`` folds change the job.

The kill path (DESIGN §12) is one for ``xce kill``, ``xce requeue``, a lost host's fencing and (later)
run limits and preemption: a run gets *orders* (end it with a grace, one signal, freeze, thaw), each a
fact numbered within its run (``Job.order_seq``).  The worker passes each number on once, and the
run's shepherd acts on it once: SIGINT and SIGTERM once, SIGKILL when the grace has passed.  Nothing
re-delivers an order, however often the worker polls.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass
from signal import SIGKILL
from typing import TYPE_CHECKING, Any, Callable

from xce.depend import DependError, parse as parse_dependency
from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.exitvalues import ExitValuesError, RequeueRule, parse as parse_exit_values
from xce.model import dependencies, fairshare, identity
from xce.model.entities.hosts import Host
from xce.model.entities.identity import User
from xce.model.entities.jobs import RUNNING, Job, JobState
from xce.model.facts import (
    Fact, JobAllocated, JobFinished, JobHeld, JobKillRequested, JobProcessEnded, JobReleased, JobRequeued, JobResumed,
    JobSignalRequested, JobStarted, JobSubmitted, JobSuspended,
)
from xce.model.state import State
from xce.model.transitions import check
from xce.names import check_job_name, check_name
from xce.jobspec_gpu import GPU_RUSAGE, GpuRequest, GpuRequestError, job_request
from xce.resreq import ResReq, ResReqError, parse_resreq
from xce.units import format_run_limit, parse_run_limit, parse_signal
from xce.wire import never_sent

if TYPE_CHECKING:
    from xce.config import Config, ControllerConfig

MAX_COMMAND_ARGS = 4096
MAX_COMMAND_BYTES = 128 * 1024
MAX_SLOTS = 1_000_000


J = JobState
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    # PEND -> PEND: an allocated run requeued; -> STAGE_OUT/DONE: a run whose start report was lost
    # (a worker restarted) reports its end directly
    J.PEND: frozenset({J.PEND, J.PSUSP, J.RUN, J.STAGE_OUT, J.DONE, J.EXIT}),
    J.PSUSP: frozenset({J.PEND, J.EXIT}),
    J.RUN: frozenset({J.STAGE_OUT, J.DONE, J.EXIT, J.PEND, J.USUSP}),
    # a suspended run may end (killed, its host lost): a kill thaws it first
    J.USUSP: frozenset({J.RUN, J.STAGE_OUT, J.DONE, J.EXIT, J.PEND}),
    J.STAGE_OUT: frozenset({J.DONE, J.EXIT, J.PEND}),
    J.DONE: frozenset({J.PEND}),  # xce requeue of a finished job
    J.EXIT: frozenset({J.PEND}),
}
MIN_MEM_LIMIT, MAX_MEM_LIMIT = 4 << 20, 1 << 50  # -M: below 4 MiB not even a shell starts
MAX_SIGNAL_ORDERS = 16  # the newest kill -s orders a run keeps (signals, as the kernel's, do not queue up)


@dataclass(frozen=True)
class JobSpec:
    """What a submission asks for, already parsed from the request body."""

    command: list[str]
    name: str | None = None
    queue: str | None = None
    project: str | None = None
    slots: int = 1
    resreq: str = ""
    cwd: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    rerunnable: bool = False
    held: bool = False
    request_id: str | None = None  # the client's id for this submission: a retry returns the first job
    mem_limit: int | None = None  # -M, in bytes
    shell: bool = False  # command is one command line for /bin/sh -c
    script: str | None = None  # the job is this script; command its arguments
    submit_dir: str | None = None  # where it starts when cwd is not given (else its workspace, noted)
    env: dict[str, str] | None = None  # the submitter's variables (-env), before the site's private ones go
    env_all: bool = False  # env is the submitter's whole environment (-env all)
    dependency: str | None = None  # -w: an expression (xce.depend)
    terminate_orphan: bool = False  # -ti: end the job if its dependency can never hold
    run_limit: str | None = None  # -W [HH:]MM
    run_estimate: str | None = None  # -We [HH:]MM
    warning_action: str | None = None  # -wa SIGNAL
    warning_time: str | None = None  # -wt [HH:]MM
    user_priority: int | None = None  # -sp
    begin_time: float | None = None  # -b: not started before (seconds since the epoch)
    exclusive: bool = False  # -x
    requeue_exit: str | None = None  # -Q (xce.exitvalues)
    pre_exec: str | None = None  # -E
    post_exec: str | None = None  # -Ep
    gpu: str | None = None  # -gpu, as xce.jobspec_gpu reads it


MAX_ARRAY = 100_000
_ARRAY = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<spec>[^\[\]]+)\]$")
_ARRAY_LIMIT = re.compile(r"^(?P<array>.*\])%(?P<limit>[^%]*)$")


def split_array_limit(text: str) -> tuple[str, int | None]:
    """``NAME[1-1000]%50`` -> (``NAME[1-1000]``, 50): at most 50 elements at once, as LSF's; other
    names come back as they are, with None."""
    m = _ARRAY_LIMIT.match(text)
    if m is None:
        return text, None
    try:
        limit = int(m.group("limit"))
    except ValueError:
        limit = 0
    if limit < 1:
        raise InvalidRequest(f"invalid job array limit in {text!r}: expected NAME[1-100]%N with N >= 1")
    return m.group("array"), limit


def parse_array_name(text: str) -> tuple[str, list[int]]:
    """``name[1-100]``, ``name[1-100:10]``, ``name[1,5,7-9]`` -> (name, indices); plain names -> (name, [])."""
    m = _ARRAY.match(text)
    if m is None:
        if "[" in text or "]" in text:
            raise InvalidRequest(f"invalid job array name {text!r}: expected NAME[1-100] or NAME[1,3,5-9:2]")
        return text, []
    indices: list[int] = []
    for part in m.group("spec").split(","):
        rng, _, step = part.strip().partition(":")
        lo, dash, hi = rng.partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
            k = int(step) if step else 1
        except ValueError:
            raise InvalidRequest(f"invalid job array range {part!r} in {text!r}") from None
        if a < 1 or b < a or k < 1:
            raise InvalidRequest(f"invalid job array range {part!r}: need 1 <= start <= end and step >= 1")
        if len(indices) + (b - a) // k + 1 > MAX_ARRAY:
            raise InvalidRequest(f"job array larger than {MAX_ARRAY} elements")
        indices.extend(range(a, b + 1, k))
    if len(set(indices)) != len(indices):
        raise InvalidRequest(f"job array {text!r} repeats an index")
    return m.group("name"), indices


def _check_path(what: str, value: str | None) -> None:
    if value is None:
        return
    if not value or "\0" in value or len(value) > 4096:
        raise InvalidRequest(f"invalid {what} path")
    if what in ("cwd", "submit_dir") and not os.path.isabs(value):
        raise InvalidRequest(f"{'--cwd' if what == 'cwd' else what} must be an absolute path, got {value!r}")


def submit(model: State, actor: User, spec: JobSpec, now: float, config: Config | None = None,
           claims: Callable[[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]] | None = None,
           ) -> tuple[list[Fact], int]:
    """``xce submit``: check everything, return the ``JobSubmitted`` fact.  ``claims`` resolves the
    submission's claims for the job's project and queue (``job_claims.submit`` passes it): (references to
    standalone claims, template claim specs, application profile)."""
    if spec.request_id is not None and (done := model.job_requests.get(request_key(actor.name, spec.request_id))):
        return [], done  # a retry (after a failover, or an answer lost on the way): the first one's job
    _check_command(spec)
    if not 1 <= spec.slots <= MAX_SLOTS:
        raise InvalidRequest(f"slots must be between 1 and {MAX_SLOTS}, got {spec.slots}")
    queue = spec.queue or model.default_queue()
    if queue is None:
        raise InvalidRequest("no queue given and no default queue is configured")
    check_name("queue", queue)
    if queue not in model.queues:
        raise NotFound(f"queue {queue!r} does not exist")
    project = spec.project or (actor.projects[0] if actor.projects else "default")
    check_name("project", project)
    if project not in model.projects:
        raise NotFound(f"project {project!r} does not exist")
    if not actor.is_admin and project not in actor.projects:
        raise Forbidden(f"user {actor.name!r} is not a member of project {project!r}")
    name = spec.name if spec.name is not None else default_name(spec)
    indices: list[int] = []
    array_limit = None
    if spec.name is not None:
        array_name, array_limit = split_array_limit(spec.name)
        name, indices = parse_array_name(array_name)
        check_job_name(name)
    if config is not None:
        _check_user_limits(model, actor, len(indices) or 1, config.controller)
    for what, value in (("cwd", spec.cwd), ("stdout", spec.stdout), ("stderr", spec.stderr),
                        ("submit_dir", spec.submit_dir)):
        _check_path(what, value)
    rr = check_resreq(model, spec.resreq, config)
    gpu = gpu_request(spec.gpu, rr)
    if spec.mem_limit is not None and not MIN_MEM_LIMIT <= spec.mem_limit <= MAX_MEM_LIMIT:
        raise InvalidRequest(f"memory limit (-M) must be between 4Mi and 1Pi, got {spec.mem_limit} bytes")
    tree = dependency_tree(model, actor, spec)
    limits = _run_limits(spec, queue, config)
    order = _order_fields(actor, spec, queue, config)
    refs, templates, app = claims(project, queue) if claims is not None else ([], [], None)
    job_id = model.next_job_id
    return [JobSubmitted(
        time=now, id=job_id, name=name, user=actor.name, project=project, queue=queue,
        command=list(spec.command), slots=spec.slots, resreq=spec.resreq, cwd=spec.cwd,
        stdout=spec.stdout, stderr=spec.stderr, rerunnable=spec.rerunnable, held=spec.held,
        array_indices=indices, claim_refs=refs, templates=templates, app=app, request_id=spec.request_id,
        mem_limit=spec.mem_limit, shell=spec.shell, script=spec.script, submit_dir=spec.submit_dir,
        env=job_environment(spec, config.controller if config is not None else None),
        dependency=spec.dependency if tree is not None else None, dependency_tree=tree,
        terminate_orphan=spec.terminate_orphan and tree is not None, array_limit=array_limit if indices else None,
        gpu=gpu.as_json() if gpu is not None else None, **limits, **order,
    )], job_id


def check_resreq(model: State, resreq: str, config: Config | None) -> ResReq:
    """A resource requirement that parses and reserves only counters the cluster has, or GPUs
    (``rusage[ngpus_physical=]``) (InvalidRequest)."""
    try:
        rr = parse_resreq(resreq)
    except ResReqError as e:
        raise InvalidRequest(f"bad resource requirement: {e.reason} at column {e.position + 1}: "
                             f"{e.text[:200]!r}") from None
    if config is not None and rr.rusage:
        known = {r.name for r in config.resources if r.layer == "L2"} | {GPU_RUSAGE}
        known.update(name for h in model.hosts.values() for name in h.counters)
        if unknown := sorted(set(rr.rusage) - known):
            raise InvalidRequest(f"unknown resource {', '.join(unknown)} in rusage[] (known counters: "
                                 f"{', '.join(sorted(known))})")
    return rr


def gpu_request(gpu: str | None, rr: ResReq) -> GpuRequest | None:
    """-gpu, or the GPUs an rusage[ngpus_physical=] asks (one or the other), read as the CLI read it."""
    try:
        return job_request(gpu, dict(rr.rusage))
    except GpuRequestError as e:
        raise InvalidRequest(e.message) from None


def _check_command(spec: JobSpec) -> None:
    """An argument vector, one command line (``shell``) or a script and its arguments: each as it may be."""
    if spec.shell and spec.script is not None:
        raise InvalidRequest("a job is a command line (shell) or a script, not both")
    if not spec.command and spec.script is None:
        raise InvalidRequest("a job needs a command: xce submit [options] -- CMD ARGS...")
    if len(spec.command) > MAX_COMMAND_ARGS or sum(len(a) for a in spec.command) > MAX_COMMAND_BYTES:
        raise InvalidRequest("command too long")
    if any("\0" in a for a in spec.command) or (spec.script is None and spec.command[0] == ""):
        raise InvalidRequest("command arguments must be non-empty strings without NUL")
    if spec.shell and (len(spec.command) != 1 or not spec.command[0].strip()):
        raise InvalidRequest("a shell command line is one non-blank string (it is run by /bin/sh -c)")
    if spec.script is not None and (not spec.script or "\0" in spec.script):
        raise InvalidRequest("a script is non-empty text without NUL")


def default_name(spec: JobSpec) -> str:
    """A job's name when none is given: its program's (a command line's first word), "script" for a
    script."""
    if spec.script is not None:
        return "script"
    first = spec.command[0].split()[0] if spec.shell else spec.command[0]
    return os.path.basename(first)[:63] or "job"


def job_environment(spec: JobSpec, site: ControllerConfig | None) -> dict[str, str] | None:
    """What of the submitter's environment goes with the job: none of XCE's credentials (``never_sent``),
    none the site marks private (``[controller] private_env``), and nothing of a whole environment
    (``-env all``) where the site keeps jobs' environments clean (``job_environment = "clean"``)."""
    if not spec.env:
        return None
    if site is not None and site.job_environment == "clean" and spec.env_all:
        return None
    return kept_environment(spec.env, site)


def kept_environment(env: dict[str, str], site: ControllerConfig | None) -> dict[str, str] | None:
    """``env`` less XCE's credentials and the variables the site marks private (a job's, a task's)."""
    private = site.private_env if site is not None else ()
    kept = {k: v for k, v in env.items()
            if not never_sent(k, v) and not any(fnmatch.fnmatchcase(k, p) for p in private)}
    return kept or None


def submission_warnings(model: State, job: Job) -> list[str]:
    """What a job just submitted names that no host here has, said back to its submitter without
    refusing it (a host with it may yet join, or come back): the names its ``select[]`` reads that no
    host has as an attribute or a counter, most likely a typo (``zoen==a``).  The job waits with
    "no host matches select[...]" all the same."""
    try:
        names = parse_resreq(job.resreq).select.names if job.resreq else frozenset()
    except ResReqError:
        return []
    unknown = set(names)
    for host in model.hosts.values():
        unknown -= host.attrs.keys() | host.counters.keys()
        if not unknown:
            return []
    if not unknown:
        return []
    listed = ", ".join(repr(n) for n in sorted(unknown))
    return [f"select[] names {listed}, which no host has (as an attribute or a counter): the job waits until "
            f"a host has {'them' if len(unknown) > 1 else 'it'} (xce hosts lists what hosts have)"]


def _run_limits(spec: JobSpec, queue: str, config: Config | None) -> dict[str, Any]:
    """-W (or the queue's run_limit), -We, -wa/-wt in the fact's terms (seconds, a signal number),
    checked against the queue's max_run_limit."""
    try:
        limit = parse_run_limit(spec.run_limit, "run limit (-W)") if spec.run_limit is not None else None
        estimate = parse_run_limit(spec.run_estimate, "run estimate (-We)") if spec.run_estimate is not None else None
        warn_time = parse_run_limit(spec.warning_time, "warning time (-wt)") if spec.warning_time is not None else None
    except ValueError as e:
        raise InvalidRequest(str(e)) from None
    default, most = config.run_limits(queue) if config is not None else (None, None)
    if limit is None:
        limit = default
    elif most is not None and limit > most:
        raise InvalidRequest(f"run limit (-W) {format_run_limit(limit)} is over queue {queue!r}'s maximum "
                             f"{format_run_limit(most)} (max_run_limit)")
    if (spec.warning_action is None) != (warn_time is None):
        raise InvalidRequest("-wa SIGNAL and -wt [HH:]MM go together: the signal, and how long before the run limit")
    warn_signal = parse_signal(spec.warning_action) if spec.warning_action is not None else None
    if warn_time is not None and limit is None:
        raise InvalidRequest("-wa/-wt warn before a run limit: give -W too (the queue has no run_limit)")
    grace = config.terminate_grace(queue) if config is not None and limit is not None else None
    return {"run_limit": limit, "run_estimate": estimate, "warn_signal": warn_signal, "warn_time": warn_time,
            "limit_grace": grace}


def _order_fields(actor: User, spec: JobSpec, queue: str, config: Config | None) -> dict[str, Any]:
    """-sp (checked against [controller] max_user_priority; an admin may go beyond), -b, -x and -Q (else
    the queue's requeue_exit_values) in the fact's terms."""
    most = config.controller.max_user_priority if config is not None else 100
    if spec.user_priority is not None and spec.user_priority > most and not actor.is_admin:
        raise InvalidRequest(f"job priority (-sp) {spec.user_priority} is over the site's maximum {most} "
                             "(max_user_priority)")
    q = config.queue(queue) if config is not None else None
    requeue_exit = spec.requeue_exit if spec.requeue_exit is not None else q.requeue_exit_values if q else None
    if requeue_exit is not None:
        try:
            parse_exit_values(requeue_exit)
        except ExitValuesError as e:
            raise InvalidRequest(f"-Q: {e}") from None
    return {"user_priority": spec.user_priority if spec.user_priority is not None else max(most // 2, 1),
            "begin_time": spec.begin_time, "exclusive": spec.exclusive, "requeue_exit": requeue_exit,
            "max_requeue": q.max_job_requeue if q else None, "pre_exec": spec.pre_exec, "post_exec": spec.post_exec}


def dependency_tree(model: State, actor: User, spec: JobSpec) -> list[Any] | None:
    """``-w``'s expression parsed, checked and its targets resolved (None: no dependency)."""
    if spec.dependency is None or not spec.dependency.strip():
        if spec.terminate_orphan:
            raise InvalidRequest("-ti ends a job whose dependency can never hold: it needs -w")
        return None
    try:
        tree = parse_dependency(spec.dependency)
    except DependError as e:
        raise InvalidRequest(f"bad dependency expression (-w): {e.reason} at column {e.position + 1}: "
                             f"{e.text[:200]!r}") from None
    dependencies.check_tree(tree)
    return dependencies.resolve(model, actor, tree)


def request_key(user: str, request_id: str) -> str:
    """``model.job_requests``'s key: request ids are the client's, so they are unique per user only."""
    return f"{user}/{request_id}"


def _check_user_limits(model: State, actor: User, count: int, limits: ControllerConfig) -> None:
    """One user cannot flood the model and the scheduler: array size and waiting jobs are bounded."""
    if count > limits.max_array_size:
        raise InvalidRequest(f"job array of {count} elements: at most {limits.max_array_size} per submission "
                             "([controller] max_array_size)")
    waiting = model.waiting_by_user.get(actor.name, 0)
    if waiting + count > limits.max_pending_jobs_per_user:
        raise Conflict(f"user {actor.name!r} has {waiting} pending jobs; {count} more would exceed the limit of "
                       f"{limits.max_pending_jobs_per_user} ([controller] max_pending_jobs_per_user)",
                       code="limit_exceeded")


def visible_job(model: State, actor: User, job_id: int) -> Job:
    """The job if ``actor`` may see it; unknown and foreign jobs look the same (404)."""
    job = model.jobs.get(job_id)
    if job is None or not (actor.is_admin or job.user == actor.name):
        raise NotFound(f"job {job_id} not found")
    return job


def listing_user(actor: User, user: str | None, every_user: bool, named: bool) -> str | None:
    """Whose jobs a listing shows (None: every user's): a user's own; an admin's own unless they name a
    user, ask for every user's (``all``), or name the jobs (an array, ids)."""
    return identity.whose(actor, user, every_user or named, "users may list only their own jobs")


def listing_match(user: str | None, queue: str | None, states: set[JobState] | None,
                  array: int | None) -> Callable[[Job], bool]:
    """A listing's filter: each criterion given narrows it."""
    def match(j: Job) -> bool:
        return (user is None or j.user == user) and (queue is None or j.queue == queue) \
            and (states is None or j.state in states) and (array is None or j.array_parent == array)
    return match


# ---------------------------------------------------------------- folds


def _index(model: State, job: Job) -> None:
    """Keep ``model.pending_jobs`` (PEND, nothing allocated: what the scheduler plans), the
    per-user count of waiting (PEND or PSUSP) jobs, ``model.finished_jobs`` (in the order they
    ended: what retirement scans, ``xce.model.history``) and the dependency indexes (the job's own,
    and the verdicts of the jobs waiting on it: ``xce.model.dependencies``) up to date."""
    if job.array_limit is not None and job.array_parent is not None:
        busy = model.array_busy.setdefault(job.array_parent, set())
        if job.array_busy:
            busy.add(job.id)
        else:
            busy.discard(job.id)
            if not busy:
                del model.array_busy[job.array_parent]
    if job.dependency_tree is not None:
        dependencies.watch(model, job)
    if job.id in model.dependents:
        dependencies.changed(model, job)
    pending = job.state is JobState.PEND and not job.alloc_slots
    if pending != (job.id in model.pending_jobs):
        if pending:
            model.pending_jobs.add(job.id)
            counts = model.pending_priorities
            counts[job.user_priority] = counts.get(job.user_priority, 0) + 1
        else:
            _unpend(model, job)
    if pending and job.begin_time is not None:
        model.begin_waiting[job.id] = job.begin_time
    else:
        model.begin_waiting.pop(job.id, None)
    if job.finished:
        if job.id not in model.finished_jobs:
            model.finished_jobs[job.id] = None
    elif job.id in model.finished_jobs:
        del model.finished_jobs[job.id]
    waiting = job.state in (JobState.PEND, JobState.PSUSP)
    if waiting != (job.id in model.waiting_jobs):
        if waiting:
            model.waiting_jobs.add(job.id)
        else:
            model.waiting_jobs.discard(job.id)
        _count_waiting(model, job.user, 1 if waiting else -1)


def reindex(model: State, job: Job, change: Callable[[], None]) -> None:
    """Change what the indexes key a pending job by (its -sp, its dependency, its array limit): out of
    them, ``change()``, back in."""
    _unpend(model, job)
    dependencies.forget(model, job)
    change()
    _index(model, job)


def _unpend(model: State, job: Job) -> None:
    """``job`` leaves ``model.pending_jobs`` (to be indexed again after a change of its -sp, or for good)."""
    if job.id in model.pending_jobs:
        model.pending_jobs.discard(job.id)
        counts = model.pending_priorities
        counts[job.user_priority] -= 1
        if not counts[job.user_priority]:
            del counts[job.user_priority]


def held_exclusively(model: State, host: Host) -> bool:
    """Does an exclusive job (-x) hold ``host``?  Then nothing else may start on it."""
    jobs = model.jobs
    return any((j := jobs.get(int(k))) is not None and j.exclusive for k in host.held_slots)


def _set_state(model: State, job: Job, new: JobState, time: float, reason: str) -> None:
    """The one place a job changes state: checked against ``TRANSITIONS``, recorded in its history,
    and the scheduler's indexes kept."""
    check(TRANSITIONS, job.state, new, f"job {job.id} run {job.run}", reason)
    job.state = new
    job.history.append({"state": new.value, "time": time, "run": job.run, "reason": reason})
    if job.finished:
        job.env = None  # only a run needs it: an hour of finished jobs (keep_finished) holds none, nor the archive
    _index(model, job)


def note(job: Job, time: float, reason: str) -> None:
    """A history entry that changes no state: what the job's owner should read about its run (a
    snapshot taken, or failed, after it was preempted)."""
    job.history.append({"state": job.state.value, "time": time, "run": job.run, "reason": reason})


def _count_waiting(model: State, user: str, delta: int) -> None:
    n = model.waiting_by_user.get(user, 0) + delta
    if n:
        model.waiting_by_user[user] = n
    else:  # no zero entries: the live model equals one rebuilt from a snapshot
        model.waiting_by_user.pop(user, None)


def apply_job_submitted(model: State, f: JobSubmitted) -> None:
    """A job, or every element of an array (one fact: ``array_indices``, ids from ``f.id`` on).  What
    the elements share is computed once: an array of 5,000 is folded on the event loop, which serves
    no read meanwhile."""
    elements: list[tuple[int, int | None, int | None]] = (  # (job id, array parent, array index)
        [(f.id + i, f.id, idx) for i, idx in enumerate(f.array_indices)] or [(f.id, None, None)])
    state = JobState.PSUSP if f.held else JobState.PEND
    pending_reason = "held by user" if f.held else None
    submitted = {"state": state.value, "time": f.time, "run": 0, "reason": f"submitted by {f.user}"}
    for job_id, parent, index in elements:
        old = model.jobs.get(job_id)
        if old is not None:
            _unpend(model, old)
        if old is not None and old.id in model.waiting_jobs:  # folds are total: a reused id replaces its job
            _count_waiting(model, old.user, -1)
            model.waiting_jobs.discard(old.id)
        if old is not None and old.request_id is not None:
            model.job_requests.pop(request_key(old.user, old.request_id), None)
        job = model.jobs[job_id] = Job(
            id=job_id, name=f.name, user=f.user, project=f.project, queue=f.queue,
            command=list(f.command), submit_time=f.time, state=state,
            slots=f.slots, resreq=f.resreq, cwd=f.cwd, stdout=f.stdout, stderr=f.stderr,
            rerunnable=f.rerunnable, array_parent=parent, array_index=index, pending_reason=pending_reason,
            claim_refs=[dict(r) for r in f.claim_refs], templates=[dict(t) for t in f.templates], app=f.app,
            history=[submitted.copy()], request_id=f.request_id if job_id == f.id else None, mem_limit=f.mem_limit,
            shell=f.shell, script=f.script, submit_dir=f.submit_dir, env=f.env,  # (shared by an array's elements)
            dependency=f.dependency, dependency_tree=f.dependency_tree, terminate_orphan=f.terminate_orphan,
            array_limit=f.array_limit if parent is not None else None, run_limit=f.run_limit,
            run_estimate=f.run_estimate, warn_signal=f.warn_signal, warn_time=f.warn_time, limit_grace=f.limit_grace,
            user_priority=f.user_priority, begin_time=f.begin_time, exclusive=f.exclusive,
            requeue_exit=f.requeue_exit, max_requeue=f.max_requeue, pre_exec=f.pre_exec, post_exec=f.post_exec,
            gpu=f.gpu,
        )
        _index(model, job)
    if f.request_id is not None:
        model.job_requests[request_key(f.user, f.request_id)] = f.id
    model.next_job_id = max(model.next_job_id, elements[-1][0] + 1)


def _release(model: State, job: Job) -> None:
    for host_name in job.alloc_slots:
        host = model.hosts.get(host_name)
        if host is not None:
            host.held_slots.pop(str(job.id), None)
            host.held_counters.pop(str(job.id), None)
            host.held_gpus.pop(str(job.id), None)
    model.cluster_held.pop(job.id, None)
    job.alloc_slots = {}
    job.alloc_counters = {}
    job.alloc_cluster = {}


def apply_job_allocated(model: State, f: JobAllocated) -> Job | None:
    """The job holds its new run's hosts (None: an unknown job; ``job_claims`` makes the run's claims)."""
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return None
    _release(model, job)
    job.run = f.run
    job.hosts = list(f.hosts)
    job.alloc_slots = dict(f.slots)
    job.alloc_counters = {h: dict(c) for h, c in f.counters.items()}
    job.alloc_cluster = dict(f.cluster_counters)
    job.run_gpus = {h: list(ids) for h, ids in f.gpus.items()}
    job.alloc_time = f.time
    if job.alloc_cluster:
        model.cluster_held[job.id] = job.alloc_cluster
    job.pending_reason = f"dispatching to {f.hosts[0]}" if f.hosts else None
    job.kill_requested = job.kill_requeue = False
    job.kill_grace = None
    job.kill_preemptor = None
    job.order_seq = 0  # a new run: its orders are numbered from 1
    job.signal_orders = []
    job.process_exit = None
    job.rendezvous = job.task_key = ""  # the new run's, when it starts
    job.tasks = []
    for host_name, n in f.slots.items():
        host = model.hosts.get(host_name)
        if host is not None:
            host.held_slots[str(job.id)] = n
            if f.counters.get(host_name):
                host.held_counters[str(job.id)] = dict(f.counters[host_name])
            if f.gpus.get(host_name):
                host.held_gpus[str(job.id)] = {"ids": list(f.gpus[host_name]),
                                               "exclusive": bool((job.gpu or {}).get("j_exclusive", True)),
                                               "gmem": (job.gpu or {}).get("gmem")}
    _index(model, job)
    return job


def apply_job_started(model: State, f: JobStarted) -> None:
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return
    if job.run != f.run or job.state is not JobState.PEND:
        return  # OBSERVATION: another run's, or started already (a repeated report), or it ended
    _set_state(model, job, JobState.RUN, f.time,
               f"started on {f.host} (pid {f.pid})" + (f": {f.note}" if f.note else ""))
    job.start_time = f.time
    job.pid = f.pid
    job.workspace = f.workspace or None
    job.stdout = f.stdout or job.stdout
    job.stderr = f.stderr or job.stderr
    job.publish = f.publish
    job.run_note = f.note
    job.rendezvous = f.rendezvous
    job.task_key = f.task_key
    job.pending_reason = None


def apply_job_finished(model: State, f: JobFinished) -> Job | None:
    """The run ended for good (None: the fact changed nothing; ``job_claims`` lets its claims go)."""
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return None
    if job.run != f.run or job.finished:
        return None  # OBSERVATION: another run's end, or decided already
    fairshare.charge_run(model, job, f.time)
    _release(model, job)
    if f.usage is not None:
        job.usage = dict(f.usage)
    job.exit_code = f.exit_code
    job.signal = f.signal
    job.exit_reason = f.reason or None
    job.end_time = f.time
    if f.post_exec_exit is not None:
        job.post_exec_exit = f.post_exec_exit
    job.pending_reason = None
    job.kill_requested = False
    # last: the jobs waiting on this one are judged as it changes state, on its exit code and reason
    _set_state(model, job, JobState(f.state), f.time, f.reason or "exit code 0")
    return job


def apply_job_requeued(model: State, f: JobRequeued) -> Job | None:
    """The run is over and the job waits again (None: the fact changed nothing)."""
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return None
    if job.run != f.run:
        return None  # OBSERVATION: about another run (this one was allocated anew since)
    fairshare.charge_run(model, job, f.time)
    _release(model, job)
    job.process_exit = None
    if f.usage is not None:
        job.usage = dict(f.usage)
    if f.by_exit_value:
        job.requeues += 1
    if f.avoid_host is not None and f.avoid_host not in job.avoid_hosts:
        job.avoid_hosts.append(f.avoid_host)
    if f.pre_exec_failed:
        job.pre_exec_failures += 1
    _set_state(model, job, JobState.PEND, f.time, f.reason or "requeued")
    job.hosts = []
    job.pid = None
    job.start_time = job.end_time = None
    job.exit_code = job.signal = None
    job.exit_reason = None
    job.kill_requested = job.kill_requeue = False
    job.pending_reason = f.reason or "requeued"
    return job


def _ordered(model: State, job_id: int, run: int) -> Job | None:
    """The job an order of run ``run`` is for, its number counted (None: not that run any more)."""
    job = model.jobs.get(job_id)
    if job is None or job.run != run or job.finished:  # folds are total: an order that comes late is moot
        return None
    job.order_seq += 1
    return job


def apply_job_kill_requested(model: State, f: JobKillRequested) -> None:
    job = _ordered(model, f.job_id, f.run)
    if job is None:
        return
    if not job.kill_requested:  # the first kill's grace stands: SIGTERM went out once, with it
        job.kill_grace = f.grace
    job.kill_requested = True
    job.kill_requeue = f.requeue
    job.kill_by = f.by
    if job.kill_preemptor is None:  # preempted it stays, whatever kill follows: its end is a preemption's
        job.kill_preemptor = f.preemptor


def apply_job_signal_requested(model: State, f: JobSignalRequested) -> None:
    job = _ordered(model, f.job_id, f.run)
    if job is None:
        return
    if f.task is None:
        job.signal_orders = [*job.signal_orders, [job.order_seq, f.signal]][-MAX_SIGNAL_ORDERS:]
        return
    if not 1 <= f.task <= len(job.tasks):
        return  # OBSERVATION: no such task of this run (folds are total)
    job.signal_orders = [*job.signal_orders, [job.order_seq, f.signal, f.task]][-MAX_SIGNAL_ORDERS:]
    if f.signal == SIGKILL:
        job.tasks[f.task - 1]["killed"] = True  # (ordered once: tasks.launchers_lost)


def apply_job_suspended(model: State, f: JobSuspended) -> None:
    job = _ordered(model, f.job_id, f.run)
    if job is not None and job.state is JobState.RUN:
        _set_state(model, job, JobState.USUSP, f.time, f"suspended by {f.by}")


def apply_job_resumed(model: State, f: JobResumed) -> None:
    job = _ordered(model, f.job_id, f.run)
    if job is not None and job.state is JobState.USUSP:
        _set_state(model, job, JobState.RUN, f.time, f"resumed by {f.by}")


def apply_job_held(model: State, f: JobHeld) -> None:
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return
    _set_state(model, job, JobState.PSUSP, f.time, f"held by {f.by}")
    job.pending_reason = f"held by {f.by}"


def apply_job_released(model: State, f: JobReleased) -> None:
    job = model.jobs.get(f.job_id)
    if job is None:  # folds are total: a fact about an unknown job changes nothing
        return
    _set_state(model, job, JobState.PEND, f.time, f"released by {f.by}")
    job.pending_reason = None


# ---------------------------------------------------------------- decisions on existing jobs


def kill(model: State, actor: User, job_id: int, now: float, requeue: bool = False,
         config: Config | None = None) -> list[Fact]:
    """``xce kill`` (and ``xce requeue``): finish or requeue now if nothing runs, else order the run
    ended: SIGINT and SIGTERM once, SIGKILL after the queue's grace (``config.terminate_grace``).  A
    second kill orders nothing more (it may turn a requeue into a kill: the signals went out once)."""
    job = visible_job(model, actor, job_id)
    by = actor.name
    if job.finished:
        if requeue:
            return [JobRequeued(time=now, job_id=job.id, run=job.run, reason=f"requeued by {by}")]
        raise Conflict(f"job {job.display_id} already finished ({job.state.value})")
    if job.started:  # (in STAGE_OUT the process has ended: its stage-out still decides)
        if job.kill_requested and job.kill_requeue == requeue:
            return []
        grace = config.terminate_grace(job.queue) if config is not None else None
        return [JobKillRequested(time=now, job_id=job.id, run=job.run, by=by, requeue=requeue, grace=grace)]
    # PEND or PSUSP, possibly allocated but not yet started: no process to signal
    if requeue:
        return [JobRequeued(time=now, job_id=job.id, run=job.run, reason=f"requeued by {by}")]
    return [JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value,
                        reason=f"killed by {by}")]


def preempt(model: State, job_id: int, victims: tuple[tuple[int, int], ...], now: float,
            config: Config | None = None) -> list[Fact]:
    """The scheduler chose ``victims`` (job, run) for pending job ``job_id`` of a preemptive queue: each
    still running that run, and not being ended already, is ended through the kill path (requeued if
    rerunnable, else killed), with its queue's grace.  Nothing if the preemptor no longer waits."""
    job = model.jobs.get(job_id)
    if job is None or job.state is not JobState.PEND or job.allocated:
        return []
    out: list[Fact] = []
    for victim_id, run in victims:
        v = model.jobs.get(victim_id)
        if v is None or v.run != run or v.state not in RUNNING or v.kill_requested:
            continue
        grace = config.terminate_grace(v.queue) if config is not None else None
        out.append(JobKillRequested(time=now, job_id=v.id, run=v.run, by=f"preemption for job {job.id}",
                                    requeue=v.rerunnable, grace=grace, preemptor=job.id))
    return out


def send_signal(model: State, actor: User, job_id: int, now: float, signal: int) -> list[Fact]:
    """``xce kill -s SIGNAL`` (LSF's ``bkill -s``): that one signal to the run's processes, once, and
    nothing after it (no escalation: the job decides what the signal means)."""
    job = visible_job(model, actor, job_id)
    if not 1 <= signal <= 64:
        raise InvalidRequest(f"signal {signal} is not a signal number (1-64)")
    if job.state not in RUNNING:
        raise Conflict(f"job {job.display_id} is {job.state.value}: only a running job's processes can be "
                       "signalled (xce kill without -s ends a pending job)")
    return [JobSignalRequested(time=now, job_id=job.id, run=job.run, by=actor.name, signal=signal)]


def peek_target(model: State, actor: User, job_id: int) -> tuple[str, int]:
    """Where ``bpeek`` reads a job's output: its first host and run, while its process runs there."""
    job = visible_job(model, actor, job_id)
    if job.state not in RUNNING or not job.hosts:
        raise Conflict(f"job {job.display_id} is {job.state.value}: only a running job's output can be peeked at"
                       + (" (it has not started)" if job.state in (JobState.PEND, JobState.PSUSP) else
                          " (it has ended: read its output file)"), code="not_running")
    return job.hosts[0], job.run


def suspend(model: State, actor: User, job_id: int, now: float) -> list[Fact]:
    """``xce stop`` (LSF's ``bstop``): the run's processes frozen; USUSP until ``xce resume``."""
    job = visible_job(model, actor, job_id)
    if job.state is JobState.USUSP:
        return []
    if job.state is not JobState.RUN or job.kill_requested:
        raise Conflict(f"job {job.display_id} is {job.state.value}"
                       f"{' and being terminated' if job.kill_requested else ''}: only a running job can be stopped")
    return [JobSuspended(time=now, job_id=job.id, run=job.run, by=actor.name)]


def resume(model: State, actor: User, job_id: int, now: float) -> list[Fact]:
    """``xce resume`` (LSF's ``bresume``): a stopped run's processes thawed."""
    job = visible_job(model, actor, job_id)
    if job.state is JobState.RUN:
        return []
    if job.state is not JobState.USUSP:
        raise Conflict(f"job {job.display_id} is {job.state.value}: only a stopped (USUSP) job can be resumed")
    return [JobResumed(time=now, job_id=job.id, run=job.run, by=actor.name)]


def orders(job: Job) -> dict[str, Any]:
    """What the run's processes have been ordered, as the worker passes it to the run's shepherd: the
    newest order's number, the kill (its grace) if one was asked, the signals, frozen or not."""
    return {"job_id": job.id, "run": job.run, "seq": job.order_seq,
            "kill": {"grace": job.kill_grace} if job.kill_requested else None,
            "signals": [list(o) for o in job.signal_orders], "suspend": job.state is JobState.USUSP}


def hold(model: State, actor: User, job_id: int, now: float) -> list[Fact]:
    job = visible_job(model, actor, job_id)
    if job.state is JobState.PSUSP:
        return []
    if job.state is not JobState.PEND or job.allocated:
        raise Conflict(f"job {job.display_id} is {job.state.value}: only pending jobs can be held")
    return [JobHeld(time=now, job_id=job.id, by=actor.name)]


def release(model: State, actor: User, job_id: int, now: float) -> list[Fact]:
    job = visible_job(model, actor, job_id)
    if job.state is JobState.PEND:
        return []
    if job.state is not JobState.PSUSP:
        raise Conflict(f"job {job.display_id} is {job.state.value}: only held jobs can be released")
    return [JobReleased(time=now, job_id=job.id, by=actor.name)]


def report_started(model: State, host: str, job_id: int, run: int, pid: int, now: float,
                   workspace: str, stdout: str, stderr: str, publish: str = "", note: str = "",
                   rendezvous: str = "", task_key: str = "") -> list[Fact]:
    job = model.jobs.get(job_id)
    if job is None or job.run != run or job.finished or host not in job.alloc_slots:
        raise Conflict(f"job {job_id} run {run} is not dispatched to {host}")
    if job.started:
        return []  # OBSERVATION: a repeated report
    return [JobStarted(time=now, job_id=job_id, run=run, host=host, pid=pid,
                       workspace=workspace, stdout=stdout, stderr=stderr, publish=publish, note=note,
                       rendezvous=rendezvous, task_key=task_key)]


def report_finished(model: State, host: str, job_id: int, run: int, now: float, exit_code: int | None,
                    signal: int | None, reason: str = "", stages_out: bool = False,
                    usage: dict[str, Any] | None = None, pre_exec_failed: bool = False,
                    post_exec_exit: int | None = None) -> list[Fact]:
    """A worker says the run ended.  Decide DONE, EXIT (and why) or requeue; a run that ``stages_out``
    (``job_claims`` knows) only records how its process ended: its stage-out decides."""
    job = model.jobs.get(job_id)
    if job is None or job.run != run or host not in job.alloc_slots:
        raise Conflict(f"job {job_id} run {run} is not dispatched to {host}")
    if job.finished or job.state is JobState.STAGE_OUT:
        return []  # OBSERVATION: decided already, or the process ended before and the stage-out decides
    if job.kill_requested and job.kill_requeue:
        return [JobRequeued(time=now, job_id=job_id, run=run, reason=f"requeued by {job.kill_by}", usage=usage)]
    if pre_exec_failed and not job.kill_requested:
        return [_pre_exec_failed(job, host, now, exit_code, signal, usage)]
    if not job.kill_requested and not reason and signal is None and job.requeue_exit is not None:
        by_exit = requeue_by_exit(job, host, now, exit_code, usage)
        if by_exit is not None:
            return [by_exit]
    if not job.kill_requested and stages_out:
        return [JobProcessEnded(time=now, job_id=job_id, run=run, exit_code=exit_code, signal=signal,
                                reason=reason, usage=usage, post_exec_exit=post_exec_exit)]
    state, why = exit_decision(exit_code, signal, reason, killed_by=job.kill_by if job.kill_requested else None)
    return [JobFinished(time=now, job_id=job_id, run=run, state=state.value, exit_code=exit_code,
                        signal=signal, reason=why, usage=usage, post_exec_exit=post_exec_exit)]


MAX_PREEXEC_RETRY = 5  # LSF's default: runs whose -E failed before the job ends EXIT


def _pre_exec_failed(job: Job, host: str, now: float, exit_code: int | None, signal: int | None,
                     usage: dict[str, Any] | None) -> Fact:
    """A run whose -E failed never ran its command: requeued, never to that host again (LSF's rule),
    until MAX_PREEXEC_RETRY such runs, after which the job ends EXIT."""
    how = f"exit code {exit_code}" if signal is None else f"signal {signal}"
    if job.pre_exec_failures + 1 >= MAX_PREEXEC_RETRY:
        return JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value, exit_code=exit_code,
                           signal=signal, usage=usage,
                           reason=f"pre-exec failed on {host} ({how}), {job.pre_exec_failures + 1} times")
    return JobRequeued(time=now, job_id=job.id, run=job.run, usage=usage, avoid_host=host, pre_exec_failed=True,
                       reason=f"pre-exec failed on {host} ({how}): requeued to another host")


def requeue_by_exit(job: Job, host: str, now: float, exit_code: int | None,
                    usage: dict[str, Any] | None = None) -> Fact | None:
    """A run that exited with one of the job's requeue exit values (``-Q``, its queue's
    ``requeue_exit_values``) goes back to the queue (off ``host`` for an ``EXCLUDE()`` code), until the
    queue's ``max_job_requeue`` such requeues, after which it ends EXIT saying so.  None: the exit code
    is not one of them."""
    requeue, avoid = _exit_rule(job.requeue_exit or "").requeues(exit_code)
    if not requeue:
        return None
    if job.max_requeue is not None and job.requeues >= job.max_requeue:
        return JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value, exit_code=exit_code,
                           reason=f"nonzero exit code {exit_code}; requeued {job.requeues} times already "
                                  f"(max_job_requeue {job.max_requeue})", usage=usage)
    return JobRequeued(time=now, job_id=job.id, run=job.run, usage=usage, by_exit_value=True,
                       avoid_host=host if avoid else None,
                       reason=f"exit code {exit_code} is a requeue exit value: requeued"
                              + (f" (not to {host} again)" if avoid else ""))


@functools.lru_cache(maxsize=256)
def _exit_rule(text: str) -> RequeueRule:
    return parse_exit_values(text)  # checked at submission (and the queue's when the config was read)


def host_lost(model: State, host: str, now: float) -> list[Fact]:
    """The jobs on a lost host: requeue if ``-r`` (or never started), else EXIT 'host lost'.
    (``job_claims.host_lost`` fences the host's attachments too.)"""
    out: list[Fact] = []
    for job in model.jobs.values():
        if host not in job.alloc_slots or job.finished:
            continue
        if job.rerunnable or not job.started:
            out.append(JobRequeued(time=now, job_id=job.id, run=job.run, reason=f"host {host} lost: requeued",
                                   host_lost=True))
        else:
            out.append(JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value,
                                   reason=f"host lost ({host})", host_lost=True))
    return out


def exit_decision(exit_code: int | None, signal: int | None, reason: str = "", killed_by: str | None = None,
                  stage_out_failure: str | None = None) -> tuple[JobState, str]:
    """How a run ends: DONE only if its process exited 0 unkilled and its stage-out (if any) succeeded;
    otherwise EXIT and why (the process's reason first, a stage-out failure after it)."""
    if killed_by is not None:
        state, why = JobState.EXIT, f"killed by {killed_by}"
    elif reason:
        state, why = JobState.EXIT, reason
    elif exit_code == 0:
        state, why = JobState.DONE, ""
    elif signal:
        state, why = JobState.EXIT, f"killed by signal {signal}"
    else:
        state, why = JobState.EXIT, f"nonzero exit code {exit_code}"
    if stage_out_failure:
        state, why = JobState.EXIT, (f"{why}; {stage_out_failure}" if why else stage_out_failure)
    return state, why


def reconcile_host(model: State, host: str, running: set[tuple[int, int]],
                   now: float) -> tuple[list[Fact], list[tuple[int, int]]]:
    """A worker (re)registers with the runs it still has: a started run it lost is requeued (-r) or
    ends EXIT; a run it has that is not its own (any more) is to be killed: ``(facts, runs to kill)``."""
    facts: list[Fact] = []
    h = model.hosts.get(host)
    for key in list(h.held_slots) if h else []:
        job = model.jobs.get(int(key))
        if job is None or job.state not in RUNNING or job.hosts[0] != host:
            continue  # OBSERVATION: not running here (in STAGE_OUT the node agent finishes the job)
        if (job.id, job.run) not in running:
            if job.rerunnable:
                facts.append(JobRequeued(time=now, job_id=job.id, run=job.run,
                                         reason=f"worker on {host} restarted without it: requeued"))
            else:
                facts.append(JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value,
                                         reason=f"lost: worker on {host} restarted"))
    kill = [(job_id, run) for job_id, run in sorted(running)
            if (job := model.jobs.get(job_id)) is None or job.run != run or job.finished
            or host not in job.alloc_slots]
    return facts, kill


def report_lost(model: State, host: str, job_id: int, run: int, now: float, reason: str,
                stages_out: bool = False, usage: dict[str, Any] | None = None) -> list[Fact]:
    """The worker no longer knows how a run ended (its shepherd died too), or its shepherd fenced it
    (no word from the controller in time): requeue it if it may run again (-r), else it ends as the
    worker says (``reason``)."""
    job = model.jobs.get(job_id)
    if job is not None and job.rerunnable and job.run == run and not job.finished and not job.kill_requested:
        return [JobRequeued(time=now, job_id=job_id, run=run, reason=f"{reason}: requeued", usage=usage)]
    return report_finished(model, host, job_id, run, now, None, None, reason, stages_out, usage)


def finish_after_stage_out(model: State, job_id: int, run: int | None, failure: str | None,
                           now: float) -> list[JobFinished]:
    """The stage-out of a run whose process ended is over: DONE only if both succeeded."""
    job = model.jobs.get(job_id)
    if job is None or job.run != run or job.state is not JobState.STAGE_OUT:
        return []
    ended = job.process_exit or {}
    exit_code, signal = ended.get("exit_code"), ended.get("signal")
    state, why = exit_decision(exit_code, signal, ended.get("reason", ""), stage_out_failure=failure)
    return [JobFinished(time=now, job_id=job_id, run=job.run, state=state.value, exit_code=exit_code,
                        signal=signal, reason=why)]


def apply_job_process_ended(model: State, f: JobProcessEnded) -> Job | None:
    """The process of a run that stages out ended (None: the fact changed nothing): how it ended is
    kept for the decision after the stage-out, which ``job_claims`` starts (``begin_stage_out``)."""
    job = model.jobs.get(f.job_id)
    if job is None or job.run != f.run or job.finished:
        return None
    job.process_exit = {"exit_code": f.exit_code, "signal": f.signal, "reason": f.reason}
    job.exit_code, job.signal = f.exit_code, f.signal
    job.post_exec_exit = f.post_exec_exit
    if f.usage is not None:
        job.usage = dict(f.usage)
    return job


def begin_stage_out(model: State, job: Job, time: float) -> None:
    _set_state(model, job, JobState.STAGE_OUT, time, "process ended: staging out")
