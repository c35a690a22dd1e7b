"""Hosts: what each worker offers (slots, L1 attributes, L2 counters) and whether it is usable.

Heartbeats are *not* facts (they would flood the log); the controller keeps
the last heartbeat in memory and records a fact only when a host's state
changes (OK -> UNAVAIL when heartbeats stop, back to OK when it registers).
What a host has reserved is derived from the jobs allocated to it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.model.facts import HostRegistered, HostStateChanged

if TYPE_CHECKING:
    from xce.model.state import Model


class HostState(enum.StrEnum):
    OK = "OK"
    UNAVAIL = "UNAVAIL"


@dataclass
class Host:
    name: str
    slots: int
    attrs: dict[str, str] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    state: HostState = HostState.OK
    reason: str = ""
    boot_id: str = ""
    registered: float = 0.0
    # job id -> slots held on this host, and job id -> counters held (kept by the job folds)
    held_slots: dict[str, int] = field(default_factory=dict)
    held_counters: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = HostState(self.state)

    @property
    def slots_used(self) -> int:
        return sum(self.held_slots.values())

    def counters_used(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for held in self.held_counters.values():
            for k, v in held.items():
                used[k] = used.get(k, 0.0) + v
        return used


def apply_host_registered(model: Model, f: HostRegistered) -> None:
    old = model.hosts.get(f.name)
    host = Host(name=f.name, slots=f.slots, attrs=dict(f.attrs), counters=dict(f.counters),
                state=HostState.OK, boot_id=f.boot_id, registered=f.time)
    if old is not None:  # reservations belong to jobs, not to the worker's process
        host.held_slots = old.held_slots
        host.held_counters = old.held_counters
    model.hosts[f.name] = host


def apply_host_state_changed(model: Model, f: HostStateChanged) -> None:
    host = model.hosts.get(f.name)
    if host is not None:
        host.state = HostState(f.state)
        host.reason = f.reason
