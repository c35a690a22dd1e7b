"""Reservations for the top pending jobs that do not fit, and what lower jobs may take around them.

EASY backfill by default (``[controller] reservation_depth = 1``, as Maui's ``RESERVATIONDEPTH``);
a deeper ``reservation_depth`` gives that many jobs a reservation, for behaviour closer to
conservative backfill; 0 turns reservations off (greedy: a stream of small jobs may starve a wide one).

A reservation is planned from the runs holding the job's candidate hosts: each gives its slots and
counters back at its expected end (``HostView.releases``: its start plus its ``-We`` estimate, else its
run limit); the start is the first such end at which the job fits on what is free then.  Runs
without a run limit give nothing back the scheduler can count on.  The reservation then *holds* on
its hosts what the job will need, from its start on (with no end: a later reservation never counts
on an earlier one's hosts coming back, which keeps the rule one comparison per host).

Per host ``i``:

- ``shadow[i]``: the earliest start of a reservation on it (``inf``: none);
- ``spare[i]``: what it has at and after every reservation's start beyond what the reservations hold
  (slots, and each counter): what runs still going then may use.

A job ending by ``shadow[i]`` (now plus its run limit) may take what host ``i`` has free now; a
job that ends later, or has no run limit, only up to ``spare[i]``, which it then uses up.

GPUs are planned as devices, the way slots are: a run holding GPUs exclusively gives its devices back
at its expected end (``HostView.gpu_releases``), and a reserved GPU job holds the devices it will
need (``held_gpus[i]``: those not free now first, so that what is idle now stays usable) from its
start; a later-ending job may take a host's idle GPUs only outside them.  Only the common GPU request
(exclusive, any model and memory: ``GpuRequest.any_idle``) gets a reservation; a job asking shared
GPUs, a model or memory is placed around reservations, and not at all on a host whose GPUs one holds
if it would run past it.  A job on one host whose template claims take host counters (``JobView.node_counters``, ``--scratch``)
is planned for when its host has those counters back too, and holds them with its slots.  The
applier re-checks only capacity, as for every allocation: a reservation is the scheduler's word,
made again every cycle, never a fact.
"""

from __future__ import annotations

import heapq
import time
from typing import Mapping, Sequence

from xce.jobspec_gpu import GpuRequest
from xce.scheduler.plan import JobReservation
from xce.scheduler.view import HostView

INF = float("inf")
_NONE: Mapping[str, float] = {}  # (read only) no counters


def clock(t: float, now: float) -> str:
    """``14:05`` (local time), with the day when it is not today's."""
    when = time.localtime(t)
    return time.strftime("%H:%M" if time.localtime(now)[:3] == when[:3] else "%b %d %H:%M", when)


