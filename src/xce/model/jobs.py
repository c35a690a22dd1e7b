"""Jobs: the one module that owns a job's states and transitions.

States follow LSF: PEND (waiting), PSUSP (held by its owner or an admin), RUN,
DONE (exit 0), EXIT (anything else).  Only the folds below change a job.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xce.errors import Forbidden, InvalidRequest, NotFound
from xce.model.facts import Fact, JobSubmitted
from xce.model.names import check_name

if TYPE_CHECKING:
    from xce.model.identity import User
    from xce.model.state import Model

MAX_COMMAND_ARGS = 4096
MAX_COMMAND_BYTES = 128 * 1024
MAX_SLOTS = 1_000_000


class JobState(enum.StrEnum):
    PEND = "PEND"
    PSUSP = "PSUSP"
    RUN = "RUN"
    DONE = "DONE"
    EXIT = "EXIT"


@dataclass
class Job:
    id: int
    name: str
    user: str
    project: str
    queue: str
    command: list[str]
    submit_time: float
    state: JobState = JobState.PEND
    slots: int = 1
    resreq: str = ""
    cwd: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    rerunnable: bool = False
    pending_reason: str | None = None
    exit_code: int | None = None
    hosts: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = JobState(self.state)


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


def _check_path(what: str, value: str | None) -> None:
    if value is None:
        return
    if not value or "\0" in value or len(value) > 4096:
        raise InvalidRequest(f"invalid {what} path")
    if what == "cwd" and not os.path.isabs(value):
        raise InvalidRequest(f"--cwd must be an absolute path, got {value!r}")


def submit(model: Model, actor: User, spec: JobSpec, now: float) -> tuple[list[Fact], int]:
    if not spec.command:
        raise InvalidRequest("a job needs a command: xce submit [options] -- CMD ARGS...")
    if len(spec.command) > MAX_COMMAND_ARGS or sum(len(a) for a in spec.command) > MAX_COMMAND_BYTES:
        raise InvalidRequest("command too long")
    if any("\0" in a for a in spec.command) or spec.command[0] == "":
        raise InvalidRequest("command arguments must be non-empty strings without NUL")
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
    name = spec.name if spec.name is not None else os.path.basename(spec.command[0])[:63] or "job"
    if spec.name is not None:
        check_name("job", name)
    for what, value in (("cwd", spec.cwd), ("stdout", spec.stdout), ("stderr", spec.stderr)):
        _check_path(what, value)
    if len(spec.resreq) > 4096:
        raise InvalidRequest("resource requirement string too long")
    job_id = model.next_job_id
    return [JobSubmitted(
        time=now, id=job_id, name=name, user=actor.name, project=project, queue=queue,
        command=list(spec.command), slots=spec.slots, resreq=spec.resreq, cwd=spec.cwd,
        stdout=spec.stdout, stderr=spec.stderr, rerunnable=spec.rerunnable, held=spec.held,
    )], job_id


def visible_job(model: Model, actor: User, job_id: int) -> Job:
    """The job if ``actor`` may see it; unknown and foreign jobs look the same (404)."""
    job = model.jobs.get(job_id)
    if job is None or not (actor.is_admin or job.user == actor.name):
        raise NotFound(f"job {job_id} not found")
    return job


# ---------------------------------------------------------------- folds


def apply_job_submitted(model: Model, f: JobSubmitted) -> None:
    model.jobs[f.id] = Job(
        id=f.id, name=f.name, user=f.user, project=f.project, queue=f.queue,
        command=list(f.command), submit_time=f.time,
        state=JobState.PSUSP if f.held else JobState.PEND,
        slots=f.slots, resreq=f.resreq, cwd=f.cwd, stdout=f.stdout, stderr=f.stderr,
        rerunnable=f.rerunnable,
        pending_reason="held by user" if f.held else "waiting for scheduling",
    )
    model.next_job_id = max(model.next_job_id, f.id + 1)
