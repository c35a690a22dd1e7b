"""Hosts: what each worker offers (slots, L1 attributes, L2 counters) and whether it is usable.

Heartbeats are *not* facts (they would flood the log); the controller keeps
the last heartbeat in memory and records a fact only when a host's state
changes (OK -> UNAVAIL when heartbeats stop, back to OK when it registers).
What a host has reserved is derived from the jobs allocated to it.
"""

from __future__ import annotations

from xce.model.entities.hosts import Host, HostState
from xce.model.facts import HostRegistered, HostStateChanged
from xce.model.state import State



def apply_host_registered(model: State, f: HostRegistered) -> None:
    old = model.hosts.get(f.name)
    host = Host(name=f.name, slots=f.slots, attrs=dict(f.attrs), counters=dict(f.counters),
                state=HostState.OK, boot_id=f.boot_id, registered=f.time, gpus=[dict(g) for g in f.gpus])
    if old is not None:  # reservations belong to jobs, not to the worker's process
        host.held_slots = old.held_slots
        host.held_counters = old.held_counters
        host.held_gpus = old.held_gpus
    model.hosts[f.name] = host


def apply_host_state_changed(model: State, f: HostStateChanged) -> None:
    host = model.hosts.get(f.name)
    if host is not None:
        host.state = HostState(f.state)
        host.reason = f.reason
