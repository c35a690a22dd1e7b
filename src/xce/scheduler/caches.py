"""Caches' replicas made on demand, and their unused replicas evicted for other claims: part of
``schedule``, pure like the rest of it.

A job that uses a cache claim (``xce claim create --cache``) goes where the cache has a READY replica
if one of those hosts has room (``core._place_with_claims``: the claim's reachable hosts).  When none
has, ``CacheFills.consider`` looks at the hosts it could go to instead:

- one whose replica of the cache is being made or filled, with the job's slots free: the job waits
  for it there;
- else one with no replica of it, the job's slots free and room on the cache's counter, if need be
  after evicting other caches' unattached replicas there, least recently used first: a replica starts
  there (a ``ReplicaPlacement`` with ``on_demand``) and the job waits for it.

A replica started on demand is charged the cache's size on its project's quota: when the tightest quota
covering the cache's class has less left (``ClusterView.cache_quotas``, less what the cycle's replicas
took already), none starts and the job waits, saying so.  The job's slots are not held while the replica fills (as a shared-class stage-in holds none): the job
stays pending and is placed on the host, like any other, once the replica is READY.  Within a cycle the
slots jobs wait for on a host are counted (``promised``), so a second job that would not fit there
starts a replica elsewhere rather than waiting for the same one.  A replica that a job placed in the
same cycle uses is never evicted, nor one attached (the view leaves those out); the applier re-checks.

A job whose template claims (``--scratch``) find no matching host with room on their counter gets it the
same way (``make_scratch_room``): caches' unused replicas on one host are evicted (``Eviction``) and the
job waits for them; nothing else takes those bytes in the cycle, and it is placed there in a later one.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Protocol

from xce.model.claims import ClaimState
from xce.scheduler.plan import Eviction, ReplicaPlacement
from xce.scheduler.view import CachedReplica, HostView, JobView, QuotaRoom
from xce.units import format_size


class Room(Protocol):
    """What a cycle knows of its hosts' room (``core._Cycle``)."""

    hosts: tuple[HostView, ...]
    free_slots: list[int]
    free_ctr: list[dict[str, float]]

    def fits(self, i: int, rusage: dict[str, float], want: int, end: float = ...) -> int: ...


