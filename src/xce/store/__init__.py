"""The durable log, snapshots, leader lease and audit trail, behind one interface (``Store``)."""

from __future__ import annotations

import os

from xce.store.base import (ArchivedClaim, ArchivedJob, AuditQuery, AuditRecord, HistoryQuery, Lease, Member, Record,
                            Snapshot, Store, Usage, UsageQuery)
from xce.store.errors import LeaseLost, PositionConflict, StaleEpoch, StoreError, StoreUnavailable


def open_store(url: str | None, state_dir: str) -> Store:
    """``postgresql://...`` opens PostgreSQL; anything else (or None) the SQLite file in state_dir."""
    if url and url.startswith(("postgresql://", "postgres://")):
        from xce.store.postgres import PostgresStore

        return PostgresStore(url)
    from xce.store.sqlite import SQLiteStore

    path = url[len("sqlite:"):] if url and url.startswith("sqlite:") else os.path.join(state_dir, "xce.db")
    return SQLiteStore(path)


__all__ = ["ArchivedClaim", "ArchivedJob", "HistoryQuery", "Usage", "UsageQuery", "AuditQuery", "AuditRecord", "Lease", "LeaseLost", "Member", "PositionConflict", "Record", "Snapshot", "StaleEpoch", "Store",
           "StoreError", "StoreUnavailable", "open_store"]
