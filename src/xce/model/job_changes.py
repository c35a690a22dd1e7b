"""``xce mod`` (LSF's ``bmod``): changing a pending job: its queue, slots, resource requirement, run
limit, dependency, priority (``-sp``), name, and an array's limit.

A change is checked as a submission of the same values would be (``jobs``' checks, the same words),
and only while the job waits with nothing allocated (PEND or PSUSP): a run that has its hosts keeps
what it was given.  An array's id changes every element still waiting, in one fact; an element
(``12[3]``) changes alone.  The change is one ``JobModified`` fact with the new values, folded here:
the scheduler's indexes (``-sp`` counts, dependencies, begin times) are kept by ``jobs.reindex``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xce.errors import Conflict, InvalidRequest, NotFound
from xce.jobspec_gpu import GPU_RUSAGE
from xce.model import dependencies, jobs
from xce.model.entities.identity import User
from xce.model.entities.jobs import Job, JobState
from xce.model.facts import Fact, JobModified
from xce.model.state import State
from xce.names import check_job_name, check_name
from xce.units import format_run_limit, parse_run_limit

if TYPE_CHECKING:
    from xce.config import Config

WAITING = (JobState.PEND, JobState.PSUSP)


@dataclass(frozen=True)
class JobChanges:
    """What ``xce mod`` asks to change (None: unchanged).  ``run_limit`` and ``dependency`` given empty
    take the limit or the dependency away (LSF's ``-Wn``, ``-wn``)."""

    queue: str | None = None
    slots: int | None = None
    resreq: str | None = None
    run_limit: str | None = None
    dependency: str | None = None
    user_priority: int | None = None
    name: str | None = None
    array_limit: int | None = None
    whole_array: bool = False  # the id is an array's: every element (else the one job, an element alone)

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and k != "whole_array"}


def modify(model: State, actor: User, job_id: int, changes: JobChanges, now: float,
           config: Config | None = None) -> list[Fact]:
    """The ``JobModified`` fact for ``job_id`` (every waiting element of an array, for the array's id),
    or why not: only its owner or an admin (another's job is not found), only while it waits with
    nothing allocated."""
    job = jobs.visible_job(model, actor, job_id)
    given = changes.given()
    if not given:
        raise InvalidRequest("nothing to change: give a queue, slots, -R, -W, -w, -sp, -J or an array limit")
    if changes.array_limit is not None and job.array_parent is None:
        raise InvalidRequest(f"job {job.display_id} is not an array: it has no array limit (%N)")
    whole = job.array_parent == job.id and (changes.whole_array or changes.array_limit is not None)
    targets = [model.jobs[i] for i in dependencies.array_or_job(model, job)] if whole else [job]
    # an array's limit is the array's: every element that has not ended counts against it
    ids = [j.id for j in targets if j.state in WAITING and not j.allocated or
           (changes.array_limit is not None and not j.finished)]
    if not ids or (set(given) - {"array_limit"} and not any(_waiting(j) for j in targets)):
        raise Conflict(f"job {job.display_id} is {job.state.value}: only a pending job (PEND, PSUSP) can be "
                       "modified" + (" (an array's limit: while an element waits or runs)" if whole else ""))
    values = _checked(model, actor, job, changes, config)
    return [JobModified(time=now, job_ids=ids, by=actor.name, changes=values)]


def _waiting(job: Job) -> bool:
    """Waits in its queue with nothing allocated: what a modification changes."""
    return job.state in WAITING and not job.allocated


