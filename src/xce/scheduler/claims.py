"""Placing standalone claims into pools, and reserving their resizes: part of ``schedule``, pure like
the rest of it.

A resize's growth is reserved in the pool its claim is in, before new claims are placed (a claim
in use that runs out of room is the more urgent); one that does not fit waits, with a reason.
Each pending claim goes to the candidate pool (from its class) with the most
room that fits its size; the pool's free capacity is reserved within the
cycle so two claims never share the last bytes.  A claim that fits nowhere
stays PENDING with a reason naming each pool's free room.

A node-local claim's replicas are reserved on hosts' counters instead: each on the host it names,
when that host has room (made, if need be, by evicting caches' unused replicas there: ``caches``); the
rest on the hosts with the most of the counter free that hold none of its replicas yet.  What cannot
be placed waits, with a reason naming the hosts and their room.
"""

from __future__ import annotations

from collections.abc import Mapping

from xce.scheduler.caches import CacheFills
from xce.scheduler.plan import Placement, ReplicaPlacement, Reservation
from xce.scheduler.view import ClusterView
from xce.units import format_size


def place_claims(view: ClusterView, pool_free: dict[str, int] | None = None,
                 ) -> tuple[tuple[Placement, ...], dict[int, str]]:
    """Standalone claims into pools, largest free first; ``pool_free``: the room left once the same
    cycle's allocations took theirs (default: the view's)."""
    free = dict(pool_free) if pool_free is not None else {p.name: p.free for p in view.pools}
    placements: list[Placement] = []
    reasons: dict[int, str] = {}
    for claim in sorted(view.pending_claims, key=lambda c: c.id):
        if not claim.pools:
            placements.append(Placement(claim_id=claim.id, pool=None, size=claim.size))
            continue
        known = [p for p in claim.pools if p in free]
        fitting = [p for p in known if free[p] >= claim.size]
        if not fitting:
            if not known:
                reasons[claim.id] = f"its class draws on pool(s) {', '.join(claim.pools)}, none configured"
            else:
                room = ", ".join(f"{p} has {format_size(max(free[p], 0))} free" for p in known)
                reasons[claim.id] = f"no pool has room for {format_size(claim.size)}: {room}"
            continue
        pool = max(fitting, key=lambda p: (free[p], p))
        free[pool] -= claim.size
        placements.append(Placement(claim_id=claim.id, pool=pool, size=claim.size))
    return tuple(placements), reasons


def reserve_resizes(view: ClusterView, free: dict[str, int]) -> tuple[tuple[Reservation, ...], dict[int, str]]:
    """Each pending resize's growth in its claim's pool, oldest claim first; ``free`` is taken from."""
    out: list[Reservation] = []
    reasons: dict[int, str] = {}
    for r in sorted(view.pending_resizes, key=lambda r: r.claim_id):
        if r.pool is not None:
            if r.pool not in free:
                reasons[r.claim_id] = f"its pool {r.pool} is not configured"
                continue
            if free[r.pool] < r.grow:
                reasons[r.claim_id] = (f"pool {r.pool} has no room for {format_size(r.grow)} more: "
                                       f"{format_size(max(free[r.pool], 0))} free")
                continue
            free[r.pool] -= r.grow
        out.append(Reservation(claim_id=r.claim_id, pool=r.pool, size=r.size, grow=r.grow))
    return tuple(out), reasons


def place_replicas(view: ClusterView, host_free: Mapping[str, dict[str, float]], fills: CacheFills | None = None,
                   ) -> tuple[tuple[ReplicaPlacement, ...], dict[int, str]]:
    """Each waiting replica on a host with room on its claim's counter, oldest claim first;
    ``host_free``: each available host's counters free once this cycle's allocations took theirs
    (taken from here too, so two replicas never share the last bytes).  A named host short of room
    gets it by evicting caches' unused replicas there, least recently used first (``fills``); so do the
    hosts ``--replicas N`` chooses when fewer than N have room as they are."""
    out: list[ReplicaPlacement] = []
    reasons: dict[int, str] = {}
    for r in sorted(view.pending_replicas, key=lambda r: r.claim_id):
        short: list[str] = []

        def room(host: str) -> float:
            return host_free[host].get(r.counter, 0.0)

        def take(host: str, evict: tuple[int, ...] = ()) -> None:
            host_free[host][r.counter] = room(host) - r.size
            out.append(ReplicaPlacement(claim_id=r.claim_id, host=host, counter=r.counter, size=r.size, evict=evict))

        for host in r.hosts:
            if host not in host_free:
                short.append(f"host {host} is not available")
            elif r.counter not in host_free[host]:
                short.append(f"host {host} offers no {r.counter} counter")
            elif room(host) < r.size:
                victims = fills.victims(r.claim_id, r.counter, host, r.size - room(host)) if fills else None
                if victims and fills is not None:
                    fills.evict(victims, host, host_free[host])
                    take(host, tuple(v.claim_id for v in victims))
                else:
                    short.append(f"host {host} has {format_size(max(room(host), 0))} {r.counter} free")
            else:
                take(host)
        if r.more:
            chosen = set(r.taken) | set(r.hosts)
            fits = sorted((h for h in host_free if h not in chosen and room(h) >= r.size),
                          key=lambda h: (-room(h), h))[:r.more]
            for host in fits:
                take(host)
            made = len(fits)
            if made < r.more and fills is not None:  # room made by evicting caches' unused replicas, fewest first
                options = [(len(v), -room(h), h, v) for h in host_free if h not in chosen and h not in fits
                           and r.counter in host_free[h] and (v := fills.victims(r.claim_id, r.counter, h,
                                                                               r.size - room(h)))]
                for _, _, host, victims in sorted(options, key=lambda o: o[:3])[:r.more - made]:
                    fills.evict(victims, host, host_free[host])
                    take(host, tuple(v.claim_id for v in victims))
                    made += 1
            if made < r.more:
                left = r.more - made
                short.append(f"{left} more host{'s' if left != 1 else ''} with {format_size(r.size)} {r.counter} "
                             f"free wanted, none left")
        if short:
            reasons[r.claim_id] = f"replicas of {format_size(r.size)} wait: " + "; ".join(short)
    return tuple(out), reasons
