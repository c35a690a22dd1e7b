"""The view builder: the model, read between commits, as the scheduler's immutable ``ClusterView``.

The scheduler (``xce.scheduler``) plans from the view types only; this is the
one place that knows both the model and those types.
"""

from __future__ import annotations

import heapq
import time
from types import MappingProxyType
from typing import Iterator, Mapping

from xce.config import Config
from xce.controller.observed import Observed
from xce.model import Model
from xce.model import capabilities, fairshare
from xce.model.claims import AccessMode, ClaimState, Mode, ReplicaState, ResizeState, Scope, quota_left
from xce.model.entities.hosts import Host
from xce.model.hosts import HostState
from xce.model.identity import hosts_locked_out
from xce.model.job_claims import early_claim, node_counters, pool_needs
from xce.model.jobs import Job, JobState, held_exclusively
from xce.jobspec_gpu import GpuRequest
from xce.model.entities.hosts import Host
from xce.scheduler.view import (
    CachedReplica, CacheUse, ClaimUse, QuotaRoom, ClaimView, ClusterView, FairShare, GpuView, HostView, JobView, Policy,
    PoolView, ReplicaView, ResizeView, RunningView,
)

MAKING = (ReplicaState.PENDING, ReplicaState.PREPARING)  # a replica being placed, made or filled


class JobViews:
    """The pending jobs' views, kept from one cluster view to the next (one per scheduling loop).

    A cycle used to build a ``JobView`` for every pending job: 45-80 ms of the event loop with
    10,000 pending (``bench/history.py``'s backlog), during which no request was answered.  A view
    changes only with the job's run, queue (and that queue's priority), slots or resource
    requirement, or the claims it uses.  So the view of a job that uses no claim is kept while the
    same job object has the same values of those; a job that uses claims gets a new view every time
    (its claims' states move without the job changing).
    """

    def __init__(self) -> None:
        self._kept: dict[int, tuple[Job, tuple[int, str, int, int, str, int], JobView]] = {}
        self.eligible = 0  # pending jobs the last call could have planned (dependencies and array limits allowing)

    def pending(self, model: Model, prio: dict[str, int], depth: int | None = None,
                now: float | None = None, per_owner: bool = False) -> tuple[JobView, ...]:
        """The views of the first ``depth`` pending jobs in the scheduler's order (all: None; with
        ``per_owner``, fair share's: the first ``depth`` of each user of each project) that may start
        at ``now`` (None: whatever their begin time)."""
        kept, self._kept = self._kept, {}
        views = []
        ids, self.eligible = first_pending(model, prio, depth, now, per_owner)
        for j in map(model.jobs.__getitem__, ids):
            key = (j.run, j.queue, prio.get(j.queue, 0), j.slots, j.resreq, j.user_priority)
            hit = kept.get(j.id)
            # only views of jobs that use no claim are kept, and what makes a job use one is fixed at
            # its submission (its references, its templates); the early claim it may get comes from those
            if hit is not None and hit[0] is j and hit[1] == key:
                view = hit[2]
            else:
                view = _job_view(model, j, prio)
                if view.claims:  # it uses claims (_uses_claims): built again next time
                    views.append(view)
                    continue
            self._kept[j.id] = (j, key, view)
            views.append(view)
        return tuple(views)


