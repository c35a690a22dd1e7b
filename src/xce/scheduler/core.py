"""``plan = schedule(view)``: queue priority, then ``-sp``, then FCFS or fair share, with backfill, from an
immutable view.

Pure: no I/O, no clock, no waiting; the same view always gives the same plan.

Placement.  Jobs are visited once, in ``order.pending_order``'s order: queue priority first, then
(FCFS) the highest user priority (``-sp``), oldest first among equals, or (fair share) the owner
furthest below its share, each owner's highest ``-sp`` first.  A job's candidate hosts are those
matching its ``select`` (evaluated once per distinct ``select`` against the view), sorted by its
``order``; it takes the first hosts that fit, in that order.  The first ``reservation_depth`` jobs that
do not fit get a reservation, and later jobs take a host only where they delay none (``backfill.py``);
with no reservations a job that does not fit never blocks later ones.  ``rusage`` amounts are per slot
(as LSF's per-task reservation).

Cost.  Free capacity only shrinks during a cycle, so a host that cannot
take something now never can later in the same cycle.  Two things use that:

- a *shape* (resource string, slot count and, with reservations, run limit) keeps a cursor into its
  candidates, past the hosts that cannot take it, and once a shape did not
  fit at all every later job of that shape is pending at O(1); when no reservation stood in the
  way of that walk (``_Shape.held_back``), no run limit can fit that resource string and slot count
  any more, so the shapes of its other run limits are pending at O(1) too (``unplaceable``), and
  the walk that would tell whether it fits with the reservations set aside is not needed (a
  failed walk costs a pass over the hosts still alive for its kind: one per run limit was 3/4 of
  the policy's cost at 100,000 jobs on 10,000 hosts);
- hosts that *no* pending job of a kind (same candidates, same counters)
  can use any more are jumped over by a ``_Skip`` shared by all shapes of
  that kind, so that a new shape does not walk again the hosts earlier
  shapes filled (without it a cycle where most jobs differ in ``-n`` or
  ``rusage`` amounts costs O(jobs × hosts)).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from xce.model.claims import AccessMode, ClaimState
from xce.jobspec_gpu import GPU_RUSAGE, GpuRequest
from xce.scheduler.backfill import INF, Reservations, reserved_reason
from xce.scheduler.caches import CacheFills
from xce.scheduler.claims import place_claims, place_replicas, reserve_resizes
from xce.scheduler.devices import Devices
from xce.scheduler.order import pending_order
from xce.scheduler.plan import Allocation, Plan
from xce.scheduler.preemption import Victims
from xce.resreq import ResReq, ResReqError, parse_resreq
from xce.scheduler.view import ClusterView, HostView, JobView
from xce.units import format_size


@dataclass
class _Shape:
    cursor: int = 0
    exhausted: str | None = None  # the pending reason once this shape cannot fit
    # a reservation gave it less than a host had free on some host its walks met: whether it fits with
    # the reservations set aside is then a walk of its own (else it does not: the same walk, the same hosts)
    held_back: bool = False
    # (what the cycle could plan with, the reason) when its last job got no reservation: the next one
    # gets none either until a reservation, a run placed with a run limit or an eviction changes that.
    # Without it, while no run on its hosts had a limit, each of an array's thousand pending elements
    # planned anew, every cycle
    unreserved: tuple[tuple[int, int], str] | None = None


class _Skip:
    """Positions in one candidate list whose host no job of one kind can use any more this cycle.

    The kind is the set of counters its jobs reserve: a host is *dead* for it when
    it has no free slot, or less of one of those counters free than the smallest
    per-slot amount any pending job asks for (so ``fits`` gives 0 to every such
    job).  A host is checked when a walk finds it cannot take the job at hand
    (``passed``); a dead host stays dead, so ``next`` jumps over runs of them
    with path compression: amortized near O(1) per call.
    """

    def __init__(self, cycle: _Cycle, cands: list[int], counters: tuple[str, ...]) -> None:
        self.cycle, self.cands = cycle, cands
        self.least = [(name, cycle.least_rusage[name]) for name in counters]
        # nxt[p] == p: not known to be dead; hosts full from the start are (on a busy cluster, most)
        free = cycle.free_slots
        self.nxt = [p if free[i] > 0 else p + 1 for p, i in enumerate(cands)]
        self.nxt.append(len(cands))

    def passed(self, pos: int) -> None:
        """The walk could not use the host at ``pos``: remember it if nothing of this kind can."""
        i = self.cands[pos]
        if self.cycle.free_slots[i] > 0:
            free = self.cycle.free_ctr[i]
            for name, least in self.least:
                if free.get(name, 0.0) < least:
                    break
            else:
                return
        self.nxt[pos] = pos + 1

    def next(self, pos: int) -> int:
        """The first position >= ``pos`` not known to be dead (``len(cands)`` if none)."""
        nxt = self.nxt
        root = pos
        while nxt[root] != root:
            root = nxt[root]
        while pos < root:  # path compression
            nxt[pos], pos = root, nxt[pos]
        return root


_ANY_LIMIT = -1.0  # a shape's key before any reservation: every run limit alike (None is "no limit")
_NONE: dict[str, float] = {}  # (read only) no cluster counters needed
_NO_POOLS: dict[str, str] = {}  # (read only) no shared template claims
_Order = tuple[tuple[str, bool], ...]  # a resreq's order[] section: (name, descending) each


class _Cycle:
    def __init__(self, view: ClusterView, least_rusage: dict[str, float], resv: Reservations) -> None:
        self.hosts = view.hosts
        self.resv = resv
        self.victims = Victims(view.hosts, view.running, view.policy.preemptable) if view.policy.preemptable \
            else None
        self.shadow = resv.shadow  # per host: the earliest reservation's start (inf: none)
        self.free_slots = [h.slots_free for h in view.hosts]
        self.idle = [h.idle for h in view.hosts]  # nothing held on it, nor taken this cycle (-x may go there)
        self.free_ctr = [dict(h.counters_free) for h in view.hosts]
        self.offered = {k for h in view.hosts for k in h.counters_total}
        self.least_rusage = least_rusage  # counter -> smallest per-slot amount a pending job asks for
        self.devices = Devices(view.hosts)  # GPUs: xce.scheduler.devices
        self._candidates: dict[tuple[str, _Order], list[int]] = {}
        self._skips: dict[tuple[str, _Order, tuple[str, ...]], _Skip] = {}
        self._walks: dict[int, tuple[list[int], dict[str, float], _Skip] | str] = {}  # id(resreq) -> _walk's
        self.shortages: dict[tuple[int, int], str] = {}  # (resreq parsed, slots) -> why it does not fit

    def candidates(self, rr: ResReq) -> list[int]:
        key = (rr.select.source, rr.order)
        cands = self._candidates.get(key)
        if cands is None:
            cands = [i for i, h in enumerate(self.hosts) if rr.select.matches(h.attrs, h.counters_free)]
            for name, descending in reversed(rr.order):  # sorted at once: the key's name is this one
                cands.sort(key=lambda i: _order_value(self.hosts[i], name), reverse=descending)
            self._candidates[key] = cands
        return cands

    def skip(self, rr: ResReq, counters: tuple[str, ...]) -> _Skip:
        key = (rr.select.source, rr.order, counters)
        skip = self._skips.get(key)
        if skip is None:
            skip = self._skips[key] = _Skip(self, self.candidates(rr), counters)
        return skip

    def walk(self, rr: ResReq) -> tuple[list[int], dict[str, float], _Skip] | str:
        """What a walk for ``rr`` needs (its candidates, its counters per slot, its kind's skip), or why
        no host can take it at all: once per resource requirement a cycle, not once per placement."""
        walk = self._walks.get(id(rr))
        if walk is None:
            walk = self._walks[id(rr)] = self._walk(rr)
        return walk

    def _walk(self, rr: ResReq) -> tuple[list[int], dict[str, float], _Skip] | str:
        if not self.hosts:
            return "no hosts are available"
        cands = self.candidates(rr)
        if not cands:
            return f"no host matches select[{rr.select.source}]" if rr.select.source else "no hosts are available"
        missing = [n for n in rr.rusage if n not in self.offered]
        if missing:
            return f"no host offers counter {', '.join(sorted(missing))}"
        rusage = dict(rr.rusage)
        return cands, rusage, self.skip(rr, tuple(sorted(rusage)))

    def fits(self, i: int, rusage: dict[str, float], want: int, end: float = -INF,
             gpu: GpuRequest | None = None) -> int:
        """How many of ``want`` slots host ``i`` can take now, counters included (and ``gpu``: its GPUs,
        per host: none if it has too few free), for a job that is over by ``end`` (a later end may not
        take what a reservation holds)."""
        k = min(self.free_slots[i], want)
        if gpu is not None and k > 0:
            if gpu.any_idle:  # (the common request, without a call)
                if len(self.devices.idle[i]) < gpu.num:
                    return 0
            elif not self.devices.fits(i, gpu):
                return 0
        if k > 0 and rusage:
            free = self.free_ctr[i]
            for name, per_slot in rusage.items():
                k = min(k, int(free.get(name, 0.0) // per_slot))
                if k <= 0:
                    return 0
        if k > 0 and end > self.shadow[i]:
            return self.resv.limit(i, end, k, rusage, gpu, self.devices.idle[i])
        return max(k, 0)

    def take(self, i: int, rusage: dict[str, float], n: int, end: float,
             gpu: GpuRequest | None = None) -> tuple[dict[str, float], tuple[int, ...]]:
        """Take ``n`` slots of host ``i``, their counters and (``gpu``) GPUs outside those a reservation
        holds if the job ends after it: what it holds, and its GPUs."""
        self.idle[i] = False
        self.free_slots[i] -= n
        held = {name: per_slot * n for name, per_slot in rusage.items()}
        for name, amount in held.items():
            self.free_ctr[i][name] -= amount
        gpus = tuple(self.devices.take(i, gpu, self.resv.avoid_gpus(i, end))) if gpu is not None else ()
        self.resv.took(i, end, n, held, gpus)
        return held, gpus


def _order_value(h: HostView, name: str) -> float:
    if name == "slots":
        return float(h.slots_free)
    if name in h.counters_free:
        return h.counters_free[name]
    try:
        return float(h.attrs[name])
    except (KeyError, ValueError):
        return float("-inf")


def schedule(view: ClusterView) -> Plan:
    parsed: dict[str, ResReq | ResReqError] = {}
    cluster_rusage: dict[str, dict[str, float]] = {}  # resreq -> its cluster-scope part, per slot
    least_rusage: dict[str, float] = {}
    for job in view.pending:
        if job.resreq not in parsed:
            try:
                host_rr = parse_resreq(job.resreq)
            except ResReqError as e:
                parsed[job.resreq] = e
                continue
            if GPU_RUSAGE in host_rr.rusage:  # GPUs are devices, asked for in JobView.gpu (xce.jobspec_gpu)
                host_rr = dataclasses.replace(host_rr, rusage=MappingProxyType(
                    {n: v for n, v in host_rr.rusage.items() if n != GPU_RUSAGE}))
            if any(name in view.cluster_free for name in host_rr.rusage):  # hosts see only their own counters
                cluster_rusage[job.resreq] = {n: v for n, v in host_rr.rusage.items() if n in view.cluster_free}
                host_rr = dataclasses.replace(host_rr, rusage=MappingProxyType(
                    {n: v for n, v in host_rr.rusage.items() if n not in view.cluster_free}))
            parsed[job.resreq] = host_rr
            for name, per_slot in host_rr.rusage.items():
                least_rusage[name] = min(per_slot, least_rusage.get(name, per_slot))
    resv = Reservations(view.hosts, view.policy.reservation_depth, view.now)
    cycle = _Cycle(view, least_rusage, resv)
    cluster_free = dict(view.cluster_free)
    pool_free = {p.name: p.free for p in view.pools}
    claimed = _Claimed()
    fills = CacheFills(view.evictable, view.cache_quotas)
    shapes: dict[tuple[object, int, float | None], _Shape] = {}
    # (kind, slots) -> why a shape of it fits nowhere, whatever its run limit: its first walk that failed
    # with no reservation in its way (free capacity only shrinks, so every later walk would fail too)
    unplaceable: dict[tuple[object, int], str] = {}
    allocations: list[Allocation] = []
    reasons: dict[int, str] = {}
    order = pending_order(view)
    now = view.now
    for job in order:
        rr = parsed[job.resreq]
        end = INF if job.run_limit is None else now + job.run_limit
        if isinstance(rr, ResReqError):
            reasons[job.id] = f"bad resource requirement: {rr}"
            continue
        cluster_per_slot = cluster_rusage.get(job.resreq)
        cluster_need = {n: v * job.slots for n, v in cluster_per_slot.items()} if cluster_per_slot else _NONE
        if cluster_need:
            short = [n for n, v in cluster_need.items() if cluster_free.get(n, 0.0) < v]
            if short:
                reasons[job.id] = "; ".join(f"cluster resource {n}: {max(cluster_free.get(n, 0.0), 0):g} free, "
                                            f"{cluster_need[n]:g} needed" for n in short)
                continue
        pools = _pick_pools(job, pool_free) if job.pool_needs else _NO_POOLS
        if isinstance(pools, str):
            reasons[job.id] = pools
            continue
        if job.claims or job.node_counters or job.exclusive or job.avoid:  # constraints of its own: no shape
            made = len(fills.evictions)
            where = _claim_hosts(cycle, rr, job, claimed)
            placed = _place_with_claims(cycle, rr, job, claimed, end, fills, where)
            if isinstance(placed, str):  # a cache of its may start a replica where it can go
                if resv.made:
                    placed = _held_back(cycle, placed, end, rr, _place_with_claims(cycle, rr, job, claimed, -INF,
                                                                                   where=where), job.gpu)
                why = fills.consider(cycle, cycle.candidates(rr), dict(rr.rusage), job, placed)
                if why == placed and len(fills.evictions) == made and not isinstance(where, str) and \
                        (resv.room or cycle.victims is not None):  # nothing made room for it: victims, a reservation
                    why = _reserve(cycle, rr, job, why, cluster_need, pools, where)
                reasons[job.id] = why
                continue
        else:
            kind = job.resreq if job.gpu is None else (job.resreq, job.gpu.key)  # what its shape is of
            shape = shapes.get((kind, job.slots, job.run_limit if resv.made else _ANY_LIMIT)) or \
                _new_shape(shapes, kind, job, resv)
            if shape.exhausted is not None:
                if not resv.room and cycle.victims is None:
                    reasons[job.id] = shape.exhausted
                elif cycle.victims is None and shape.unreserved is not None and \
                        shape.unreserved[0] == (resv.changes, len(fills.evictions)):
                    reasons[job.id] = shape.unreserved[1]  # (the same shape, nothing new to plan with)
                else:
                    reasons[job.id] = _reserve_shape(cycle, rr, job, shape, shape.exhausted, cluster_need, pools,
                                                     len(fills.evictions))
                continue
            spent = unplaceable.get((kind, job.slots))
            placed = spent if spent is not None else _place(cycle, rr, job.slots, shape, end, job.gpu)
            if isinstance(placed, str):
                if spent is None and not shape.held_back:  # no reservation in its way: no run limit fits
                    unplaceable[(kind, job.slots)] = placed
                if job.gpu is not None:
                    placed = _gpu_shortage(cycle, rr, job.gpu, placed)
                if spent is None and shape.held_back:  # would it fit with the reservations set aside?
                    # (what could not take its shape before any reservation still cannot)
                    base = shapes.get((kind, job.slots, _ANY_LIMIT))
                    unreserved = _place(cycle, rr, job.slots, _Shape(cursor=base.cursor if base else 0), -INF,
                                        job.gpu)
                    placed = _held_back(cycle, placed, end, rr, unreserved, job.gpu)
                shape.exhausted = placed
                reasons[job.id] = _reserve_shape(cycle, rr, job, shape, placed, cluster_need, pools,
                                                 len(fills.evictions))
                continue
        hosts = tuple(cycle.hosts[i].name for i, _ in placed)
        rusage = dict(rr.rusage)
        counters: dict[str, dict[str, float]] = {}
        slots: dict[str, int] = {}
        gpus: dict[str, tuple[int, ...]] = {}
        for i, taken in placed:
            held, devices = cycle.take(i, rusage, taken, end, job.gpu)
            slots[cycle.hosts[i].name] = taken
            if job.gpu is not None:
                gpus[cycle.hosts[i].name] = devices
            if held:
                counters[cycle.hosts[i].name] = held
        if job.node_counters:  # template claims live on the first host
            first = placed[0][0]
            held = counters.setdefault(hosts[0], {})
            for name, amount in job.node_counters.items():
                cycle.free_ctr[first][name] = cycle.free_ctr[first].get(name, 0.0) - amount
                held[name] = held.get(name, 0.0) + amount
            resv.took(first, end, 0, job.node_counters)
        if job.exclusive:  # its hosts run nothing else
            for i, _ in placed:
                cycle.free_slots[i] = 0
        claimed.took(job, hosts)
        fills.placed(job, hosts)
        order.placed(job)
        for n, v in cluster_need.items():
            cluster_free[n] -= v
        for kind, pool in pools.items():
            pool_free[pool] -= next(size for k, _, size in job.pool_needs if k == kind)
        allocations.append(Allocation(job_id=job.id, run=job.run, hosts=hosts, slots=slots, counters=counters,
                                      cluster=dict(cluster_need), pools=dict(pools), gpus=gpus))
    resizes, resize_reasons = reserve_resizes(view, pool_free)  # what this cycle's allocations left
    placements, claim_reasons = place_claims(view, pool_free)  # ... and the resizes
    replicas, replica_reasons = place_replicas(view, {h.name: cycle.free_ctr[i] for i, h in enumerate(cycle.hosts)},
                                               fills)
    replicas += tuple(fills.placements)
    return Plan(position=view.position, allocations=tuple(allocations), pending_reasons=reasons,
                placements=placements, claim_reasons={**claim_reasons, **replica_reasons}, resizes=resizes,
                resize_reasons=resize_reasons, replicas=replicas, evictions=tuple(fills.evictions),
                reservations=tuple(resv.made),
                preemptions=tuple(cycle.victims.made) if cycle.victims is not None else (),
                room_left=any(n > 0 for n in cycle.free_slots))


def _new_shape(shapes: dict[tuple[object, int, float | None], _Shape], kind: object, job: JobView,
               resv: Reservations) -> _Shape:
    """A job's shape, the first time it is met.  Before any reservation the run limit does not matter
    (one shape for all); after, a shape per run limit, starting where the shape was when the first
    reservation was made (what could not take it then cannot take it under a reservation either)."""
    if not resv.made:
        shape = shapes[(kind, job.slots, _ANY_LIMIT)] = _Shape()
        return shape
    base = shapes.get((kind, job.slots, _ANY_LIMIT))
    shape = shapes[(kind, job.slots, job.run_limit)] = \
        _Shape(cursor=base.cursor, exhausted=base.exhausted) if base is not None else _Shape()
    return shape


def _held_back(cycle: _Cycle, why: str, end: float, rr: ResReq, unreserved: list[tuple[int, int]] | str,
               gpu: GpuRequest | None) -> str:
    """Why a job that did not fit waits: a reservation it would delay, if it fits what is free now
    (``unreserved``: its placement with the reservations set aside, else why it does not fit either)."""
    if isinstance(unreserved, str):
        return why
    return cycle.resv.blocking(unreserved, end, rr.rusage, gpu, cycle.devices.idle) or why


def _reserve_shape(cycle: _Cycle, rr: ResReq, job: JobView, shape: _Shape, why: str,
                   cluster_need: dict[str, float], pools: dict[str, str], evictions: int) -> str:
    """``_reserve`` for a job of ``shape``, noting on the shape when it got no reservation (with what
    the cycle planned with then: ``evictions`` so far, which give counters back)."""
    made = len(cycle.resv.made)
    reason = _reserve(cycle, rr, job, why, cluster_need, pools)
    if len(cycle.resv.made) == made and cycle.victims is None:
        shape.unreserved = ((cycle.resv.changes, evictions), reason)
    return reason


def _reserve(cycle: _Cycle, rr: ResReq, job: JobView, why: str, cluster_need: dict[str, float],
             pools: dict[str, str], where: _ClaimHosts | None = None) -> str:
    """Victims for a job of a preemptive queue that does not fit now (``preemption.py``), else a
    reservation while the cycle has room for one; its reason.  Neither for a job with cluster or pool
    counters (not planned in time: such a job is placed around reservations) or GPUs other than the
    common request (``GpuRequest.any_idle``).  A job with constraints of its own (``where``: its
    candidate hosts, ``_claim_hosts``) has them on those hosts only, its template claims' host counters
    freed or held on the first host with its slots; a reservation only on one host (its template claims'
    counters are planned for that host), and none for -x."""
    resv = cycle.resv
    if cluster_need or pools or (job.gpu is not None and not job.gpu.any_idle):
        return why
    node: Mapping[str, float] = _NONE
    if where is None:
        cands = cycle.candidates(rr)
        if not cands or any(n not in cycle.offered for n in rr.rusage):
            return why
        per_host = job.slots if rr.span_hosts == 1 else (rr.ptile or 0)
    else:
        cands, node = where.cands, job.node_counters
        per_host = job.slots if where.single or job.slots == 1 else (rr.ptile or 0)
    if cycle.victims is not None and job.gpu is None:  # a preemptive queue's job has runs ended for it rather than wait
        said = cycle.victims.choose(job, cands, cycle.free_slots, cycle.free_ctr, rr.rusage, per_host, node)
        if said is not None:
            return said
    if not resv.room or why.startswith("would delay") or job.exclusive or (node and per_host != job.slots):
        return why
    r = resv.reserve(job.id, cands, cycle.free_slots, cycle.free_ctr, rr.rusage, job.slots, per_host, job.gpu,
                     cycle.devices.idle, node)
    if r is None:
        return why
    return f"{why}; {r}" if isinstance(r, str) else reserved_reason(r, resv.now, why)


def _place(cycle: _Cycle, rr: ResReq, want: int, shape: _Shape, end: float,
           gpu: GpuRequest | None = None) -> list[tuple[int, int]] | str:
    """Hosts and slot counts for one job (with ``gpu``: GPUs free on each), or the reason it cannot be
    placed now."""
    walk = cycle.walk(rr)
    if isinstance(walk, str):
        return walk
    cands, rusage, skip = walk
    per_host = want if rr.span_hosts == 1 else (rr.ptile or 0)
    # move the cursor past the hosts that can take nothing of this shape any more
    need_first = min(per_host, want) if per_host else 1
    shadow = cycle.shadow
    pos = skip.next(shape.cursor)
    while pos < len(cands):
        i = cands[pos]
        k = cycle.fits(i, rusage, need_first, end, gpu)
        if k >= need_first:
            break
        if end > shadow[i] and not shape.held_back:  # (a few hosts: those reserved for)
            shape.held_back = cycle.fits(i, rusage, need_first, -INF, gpu) >= need_first
        skip.passed(pos)
        pos = skip.next(pos + 1)
    shape.cursor = pos
    placed: list[tuple[int, int]] = []
    remaining = want
    while pos < len(cands):
        i = cands[pos]
        need = min(per_host, remaining) if per_host else remaining
        k = cycle.fits(i, rusage, need, end, gpu)
        if end > shadow[i] and not shape.held_back:
            free = cycle.fits(i, rusage, need, -INF, gpu)
            shape.held_back = free >= need > k if per_host else free != k
        if k > 0 and not (per_host and k < need):
            placed.append((i, k))
            remaining -= k
            if remaining == 0:
                return placed
        else:
            skip.passed(pos)
        pos = skip.next(pos + 1)
    key = (id(rr), want)  # one reason per resource requirement and size: a shape per run limit shares it
    why = cycle.shortages.get(key)
    if why is None:
        why = cycle.shortages[key] = _shortage(cycle, rr, want, per_host, cands)
    return why


def _gpu_shortage(cycle: _Cycle, rr: ResReq, gpu: GpuRequest, why: str) -> str:
    """Why a GPU job does not fit (once per shape: the shape is then exhausted for the cycle): its GPUs
    when no matching host has them free, else ``why`` (slots or counters), saying how many hosts do."""
    cands = cycle.candidates(rr) if cycle.hosts else []
    if not cands:  # no host matches its select[] at all: that first
        return why
    free = sum(1 for i in cands if cycle.devices.fits(i, gpu))
    if not free:
        return cycle.devices.reason(cands, gpu)
    return f"{why} (with {gpu.num} GPU{'s' if gpu.num != 1 else ''} free: {free} of them)"


def _pick_pools(job: JobView, pool_free: dict[str, int]) -> dict[str, str] | str:
    """A pool with room for each of the job's shared template claims (all or none), or why not."""
    taken: dict[str, int] = {}
    out: dict[str, str] = {}
    for kind, pools, size in job.pool_needs:
        fits = [p for p in pools if pool_free.get(p, 0) - taken.get(p, 0) >= size]
        if pools and not fits:
            room = ", ".join(f"{p} has {format_size(max(pool_free.get(p, 0) - taken.get(p, 0), 0))} free"
                             for p in pools)
            return f"no pool has room for its {kind} claim ({format_size(size)}): {room}"
        if fits:
            out[kind] = max(fits, key=lambda p: (pool_free[p] - taken.get(p, 0), p))
            taken[out[kind]] = taken.get(out[kind], 0) + size
    return out


class _Claimed:
    """Standalone claims taken by jobs placed earlier in this cycle (RWOP: the job; RWO: the host)."""

    def __init__(self) -> None:
        self.rwop: dict[int, int] = {}
        self.rwo: dict[int, str] = {}

    def took(self, job: JobView, hosts: tuple[str, ...]) -> None:
        for use in job.claims:
            if use.access_mode == AccessMode.RWOP:
                self.rwop[use.claim_id] = job.id
            elif use.access_mode == AccessMode.RWO:
                self.rwo.setdefault(use.claim_id, hosts[0])


@dataclass
class _ClaimHosts:
    """The hosts a job with constraints of its own may go to, in its ``order``, and why no others."""

    cands: list[int]
    restricted: str  # its claims' and -x/avoided hosts' restrictions ("" if none)
    single: bool  # on one host (span[hosts=1], or an RWO/RWOP claim)


def _claim_hosts(cycle: _Cycle, rr: ResReq, job: JobView, claimed: _Claimed) -> _ClaimHosts | str:
    """The candidate hosts of a job with claims, template claims' host counters, -x or avoided hosts:
    those every claim can follow to, none it must avoid, only idle ones for -x; or why there are none
    (a claim not READY, an RWOP claim held, no host offering a counter, none matching).  What it returns
    is what ending other runs cannot change: placement (``_place_with_claims``) and preemption and
    reservations (``_reserve``) all walk these hosts.

    Standalone claims: READY, reachable from the host, RWOP held by no other job, RWO kept on the
    host its other users are on (and the job on one host)."""
    allowed: set[str] | None = None
    single = rr.span_hosts == 1
    why_restricted = []
    for use in job.claims:
        if use.state != ClaimState.READY:
            return f"waiting for claim {use.name} ({use.state}" + (f": {use.waiting})" if use.waiting else ")")
        if use.access_mode == AccessMode.RWOP:
            holder = use.holder_jobs[0] if use.holder_jobs else claimed.rwop.get(use.claim_id)
            if holder is not None:
                return f"claim {use.name} (RWOP) in use by job {holder}"
            single = True
        if use.access_mode == AccessMode.RWO:
            single = True
            on = set(use.attached_hosts) | ({claimed.rwo[use.claim_id]} if use.claim_id in claimed.rwo else set())
            if on:
                allowed = on if allowed is None else allowed & on
                why_restricted.append(f"claim {use.name} (RWO) is in use on {', '.join(sorted(on))}")
        if use.reachable is not None:
            allowed = set(use.reachable) if allowed is None else allowed & use.reachable
            hosts = ', '.join(sorted(use.reachable)) or 'no host'
            lost = f" (LOST with {', '.join(sorted(use.lost))})" if use.lost else ""
            why_restricted.append(f"claim {use.name}: replicas READY on {hosts}{lost}" if use.replicated else
                                  f"claim {use.name} is reachable only from {hosts}")
    missing = [n for n in list(rr.rusage) + list(job.node_counters) if n not in cycle.offered]
    if missing:
        return f"no host offers counter {', '.join(sorted(set(missing)))}"
    cands = [i for i in cycle.candidates(rr) if allowed is None or cycle.hosts[i].name in allowed]
    if job.avoid:
        kept = [i for i in cands if cycle.hosts[i].name not in job.avoid]
        if len(kept) < len(cands):
            why_restricted.append(f"not on {', '.join(sorted(job.avoid))} (its earlier run there failed)")
        cands = kept
    if job.exclusive:
        cands = [i for i in cands if cycle.idle[i]]
        if not cands:
            return "exclusive (-x): no matching host is idle (every one runs other jobs)"
    restricted = "; ".join(why_restricted)
    if not cands:
        return (f"{restricted}: no such host matches" if restricted else
                f"no host matches select[{rr.select.source}]" if rr.select.source else "no hosts are available")
    return _ClaimHosts(cands, restricted, single)


def _place_with_claims(cycle: _Cycle, rr: ResReq, job: JobView, claimed: _Claimed,
                       end: float, fills: CacheFills | None = None,
                       where: _ClaimHosts | str | None = None) -> list[tuple[int, int]] | str:
    """Placement for a job with constraints of its own: on its candidate hosts (``_claim_hosts``, or
    ``where`` if already computed), all or nothing.

    Template claims: their host counters (``scratch``) free on the first host (outside what a
    reservation holds there if the job runs past it); with ``fills``, where no host has them free,
    caches' unused replicas are evicted to make room (``CacheFills.make_scratch_room``).
    """
    if where is None:
        where = _claim_hosts(cycle, rr, job, claimed)
    if isinstance(where, str):
        return where
    cands, restricted, single = where.cands, where.restricted, where.single
    rusage = dict(rr.rusage)
    want = job.slots
    per_host = want if single else (rr.ptile or 0)

    def node_room(i: int, end: float = -INF) -> bool:
        free = cycle.free_ctr[i]
        return all(free.get(name, 0.0) >= amount for name, amount in job.node_counters.items()) and \
            cycle.resv.node_fits(i, end, job.node_counters)

    placed: list[tuple[int, int]] = []
    remaining = want
    for i in cands:
        need = min(per_host, remaining) if per_host else remaining
        if not placed and not node_room(i, end):
            continue
        k = cycle.fits(i, rusage, need, end, job.gpu)
        if k > 0 and not (per_host and k < need):
            placed.append((i, k))
            remaining -= k
            if remaining == 0:
                return placed
    if job.gpu is not None and not any(cycle.devices.fits(i, job.gpu) for i in cands):
        return (f"{restricted}: " if restricted else "") + cycle.devices.reason(cands, job.gpu)
    if job.node_counters and not any(node_room(i) for i in cands):
        room = ", ".join(f"{format_size(v)} {n}" for n, v in job.node_counters.items())
        evicting = fills.make_scratch_room(cycle, cands, job, rusage) if fills is not None else None
        return f"no matching host has {room} free for its template claims" + \
            (f"; {evicting}" if evicting else f"; {len(cands)} host(s) match")
    if job.node_counters and not any(node_room(i, end) for i in cands):
        return next(cycle.resv.delayed(i) for i in cands if node_room(i) and not node_room(i, end))
    if restricted and all(cycle.free_slots[i] <= 0 for i in cands):  # where its claims are, every slot is taken
        return f"{restricted}; " + ("full" if len(cands) == 1 else "both full" if len(cands) == 2 else
                                    f"all {len(cands)} full")
    prefix = f"{restricted}: " if restricted else ""
    one = " on one host (its claims need one)" if single and rr.span_hosts != 1 else ""
    plural = "s" if want != 1 else ""
    if rusage and sum(min(cycle.free_slots[i], per_host or want) for i in cands) >= want:
        wanted = ", ".join(f"{n}={v:g}/slot" for n, v in rusage.items())
        return f"{prefix}matching hosts do not have {want} slot{plural}{one} with enough counters free ({wanted})"
    return f"{prefix}matching hosts do not have {want} free slot{plural}{one}; {len(cands)} host(s) match"


def _shortage(cycle: _Cycle, rr: ResReq, want: int, per_host: int, cands: list[int]) -> str:
    """Why ``want`` slots do not fit now: too few slots, or which counters are short.

    Runs once per shape (the shape is then exhausted for the cycle), over the
    candidates that still have a free slot.
    """
    slots_ok = 0  # slots the matching hosts could give if counters did not matter
    short: set[str] = set()
    need = min(per_host, want) if per_host else 1
    with_slots = cycle.skip(rr, ())
    pos = with_slots.next(0)
    while pos < len(cands):
        i = cands[pos]
        free = cycle.free_slots[i]
        if free <= 0:
            with_slots.passed(pos)
        elif free >= need:
            k = need if per_host else min(free, want)
            slots_ok += k
            for name, per_slot in rr.rusage.items():
                if cycle.free_ctr[i].get(name, 0.0) // per_slot < k:
                    short.add(name)
        pos = with_slots.next(pos + 1)
    what = ("span[hosts=1]: no single matching host has " if rr.span_hosts == 1 else
            f"span[ptile={rr.ptile}]: not enough matching hosts with " if rr.ptile else
            "matching hosts do not have ")
    plural = "s" if want != 1 else ""
    if slots_ok >= want and short:
        names = ", ".join(n for n in rr.rusage if n in short)
        wanted = ", ".join(f"{n}={v:g}/slot" for n, v in rr.rusage.items() if n in short)
        return f"{what}{want} slot{plural} with enough {names} free ({wanted}); {len(cands)} host(s) match"
    return f"{what}{want} free slot{plural}; {len(cands)} host(s) match"
