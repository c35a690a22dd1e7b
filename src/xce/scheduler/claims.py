"""Placing standalone claims into pools, and reserving their resizes: part of ``schedule``, pure like
the rest of it.

A resize's growth is reserved in the pool its claim is in, before new claims are placed (a claim
in use that runs out of room is the more urgent); one that does not fit waits, with a reason.
Each pending claim goes to the candidate pool (from its class) with the most
room that fits its size; the pool's free capacity is reserved within the
cycle so two claims never share the last bytes.  A claim that fits nowhere
stays PENDING with a reason naming each pool's free room.
"""

from __future__ import annotations

from xce.scheduler.plan import Placement, Reservation
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