def first_pending(model: Model, prio: dict[str, int], depth: int | None,
                  now: float | None = None, per_owner: bool = False) -> tuple[list[int], int]:
    """The ids of the first ``depth`` pending jobs in the order the scheduler takes them (highest
    queue priority, then highest ``-sp``, then oldest), or of all of them (None); in id order; and how
    many could be planned, at any depth.  Jobs whose dependency does not hold are not planned
    (``xce.model.dependencies``), nor those whose begin time (``-b``) is after ``now``, nor the elements
    of a limited array (``NAME[1-100]%5``) beyond what its limit leaves room for (its lowest pending
    indices go first)."""
    waiting = model.dependency_blocked.keys()
    if model.begin_waiting and now is not None:
        waiting = waiting | {i for i, at in model.begin_waiting.items() if at > now}
    ids = sorted(model.pending_jobs.difference(waiting) if waiting else model.pending_jobs)
    ids = _within_array_limits(model, ids)
    if depth is None or len(ids) <= depth:
        return ids, len(ids)
    if per_owner:  # fair share orders within a queue by owner: each one's oldest, not the queue's
        jobs = model.jobs
        count: dict[tuple[str, str, int], int] = {}
        out = []
        for i in ids:
            j = jobs[i]
            key = (j.project, j.user, prio.get(j.queue, 0))
            n = count[key] = count.get(key, 0) + 1
            if n <= depth:
                out.append(i)
        return out, len(ids)
    # one priority for every queue (queues are never removed) and one -sp for every pending job: oldest first
    if len(set(prio.values())) <= 1 and len(model.pending_priorities) <= 1:
        return ids[:depth], len(ids)
    jobs = model.jobs
    return sorted(heapq.nsmallest(depth, ids, key=lambda i: (-prio.get(jobs[i].queue, 0), -jobs[i].user_priority,
                                                             i))), len(ids)


def _within_array_limits(model: Model, ids: list[int]) -> list[int]:
    """``ids`` (ascending) without the elements of limited arrays beyond the room their limit leaves."""
    jobs = model.jobs
    room: dict[int, int] = {}
    out = []
    for i in ids:
        job = jobs[i]
        if job.array_limit is not None and job.array_parent is not None:
            parent = job.array_parent
            left = room.get(parent)
            if left is None:
                left = job.array_limit - len(model.array_busy.get(parent, ()))
            room[parent] = left - 1
            if left <= 0:
                continue
        out.append(i)
    return out


def _uses_claims(j: Job) -> bool:
    return bool(j.claim_refs) or j.early_claim is not None or any(t.get("early") for t in j.templates)


def _job_view(model: Model, j: Job, prio: dict[str, int]) -> JobView:
    return JobView(id=j.id, run=j.run, queue=j.queue, priority=prio.get(j.queue, 0), slots=j.slots,
                   resreq=j.resreq, run_limit=j.run_limit, project=j.project, user=j.user, claims=_claim_uses(model, j) if _uses_claims(j) else (),
                   node_counters=MappingProxyType(node_counters(j.templates)) if j.templates else
                   MappingProxyType({}), pool_needs=pool_needs(j.templates) if j.templates else (),
                   user_priority=j.user_priority, exclusive=j.exclusive, avoid=frozenset(j.avoid_hosts),
                   gpu=GpuRequest.from_json(j.gpu) if j.gpu is not None else None)


