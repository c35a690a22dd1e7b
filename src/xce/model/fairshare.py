"""Fair share usage: what each user of each project has used, decayed with a half-life, in the model.

Kept from facts, so it is durable and survives a restart or a failover as the rest of the model
does: a run's hosts are charged when the run lets them go (``JobFinished``, ``JobRequeued``: its
slot-seconds, and the GPU-seconds of the ``gpu`` counter it held), a claim when it is RELEASED (its
byte-seconds, to its owner).  Each project keeps, per user, ``[at, slot_s, gpu_s, claim_byte_s]``:
the amounts decayed to time ``at`` (the latest charge).  Decay halves them every
``Project.usage_half_life`` seconds, which the configuration sets (``[controller] fairshare_half_life``,
recorded by ``ProjectDefined``).  The weights of the parts are applied when usage is read
(``weighted``), so changing them needs no fact.  Who goes first is the scheduler's
(``xce.scheduler.fairshare``).
"""

from __future__ import annotations

from collections.abc import Iterable

from xce.model.entities.catalog import Project
from xce.model.entities.identity import User
from xce.model.entities.jobs import Job
from xce.model.state import State

GPU = "gpu"  # the counter whose seconds are counted as GPU-seconds (until GPUs are devices: issue 33)


def decay(elapsed: float, half_life: float) -> float:
    """The factor an amount shrinks by over ``elapsed`` seconds (1 for none, or for time going back)."""
    return 0.5 ** (elapsed / half_life) if elapsed > 0 else 1.0


def charge(model: State, project: str, user: str, time: float, slot_s: float = 0.0, gpu_s: float = 0.0,
           claim_byte_s: float = 0.0) -> None:
    p = model.projects.get(project)
    if p is None or not (slot_s or gpu_s or claim_byte_s):
        return
    u = p.usage.get(user)
    if u is None:
        p.usage[user] = [time, slot_s, gpu_s, claim_byte_s]
        return
    if time >= u[0]:
        f = decay(time - u[0], p.usage_half_life)
        u[:] = [time, u[1] * f + slot_s, u[2] * f + gpu_s, u[3] * f + claim_byte_s]
    else:  # an earlier end folded later: its amounts decayed to the latest charge
        f = decay(u[0] - time, p.usage_half_life)
        u[1:] = [u[1] + slot_s * f, u[2] + gpu_s * f, u[3] + claim_byte_s * f]


def run_usage(job: Job, until: float) -> tuple[float, float, float] | None:
    """The slot-seconds and GPU-seconds of the job's run from its start to ``until`` (None for a run
    that never started, or a finished job's: charged when it ended)."""
    if job.start_time is None or not job.started:
        return None
    seconds = max(0.0, until - job.start_time)
    gpus = sum(c.get(GPU, 0.0) for c in job.alloc_counters.values())
    return (seconds * job.slots, seconds * gpus, 0.0)


def charge_run(model: State, job: Job, end: float) -> None:
    """The job's run lets its hosts go at ``end``: charged its ``run_usage``."""
    used = run_usage(job, end)
    if used is not None:
        charge(model, job.project, job.user, end, slot_s=used[0], gpu_s=used[1])


def decayed(p: Project, user: str, now: float) -> tuple[float, float, float]:
    """``user``'s slot-seconds, GPU-seconds and claim byte-seconds in project ``p``, decayed to ``now``."""
    u = p.usage.get(user)
    if u is None:
        return (0.0, 0.0, 0.0)
    f = decay(now - u[0], p.usage_half_life)
    return (u[1] * f, u[2] * f, u[3] * f)


def weighted(parts: tuple[float, float, float], slot: float, gpu: float, claim_per_gib: float) -> float:
    """One number for fair share: the parts weighted by the configured factors (claims per GiB-second)."""
    return parts[0] * slot + parts[1] * gpu + parts[2] / 2**30 * claim_per_gib


def members(model: State) -> dict[str, set[str]]:
    """Each project's enabled users: ``xce fairshare`` lists them beside those with usage."""
    found: dict[str, set[str]] = {name: set() for name in model.projects}
    for u in model.users.values():
        for p in u.projects:
            if p in found and not u.disabled:
                found[p].add(u.name)
    return found


def visible_projects(actor: User, projects: Iterable[str]) -> set[str]:
    """Of ``projects``, those whose standings ``actor`` may read: their own (admins: all)."""
    return set(projects) if actor.is_admin else {p for p in projects if p in actor.projects}
