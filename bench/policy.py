"""Backfill and fair share in simulated time: a synthetic trace replayed through the real scheduler.

    python bench/policy.py [--jobs 20000] [--hosts 128] [--load 1.6] [--seed 1]

The trace: ``--jobs`` jobs of mixed sizes (1-8 slots on one host, 16-64 slots as whole 8-slot hosts,
``span[ptile=8]``) and run limits (10 minutes to 4 hours, LSF's ``-W`` in minutes; each job runs a
whole number of minutes up to its limit), from three projects with equal demand and shares 2:1:1,
arriving as a Poisson stream that offers ``--load`` times what the cluster can do (so every project
asks for more than its share, and a backlog is always there to backfill from).

Replayed twice on ``--hosts`` hosts of 8 slots, in simulated time with a cycle at every minute at
which a job arrives or ends:

- through ``xce.scheduler.core.schedule``, with a view built as the controller builds it (hosts with
  their runs' expected ends, pending jobs with their run limits, the first ``--depth`` of each user of
  each project as ``queue_depth`` does under fair share), ``reservation_depth = 1`` and fair share
  (usage in slot-seconds, halving every ``--half-life``, the runs going now included), and the
  previous cycle's reservations kept (``Policy.reserved``);
- through a reference EASY backfill written here (Lifka's: first come first served; the head job
  that does not fit gets the earliest start the running jobs' limits allow, on the hosts it would get
  then; a later job starts now if it fits and ends by then, or fits in what the head job leaves),
  looking at as many of the oldest pending jobs as ours sees in all.

It prints, over the window from 10% of the arrivals to the last one (always saturated):
utilization of each (and ours over the reference's, goal >= 0.95); each project's part of the
slot-seconds against its share (goal: within 10% of it, relative); reserved jobs, and how many
started later than their first reservation (goal: none).  The scheduler's wall time per cycle is
printed too, never asserted.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import os
import random
import sys
import time
from dataclasses import dataclass
from types import MappingProxyType

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

from xce.scheduler.core import schedule  # noqa: E402
from xce.scheduler.view import ClusterView, FairShare, HostView, JobView, Policy  # noqa: E402

SLOTS = 8  # per host
SIZES = ((1, 30), (2, 15), (4, 15), (8, 15), (16, 10), (32, 10), (64, 5))  # slots, weight
LIMITS = (10, 30, 60, 120, 240)  # minutes
PROJECTS = (("a", 2.0), ("b", 1.0), ("c", 1.0))  # name, shares
USERS = ("u1", "u2")
TICK = 60.0  # every time in the trace is a whole minute
EMPTY = MappingProxyType({})


@dataclass
class Job:
    id: int
    arrival: float
    slots: int
    limit: float  # seconds
    runtime: float  # seconds, <= limit
    project: str
    user: str
    start: float | None = None
    end: float | None = None

    @property
    def resreq(self) -> str:
        return "span[hosts=1]" if self.slots <= SLOTS else f"span[ptile={SLOTS}]"


def trace(n: int, hosts: int, load: float, seed: int) -> list[Job]:
    rnd = random.Random(seed)
    sizes = [s for s, w in SIZES for _ in range(w)]
    jobs = []
    for i in range(n):
        limit = rnd.choice(LIMITS)
        jobs.append(Job(id=i + 1, arrival=0.0, slots=rnd.choice(sizes), limit=limit * 60.0,
                        runtime=rnd.randint(1, limit) * 60.0, project=rnd.choice(PROJECTS)[0],
                        user=rnd.choice(USERS)))
    work = sum(j.slots * j.runtime for j in jobs) / n
    gap = work / (hosts * SLOTS * load)  # mean seconds between arrivals
    t = 0.0
    for j in jobs:
        t += rnd.expovariate(1.0 / gap)
        j.arrival = -(-t // TICK) * TICK  # the next whole minute
    return jobs


class Sim:
    """Hosts, the runs on them, the backlog; ``cycle(now)`` is the scheduler under test."""

    def __init__(self, jobs: list[Job], hosts: int) -> None:
        self.jobs = {j.id: j for j in jobs}
        self.arrivals = sorted(jobs, key=lambda j: (j.arrival, j.id))
        self.free = [SLOTS] * hosts
        self.runs: dict[int, dict[int, int]] = {}  # job -> host -> slots
        self.ends: list[tuple[float, int]] = []
        self.pending: dict[int, Job] = {}  # by id (insertion: arrival order)

    def start(self, job: Job, now: float, slots: dict[int, int]) -> None:
        for h, n in slots.items():
            self.free[h] -= n
            assert self.free[h] >= 0, "overcommitted"
        self.runs[job.id] = slots
        job.start, job.end = now, now + job.runtime
        heapq.heappush(self.ends, (job.end, job.id))
        del self.pending[job.id]

    def run(self, until: float, cycle) -> tuple[float, float]:
        """Replay until the last arrival (``until``); the scheduler's total wall and CPU time."""
        spent = cpu = 0.0
        i = 0
        while True:
            nxt = min(self.arrivals[i].arrival if i < len(self.arrivals) else float("inf"),
                      self.ends[0][0] if self.ends else float("inf"))
            if nxt > until:
                return spent, cpu
            while self.ends and self.ends[0][0] <= nxt:
                _, job_id = heapq.heappop(self.ends)
                for h, n in self.runs.pop(job_id).items():
                    self.free[h] += n
                self.ended(self.jobs[job_id])
            while i < len(self.arrivals) and self.arrivals[i].arrival <= nxt:
                self.pending[self.arrivals[i].id] = self.arrivals[i]
                i += 1
            t0, c0 = time.perf_counter(), time.process_time()
            cycle(nxt)
            spent += time.perf_counter() - t0
            cpu += time.process_time() - c0

    def ended(self, job: Job) -> None:
        pass