class Reservations:
    """The reservations made in one cycle, and what each host keeps for them."""

    def __init__(self, hosts: tuple[HostView, ...], depth: int, now: float) -> None:
        self.hosts = hosts
        self.depth = depth
        self.now = now
        n = len(hosts)
        self.shadow = [INF] * n
        self.spare_slots = [0] * n
        self.spare_ctr: list[dict[str, float]] = [{} for _ in range(n)] if depth else []
        self.first: dict[int, tuple[int, float]] = {}  # host -> (job, start) of its earliest reservation
        self.held_slots: dict[int, int] = {}
        self.held_ctr: dict[int, dict[str, float]] = {}
        self.added: dict[int, list[tuple[float, int, Mapping[str, float]]]] = {}  # runs placed this cycle
        self.added_gpus: dict[int, list[tuple[float, tuple[int, ...]]]] = {}  # ... and the GPUs they hold
        self.held_gpus: dict[int, set[int]] = {}  # host -> the GPUs its reservations hold from their start
        self.made: list[JobReservation] = []
        self.room = depth > 0  # more jobs may get a reservation this cycle
        # how often what a reservation is planned with changed this cycle (one made; a run placed with a
        # run limit): a job that got none gets none again while it is the same (``_Shape.unreserved``)
        self.changes = 0


    def end_of(self, run_limit: float | None) -> float:
        """When a job started now is over at the latest (``inf``: it has no run limit)."""
        return self.now + run_limit if run_limit is not None else INF

    def limit(self, i: int, end: float, k: int, rusage: Mapping[str, float], gpu: GpuRequest | None = None,
              idle: Sequence[int] = ()) -> int:
        """How many of ``k`` slots host ``i`` may give a job that ends at ``end`` without delaying a
        reservation (``k`` already fits what the host has free now; with ``gpu``, its GPUs among the
        host's ``idle`` ones)."""
        if end <= self.shadow[i]:
            return k
        if gpu is not None and not self.gpus_fit(i, gpu, idle):
            return 0
        k = min(k, self.spare_slots[i])
        if k > 0 and rusage:
            spare = self.spare_ctr[i]
            for name, per_slot in rusage.items():
                k = min(k, int(spare.get(name, 0.0) // per_slot))
        return max(k, 0)

    def gpus_fit(self, i: int, gpu: GpuRequest, idle: Sequence[int]) -> bool:
        """Whether a job running past host ``i``'s reservations finds its GPUs outside those they hold."""
        held = self.held_gpus.get(i)
        if not held:
            return True
        if not gpu.any_idle:  # (shared, or a model or memory asked: kept off a host whose GPUs are reserved)
            return False
        return sum(1 for d in idle if d not in held) >= gpu.num

    def avoid_gpus(self, i: int, end: float) -> frozenset[int]:
        """The GPUs of host ``i`` a job ending at ``end`` must not take (those a reservation holds)."""
        return frozenset(self.held_gpus.get(i, ())) if end > self.shadow[i] else frozenset()

    def took(self, i: int, end: float, n: int, held: Mapping[str, float], gpus: tuple[int, ...] = ()) -> None:
        """A job ending at ``end`` took ``n`` slots, ``held`` and the GPUs ``gpus`` of host ``i`` now."""
        if not self.depth:
            return
        if end < INF:
            self.changes += 1
        if gpus and end < INF:
            self.added_gpus.setdefault(i, []).append((end, gpus))
        if end > self.shadow[i]:
            self.spare_slots[i] -= n
            spare = self.spare_ctr[i]
            for name, amount in held.items():
                spare[name] = spare.get(name, 0.0) - amount
        if end < INF:
            self.added.setdefault(i, []).append((end, n, held))

    def node_fits(self, i: int, end: float, node: Mapping[str, float]) -> bool:
        """Whether a job ending at ``end`` may take ``node`` (its template claims' counters) on host ``i``
        without delaying a reservation (they already fit what the host has free now)."""
        if end <= self.shadow[i] or not node:
            return True
        spare = self.spare_ctr[i]
        return all(spare.get(name, 0.0) >= amount for name, amount in node.items())

    def delayed(self, i: int) -> str:
        """Why a job is held back from host ``i``: the first reservation there."""
        job_id, start = self.first[i]
        return f"would delay job {job_id}'s reservation at {clock(start, self.now)} on {self.hosts[i].name}"

    def blocking(self, placed: list[tuple[int, int]], end: float, rusage: Mapping[str, float],
                 gpu: GpuRequest | None = None, idle: Sequence[Sequence[int]] = ()) -> str | None:
        """Why a placement that fits what is free now is held back: the first reservation it would delay."""
        for i, k in placed:
            if self.limit(i, end, k, rusage, gpu, idle[i] if gpu is not None else ()) < k:
                return self.delayed(i)
        return None

    def reserve(self, job_id: int, cands: list[int], free_slots: list[int], free_ctr: list[dict[str, float]],
                rusage: Mapping[str, float], want: int, per_host: int, gpu: GpuRequest | None = None,
                idle: Sequence[Sequence[int]] = (), node: Mapping[str, float] = _NONE,
                ) -> JobReservation | str | None:
        """Plan job ``job_id`` at the first expected end of a run after which ``want`` slots fit its
        candidate hosts ``cands`` (what the hosts have free now, less what earlier reservations hold,
        plus what the runs there give back by then); hold them.  Else why not (their runs' limits never
        free enough), or None when no run there has a limit to plan with.  With ``gpu`` (an ``any_idle``
        request), each host must also have ``gpu.num`` GPUs by then: ``idle`` now (per host) and not
        held by an earlier reservation, or given back by the runs holding them.  With ``node`` (a job on
        one host: ``per_host == want``), the host must also have those counters (its template claims')
        by then, and holds them too.

        Cost: one pass over the candidates for what fits now (no copy of a host's counters unless an
        earlier reservation holds some of them), then the runs' ends taken from a heap, earliest first,
        only until the job fits (a host's counters are copied once one of its runs ends): at 10,000
        candidates, sorting every end and copying every host's counters was most of a reservation's
        cost, and a wide job usually fits after a few ends."""
        need = min(per_host, want) if per_host else 0

        gpus: dict[int, set[int]] = {}  # host -> the GPUs it has for the job by the time being planned

        def fit(slots: int, ctr: Mapping[str, float], i: int) -> int:
            if gpu is not None and len(gpus[i]) < gpu.num:
                return 0
            k = min(slots, want)
            for name, per_slot in rusage.items():
                k = min(k, int(ctr.get(name, 0.0) // per_slot))
            for name, amount in node.items():
                if ctr.get(name, 0.0) < amount:
                    return 0
            if per_host:
                return need if k >= need else 0
            return max(k, 0)

        avail_slots: dict[int, int] = {}
        avail_ctr: dict[int, Mapping[str, float]] = {}  # a host's own copy once a run of it ends
        contrib: dict[int, int] = {}
        # (end, seq, host, slots, counters, GPUs)
        events: list[tuple[float, int, int, int, Mapping[str, float], tuple[int, ...]]] = []
        for i in cands:
            held = self.held_ctr.get(i)
            avail_slots[i] = free_slots[i] - self.held_slots.get(i, 0)
            avail_ctr[i] = {name: v - held.get(name, 0.0) for name, v in free_ctr[i].items()} if held else free_ctr[i]
            if gpu is not None:
                gpus[i] = set(idle[i]).difference(self.held_gpus.get(i, ()))
            contrib[i] = fit(avail_slots[i], avail_ctr[i], i)
            for end, n, ctr in self.hosts[i].releases:
                events.append((end, len(events), i, n, ctr, ()))
            for end, n, ctr in self.added.get(i, ()):
                events.append((end, len(events), i, n, ctr, ()))
            if gpu is not None:
                for end, ids in self.hosts[i].gpu_releases:
                    events.append((end, len(events), i, 0, _NONE, ids))
                for end, ids in self.added_gpus.get(i, ()):
                    events.append((end, len(events), i, 0, _NONE, ids))
        total = sum(contrib.values())
        start = self.now
        if total < want and not events:
            return None  # nothing in its way has a run limit: no time to plan with
        if total < want:
            heapq.heapify(events)  # (seq: equal ends in the candidates' order, as a stable sort gives them)
            grown: dict[int, dict[str, float]] = {}  # hosts whose counters a run's end gave back to
            while events:
                end, _, i, n, ctr, ids = heapq.heappop(events)
                avail_slots[i] += n
                if ids:
                    gpus[i].update(ids)
                got = grown.get(i)
                if got is None:
                    got = grown[i] = dict(avail_ctr[i])
                    avail_ctr[i] = got
                for name, amount in ctr.items():
                    got[name] = got.get(name, 0.0) + amount
                k = fit(avail_slots[i], got, i)
                total += k - contrib[i]
                contrib[i] = k
                if total >= want:
                    start = max(end, self.now)
                    break
            else:
                return "no planned start: too few of its hosts are expected to free up (runs without a run " \
                       "limit are not counted on)"
        slots: dict[str, int] = {}
        remaining = want
        for i in cands:
            if remaining == 0:
                break
            k = min(contrib[i], remaining, per_host or remaining)
            if k <= 0:
                continue
            remaining -= k
            slots[self.hosts[i].name] = k
            self._hold(i, k, rusage, avail_slots[i], avail_ctr[i], job_id, start, node)
            if gpu is not None:  # the devices given back by then first: what is idle now stays usable
                chosen = sorted(gpus[i], key=lambda d: (d in idle[i], d))[:gpu.num]
                self.held_gpus.setdefault(i, set()).update(chosen)
        reservation = JobReservation(job_id=job_id, start=start, slots=slots)
        self.made.append(reservation)
        self.changes += 1
        self.room = len(self.made) < self.depth
        return reservation

    def _hold(self, i: int, k: int, rusage: Mapping[str, float], avail_slots: int, avail_ctr: Mapping[str, float],
              job_id: int, start: float, node: Mapping[str, float] = _NONE) -> None:
        self.held_slots[i] = self.held_slots.get(i, 0) + k
        held = self.held_ctr.setdefault(i, {})
        take = {name: per_slot * k for name, per_slot in rusage.items()}
        for name, amount in node.items():
            take[name] = take.get(name, 0.0) + amount
        for name, amount in take.items():
            held[name] = held.get(name, 0.0) + amount
        left_slots = avail_slots - k  # what the host has at the start beyond every hold
        left_ctr = {name: v - take.get(name, 0.0) for name, v in avail_ctr.items()}
        if self.shadow[i] == INF:
            self.spare_slots[i], self.spare_ctr[i] = left_slots, left_ctr
        else:  # what an earlier reservation left is now shared with this one's hold
            self.spare_slots[i] = min(self.spare_slots[i] - k, left_slots)
            spare = self.spare_ctr[i]
            for name in set(spare) | set(left_ctr):
                spare[name] = min(spare.get(name, 0.0) - take.get(name, 0.0), left_ctr.get(name, 0.0))
        if start < self.shadow[i]:
            self.shadow[i] = start
            self.first[i] = (job_id, start)


def reserved_reason(r: JobReservation, now: float, why: str) -> str:
    """What ``xce job why`` says of a job with a reservation: its planned start and hosts, and why not now."""
    hosts = ", ".join(f"{h}" + (f" ({n} slots)" if n != 1 else "") for h, n in r.slots.items())
    return f"planned start {clock(r.start, now)} on {hosts} (reserved; lower jobs backfill only around it); now: {why}"