def build_view(model: Model, config: Config | None = None, observed: Observed | None = None,
               views: JobViews | None = None, depth: int | None = None, now: float | None = None,
               reserved: frozenset[int] = frozenset()) -> ClusterView:
    """The scheduler's view of ``model`` at its position (``config``: pools and cluster counters;
    ``observed``: what providers report of the pools' capacity; ``views``: the pending jobs' views
    kept from the last view, if any; ``depth``: how many pending jobs it holds, the first in
    the scheduler's order, or all: None; ``now``: the time tokens are judged at, for the hosts whose
    daemon credentials were taken back, which it leaves out: ``identity.hosts_locked_out``, and
    reservations are planned from; ``reserved``: the jobs the previous plan reserved for)."""
    hosts = []
    now = time.time() if now is None else now
    locked = hosts_locked_out(model, now)
    reserving = config is not None and config.controller.reservation_depth > 0
    for h in model.hosts.values():
        if h.state is not HostState.OK or h.name in locked:
            continue
        used = h.counters_used()
        free = {k: v - used.get(k, 0.0) for k, v in h.counters.items()}
        hosts.append(HostView(name=h.name, slots_free=0 if held_exclusively(model, h) else h.slots - h.slots_used,
                              attrs=MappingProxyType(dict(h.attrs)),
                              counters_total=MappingProxyType(dict(h.counters)),
                              counters_free=MappingProxyType(free), idle=not h.held_slots,
                              gpus=gpu_views(h) if h.gpus else (),
                              releases=_releases(model, h, now) if reserving else (),
                              gpu_releases=_gpu_releases(model, h, now) if reserving and h.held_gpus else ()))
    hosts.sort(key=lambda h: h.name)
    prio = {q.name: q.priority for q in model.queues.values()}
    views = views or JobViews()
    pending = views.pending(model, prio, depth, now, per_owner=config is not None and config.fairshare)
    pools: tuple[PoolView, ...] = ()
    claims: tuple[ClaimView, ...] = ()
    resizes: tuple[ResizeView, ...] = ()
    replicas: tuple[ReplicaView, ...] = ()
    cluster: dict[str, float] = {}
    if config is not None:
        pools, claims, resizes = _claim_views(model, config, observed)
        replicas = _replica_views(model, config)
        used = model.cluster_used()
        cluster = {name: total - used.get(name, 0.0) for name, total in config.cluster_counters().items()}
    evictable = _evictable(model)
    cache_quotas = _cache_quotas(model, config) if config is not None else {}
    preemptable = config.preemptable() if config is not None else {}
    policy = Policy(reservation_depth=config.controller.reservation_depth,
                    fairshare=fairshare_view(model, config, now) if config.fairshare else None,
                    reserved=reserved, preemptable=MappingProxyType(preemptable)) \
        if config is not None else Policy()
    return ClusterView(position=model.position, hosts=tuple(hosts), pending=pending, pools=pools,
                       pending_claims=claims, pending_resizes=resizes, pending_replicas=replicas, evictable=evictable,
                       cache_quotas=MappingProxyType(cache_quotas),
                       cluster_free=MappingProxyType(cluster),
                       pending_beyond=views.eligible - len(pending), now=now, policy=policy,
                       running=_running(model, prio, frozenset().union(*preemptable.values())) if preemptable
                       else ())


def _holding(model: Model) -> Iterator[Job]:
    """Every job holding hosts (allocated, running, staging out), once."""
    seen: set[str] = set()
    for h in model.hosts.values():
        for key in h.held_slots:
            if key not in seen:
                seen.add(key)
                job = model.jobs.get(int(key))
                if job is not None:
                    yield job


def _running(model: Model, prio: dict[str, int], queues: frozenset[str]) -> tuple[RunningView, ...]:
    """The runs holding hosts in ``queues`` (those some queue may preempt): what a preemption may end."""
    out = []
    for job in _holding(model):
        if job.queue in queues and job.started:
            out.append(RunningView(job_id=job.id, run=job.run, queue=job.queue, priority=prio.get(job.queue, 0),
                                   start=job.start_time or 0.0, slots=MappingProxyType(dict(job.alloc_slots)),
                                   counters=MappingProxyType({k: MappingProxyType(v) for k, v in
                                                              job.alloc_counters.items()}),
                                   ending=job.kill_requested or job.state is JobState.STAGE_OUT))
    return tuple(out)


def fairshare_view(model: Model, config: Config, now: float) -> FairShare:
    """Shares from the configuration; usage from the model (``xce.model.fairshare``), decayed to ``now``
    and weighted by the configured factors, with what running jobs have used so far; the slots held."""
    ctl = config.controller
    factors = (ctl.fairshare_slot_factor, ctl.fairshare_gpu_factor, ctl.fairshare_claim_factor)
    usage: dict[tuple[str, str], float] = {}
    for p in model.projects.values():
        for user in p.usage:
            usage[(p.name, user)] = fairshare.weighted(fairshare.decayed(p, user, now), *factors)
    running: dict[tuple[str, str], int] = {}
    for job in _holding(model):
        who = (job.project, job.user)
        running[who] = running.get(who, 0) + job.slots
        so_far = fairshare.run_usage(job, now)  # its run so far counts as it will when it ends
        if so_far is not None:
            usage[who] = usage.get(who, 0.0) + fairshare.weighted(so_far, *factors)
    return FairShare(project_shares=MappingProxyType({p.name: float(p.shares) for p in config.projects
                                                      if p.shares is not None}),
                     user_shares=MappingProxyType({p.name: MappingProxyType({u: float(s) for u, s in p.user_shares.items()})
                                                   for p in config.projects if p.user_shares}),
                     usage=MappingProxyType(usage), running=MappingProxyType(running),
                     run_job_factor=ctl.fairshare_run_job_factor)


