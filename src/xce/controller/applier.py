"""The plan applier: re-check each scheduler decision against the current model, commit the good ones.

The model may have moved on since the snapshot (a job was killed, a host
went away, another decision took the last slot): such decisions are
rejected here and the job is simply planned again next cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xce.controller.core import Outcome
from xce.model import Model
from xce.model import job_claims
from xce.model.claims import ClaimState
from xce.model.facts import ClaimCreated, ClaimPlaced, Fact, JobAllocated
from xce.model.hosts import HostState
from xce.model.jobs import JobState
from xce.scheduler.plan import Plan
from xce.model.pools import pool_use

if TYPE_CHECKING:
    from xce.config import Config


@dataclass
class ApplyResult:
    accepted: list[int] = field(default_factory=list)
    rejected: dict[int, str] = field(default_factory=dict)
    claims_placed: list[int] = field(default_factory=list)
    claims_rejected: dict[int, str] = field(default_factory=dict)


def apply_plan(model: Model, plan: Plan, now: float, config: Config | None = None) -> Outcome:
    outcome = _apply_allocations(model, plan, now, config)
    if config is not None and plan.placements:
        outcome.facts.extend(_apply_placements(model, plan, now, config, outcome.result, outcome.facts))
    return outcome


def _apply_placements(model: Model, plan: Plan, now: float, config: Config, result: ApplyResult,
                      accepted: list[Fact]) -> list[Fact]:
    """Re-check each claim placement against the current pools, less what the plan's accepted
    allocations took for their template claims (``accepted``); the claim may have been deleted."""
    used = pool_use(model)
    for f in accepted:
        if isinstance(f, ClaimCreated) and f.pool is not None:
            used[f.pool] = used.get(f.pool, 0) + f.size_bytes
    facts: list[Fact] = []
    for p in plan.placements:
        claim = model.claims.get(p.claim_id)
        why = None
        if claim is None or claim.state is not ClaimState.PENDING or claim.placed or claim.delete_requested:
            why = "claim changed since the snapshot"
        elif p.pool is not None:
            pool = config.pool(p.pool)
            if pool is None:
                why = f"pool {p.pool} is no longer configured"
            elif pool.capacity_bytes - used.get(p.pool, 0) < claim.charged_bytes:
                why = f"pool {p.pool} no longer has room"
        if why:
            result.claims_rejected[p.claim_id] = why
            continue
        if p.pool is not None:
            used[p.pool] = used.get(p.pool, 0) + claim.charged_bytes
        facts.append(ClaimPlaced(time=now, claim_id=p.claim_id, pool=p.pool))
        result.claims_placed.append(p.claim_id)
    return facts


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


def _pool_short(model: Model, config: Config | None, job, pools, taken: dict[str, int]) -> str | None:
    if not pools or config is None:
        return None
    used = pool_use(model)
    for t in job.templates:
        pool = pools.get(t["kind"])
        p = config.pool(pool) if pool else None
        if pool is not None and (p is None or p.capacity_bytes - used.get(pool, 0) - taken.get(pool, 0)
                                 < t["size_bytes"]):
            return f"pool {pool} no longer has room for its {t['kind']} claim"
    return None


def _apply_allocations(model: Model, plan: Plan, now: float, config: Config | None = None) -> Outcome:
    result = ApplyResult()
    facts: list[Fact] = []
    taken_slots: dict[str, int] = {}
    taken_ctr: dict[str, dict[str, float]] = {}
    taken_cluster: dict[str, float] = {}
    taken_pool: dict[str, int] = {}
    next_claim, next_attachment = model.next_claim_id, model.next_attachment_id
    for a in plan.allocations:
        job = model.jobs.get(a.job_id)
        why = None
        if job is None or job.state is not JobState.PEND or job.alloc_slots or job.run != a.run:
            why = "job changed since the snapshot"
        elif (gone := job_claims.unusable_ref(model, job)) is not None:
            why = gone
        elif (short := _cluster_short(model, config, a.cluster, taken_cluster)) is not None:
            why = short
        elif (short := _pool_short(model, config, job, a.pools, taken_pool)) is not None:
            why = short
        else:
            for host_name, n in a.slots.items():
                host = model.hosts.get(host_name)
                if host is None or host.state is not HostState.OK:
                    why = f"host {host_name} is not available"
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
        if why:
            result.rejected[a.job_id] = why
            continue
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
                                  cluster_counters=dict(a.cluster), attachments=attachments))
        facts += templates  # the run's template claims: made through the same fact as any claim
        result.accepted.append(a.job_id)
    return Outcome(facts, result=result)
