"""The scheduler's output: decisions the controller's plan applier checks and commits."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping


@dataclass(frozen=True, slots=True)
class Allocation:
    """Run job ``job_id`` (its run after ``run``) on ``hosts`` (the first runs the command)."""

    job_id: int
    run: int
    hosts: tuple[str, ...]
    slots: Mapping[str, int]
    counters: Mapping[str, Mapping[str, float]]
    cluster: Mapping[str, float] = field(default_factory=dict)  # cluster-scope counters (licenses...)
    pools: Mapping[str, str] = field(default_factory=dict)  # shared template claim kind -> the pool it goes to
    gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # host -> the ids of the GPUs it gets there


@dataclass(frozen=True, slots=True)
class Placement:
    """Place standalone claim ``claim_id`` in ``pool`` (None: its class draws on no pool)."""

    claim_id: int
    pool: str | None
    size: int


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Reserve ``size`` bytes of ``host``'s ``counter`` for a replica of node-local claim ``claim_id``.
    ``on_demand``: a cache's new replica, where a job of its waits for it; ``evict``: the caches whose
    unattached replicas on ``host`` go to make room for it."""

    claim_id: int
    host: str
    counter: str
    size: int
    on_demand: bool = False
    evict: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Eviction:
    """Release cache ``claim_id``'s unattached replica on ``host``: its bytes on the host's counter go to
    job ``job_id``'s template claims (``--scratch``), which waits for them and is placed there after."""

    claim_id: int
    host: str
    job_id: int


@dataclass(frozen=True, slots=True)
class Reservation:
    """Reserve claim ``claim_id``'s resize to ``size`` bytes in its ``pool`` (None: no pool)."""

    claim_id: int
    pool: str | None
    size: int
    grow: int


@dataclass(frozen=True, slots=True)
class JobReservation:
    """Pending job ``job_id`` is planned to start at ``start`` on ``hosts`` (``slots`` each): lower jobs
    start now only if they end before it or leave it enough (backfill).  Not a decision the applier
    commits: the scheduler makes it again every cycle from the runs' limits, and says it in the job's
    pending reason."""

    job_id: int
    start: float
    slots: Mapping[str, int]

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self.slots)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Pending job ``job_id`` of a preemptive queue is to have ``victims`` (job, run) ended through the
    kill path (requeued if rerunnable), so that it fits where their slots free."""

    job_id: int
    victims: tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class Plan:
    position: int  # the log position of the view the plan was made from
    allocations: tuple[Allocation, ...] = ()
    pending_reasons: Mapping[int, str] = field(default_factory=dict)
    placements: tuple[Placement, ...] = ()
    claim_reasons: Mapping[int, str] = field(default_factory=dict)  # claim id -> why it waits
    resizes: tuple[Reservation, ...] = ()
    resize_reasons: Mapping[int, str] = field(default_factory=dict)  # claim id -> why its resize waits
    replicas: tuple[ReplicaPlacement, ...] = ()  # node-local claims' replicas, their hosts' counters reserved
    evictions: tuple[Eviction, ...] = ()  # caches' unused replicas released for jobs' template claims
    reservations: tuple[JobReservation, ...] = ()  # the top pending jobs that did not fit (backfill)
    preemptions: tuple[Preemption, ...] = ()  # runs to end for jobs of preemptive queues
    room_left: bool = False  # some host still has a free slot once the allocations are made