def _expected_end(model: Model, key: str, now: float) -> float | None:
    """When the run of job ``key`` holding a host gives it back: at its start (or allocation, for one
    not started yet) plus its ``-We`` estimate, else its run limit; a run past it gives back now.  None
    for a run without either: it never gives back anything the scheduler can plan a reservation with."""
    job = model.jobs.get(int(key))
    if job is None:
        return None
    expected = job.run_estimate if job.run_estimate is not None else job.run_limit
    if expected is None:
        return None
    begun = job.start_time if job.start_time is not None else job.alloc_time if job.alloc_time is not None else now
    return max(begun + expected, now)


def _releases(model: Model, host: Host, now: float) -> tuple[tuple[float, int, Mapping[str, float]], ...]:
    """What the runs holding ``host`` give back, and when (``_expected_end``)."""
    out = []
    for key, n in host.held_slots.items():
        end = _expected_end(model, key, now)
        if end is not None:
            out.append((end, n, MappingProxyType(host.held_counters.get(key, {}))))
    return tuple(out)


def _gpu_releases(model: Model, host: Host, now: float) -> tuple[tuple[float, tuple[int, ...]], ...]:
    """The GPUs the runs holding ``host`` exclusively give back, and when (``_expected_end``).  A shared
    GPU is not planned with: it comes free only when its last sharer ends."""
    out = []
    for key, held in host.held_gpus.items():
        end = _expected_end(model, key, now) if held["exclusive"] else None
        if end is not None:
            out.append((end, tuple(held["ids"])))
    return tuple(out)


def gpu_views(h: Host) -> tuple[GpuView, ...]:
    """A host's GPUs with what holds each now (the runs' ``held_gpus``)."""
    if not h.held_gpus:
        return tuple(GpuView(g["id"], g.get("model", ""), int(g.get("memory", 0))) for g in h.gpus)
    exclusive: set[int] = set()
    sharers: dict[int, int] = {}
    gmem: dict[int, int] = {}
    for held in h.held_gpus.values():
        for i in held["ids"]:
            if held["exclusive"]:
                exclusive.add(i)
            else:
                sharers[i] = sharers.get(i, 0) + 1
                gmem[i] = gmem.get(i, 0) + (held.get("gmem") or 0)
    return tuple(GpuView(id=g["id"], model=g.get("model", ""), memory=int(g.get("memory", 0)),
                         exclusive=g["id"] in exclusive, sharers=sharers.get(g["id"], 0),
                         gmem_used=gmem.get(g["id"], 0)) for g in h.gpus)


def _claim_uses(model: Model, job) -> tuple[ClaimUse, ...]:
    out = []
    if any(t.get("early") for t in job.templates):
        # the readiness gate before allocation: a job that stages in early is placed only once its staging
        # claim is READY, and only on hosts that reach it (as the provider reported)
        c = early_claim(model, job)
        if c is None:
            out.append(ClaimUse(claim_id=job.early_claim or 0, name="stage", mode="rw", access_mode="RWX",
                                state="GONE", reachable=None))
        else:
            out.append(ClaimUse(claim_id=c.id, name=c.name, mode="rw", access_mode=AccessMode.RWX.value,
                                state="BEING_DELETED" if c.delete_requested else c.state.value,
                                reachable=frozenset(c.reachable_hosts) if c.reachable_hosts is not None else None,
                                waiting=c.waiting() or ""))
    for ref in job.claim_refs:
        c = model.claims.get(ref["claim_id"])
        if c is None:
            out.append(ClaimUse(claim_id=ref["claim_id"], name=ref["name"], mode=ref["mode"], access_mode="RWX",
                                state="GONE", reachable=None))
            continue
        others = [a for a in c.attachments if a.job_id != job.id]
        state = c.state.value
        if c.delete_requested:
            state = "BEING_DELETED"
        elif c.resize is not None and c.resize.open and not capabilities.can(model, c.class_name, "online_expand"):
            state = "RESIZING"  # its class expands only offline: no job attaches it until that is done
        reachable = frozenset(c.ready_hosts()) if c.replicated else \
            frozenset(c.reachable_hosts) if c.reachable_hosts is not None else None
        cache = CacheUse(counter=c.counter, size=c.size_bytes,
                         filling=frozenset(r.host for r in c.replicas if r.state in MAKING),
                         taken=frozenset(r.host for r in c.replicas if r.state is not ReplicaState.RELEASED)) \
            if c.cache and c.counter is not None else None
        out.append(ClaimUse(claim_id=c.id, name=c.name, mode=ref["mode"], access_mode=c.access_mode.value,
                            state=state, reachable=reachable, replicated=c.replicated, cache=cache,
                            lost=frozenset(r.host for r in c.replicas if r.state is ReplicaState.LOST),
                            attached_hosts=frozenset(a.host for a in others if a.mode is Mode.RW or
                                                     c.access_mode is AccessMode.RWO),
                            holder_jobs=tuple(sorted({a.job_id for a in others if a.job_id is not None})),
                            waiting=c.waiting() or ""))
    return tuple(out)


