"""Model snapshots: the whole model at a log position, written to the store so that recovery loads it
and replays only the facts after it (``load_model``); the log behind it is compacted.

The leader writes one every ``[controller] snapshot_every`` facts, when it stops cleanly, and when it
took over a snapshot of an older format (``leadership.py``).  Always on the writer thread between two
batches, so the model it encodes equals the committed log.  Loading one is field-complete: the
snapshot at N plus the log after N is exactly the live model (``tests/model/test_snapshot_property.py``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import orjson

from xce.controller.memory import release_free_memory
from xce.model import Model, decode
from xce.model.audit import AuditOutbox
from xce.model.state import SNAPSHOT_FORMAT
from xce.store import Snapshot, Store

log = logging.getLogger("xce.controller")


@dataclass(frozen=True)
class Written:
    position: int
    size: int  # bytes of JSON
    seconds: float  # what the commit loop waited for: the encoding and the write (compaction is after)


def write_snapshot(store: Store, epoch: int, model: Model) -> Written:
    """Write a snapshot of ``model`` fenced by ``epoch``, then compact the log behind it."""
    # orjson, straight from the entities: a whole-model snapshot is the controller's one big
    # serialisation, and the commit loop waits for it (it must see one model)
    began = time.monotonic()
    data = model.snapshot_json()
    position = model.position
    store.write_snapshot(epoch, Snapshot(position=position, data=data))
    took = time.monotonic() - began
    size = len(data)
    del data
    store.compact(epoch, position)
    release_free_memory()  # the encoding's pages: the snapshot is the controller's peak
    log.info("snapshot at position %d (%d bytes, %.3f s)", position, size, took)
    return Written(position, size, took)


@dataclass
class Recovered:
    """What start-up rebuilds: the model, and whether its snapshot is of an older format."""

    model: Model
    old_snapshot: bool = False


def catch_up(store: Store, model: Model) -> bool:
    """Fold every record after ``model.position`` into ``model``; False (and nothing folded past the
    gap) if the log no longer holds the records that follow it (compacted behind a newer snapshot)."""
    while True:
        records = store.read_after(model.position)
        if not records:
            return True
        for rec in records:
            if rec.position != model.position + 1:
                return False
            model.apply(rec.position, decode(rec.type, rec.version, rec.payload))


def load_model(store: Store) -> Recovered:
    """Latest snapshot plus every fact after it.

    The model comes back with an audit outbox holding the records its replay derived (and those
    of a format-1 snapshot): the caller hands them to ``Store.backfill_audit``, which keeps only
    what the trail lacks.
    """
    snap = store.load_snapshot()
    data = orjson.loads(snap.data) if snap else None
    model = Model.from_snapshot(data) if data else Model()
    if model.audit_outbox is None:
        model.audit_outbox = AuditOutbox()
    recovered = Recovered(model, old_snapshot=data is not None and data.get("format") != SNAPSHOT_FORMAT)
    if not catch_up(store, model):
        raise RuntimeError(f"log gap after position {model.position}")
    return recovered
