"""What claim agents observe of storage between facts: backend capacity per class, bytes used per claim.

These are readings, not decisions: they change all the time (every byte a job writes), and nothing
that happened depends on a past reading.  So they are kept here, in the leader's memory, and not
in the log: a fact per reading would grow the log with every scan of every claim, and replay would
rebuild numbers that are stale anyway.  The provisioner sends them with its periodic inventory
(``[claims] orphan_scan_interval``), which is what rate-limits them, and with the result of an op
whose reply carries them (a create, an expand), so a new or grown claim shows them at once.  After
a restart or a failover they are unknown until its next scan: pools then count on their configured
capacity alone, and claims show no used bytes.  Decisions made from them (a placement, a resize's reservation) are facts
as always, so replay never needs them.

Transfer progress is a reading too: how far a claim's stage-in or populate op has copied (bytes,
total, rate), sent by the agent running it every few seconds (rclone's stats interval).  A fact per
tick would put thousands of records into the log for each large transfer, all of them stale the
moment the next one arrives, and none a decision; what *is* decided (the op succeeded, failed, is
retried) is a fact as always.  A reading is kept only while its op is the claim's open op, and is
lost with the leader: the next tick after a failover brings it back.  A node-local claim's replicas are
filled each by its host's worker: their readings are kept per replica, as long as that replica's op is open.

A pool's room: its configured capacity is the cap (and the fallback when no provider reports one);
a provider that reports a smaller ``capacity_bytes`` lowers it; what is free is that capacity less
what placed claims reserve, and never more than the backend's reported ``available_bytes``.  A pool
drawn on by several classes takes the smallest report among their providers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.model.pools import pool_use

if TYPE_CHECKING:
    from xce.config import Config
    from xce.model import Model


@dataclass(frozen=True)
class Capacity:
    """One class's provider's last ``health`` reading."""

    capacity_bytes: int | None
    available_bytes: int | None
    time: float


@dataclass(frozen=True)
class Used:
    used_bytes: int
    time: float


@dataclass(frozen=True)
class PoolRoom:
    name: str
    configured: int
    capacity: int  # the configured capacity, or less if a provider reports less
    reserved: int  # what placed claims (and reserved resizes) take
    available: int | None  # what the backend reports free (None: no report)
    used: int | None  # bytes the pool's claims hold, as last listed (None: no report)

    @property
    def free(self) -> int:
        room = self.capacity - self.reserved
        return room if self.available is None else min(room, self.available)


@dataclass(frozen=True)
class Progress:
    """An op's transfer as its agent last saw it."""

    op_id: str
    bytes: int
    total_bytes: int | None
    rate: float | None  # bytes per second
    time: float

    def as_json(self) -> dict:
        return {"op_id": self.op_id, "bytes": self.bytes, "total_bytes": self.total_bytes, "rate": self.rate,
                "time": self.time}


