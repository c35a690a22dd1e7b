"""The scheduler's input: ``ClusterView``, an immutable view of what it may plan with.

Built by the controller from the model between commits (``xce.controller.view``); the
scheduler reads nothing else.  Hosts carry what is *free* at the view's log position.
Plain data: no model, no config.  (A *snapshot* is something else: the whole model
written to the store, ``Store.write_snapshot``; or a claim's storage snapshot.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, NamedTuple

from xce.jobspec_gpu import GpuRequest


class GpuView(NamedTuple):
    """One GPU of a host, with what holds it now: an exclusive job, or shared jobs and their gmem.
    (A named tuple: a cycle's view holds one per GPU of the cluster, made 4x faster than a frozen
    dataclass.)"""

    id: int
    model: str = ""
    memory: int = 0  # bytes
    exclusive: bool = False
    sharers: int = 0
    gmem_used: int = 0


@dataclass(frozen=True, slots=True)
class HostView:
    name: str
    slots_free: int
    attrs: Mapping[str, str]
    counters_total: Mapping[str, float]
    counters_free: Mapping[str, float]
    idle: bool = False  # no job holds anything on it: an exclusive job (-x) may start here
    gpus: tuple[GpuView, ...] = ()
    # what the runs holding it give back and when they are expected to end (their run limits or
    # estimates): (end, slots, counters) each, ends finite; a run with no limit is not here (it never
    # gives back anything the scheduler can plan with).  Only built when reservations are on.
    releases: tuple[tuple[float, int, Mapping[str, float]], ...] = ()
    # the GPUs those runs hold exclusively and give back then: (end, device ids) each (shared GPUs are
    # not planned with: one comes free only when its last sharer ends)
    gpu_releases: tuple[tuple[float, tuple[int, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class CacheUse:
    """What the scheduler needs of a cache claim (``xce claim create --cache``) to start a replica of it
    where a job of its can go: the host counter a replica's ``size`` is reserved on, the hosts whose
    replica is being made or filled (``filling``), and those where none may start (``taken``: a replica
    in any state but RELEASED is there)."""

    counter: str
    size: int
    filling: frozenset[str] = frozenset()
    taken: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class CachedReplica:
    """A READY replica of a cache that no job has attached: evicted, least recently used first, when its
    host's counter is needed for another cache's replica."""

    claim_id: int
    host: str
    counter: str
    size: int
    last_used: float


@dataclass(frozen=True, slots=True)
class QuotaRoom:
    """What a cache's project may still be charged under its tightest quota covering the cache's class: a
    replica started on demand is charged the cache's size (the scheduler starts none that does not fit)."""

    left: float  # bytes
    quota: str  # that quota in words ("quota of project a: at most 2Gi, 2Gi in use"); also its key
    prepaid: bool = False  # the cache has no replica: its first is charged already (from its creation)


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
    replicated: bool = False  # a node-local claim: ``reachable`` are the hosts of its READY replicas
    cache: CacheUse | None = None  # a cache: replicas may start where the job can go
    lost: frozenset[str] = frozenset()  # a node-local claim: hosts whose replicas were lost with them


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
    run_limit: float | None = None  # seconds a run may last (-W or the queue's run_limit); None: no limit
    project: str = ""
    user: str = ""
    user_priority: int = 0  # -sp: its order within its queue, higher first
    exclusive: bool = False  # -x: only on idle hosts, and nothing else on them this cycle
    avoid: frozenset[str] = frozenset()  # hosts it must not go to (-Q EXCLUDE(), a failed pre-exec)
    gpu: GpuRequest | None = None  # GPUs on each of its hosts


@dataclass(frozen=True, slots=True)
class PoolView:
    """A pool-scope counter: its capacity (the config's, or less if its provider reports less), and
    what is free (capacity less what placed claims reserve, and no more than the provider has free)."""

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
class ReplicaView:
    """A node-local claim's replicas waiting for their size to be reserved on a host's ``counter``: one
    on each host it names (``hosts``), and one on each of ``more`` hosts the scheduler chooses among
    those holding none of its replicas (``taken``)."""

    claim_id: int
    name: str
    size: int
    counter: str
    hosts: tuple[str, ...] = ()
    more: int = 0
    taken: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class ResizeView:
    """A READY claim's resize waiting for its growth to be reserved in the claim's pool."""

    claim_id: int
    name: str
    pool: str | None  # where the claim was placed (None: its class draws on no pool)
    size: int  # the new size
    grow: int  # what it adds to the pool's use


@dataclass(frozen=True, slots=True)
class ClusterView:
    position: int
    hosts: tuple[HostView, ...]
    pending: tuple[JobView, ...]  # PEND jobs without an allocation, any order (the first queue_depth of them)
    pools: tuple[PoolView, ...] = ()
    pending_claims: tuple[ClaimView, ...] = ()
    pending_resizes: tuple[ResizeView, ...] = ()
    pending_replicas: tuple[ReplicaView, ...] = ()
    evictable: tuple[CachedReplica, ...] = ()  # caches' unattached READY replicas
    cache_quotas: Mapping[int, QuotaRoom] = field(default_factory=lambda: MappingProxyType({}))  # by cache claim id
    cluster_free: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))  # cluster counters
    pending_beyond: int = 0  # pending jobs left out of ``pending``: behind the first queue_depth
    now: float = 0.0  # the time the view was taken: reservations are planned from it
    running: tuple[RunningView, ...] = ()  # runs of queues some queue may preempt (only then)
    policy: Policy = field(default_factory=lambda: Policy())


@dataclass(frozen=True, slots=True)
class FairShare:
    """Who is owed what ([[projects]] ``shares`` and ``user_shares``), and what each has used: decayed,
    weighted usage (``xce.model.fairshare``) plus what runs now, per project and per (project, user).
    Projects and users not named have a share of 1."""

    project_shares: Mapping[str, float]
    user_shares: Mapping[str, Mapping[str, float]]  # project -> user -> share
    usage: Mapping[tuple[str, str], float]  # (project, user) -> weighted usage so far
    running: Mapping[tuple[str, str], int] = field(default_factory=lambda: MappingProxyType({}))  # slots held now
    run_job_factor: float = 3.0  # weight of a slot held now (LSF's RUN_JOB_FACTOR), in usage units


@dataclass(frozen=True, slots=True)
class Policy:
    """How the scheduler chooses, from the configuration: ``reservation_depth`` pending jobs that do not
    fit get a reservation that lower jobs may not delay (0: none, greedy as before; 1: EASY backfill);
    ``fairshare``: order within a queue by share and usage (None: oldest first); ``reserved``: the jobs
    the previous cycle reserved for (the scheduling loop's memory, not a fact)."""

    reservation_depth: int = 0
    fairshare: FairShare | None = None
    # jobs the previous cycle gave a reservation: each keeps its place at the head of its queue priority,
    # so a reservation is not lost to a job fair share puts ahead later (Maui's RESERVATIONPOLICY HIGHEST)
    reserved: frozenset[int] = frozenset()
    # preemption ([[queues]] preemption = "PREEMPTIVE[low]"): queue -> the queues its jobs may preempt
    preemptable: Mapping[str, frozenset[str]] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class RunningView:
    """A run holding hosts that a job of a preemptive queue may preempt: what it holds, since when, and
    whether it is ending already (a kill asked: its slots are coming free)."""

    job_id: int
    run: int
    queue: str
    priority: int
    start: float
    slots: Mapping[str, int]
    counters: Mapping[str, Mapping[str, float]] = field(default_factory=lambda: MappingProxyType({}))
    ending: bool = False
