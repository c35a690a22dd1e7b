"""What storage pools hold: the bytes placed claims charge to each pool.

Pools are pool-scope counters whose capacity comes from the config; what is *used* is a fact of
the model (which claims were placed where), so it is computed here, once, for the scheduler's
snapshot, the plan applier's re-check and the API's ``/v1/pools`` and ``/v1/resources``.
"""

from __future__ import annotations

from xce.model.entities.claims import ClaimState
from xce.model.entities.snapshots import SnapshotState
from xce.model.state import State



def pool_use(model: State) -> dict[str, int]:
    """Bytes reserved in each pool: every claim whose object exists or may (retained ones included),
    with the size of a resize the scheduler has reserved; and every snapshot not yet RELEASED, in
    its claim's pool (``Snapshot.reserved_bytes``): a snapshot takes room on the storage behind the
    pool as a claim does, or less when its provider reports copy-on-write usage."""
    used = snapshot_use(model)
    for c in model.claims.values():
        if c.pool is not None and (c.state is not ClaimState.RELEASED or c.retained):
            used[c.pool] = used.get(c.pool, 0) + c.reserved_bytes
    return used


def snapshot_use(model: State) -> dict[str, int]:
    """The part of ``pool_use`` that snapshots reserve."""
    used: dict[str, int] = {}
    for s in model.snapshots.values():
        if s.pool is not None and s.state is not SnapshotState.RELEASED:
            used[s.pool] = used.get(s.pool, 0) + s.reserved_bytes
    return used
