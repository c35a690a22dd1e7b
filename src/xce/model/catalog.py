"""Queues and projects: the named containers jobs are submitted into, defined by config."""

from __future__ import annotations

from xce.model.entities.catalog import Project, Queue
from xce.model.fairshare import decay
from xce.model.facts import Fact, ProjectDefined, ProjectRemoved, QueueDefined
from xce.model.state import State
from xce.names import check_name



def define_queue(model: State, name: str, priority: int, description: str, now: float) -> list[Fact]:
    check_name("queue", name)
    q = model.queues.get(name)
    if q is not None and (q.priority, q.description) == (priority, description):
        return []
    return [QueueDefined(time=now, name=name, priority=priority, description=description)]


def define_project(model: State, name: str, description: str, now: float,
                   usage_half_life: float | None = None) -> list[Fact]:
    check_name("project", name)
    p = model.projects.get(name)
    if p is not None and p.description == description and usage_half_life in (None, p.usage_half_life):
        return []
    return [ProjectDefined(time=now, name=name, description=description, usage_half_life=usage_half_life)]


def apply_queue_defined(model: State, f: QueueDefined) -> None:
    model.queues[f.name] = Queue(name=f.name, priority=f.priority, description=f.description)


def apply_project_defined(model: State, f: ProjectDefined) -> None:
    """Defined, or defined again: its fair share usage stays (decayed at the old half-life until now)."""
    old = model.projects.get(f.name)
    p = model.projects[f.name] = Project(name=f.name, description=f.description)
    if old is not None:
        p.usage_half_life, p.usage = old.usage_half_life, old.usage
        if f.usage_half_life is not None and f.usage_half_life != old.usage_half_life:
            for user, u in p.usage.items():  # (fairshare.decayed, at the old half-life, to this fact)
                factor = decay(f.time - u[0], old.usage_half_life)
                p.usage[user] = [max(f.time, u[0]), u[1] * factor, u[2] * factor, u[3] * factor]
    if f.usage_half_life is not None:
        p.usage_half_life = f.usage_half_life


def remove_project(model: State, name: str, now: float) -> list[Fact]:
    return [ProjectRemoved(time=now, name=name)] if name in model.projects else []


def apply_project_removed(model: State, f: ProjectRemoved) -> None:
    model.projects.pop(f.name, None)
