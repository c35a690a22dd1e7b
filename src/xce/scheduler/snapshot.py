"""The scheduler's input: an immutable, cached view of what it may plan with.

Built by the controller from the model between commits; the scheduler reads
nothing else.  Hosts carry what is *free* at the snapshot's position.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from xce.model import Model


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    slots_free: int
    attrs: Mapping[str, str]
    counters_total: Mapping[str, float]
    counters_free: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class JobView:
    id: int
    run: int  # the run number the applier will check is still current
    queue: str
    priority: int
    slots: int
    resreq: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    position: int
    hosts: tuple[HostView, ...]
    pending: tuple[JobView, ...]  # PEND jobs without an allocation, any order


def build_snapshot(model: Model) -> Snapshot:
    from xce.model.hosts import HostState
    from xce.model.jobs import JobState

    hosts = []
    for h in model.hosts.values():
        if h.state is not HostState.OK:
            continue
        used = h.counters_used()
        free = {k: v - used.get(k, 0.0) for k, v in h.counters.items()}
        hosts.append(HostView(name=h.name, slots_free=h.slots - h.slots_used,
                              attrs=MappingProxyType(dict(h.attrs)),
                              counters_total=MappingProxyType(dict(h.counters)),
                              counters_free=MappingProxyType(free)))
    hosts.sort(key=lambda h: h.name)
    prio = {q.name: q.priority for q in model.queues.values()}
    pending = tuple(JobView(id=j.id, run=j.run, queue=j.queue, priority=prio.get(j.queue, 0),
                            slots=j.slots, resreq=j.resreq)
                    for j in model.jobs.values() if j.state is JobState.PEND and not j.alloc_slots)
    return Snapshot(position=model.position, hosts=tuple(hosts), pending=pending)
