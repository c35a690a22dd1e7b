"""The plan applier: re-check each scheduler decision against the current model, commit the good ones.

The model may have moved on since the scheduler's view of it (a job was killed, a host
went away, another decision took the last slot): such decisions are
rejected here and the job is simply planned again next cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xce.controller.commit import Outcome
from xce.model import Model
from xce.model import gpus as gpu_use
from xce.model import job_claims, jobs
from xce.model.claims import ClaimState
from xce.controller.observed import Observed, pool_free
from xce.model.claims import ResizeState
from xce.model.claims import Claim, ReplicaState, check_quota
from xce.errors import Conflict
from xce.model.facts import (
    ClaimCreated, ClaimPlaced, ClaimResizeReserved, Fact, JobAllocated, ReplicaEvicted, ReplicaPlaced,
)
from xce.model.hosts import HostState
from xce.model.identity import hosts_locked_out
from xce.model.jobs import JobState, held_exclusively
from xce.scheduler.plan import Plan, ReplicaPlacement

if TYPE_CHECKING:
    from xce.config import Config


@dataclass
class ApplyResult:
    accepted: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)
    claims_placed: list[int] = field(default_factory=list)
    claims_rejected: dict[int, str] = field(default_factory=dict)
    resizes_reserved: list[int] = field(default_factory=list)
    resizes_rejected: dict[int, str] = field(default_factory=dict)


def apply_plan(model: Model, plan: Plan, now: float, config: Config | None = None,
               observed: Observed | None = None) -> Outcome:
    """``observed``: the pools' reported capacity (``controller.observed``); None: the config's alone."""
    outcome = _apply_allocations(model, plan, now, config, observed)
    if config is not None and (plan.placements or plan.resizes):
        free = pool_free(model, config, observed)
        for f in outcome.facts:  # less what the plan's accepted allocations took for their template claims
            if isinstance(f, ClaimCreated) and f.pool is not None and f.pool in free:
                free[f.pool] -= f.size_bytes
        outcome.facts.extend(_apply_resizes(model, plan, now, free, outcome.result))
        outcome.facts.extend(_apply_placements(model, plan, now, free, outcome.result))
    if plan.replicas or plan.evictions:
        outcome.facts.extend(_apply_replicas(model, plan, now, outcome.facts, outcome.result, config))
    for p in plan.preemptions:  # the victims' runs end through the kill path (jobs.preempt re-checks them)
        outcome.facts.extend(jobs.preempt(model, p.job_id, p.victims, now, config))
    return outcome


def _apply_replicas(model: Model, plan: Plan, now: float, accepted: list[Fact], result: ApplyResult,
                    config: Config | None = None) -> list[Fact]:
    """Re-check each replica placement: the claim still wants a replica on that host, and the host is
    available with room on the counter (less what this plan's accepted allocations took, plus what the
    caches' replicas it evicts free); a cache's replica started on demand fits its project's quota (less
    what this plan's earlier ones are charged).  Then the evictions for jobs' template claims, each
    re-checked as those for replicas are.  An eviction holds only if that replica is still READY, unattached,
    idle, and no allocation of this plan attaches it."""
    taken: dict[str, dict[str, float]] = {}
    attaching: set[tuple[int, str]] = set()
    for f in accepted:
        if isinstance(f, JobAllocated):
            for host_name, held in f.counters.items():
                for name, amount in held.items():
                    taken.setdefault(host_name, {})[name] = taken.get(host_name, {}).get(name, 0.0) + amount
            attaching.update((a["claim_id"], a["host"]) for a in f.attachments)
    more: dict[int, int] = {}  # claim -> hosts chosen for it in this plan so far
    charged: dict[str, int] = {}  # project -> bytes this plan's on-demand replicas are charged so far
    on_demand: set[int] = set()  # caches this plan started a replica of already
    locked = hosts_locked_out(model, now)
    facts: list[Fact] = []
    for p in plan.replicas:
        claim = model.claims.get(p.claim_id)
        victims = [model.claims.get(v) for v in p.evict]
        why = next((f"claim {v.name if v else c}'s replica on {p.host} is in use now" for v, c in zip(victims, p.evict)
                    if v is None or not _evictable(v, p.host, attaching)), None)
        freed = sum(v.size_bytes for v in victims if v is not None)
        why = why or _replica_short(model, claim, p, more, taken, locked, freed)
        cost = 0
        if why is None and claim is not None and p.on_demand and config is not None:
            cost = claim.replica_charge if claim.id not in on_demand else claim.size_bytes
            try:
                if cost:
                    check_quota(model, config, claim.project, claim.class_name, cost + charged.get(claim.project, 0),
                                new_claims=0)
            except Conflict as e:
                why = e.message
        if why is not None or claim is None:
            result.claims_rejected[p.claim_id] = why or "claim changed since the scheduler's view"
            continue
        if not p.on_demand and p.host not in claim.unplaced_hosts():
            more[claim.id] = more.get(claim.id, 0) + 1
        if p.on_demand:
            charged[claim.project] = charged.get(claim.project, 0) + cost
            on_demand.add(claim.id)
        taken.setdefault(p.host, {})[p.counter] = taken.get(p.host, {}).get(p.counter, 0.0) + claim.size_bytes - freed
        facts += [ReplicaEvicted(time=now, claim_id=v.id, host=p.host, by="scheduler", make_room=True,
                                 reason=f"least recently used: its room on {p.host} went to claim {claim.name}'s "
                                        "replica") for v in victims if v is not None]
        facts.append(ReplicaPlaced(time=now, claim_id=p.claim_id, host=p.host, counter=p.counter,
                                   size_bytes=claim.size_bytes))
        result.claims_placed.append(p.claim_id)
    gone = {(f.claim_id, f.host) for f in facts if isinstance(f, ReplicaEvicted)}
    for e in plan.evictions:  # for jobs' template claims: each still idle, and attached by none of this plan's jobs
        v = model.claims.get(e.claim_id)
        if v is not None and (v.id, e.host) not in gone and _evictable(v, e.host, attaching):
            gone.add((v.id, e.host))
            facts.append(ReplicaEvicted(time=now, claim_id=v.id, host=e.host, by="scheduler", make_room=True,
                                        reason=f"least recently used: its room on {e.host} went to job {e.job_id}'s "
                                               "template claims"))
    return facts


def _apply_resizes(model: Model, plan: Plan, now: float, free: dict[str, int], result: ApplyResult) -> list[Fact]:
    """Re-check each resize reservation: the resize is still waiting, the same size, and its pool has room."""
    facts: list[Fact] = []
    for r in plan.resizes:
        claim = model.claims.get(r.claim_id)
        resize = claim.resize if claim is not None else None
        why = None
        if resize is None or resize.state is not ResizeState.REQUESTED or resize.size_bytes != r.size \
                or claim.state is not ClaimState.READY or claim.delete_requested or claim.op is not None:
            why = "resize changed since the scheduler's view"
        else:
            grow = resize.size_bytes - claim.reserved_bytes
            if claim.pool is not None and (claim.pool not in free or free[claim.pool] < grow):
                why = f"pool {claim.pool} no longer has room"
        if why:
            result.resizes_rejected[r.claim_id] = why
            continue
        if claim.pool is not None:
            free[claim.pool] -= grow
        facts.append(ClaimResizeReserved(time=now, claim_id=r.claim_id, size_bytes=r.size))
        result.resizes_reserved.append(r.claim_id)
    return facts


def _apply_placements(model: Model, plan: Plan, now: float, free: dict[str, int],
                      result: ApplyResult) -> list[Fact]:
    """Re-check each claim placement against the pools' current room (``free``, less what this plan
    took already); the claim may have been deleted."""
    facts: list[Fact] = []
    for p in plan.placements:
        claim = model.claims.get(p.claim_id)
        why = None
        if claim is None or claim.state is not ClaimState.PENDING or claim.placed or claim.delete_requested:
            why = "claim changed since the scheduler's view"
        elif p.pool is not None:
            if p.pool not in free:
                why = f"pool {p.pool} is no longer configured"
            elif free[p.pool] < claim.charged_bytes:
                why = f"pool {p.pool} no longer has room"
        if why:
            result.claims_rejected[p.claim_id] = why
            continue
        if p.pool is not None:
            free[p.pool] -= claim.charged_bytes
        facts.append(ClaimPlaced(time=now, claim_id=p.claim_id, pool=p.pool))
        result.claims_placed.append(p.claim_id)
    return facts


def _evictable(claim: Claim, host: str, attaching: set[tuple[int, str]]) -> bool:
    """A cache's replica on ``host`` may go to make room: READY, idle, attached by no job (nor by one
    this plan allocates)."""
    r = claim.replica_on(host)
    return claim.cache and claim.live and not claim.delete_requested and r is not None and \
        r.state is ReplicaState.READY and r.op is None and not any(a.host == host for a in claim.attachments) \
        and (claim.id, host) not in attaching


def _replica_short(model: Model, claim: Claim | None, p: ReplicaPlacement, more: dict[int, int],
                   taken: dict[str, dict[str, float]], locked: frozenset[str], freed: float = 0.0) -> str | None:
    """Why a replica placement no longer holds (None: it does)."""
    if claim is None or claim.delete_requested or not claim.live:
        return "claim changed since the scheduler's view"
    named = p.host in claim.unplaced_hosts()
    has_one = claim.replica_on(p.host) is not None
    if p.on_demand:
        if not claim.cache or has_one:
            return "claim changed since the scheduler's view"
    elif not named and (has_one or more.get(claim.id, 0) >= claim.replicas_to_place):
        return "claim changed since the scheduler's view"
    host = model.hosts.get(p.host)
    if host is None or host.state is not HostState.OK or p.host in locked:
        return f"host {p.host} is not available"
    free = host.counters.get(p.counter, 0.0) - host.counters_used().get(p.counter, 0.0) - \
        taken.get(p.host, {}).get(p.counter, 0.0) + freed
    if free < claim.size_bytes:
        return f"host {p.host} has no longer {claim.size_bytes} bytes of {p.counter} free"
    return None


def _cluster_short(model: Model, config: Config | None, need: dict[str, float] | Any,
                   taken: dict[str, float]) -> str | None:
    if not need:
        return None
    totals = config.cluster_counters() if config is not None else {}
    used = model.cluster_used()
    for name, amount in need.items():
        free = totals.get(name, 0.0) - used.get(name, 0.0) - taken.get(name, 0.0)
        if free < amount:
            return f"cluster resource {name} has no longer {amount:g} free"
    return None


def _pool_short(model: Model, config: Config | None, observed: Observed | None, job, pools,
                taken: dict[str, int]) -> str | None:
    if not pools or config is None:
        return None
    free = pool_free(model, config, observed)
    for t in job.templates:
        pool = pools.get(t["kind"])
        if pool is not None and (pool not in free or free[pool] - taken.get(pool, 0) < t["size_bytes"]):
            return f"pool {pool} no longer has room for its {t['kind']} claim"
    return None


def _not_for(model: Model, job, hosts: tuple[str, ...], closed: set[str], taken: dict[str, int]) -> str | None:
    """Why ``job`` may not go to one of ``hosts`` whatever their room: one its earlier run failed on (-Q
    EXCLUDE(), -E), one an exclusive job holds or this plan gave one, or, for an exclusive job (-x), one
    that is not idle (None: it may)."""
    for name in hosts:
        host = model.hosts.get(name)
        if name in job.avoid_hosts:
            return f"host {name} is one its earlier run failed on"
        if name in closed or host is not None and held_exclusively(model, host):
            return f"host {name} is held by an exclusive job"
        if job.exclusive and (taken.get(name) or host is not None and host.held_slots):
            return f"host {name} is no longer idle (exclusive, -x)"
    return None


def _apply_allocations(model: Model, plan: Plan, now: float, config: Config | None = None,
                       observed: Observed | None = None) -> Outcome:
    result = ApplyResult()
    facts: list[Fact] = []
    taken_slots: dict[str, int] = {}
    taken_ctr: dict[str, dict[str, float]] = {}
    taken_cluster: dict[str, float] = {}
    taken_pool: dict[str, int] = {}
    next_claim, next_attachment = model.next_claim_id, model.next_attachment_id
    taken_array: dict[int, int] = {}  # elements of limited arrays allocated by this plan
    closed: set[str] = set()  # hosts an exclusive job (-x) of this plan took: nothing else goes there
    taken_gpus: dict[str, gpu_use.Taken] = {}  # GPUs this plan gave out, by host
    locked = hosts_locked_out(model, now) if plan.allocations else frozenset()
    for a in plan.allocations:
        job = model.jobs.get(a.job_id)
        why = None
        if job is None or job.state is not JobState.PEND or job.alloc_slots or job.run != a.run:
            why = "job changed since the scheduler's view"
        elif job.id in model.dependency_blocked:
            why = "its dependency no longer holds"
        elif job.begin_time is not None and job.begin_time > now:
            why = "its begin time (-b) has not come"
        elif (host := _not_for(model, job, a.hosts, closed, taken_slots)) is not None:
            why = host
        elif job.array_limit is not None and job.array_parent is not None and \
                len(model.array_busy.get(job.array_parent, ())) + taken_array.get(job.array_parent, 0) >= job.array_limit:
            why = f"array limit reached: {job.array_limit} elements at once"
        elif (gone := job_claims.unusable_ref(model, job)) is not None:
            why = gone
        elif (far := job_claims.unreachable(model, job, a.hosts)) is not None:
            why = far
        elif (staging := job_claims.early_blocking(model, job)) is not None:
            why = staging
        elif (short := _cluster_short(model, config, a.cluster, taken_cluster)) is not None:
            why = short
        elif (short := _pool_short(model, config, observed, job, a.pools, taken_pool)) is not None:
            why = short
        else:
            for host_name, n in a.slots.items():
                host = model.hosts.get(host_name)
                if host is None or host.state is not HostState.OK:
                    why = f"host {host_name} is not available"
                    break
                if host_name in locked:
                    why = f"host {host_name}'s daemon credentials were revoked"
                    break
                if host.slots - host.slots_used - taken_slots.get(host_name, 0) < n:
                    why = f"host {host_name} has no longer {n} free slots"
                    break
                used = host.counters_used()
                for name, amount in a.counters.get(host_name, {}).items():
                    free = host.counters.get(name, 0.0) - used.get(name, 0.0) - taken_ctr.get(host_name, {}).get(name, 0.0)
                    if free < amount:
                        why = f"host {host_name} has no longer {amount:g} {name} free"
                        break
                if why:
                    break
                if (why := gpu_use.why_not(host, a.gpus.get(host_name, ()), gpu_use.request_of(job.gpu),
                                           taken_gpus.get(host_name))) is not None:
                    break
        if why:
            result.rejected[a.job_id] = why
            continue
        if job.array_limit is not None and job.array_parent is not None:
            taken_array[job.array_parent] = taken_array.get(job.array_parent, 0) + 1
        if job.exclusive:
            closed.update(a.hosts)
        if (req := gpu_use.request_of(job.gpu)) is not None:
            for host_name, ids in a.gpus.items():
                gpu_use.took(taken_gpus.setdefault(host_name, {}), ids, req)
        for host_name, n in a.slots.items():
            taken_slots[host_name] = taken_slots.get(host_name, 0) + n
            for name, amount in a.counters.get(host_name, {}).items():
                t = taken_ctr.setdefault(host_name, {})
                t[name] = t.get(name, 0.0) + amount
        templates, attachments = job_claims.plan_claims(job, a.run + 1, list(a.hosts), next_claim, next_attachment,
                                                        dict(a.pools), now)
        next_claim += len(templates)
        next_attachment += len(attachments)
        for name, amount in a.cluster.items():
            taken_cluster[name] = taken_cluster.get(name, 0.0) + amount
        for t in templates:
            if t.pool:
                taken_pool[t.pool] = taken_pool.get(t.pool, 0) + t.size_bytes
        facts.append(JobAllocated(time=now, job_id=a.job_id, run=a.run + 1, hosts=list(a.hosts),
                                  slots=dict(a.slots), counters={h: dict(c) for h, c in a.counters.items()},
                                  cluster_counters=dict(a.cluster), attachments=attachments,
                                  gpus={h: list(ids) for h, ids in a.gpus.items()}))
        facts += templates  # the run's template claims: made through the same fact as any claim
        result.accepted.append(a.job_id)
    return Outcome(facts, result=result)