class Ours(Sim):
    """The real scheduler, fed as the controller feeds it."""

    def __init__(self, jobs: list[Job], hosts: int, depth: int, half_life: float) -> None:
        super().__init__(jobs, hosts)
        self.depth, self.half_life = depth, half_life
        self.names = [f"h{h:03d}" for h in range(hosts)]
        self.index = {name: h for h, name in enumerate(self.names)}
        self.views = {j.id: JobView(id=j.id, run=0, queue="normal", priority=30, slots=j.slots, resreq=j.resreq,
                                    run_limit=j.limit, project=j.project, user=j.user) for j in jobs}
        self.usage: dict[tuple[str, str], tuple[float, float]] = {}  # (project, user) -> (at, slot-seconds)
        self.reserved: frozenset[int] = frozenset()
        self.first_reservation: dict[int, float] = {}
        self.cycles = 0

    def ended(self, job: Job) -> None:
        assert job.start is not None and job.end is not None
        key = (job.project, job.user)
        at, used = self.usage.get(key, (job.end, 0.0))
        self.usage[key] = (job.end, used * 0.5 ** ((job.end - at) / self.half_life) + job.runtime * job.slots)

    def fairshare(self, now: float) -> FairShare:
        usage = {k: used * 0.5 ** ((now - at) / self.half_life) for k, (at, used) in self.usage.items()}
        running: dict[tuple[str, str], int] = {}
        for job_id in self.runs:
            j = self.jobs[job_id]
            key = (j.project, j.user)
            running[key] = running.get(key, 0) + j.slots
            usage[key] = usage.get(key, 0.0) + (now - (j.start or now)) * j.slots
        return FairShare(project_shares=MappingProxyType(dict(PROJECTS)), user_shares=EMPTY,
                         usage=MappingProxyType(usage), running=MappingProxyType(running))

    def cycle(self, now: float) -> None:
        releases: list[list[tuple[float, int, MappingProxyType]]] = [[] for _ in self.free]
        for job_id, slots in self.runs.items():
            j = self.jobs[job_id]
            for h, n in slots.items():
                releases[h].append((max((j.start or now) + j.limit, now), n, EMPTY))
        hosts = tuple(HostView(name=name, slots_free=self.free[h], attrs=EMPTY, counters_total=EMPTY,
                               counters_free=EMPTY, releases=tuple(releases[h])) for h, name in enumerate(self.names))
        count: dict[tuple[str, str], int] = {}
        pending = []
        for j in self.pending.values():  # the first ``depth`` of each owner, as queue_depth under fair share
            key = (j.project, j.user)
            count[key] = count.get(key, 0) + 1
            if count[key] <= self.depth:
                pending.append(self.views[j.id])
        view = ClusterView(position=self.cycles, hosts=hosts, pending=tuple(pending), now=now,
                           policy=Policy(reservation_depth=1, fairshare=self.fairshare(now), reserved=self.reserved))
        plan = schedule(view)
        self.cycles += 1
        for a in plan.allocations:
            self.start(self.jobs[a.job_id], now, {self.index[h]: n for h, n in a.slots.items()})
        for r in plan.reservations:
            self.first_reservation.setdefault(r.job_id, r.start)
        self.reserved = frozenset(r.job_id for r in plan.reservations)