def _checked(model: State, actor: User, job: Job, changes: JobChanges, config: Config | None) -> dict[str, Any]:
    """The changes in the fact's terms, each checked as ``jobs.submit`` checks it."""
    out: dict[str, Any] = {}
    queue = job.queue
    if changes.queue is not None:
        check_name("queue", changes.queue)
        if changes.queue not in model.queues:
            raise NotFound(f"queue {changes.queue!r} does not exist")
        queue = out["queue"] = changes.queue
    if changes.slots is not None:
        if not 1 <= changes.slots <= jobs.MAX_SLOTS:
            raise InvalidRequest(f"slots must be between 1 and {jobs.MAX_SLOTS}, got {changes.slots}")
        out["slots"] = changes.slots
    if changes.resreq is not None:
        rr = jobs.check_resreq(model, changes.resreq, config)
        out["resreq"] = changes.resreq
        if GPU_RUSAGE in rr.rusage:  # GPUs asked as rusage[ngpus_physical=]: the request follows the -R
            gpu = jobs.gpu_request(None, rr)
            out["gpu"] = gpu.as_json() if gpu is not None else None
    limit = job.run_limit
    if changes.run_limit is not None:
        try:
            limit = parse_run_limit(changes.run_limit, "run limit (-W)") if changes.run_limit else None
        except ValueError as e:
            raise InvalidRequest(str(e)) from None
    default, most = config.run_limits(queue) if config is not None else (None, None)
    if limit is None and changes.queue is not None:
        limit = default  # a job without a limit takes its new queue's
    if limit is not None and most is not None and limit > most:
        raise InvalidRequest(f"run limit (-W) {format_run_limit(limit)} is over queue {queue!r}'s maximum "
                             f"{format_run_limit(most)} (max_run_limit)")
    if limit != job.run_limit:
        out["run_limit"] = limit
        if limit is None:
            out["warn_signal"] = out["warn_time"] = None  # a warning before no limit means nothing
        if config is not None and limit is not None:
            out["limit_grace"] = config.terminate_grace(queue)
    if changes.dependency is not None:
        spec = jobs.JobSpec(command=[], dependency=changes.dependency or None)
        tree = jobs.dependency_tree(model, actor, spec)
        if tree is not None and job.id in set(dependencies.named_jobs(tree)):
            raise InvalidRequest(f"job {job.display_id} cannot depend on itself")
        out["dependency"], out["dependency_tree"] = (changes.dependency or None), tree
    if changes.user_priority is not None:
        most_priority = config.controller.max_user_priority if config is not None else 100
        if not 1 <= changes.user_priority <= most_priority and not actor.is_admin:
            raise InvalidRequest(f"job priority (-sp) is 1 to the site's maximum {most_priority} "
                                 f"(max_user_priority), got {changes.user_priority}")
        out["user_priority"] = changes.user_priority
    if changes.name is not None:
        if job.array_parent is not None:
            raise InvalidRequest("an array's elements keep the array's name (its limit: -J %N)")
        check_job_name(changes.name)
        out["name"] = changes.name
    if changes.array_limit is not None:
        if changes.array_limit < 1:
            raise InvalidRequest(f"an array limit (%N) is at least 1, got {changes.array_limit}")
        out["array_limit"] = changes.array_limit
    return out


_FIELDS = frozenset({"queue", "slots", "resreq", "gpu", "run_limit", "warn_signal", "warn_time", "limit_grace",
                     "dependency", "dependency_tree", "user_priority", "name", "array_limit"})


def apply_job_modified(model: State, f: JobModified) -> None:
    """The new values on each job that still waits with nothing allocated (folds are total: one that
    started since, or is gone, keeps what it had)."""
    changes = {k: v for k, v in f.changes.items() if k in _FIELDS}
    for job_id in f.job_ids:
        job = model.jobs.get(job_id)
        if job is None or job.finished:
            continue  # OBSERVATION: gone, or ended between the decision and this fact
        # a job that left the queue since keeps what its run was given, but for its array's limit
        now = changes if _waiting(job) else {k: v for k, v in changes.items() if k == "array_limit"}
        if not now or (job.array_parent is None and set(now) == {"array_limit"}):
            continue

        def change(job: Job = job, now: dict[str, Any] = now) -> None:
            for key, value in now.items():
                if key != "array_limit" or job.array_parent is not None:  # only an array's elements have one
                    setattr(job, key, value)

        jobs.reindex(model, job, change)
