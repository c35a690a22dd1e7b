"""The store interface every backend implements (SQLite, PostgreSQL).

The store knows nothing about fact types: it keeps an ordered log of opaque
records, one latest snapshot, and the leader lease whose epoch fences every
append.  ``tests/store/contract.py`` is the one suite both backends pass.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class Record:
    """One stored fact: its log position, the epoch that wrote it, and the encoded fact."""

    position: int
    type: str
    version: int
    payload: str
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class Lease:
    holder: str
    epoch: int
    expires_at: float  # seconds since the epoch on the store's clock


@dataclass(frozen=True, slots=True)
class Snapshot:
    position: int
    data: bytes


class Store(abc.ABC):
    """A durable log with a leader lease.  Methods are thread-safe and blocking."""

    #: name used in ``xce ping`` and metrics
    backend: str = ""

    @abc.abstractmethod
    def append(self, epoch: int, records: Sequence[Record]) -> None:
        """Append ``records`` atomically, all or nothing, durable on return.

        Refused with ``StaleEpoch`` unless ``epoch`` is the lease's current
        epoch, and with ``PositionConflict`` unless the positions continue the
        log (first = ``last_position() + 1``, consecutive).
        """

    @abc.abstractmethod
    def read_after(self, position: int, limit: int = 10_000) -> list[Record]:
        """Records with position > ``position``, in order, at most ``limit``."""

    @abc.abstractmethod
    def last_position(self) -> int:
        """Position of the newest record ever appended (0 for an empty log), compaction aside."""

    @abc.abstractmethod
    def write_snapshot(self, epoch: int, snapshot: Snapshot) -> None:
        """Store ``snapshot`` as the latest, fenced like ``append``."""

    @abc.abstractmethod
    def load_snapshot(self) -> Snapshot | None:
        """The latest snapshot, or None."""

    @abc.abstractmethod
    def compact(self, epoch: int, upto: int) -> int:
        """Delete records with position <= ``upto`` (never past the latest snapshot); count removed."""

    @abc.abstractmethod
    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Take the leader lease if it is free, expired or already ours; None if someone else holds it.

        Every change of holder increments the epoch.
        """

    @abc.abstractmethod
    def renew_lease(self, holder: str, epoch: int, ttl: float) -> Lease:
        """Extend our lease; ``LeaseLost`` if the lease moved on to another holder or epoch."""

    @abc.abstractmethod
    def release_lease(self, holder: str, epoch: int) -> None:
        """Give the lease up at once (clean shutdown), if still ours."""

    @abc.abstractmethod
    def current_lease(self) -> Lease | None:
        """The lease as stored now, whoever holds it (for ``ping`` and tests)."""

    @abc.abstractmethod
    def close(self) -> None: ...


def check_continuous(last: int, records: Sequence[Record]) -> None:
    from xce.store.errors import PositionConflict

    for i, r in enumerate(records):
        if r.position != last + 1 + i:
            raise PositionConflict(
                f"append at position {r.position} does not continue the log at {last + i}")
