"""Hosts: what each worker offers (slots, L1 attributes, L2 counters) and whether it is usable.

Heartbeats are *not* facts (they would flood the log); the controller keeps
the last heartbeat in memory and records a fact only when a host's state
changes (OK -> UNAVAIL when heartbeats stop, back to OK when it registers).
What a host has reserved is derived from the jobs allocated to it.
"""

from __future__ import annotations

from xce.errors import Conflict, NotFound
from xce.model.entities.claims import ClaimState
from xce.model.entities.hosts import Host, HostState
from xce.model.facts import Fact, HostRegistered, HostRemoved, HostStateChanged
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


def apply_host_removed(model: State, f: HostRemoved) -> None:
    model.hosts.pop(f.name, None)


def remove(model: State, name: str, by: str, now: float) -> list[Fact]:
    """``xce host remove NAME`` (the caller checked the actor is an admin): a host that is gone leaves
    ``xce hosts``.  Refused, saying why, while anything is held or kept there: a worker still
    heartbeating (it would register again at once), jobs allocated to it (running, or pending with
    its slots held: given up only when its fence runs out), or claims whose data lives there (a
    node-local claim's replica, a node-scope claim, an attachment): those go first, or stay."""
    host = model.hosts.get(name)
    if host is None:
        raise NotFound(f"host {name!r} does not exist")
    if host.state is HostState.OK:
        raise Conflict(f"host {name} is up (its worker heartbeats): stop its worker first, or it registers again")
    if host.held_slots or host.held_counters:
        held = ", ".join(sorted(host.held_slots, key=int)[:10])
        raise Conflict(f"host {name} still holds jobs {held}: they are given up when its fence runs out "
                       "(or xce kill them)")
    kept = sorted(
        c.name for c in model.claims.values() if c.state is not ClaimState.RELEASED and (
            c.host == name or c.replica_on(name) is not None or any(a.host == name for a in c.attachments)))
    if kept:
        more = f" and {len(kept) - 10} more" if len(kept) > 10 else ""
        raise Conflict(f"host {name} keeps claims {', '.join(kept[:10])}{more} (a replica, a node-scope claim or "
                       "an attachment): delete or evict them first")
    return [HostRemoved(time=now, name=name, by=by)]
