"""What a snapshot is: its state enum and the ``Snapshot`` record.  Plain data.

How a snapshot changes is in ``xce.model.snapshots.lifecycle``; what requests may do to one is in
``xce.model.snapshots.decide``; what the provisioner does with its ops is in
``xce.model.snapshots.agents``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from xce.model.entities.ops import Op, OpKind


class SnapshotState(enum.StrEnum):
    PENDING = "PENDING"  # asked for; its create_snapshot op is open (attempts show on it)
    READY = "READY"  # made: it can be cloned
    RELEASING = "RELEASING"  # deleted: its delete_snapshot op is open
    RELEASED = "RELEASED"
    FAILED = "FAILED"


S = SnapshotState
LIVE = frozenset({S.PENDING, S.READY, S.RELEASING, S.FAILED})  # holds its name and quota


@dataclass
class Snapshot:
    """A read-only point-in-time copy of a claim's data, owned by a user and a project.  It
    outlives its claim (as CSI's snapshots do) until it is deleted itself."""

    id: int
    name: str
    project: str
    owner: str
    claim_id: int  # the claim it was taken of (which may be gone since)
    claim_name: str
    class_name: str  # the claim's class: its provider holds the snapshot
    size_bytes: int  # the claim's size when it was asked for
    access_mode: str  # the claim's; a clone takes it unless told otherwise
    created: float
    state: SnapshotState = SnapshotState.PENDING
    handle: str | None = None
    actual_bytes: int | None = None  # what the provider says it took (the volume's size then)
    pool: str | None = None  # its claim's pool, where its bytes are reserved
    used_bytes: int | None = None  # what the provider said the snapshot holds when it was taken
    op: Op | None = None
    op_counts: dict[str, int] = field(default_factory=dict)
    last_error: str | None = None
    stderr_tail: str = ""
    delete_requested: bool = False
    deleted_by: str | None = None
    data_exists: bool = False  # a provider object exists (or may: a create_snapshot was attempted)
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}
    # a snapshot taken because run ``run`` of job ``job_id`` was preempted: its create waits for that
    # run's attachments of the claim to be gone (``xce.model.preempt_snapshots``)
    job_id: int | None = None
    run: int | None = None
    ops: list[dict[str, Any]] = field(default_factory=list)  # every attempt, as claims keep them

    def __post_init__(self) -> None:
        self.state = SnapshotState(self.state)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def charged_bytes(self) -> int:
        """Quota: the larger of the claim's size and what the provider says it took."""
        return max(self.size_bytes, self.actual_bytes or 0)

    @property
    def reserved_bytes(self) -> int:
        """Its room in its pool: its charge, or less if its provider reported that it holds less (a
        copy-on-write snapshot shares blocks with its claim; a read-only one never holds more than it
        did when taken)."""
        return min(self.charged_bytes, self.used_bytes) if self.used_bytes is not None else self.charged_bytes

    @property
    def being_made(self) -> bool:
        return self.op is not None and self.op.kind is OpKind.CREATE_SNAPSHOT

    def waiting(self) -> str | None:
        op = self.op
        if op is None:
            return None
        return f"{op.kind.value} (op {op.op_id}" + (f", attempt {op.attempts})" if op.attempts else ")")