@dataclass
class Observed:
    capacity: dict[str, Capacity] = field(default_factory=dict)  # class name -> its provider's reading
    used: dict[int, Used] = field(default_factory=dict)  # claim id -> its object's used bytes
    transfers: dict[int, Progress] = field(default_factory=dict)  # claim id -> its open op's transfer
    replica_transfers: dict[tuple[int, str], Progress] = field(default_factory=dict)  # (claim id, host) -> its populate

    def report_progress(self, model: Model, claim_id: int, op_id: str, copied: int, total: int | None,
                        rate: float | None, now: float) -> None:
        """A reading of a transfer in flight, the claim's own op's or one of its replicas' (the caller checked
        the agent holds the op's intent)."""
        claim = model.claims.get(claim_id)
        replica = claim.replica_by_op(op_id) if claim is not None else None
        if replica is not None:
            self.replica_transfers[(claim_id, replica.host)] = Progress(op_id, copied, total, rate, now)
        else:
            self.transfers[claim_id] = Progress(op_id, copied, total, rate, now)
        for cid in [c for c, p in self.transfers.items() if self.progress(model, c) is None]:
            del self.transfers[cid]  # its op is over: kept no longer than the op is open
        for key in [k for k in self.replica_transfers if self.replica_progress(model, *k) is None]:
            del self.replica_transfers[key]

    def progress(self, model: Model, claim_id: int) -> Progress | None:
        """The transfer of the claim's open op (None: no reading, or the op it was about is over)."""
        p = self.transfers.get(claim_id)
        claim = model.claims.get(claim_id)
        if p is None or claim is None or claim.op is None or claim.op.op_id != p.op_id:
            return None
        return p

    def replica_progress(self, model: Model, claim_id: int, host: str) -> Progress | None:
        """The transfer of the open op of the claim's replica on ``host`` (None: no reading, or it is over)."""
        p = self.replica_transfers.get((claim_id, host))
        claim = model.claims.get(claim_id)
        r = claim.replica_on(host) if claim is not None else None
        if p is None or r is None or r.op is None or r.op.op_id != p.op_id:
            return None
        return p

    def report_capacity(self, class_name: str, capacity_bytes: int | None, available_bytes: int | None,
                        now: float) -> None:
        if capacity_bytes is None and available_bytes is None:
            self.capacity.pop(class_name, None)
        else:
            self.capacity[class_name] = Capacity(capacity_bytes, available_bytes, now)

    def report_used(self, model: Model, class_name: str, objects: list[dict], now: float) -> None:
        """A class's listed objects: the used bytes of each one a claim of that class holds."""
        handles = {c.handle: c.id for c in model.claims.values()
                   if c.class_name == class_name and c.handle is not None and c.data_exists}
        seen = set()
        for o in objects:
            claim_id = handles.get(o.get("handle"))
            used = o.get("used_bytes")
            if claim_id is not None and isinstance(used, int) and used >= 0:
                self.used[claim_id] = Used(used, now)
                seen.add(claim_id)
        for claim_id in [i for i, c in ((i, model.claims.get(i)) for i in self.used)
                         if c is None or c.class_name == class_name and i not in seen]:
            del self.used[claim_id]  # gone, or no longer listed with a reading

    def note_used(self, model: Model, claim_id: int, used: int, now: float) -> None:
        """One claim's used bytes from its op's reply (a create, an expand): shown at once rather than
        at the next scan, which still replaces it."""
        if claim_id in model.claims and used >= 0:
            self.used[claim_id] = Used(used, now)

    def used_bytes(self, claim_id: int) -> int | None:
        got = self.used.get(claim_id)
        return got.used_bytes if got is not None else None

    def rooms(self, model: Model, config: Config) -> dict[str, PoolRoom]:
        reserved = pool_use(model)
        held: dict[str, int] = {}
        for claim_id, u in self.used.items():
            c = model.claims.get(claim_id)
            if c is not None and c.pool is not None:
                held[c.pool] = held.get(c.pool, 0) + u.used_bytes
        out = {}
        for p in config.pools:
            readings = [self.capacity[c.name] for c in config.claim_classes
                        if p.name in c.pools and c.name in self.capacity]
            caps = [r.capacity_bytes for r in readings if r.capacity_bytes is not None]
            avail = [r.available_bytes for r in readings if r.available_bytes is not None]
            configured = p.capacity_bytes
            out[p.name] = PoolRoom(name=p.name, configured=configured, capacity=min([configured, *caps]),
                                   reserved=reserved.get(p.name, 0), available=min(avail) if avail else None,
                                   used=held.get(p.name) if readings or p.name in held else None)
        return out


def pool_free(model: Model, config: Config, observed: Observed | None) -> dict[str, int]:
    """Each configured pool's free bytes (the configured capacity alone when nothing was observed)."""
    return {name: room.free for name, room in (observed or Observed()).rooms(model, config).items()}
