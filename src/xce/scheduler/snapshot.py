"""The scheduler's input: an immutable, cached view of what it may plan with.

Built by the controller from the model between commits; the scheduler reads
nothing else.  Hosts carry what is *free* at the snapshot's position.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    from xce.config import Config
    from xce.model import Model


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    slots_free: int
    attrs: Mapping[str, str]
    counters_total: Mapping[str, float]
    counters_free: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A standalone claim a pending job references, with what constrains where the job can go."""

    claim_id: int
    name: str
    mode: str  # "rw" or "ro"
    access_mode: str  # RWO, ROX, RWX, RWOP
    state: str  # the claim's state; only READY claims can be attached
    reachable: frozenset[str] | None  # hosts that can reach it (None: every host)
    attached_hosts: frozenset[str] = frozenset()  # where other runs have it attached (RWO: all on one host)
    holder_jobs: tuple[int, ...] = ()  # jobs holding an attachment (RWOP: one job at a time)
    waiting: str = ""  # the claim's own word on what it waits for


@dataclass(frozen=True, slots=True)
class JobView:
    id: int
    run: int  # the run number the applier will check is still current
    queue: str
    priority: int
    slots: int
    resreq: str
    claims: tuple[ClaimUse, ...] = ()
    node_counters: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # on the first host
    pool_needs: tuple[tuple[str, tuple[str, ...], int], ...] = ()  # shared template claims: (kind, pools, size)


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool-scope counter: capacity from the config, minus what placed claims charge."""

    name: str
    capacity: int
    free: int


@dataclass(frozen=True, slots=True)
class ClaimView:
    """A standalone claim waiting for placement into one of its class's pools."""

    id: int
    name: str
    size: int
    pools: tuple[str, ...]  # candidates, from the claim class (empty: the class draws on no pool)


@dataclass(frozen=True, slots=True)
class Snapshot:
    position: int
    hosts: tuple[HostView, ...]
    pending: tuple[JobView, ...]  # PEND jobs without an allocation, any order
    pools: tuple[PoolView, ...] = ()
    pending_claims: tuple[ClaimView, ...] = ()
    cluster_free: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # cluster counters


def build_snapshot(model: Model, config: Config | None = None) -> Snapshot:
    from xce.model.hosts import HostState
    from xce.model.job_claims import node_counters, pool_needs

    hosts = []
    for h in model.hosts.values():
        if h.state is not HostState.OK:
            continue
        used = h.counters_used()
        free = {k: v - used.get(k, 0.0) for k, v in h.counters.items()}
        hosts.append(HostView(name=h.name, slots_free=h.slots - h.slots_used,
                              attrs=MappingProxyType(dict(h.attrs)),
                              counters_total=MappingProxyType(dict(h.counters)),
                              counters_free=MappingProxyType(free)))
    hosts.sort(key=lambda h: h.name)
    prio = {q.name: q.priority for q in model.queues.values()}
    pending = tuple(JobView(id=j.id, run=j.run, queue=j.queue, priority=prio.get(j.queue, 0),
                            slots=j.slots, resreq=j.resreq, claims=_claim_uses(model, j) if j.claim_refs else (),
                            node_counters=MappingProxyType(node_counters(j.templates)) if j.templates else
                            MappingProxyType({}), pool_needs=pool_needs(j.templates) if j.templates else ())
                    for j in map(model.jobs.__getitem__, sorted(model.pending_jobs)))
    pools: tuple[PoolView, ...] = ()
    claims: tuple[ClaimView, ...] = ()
    cluster: dict[str, float] = {}
    if config is not None:
        pools, claims = _claim_views(model, config)
        used = model.cluster_used()
        cluster = {name: total - used.get(name, 0.0) for name, total in config.cluster_counters().items()}
    return Snapshot(position=model.position, hosts=tuple(hosts), pending=pending, pools=pools,
                    pending_claims=claims, cluster_free=MappingProxyType(cluster))


def _claim_uses(model: Model, job) -> tuple[ClaimUse, ...]:
    out = []
    for ref in job.claim_refs:
        c = model.claims.get(ref["claim_id"])
        if c is None:
            out.append(ClaimUse(claim_id=ref["claim_id"], name=ref["name"], mode=ref["mode"], access_mode="RWX",
                                state="GONE", reachable=None))
            continue
        others = [a for a in c.attachments if a.job_id != job.id]
        out.append(ClaimUse(claim_id=c.id, name=c.name, mode=ref["mode"], access_mode=c.access_mode.value,
                            state="BEING_DELETED" if c.delete_requested else c.state.value,
                            reachable=frozenset(c.reachable_hosts) if c.reachable_hosts is not None else None,
                            attached_hosts=frozenset(a.host for a in others if a.mode == "rw" or
                                                     c.access_mode.value == "RWO"),
                            holder_jobs=tuple(sorted({a.job_id for a in others if a.job_id is not None})),
                            waiting=c.waiting() or ""))
    return tuple(out)


def _claim_views(model: Model, config: Config) -> tuple[tuple[PoolView, ...], tuple[ClaimView, ...]]:
    from xce.model.claims import ClaimState
    from xce.model.pools import pool_use

    used = pool_use(model)
    pools = tuple(PoolView(name=p.name, capacity=p.capacity_bytes, free=p.capacity_bytes - used.get(p.name, 0))
                  for p in config.pools)
    claims = []
    for c in model.claims.values():
        if c.state is ClaimState.PENDING and not c.placed and not c.delete_requested and c.scope == "shared":
            cls = config.claim_class(c.class_name)
            claims.append(ClaimView(id=c.id, name=c.name, size=c.charged_bytes,
                                    pools=tuple(cls.pools) if cls else ()))
    return pools, tuple(claims)