def _claim_views(model: Model, config: Config, observed: Observed | None,
                 ) -> tuple[tuple[PoolView, ...], tuple[ClaimView, ...], tuple[ResizeView, ...]]:
    rooms = (observed or Observed()).rooms(model, config)
    pools = tuple(PoolView(name=r.name, capacity=r.capacity, free=r.free) for r in rooms.values())
    claims = []
    resizes = []
    for c in model.claims.values():
        if c.state is ClaimState.PENDING and not c.placed and not c.delete_requested and c.scope is Scope.SHARED:
            cls = config.claim_class(c.class_name)
            claims.append(ClaimView(id=c.id, name=c.name, size=c.charged_bytes,
                                    pools=tuple(cls.pools) if cls else ()))
        elif c.resize is not None and c.resize.state is ResizeState.REQUESTED and c.state is ClaimState.READY \
                and not c.delete_requested and c.op is None:
            resizes.append(ResizeView(claim_id=c.id, name=c.name, pool=c.pool, size=c.resize.size_bytes,
                                      grow=c.resize.size_bytes - c.reserved_bytes))
    return pools, tuple(claims), tuple(resizes)


def _evictable(model: Model) -> tuple[CachedReplica, ...]:
    """Caches' READY replicas that no job has attached and no op is busy with: what the scheduler may
    evict, least recently used first, when a host's counter is needed for another cache's replica."""
    out = []
    for c in model.claims.values():
        if not c.cache or c.delete_requested or not c.live:
            continue
        attached = {a.host for a in c.attachments}
        out += [CachedReplica(claim_id=c.id, host=r.host, counter=r.counter, size=c.size_bytes,
                              last_used=r.last_used if r.last_used is not None else r.created)
                for r in c.replicas if r.state is ReplicaState.READY and r.op is None and r.host not in attached
                and r.counter is not None]
    return tuple(out)


def _cache_quotas(model: Model, config: Config) -> dict[int, QuotaRoom]:
    """Each live cache's room on its project's tightest quota (``claims.quota_left``), where one limits it."""
    out = {}
    for c in model.claims.values():
        if c.cache and c.live and not c.delete_requested and \
                (left := quota_left(model, config, c.project, c.class_name)) is not None:
            out[c.id] = QuotaRoom(left=float(left[0]), quota=left[1], prepaid=c.replica_count == 0)
    return out


def _replica_views(model: Model, config: Config) -> tuple[ReplicaView, ...]:
    """Node-local claims' replicas waiting for their hosts' counters: on the hosts they name, and the
    number still to be placed on hosts the scheduler chooses."""
    out = []
    for c in model.claims.values():
        cls = config.claim_class(c.class_name) if c.replicas_waiting else None
        if cls is not None and cls.counter is not None:
            out.append(ReplicaView(claim_id=c.id, name=c.name, size=c.size_bytes, counter=cls.counter,
                                   hosts=tuple(c.unplaced_hosts()),
                                   more=c.replicas_to_place,
                                   taken=frozenset(r.host for r in c.replicas if r.state is not ReplicaState.RELEASED)))
    return tuple(out)
