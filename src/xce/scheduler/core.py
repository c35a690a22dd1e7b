"""``plan = schedule(snapshot)``: queue priority, then FCFS, from an immutable snapshot.

Pure: no I/O, no clock, no waiting; the same snapshot always gives the same plan.

Cost.  Jobs are visited once, highest queue priority first and oldest first
within a queue.  Candidate hosts are filtered once per distinct ``select``
(not once per job), and a *shape* (resource string and slot count) keeps a
cursor into its candidates: free capacity only shrinks during a cycle, so a
host that cannot take a shape now never can later in the same cycle, and a
shape that did not fit at all makes every later job of that shape pending at
O(1).  A cycle therefore costs O(jobs + shapes × candidates), not
O(jobs × hosts).  A job that does not fit never blocks later jobs (no
reservation yet; backfill comes later).

``rusage`` amounts are per slot (as LSF's per-task reservation).
"""

from __future__ import annotations

from dataclasses import dataclass

from xce.scheduler.plan import Allocation, Plan
from xce.scheduler.resreq import ResReq, ResReqError, parse_resreq
from xce.scheduler.snapshot import HostView, Snapshot


@dataclass
class _Shape:
    cursor: int = 0
    exhausted: str | None = None  # the pending reason once this shape cannot fit


class _Cycle:
    def __init__(self, snap: Snapshot) -> None:
        self.hosts = snap.hosts
        self.free_slots = [h.slots_free for h in snap.hosts]
        self.free_ctr = [dict(h.counters_free) for h in snap.hosts]
        self._candidates: dict[tuple[str, tuple], list[int]] = {}
        self.offered = {k for h in snap.hosts for k in h.counters_total}

    def candidates(self, rr: ResReq) -> list[int]:
        key = (rr.select.source, rr.order)
        cands = self._candidates.get(key)
        if cands is None:
            cands = [i for i, h in enumerate(self.hosts) if rr.select.matches(h.attrs, h.counters_free)]
            for name, descending in reversed(rr.order):
                cands.sort(key=lambda i, n=name: _order_value(self.hosts[i], n), reverse=descending)
            self._candidates[key] = cands
        return cands

    def fits(self, i: int, rusage: dict[str, float], want: int) -> int:
        """How many of ``want`` slots host ``i`` can take now, counters included."""
        k = min(self.free_slots[i], want)
        if k <= 0 or not rusage:
            return max(k, 0)
        free = self.free_ctr[i]
        for name, per_slot in rusage.items():
            k = min(k, int(free.get(name, 0.0) // per_slot))
            if k <= 0:
                return 0
        return k

    def take(self, i: int, rusage: dict[str, float], n: int) -> dict[str, float]:
        self.free_slots[i] -= n
        held = {name: per_slot * n for name, per_slot in rusage.items()}
        for name, amount in held.items():
            self.free_ctr[i][name] -= amount
        return held


def _order_value(h: HostView, name: str) -> float:
    if name == "slots":
        return float(h.slots_free)
    if name in h.counters_free:
        return h.counters_free[name]
    try:
        return float(h.attrs[name])
    except (KeyError, ValueError):
        return float("-inf")


def schedule(snap: Snapshot) -> Plan:
    cycle = _Cycle(snap)
    shapes: dict[tuple[str, int], _Shape] = {}
    allocations: list[Allocation] = []
    reasons: dict[int, str] = {}
    for job in sorted(snap.pending, key=lambda j: (-j.priority, j.id)):
        try:
            rr = parse_resreq(job.resreq)
        except ResReqError as e:
            reasons[job.id] = f"bad resource requirement: {e}"
            continue
        shape = shapes.setdefault((job.resreq, job.slots), _Shape())
        if shape.exhausted is not None:
            reasons[job.id] = shape.exhausted
            continue
        placed = _place(cycle, rr, job.slots, shape)
        if isinstance(placed, str):
            shape.exhausted = reasons[job.id] = placed
            continue
        hosts = tuple(cycle.hosts[i].name for i, _ in placed)
        rusage = dict(rr.rusage)
        counters = {}
        slots = {}
        for i, n in placed:
            held = cycle.take(i, rusage, n)
            slots[cycle.hosts[i].name] = n
            if held:
                counters[cycle.hosts[i].name] = held
        allocations.append(Allocation(job_id=job.id, run=job.run, hosts=hosts, slots=slots, counters=counters))
    return Plan(position=snap.position, allocations=tuple(allocations), pending_reasons=reasons)


def _place(cycle: _Cycle, rr: ResReq, want: int, shape: _Shape) -> list[tuple[int, int]] | str:
    """Hosts and slot counts for one job, or the reason it cannot be placed now."""
    if not cycle.hosts:
        return "no hosts are available"
    cands = cycle.candidates(rr)
    if not cands:
        return f"no host matches select[{rr.select.source}]" if rr.select.source else "no hosts are available"
    missing = [n for n in rr.rusage if n not in cycle.offered]
    if missing:
        return f"no host offers counter {', '.join(sorted(missing))}"
    rusage = dict(rr.rusage)
    per_host = want if rr.span_hosts == 1 else (rr.ptile or 0)
    # skip hosts at the cursor that can take nothing of this shape any more
    need_first = min(per_host, want) if per_host else 1
    while shape.cursor < len(cands) and cycle.fits(cands[shape.cursor], rusage, need_first) < need_first:
        shape.cursor += 1
    placed: list[tuple[int, int]] = []
    remaining = want
    for pos in range(shape.cursor, len(cands)):
        i = cands[pos]
        need = min(per_host, remaining) if per_host else remaining
        k = cycle.fits(i, rusage, need)
        if k == 0 or per_host and k < need:
            continue
        placed.append((i, k))
        remaining -= k
        if remaining == 0:
            return placed
    return _shortage(cycle, rr, want, per_host, cands)


def _shortage(cycle: _Cycle, rr: ResReq, want: int, per_host: int, cands: list[int]) -> str:
    """Why ``want`` slots do not fit now: too few slots, or which counters are short.

    Runs once per shape (the shape is then exhausted for the cycle), over every candidate.
    """
    slots_ok = 0  # slots the matching hosts could give if counters did not matter
    short: set[str] = set()
    need = min(per_host, want) if per_host else 1
    for i in cands:
        free = cycle.free_slots[i]
        if free < need:
            continue
        k = need if per_host else min(free, want)
        slots_ok += k
        for name, per_slot in rr.rusage.items():
            if cycle.free_ctr[i].get(name, 0.0) // per_slot < k:
                short.add(name)
    what = ("span[hosts=1]: no single matching host has " if rr.span_hosts == 1 else
            f"span[ptile={rr.ptile}]: not enough matching hosts with " if rr.ptile else
            "matching hosts do not have ")
    plural = "s" if want != 1 else ""
    if slots_ok >= want and short:
        names = ", ".join(n for n in rr.rusage if n in short)
        wanted = ", ".join(f"{n}={v:g}/slot" for n, v in rr.rusage.items() if n in short)
        return f"{what}{want} slot{plural} with enough {names} free ({wanted}); {len(cands)} host(s) match"
    return f"{what}{want} free slot{plural}; {len(cands)} host(s) match"