class ReferenceEasy(Sim):
    """EASY backfill (Lifka), first come first served, on the same hosts."""

    def place(self, job: Job, cap: list[float]) -> dict[int, int] | None:
        if job.slots <= SLOTS:
            h = next((h for h, c in enumerate(cap) if c >= job.slots), None)
            return None if h is None else {h: job.slots}
        whole = [h for h, c in enumerate(cap) if c >= SLOTS][:job.slots // SLOTS]
        return {h: SLOTS for h in whole} if len(whole) == job.slots // SLOTS else None

    def __init__(self, jobs: list[Job], hosts: int, lookahead: int) -> None:
        super().__init__(jobs, hosts)
        self.lookahead = lookahead

    def cycle(self, now: float) -> None:
        queue = list(itertools.islice(self.pending.values(), self.lookahead))  # as many as ours sees
        k = 0
        while k < len(queue):  # the head starts while it fits
            slots = self.place(queue[k], list(self.free))
            if slots is None:
                break
            self.start(queue[k], now, slots)
            k += 1
        if k == len(queue):
            return
        head = queue[k]
        # the shadow: the head job's earliest start, from the running jobs' limits
        free_then: list[float] = list(self.free)
        shadow, at = None, None
        for end, job_id in sorted(((self.jobs[j].start or now) + self.jobs[j].limit, j) for j in self.runs):
            for h, n in self.runs[job_id].items():
                free_then[h] += n
            at = self.place(head, free_then)
            if at is not None:
                shadow = max(end, now)
                break
        extra = [float("inf")] * len(self.free)  # what the head job leaves at the shadow, on its hosts
        if at is not None:
            for h, n in at.items():
                extra[h] = free_then[h] - n
        for job in queue[k + 1:]:
            ends_first = shadow is None or now + job.limit <= shadow
            cap = list(self.free) if ends_first else [min(f, e) for f, e in zip(self.free, extra)]
            slots = self.place(job, cap)
            if slots is None:
                continue
            if not ends_first:
                for h, n in slots.items():
                    extra[h] -= n
            self.start(job, now, slots)


def window_stats(jobs: list[Job], lo: float, hi: float, capacity: int) -> tuple[float, dict[str, float]]:
    """Utilization over [lo, hi) and each project's part of the slot-seconds in it."""
    by_project = {p: 0.0 for p, _ in PROJECTS}
    for j in jobs:
        if j.start is None or j.end is None:
            continue
        overlap = max(0.0, min(j.end, hi) - max(j.start, lo))
        by_project[j.project] += overlap * j.slots
    total = sum(by_project.values())
    return total / (capacity * (hi - lo)), {p: v / total for p, v in by_project.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--hosts", type=int, default=128)
    ap.add_argument("--load", type=float, default=1.6, help="offered load, times the cluster's capacity")
    ap.add_argument("--depth", type=int, default=100, help="pending jobs of each owner a cycle sees (the "
                    "reference sees as many in all, oldest first)")
    ap.add_argument("--half-life", type=float, default=6 * 3600.0, help="fair share usage's, simulated seconds")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    runs = {}
    for name in ("ours", "reference"):
        jobs = trace(args.jobs, args.hosts, args.load, args.seed)
        sim = Ours(jobs, args.hosts, args.depth, args.half_life) if name == "ours" else \
            ReferenceEasy(jobs, args.hosts, args.depth * len(PROJECTS) * len(USERS))
        last = max(j.arrival for j in jobs)
        spent = sim.run(last, sim.cycle)
        runs[name] = (jobs, sim, spent)
    jobs, ours, (spent, cpu) = runs["ours"]
    assert isinstance(ours, Ours)
    last = max(j.arrival for j in jobs)
    lo, hi = 0.1 * last, last
    capacity = args.hosts * SLOTS
    util, parts = window_stats(jobs, lo, hi, capacity)
    ref_util, ref_parts = window_stats(runs["reference"][0], lo, hi, capacity)
    shares = {p: s / sum(s for _, s in PROJECTS) for p, s in PROJECTS}
    error = max(abs(parts[p] - shares[p]) / shares[p] for p in shares)
    ref_error = max(abs(ref_parts[p] - shares[p]) / shares[p] for p in shares)
    late = {j: (self_start - first) for j, first in ours.first_reservation.items()
            if (self_start := ours.jobs[j].start) is not None and self_start > first + 1e-6}
    reserved_started = sum(1 for j in ours.first_reservation if ours.jobs[j].start is not None)
    started = sum(1 for j in jobs if j.start is not None)

    print(f"trace: {args.jobs:,} jobs (sizes {', '.join(str(s) for s, _ in SIZES)} slots; limits "
          f"{', '.join(str(m) for m in LIMITS)} min), offered load {args.load}, on {args.hosts} hosts x {SLOTS} "
          f"slots; projects {', '.join(f'{p}={s:g}' for p, s in PROJECTS)} with equal demand; seed {args.seed}")
    print(f"window: {lo / 3600:.1f} h to {hi / 3600:.1f} h of simulated time (10% of the arrivals to the last)\n")
    print(f"utilization: ours {util:.4f}, reference EASY {ref_util:.4f}: ratio {util / ref_util:.4f} "
          f"(goal >= 0.95: {'met' if util / ref_util >= 0.95 else 'NOT met'})")
    print("fair share (part of the slot-seconds / share): " +
          ", ".join(f"{p} {parts[p]:.3f}/{shares[p]:.3f}" for p in shares) +
          f"; largest error {error:.1%} (goal <= 10%: {'met' if error <= 0.10 else 'NOT met'}); "
          f"the FCFS reference's {ref_error:.1%}")
    print(f"reservations: {len(ours.first_reservation)} jobs reserved for, {reserved_started} of them started; "
          f"{len(late)} started later than their first reservation (goal 0: {'met' if not late else 'NOT met'})"
          + (f", by up to {max(late.values()):.0f} s" if late else ""))
    print(f"scheduler: {ours.cycles:,} cycles (each with building its view), {spent:.1f} s wall, {cpu:.1f} s CPU: "
          f"{cpu / ours.cycles * 1e3:.2f} ms CPU per cycle; {started:,} jobs started by the last arrival; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