class CacheFills:
    """One cycle's on-demand replicas, the slots jobs wait for on the hosts they fill on, and the
    replicas evicted to make room."""

    def __init__(self, evictable: tuple[CachedReplica, ...],
                 quotas: Mapping[int, QuotaRoom] = MappingProxyType({})) -> None:
        self.quotas = quotas
        self.charged: dict[str, float] = {}  # quota -> bytes this cycle's replicas are charged on it
        self.placements: list[ReplicaPlacement] = []
        self.evictions: list[Eviction] = []  # for jobs' template claims
        self.started: dict[int, set[str]] = {}  # claim -> hosts a replica of it starts on in this cycle
        self.promised: dict[str, int] = {}  # host -> slots jobs waiting for its fills expect there
        self.lru = sorted(evictable, key=lambda r: (r.last_used, r.claim_id, r.host))
        self.evicted: set[tuple[int, str]] = set()
        self.in_use: set[tuple[int, str]] = set()  # (claim, host): a job placed in this cycle uses it there

    def placed(self, job: JobView, hosts: tuple[str, ...]) -> None:
        """A job was placed on ``hosts``: its caches' replicas there are in use from now on."""
        for use in job.claims:
            if use.cache is not None:
                self.in_use.update((use.claim_id, h) for h in hosts)

    def consider(self, room: Room, cands: list[int], rusage: dict[str, float], job: JobView, reason: str) -> str:
        """A job that could not be placed where its cache is READY: wait for a replica being filled on a
        host with its slots free, or start one on such a host.  Returns why the job waits."""
        use = next((u for u in job.claims if u.cache is not None and u.state == ClaimState.READY), None)
        if use is None or any(u.state != ClaimState.READY for u in job.claims):
            return reason
        cache = use.cache
        assert cache is not None
        started = self.started.setdefault(use.claim_id, set())

        def free_for_job(i: int) -> bool:  # (on one host: a job spanning hosts waits for READY replicas)
            name = room.hosts[i].name
            return room.free_slots[i] - self.promised.get(name, 0) >= job.slots and \
                room.fits(i, rusage, job.slots) >= job.slots

        ready = sorted(use.reachable or ())
        head = f"claim {use.name}: " + (f"replicas READY on {', '.join(ready)}, none with room" if ready else
                                        "no replica READY")
        for i in cands:
            name = room.hosts[i].name
            if name in cache.filling | started and free_for_job(i):
                self.promised[name] = self.promised.get(name, 0) + job.slots
                return f"{head}; waiting for its replica on {name} to be filled"
        best: tuple[tuple[int, int, str], int, list[CachedReplica]] | None = None
        for i in cands:
            name = room.hosts[i].name
            if name in cache.taken or name in started or cache.counter not in room.hosts[i].counters_total \
                    or not free_for_job(i):
                continue
            short = cache.size - room.free_ctr[i].get(cache.counter, 0.0)
            victims = self.victims(use.claim_id, cache.counter, name, short)
            if victims is None:
                continue
            key = (-room.free_slots[i], len(victims), name)  # the most free slots, the fewest evictions
            if best is None or key < best[0]:
                best = (key, i, victims)
        if best is None:
            return reason
        quota = self.quotas.get(use.claim_id)
        cost = 0 if quota is None or quota.prepaid and not started else cache.size
        if quota is not None and cost > quota.left - self.charged.get(quota.quota, 0.0):
            return f"{head}; no replica starts: {quota.quota}, a replica is charged {format_size(int(cache.size))}"
        if quota is not None:
            self.charged[quota.quota] = self.charged.get(quota.quota, 0.0) + cost
        _, i, victims = best
        name = room.hosts[i].name
        self.evict(victims, name, room.free_ctr[i])
        room.free_ctr[i][cache.counter] = room.free_ctr[i].get(cache.counter, 0.0) - cache.size
        started.add(name)
        self.promised[name] = self.promised.get(name, 0) + job.slots
        self.placements.append(ReplicaPlacement(claim_id=use.claim_id, host=name, counter=cache.counter,
                                                size=cache.size, on_demand=True,
                                                evict=tuple(r.claim_id for r in victims)))
        evicting = f", evicting {len(victims)} unused cache replica{'s' if len(victims) != 1 else ''} there" \
            if victims else ""
        return f"{head}; a replica starts on {name}{evicting}: waiting for it to be filled"

    def make_scratch_room(self, room: Room, cands: list[int], job: JobView, rusage: dict[str, float]) -> str | None:
        """A job whose template claims (``--scratch``) find no host with room on their counters: evict
        caches' unused replicas, least recently used first, on the matching host with the job's slots free
        that needs the fewest.  The job waits for their release and is placed there after (the bytes are
        not handed out in this cycle: nobody else takes them meanwhile).  None: no host can be made room on."""
        best: tuple[tuple[int, int, str], str, list[CachedReplica]] | None = None
        for i in cands:
            name = room.hosts[i].name
            if room.fits(i, rusage, job.slots) < job.slots:
                continue
            victims: list[CachedReplica] = []
            for counter, amount in job.node_counters.items():
                short = amount - room.free_ctr[i].get(counter, 0.0)
                found = self.victims(-1, counter, name, short) if short > 0 else []
                if found is None:
                    break
                victims += found
            else:
                key = (len(victims), -room.free_slots[i], name)
                if victims and (best is None or key < best[0]):
                    best = (key, name, victims)
        if best is None:
            return None
        _, name, victims = best
        for r in victims:
            self.evicted.add((r.claim_id, name))
            self.evictions.append(Eviction(claim_id=r.claim_id, host=name, job_id=job.id))
        return (f"evicting {len(victims)} unused cache replica{'s' if len(victims) != 1 else ''} on {name} for its "
                "template claims: it goes there once they are released")

    def victims(self, claim_id: int, counter: str, host: str, need: float) -> list[CachedReplica] | None:
        """Other caches' unused replicas on ``host`` whose bytes make ``need`` more room on ``counter``
        for a replica of ``claim_id``, least recently used first ([]: there is room already; None: not
        even with all of them)."""
        victims: list[CachedReplica] = []
        for r in self.lru:
            if need <= 0:
                break
            if r.host == host and r.counter == counter and r.claim_id != claim_id \
                    and (r.claim_id, host) not in self.evicted and (r.claim_id, host) not in self.in_use:
                victims.append(r)
                need -= r.size
        return victims if need <= 0 else None

    def evict(self, victims: list[CachedReplica], host: str, free: dict[str, float]) -> None:
        """``victims`` go in this plan: their bytes are ``host``'s ``free`` counters' again."""
        for r in victims:
            self.evicted.add((r.claim_id, host))
            free[r.counter] = free.get(r.counter, 0.0) + r.size
