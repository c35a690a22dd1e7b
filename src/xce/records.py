"""Records the store keeps beside the log: the audit trail's records and how they are queried.

Plain data at the bottom of the house: the model writes audit records (its folds fill an outbox
the controller appends with their facts), the store keeps and queries them, the API shows them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One audit record: who did what to which target, and how it ended (``ok`` or a refusal code).

    ``position`` is the log position of the fact it came with (0 for records migrated from a
    snapshot of format 1, which did not keep it) and ``index`` its place among that fact's records.
    ``seq`` is assigned by the store when the record is written: it only grows, in commit order.
    """

    time: float
    user: str
    action: str
    target: str
    result: str
    detail: str = ""
    position: int = 0
    index: int = 0
    seq: int = 0


@dataclass(frozen=True, slots=True)
class AuditQuery:
    """Which audit records to read: all filters optional, newest first, ``before_seq`` to page on.

    ``since`` is inclusive and ``until`` exclusive (seconds since the Unix epoch); ``target`` is a
    prefix (``claim/ckpt``, ``job/12``); ``user``, ``action`` and ``result`` match exactly.
    """

    since: float | None = None
    until: float | None = None
    user: str | None = None
    target: str | None = None
    action: str | None = None
    result: str | None = None
    before_seq: int | None = None
    limit: int = 100


# ---------------------------------------------------------------- the archive (bounded history)


@dataclass(frozen=True, slots=True)
class ArchivedJob:
    """A finished job retired from the live model: its indexed columns and its whole document.

    ``doc`` is the job's every field and history as the model held it when it was retired (JSON);
    ``position`` is the log position of the retirement fact that moved it here."""

    id: int
    user: str
    project: str
    queue: str
    name: str
    state: str
    array_parent: int | None
    slots: int
    submit_time: float
    start_time: float | None
    end_time: float
    position: int
    doc: str
    cpu_seconds: float | None = None  # user + system CPU of its last run (None: not measured, or never ran)
    gpu_seconds: float | None = None  # GPUs its last run held times the seconds it ran (None: none held)


@dataclass(frozen=True, slots=True)
class ArchivedClaim:
    """A RELEASED claim retired from the live model (``doc`` as for ``ArchivedJob``); ``released``
    is when it became RELEASED."""

    id: int
    name: str
    project: str
    owner: str
    form: str
    class_name: str
    job_id: int | None
    size_bytes: int
    created: float
    released: float
    position: int
    doc: str


@dataclass(frozen=True, slots=True)
class HistoryQuery:
    """Which archived jobs to read, newest (highest id) first: every filter optional.

    ``since`` is inclusive and ``until`` exclusive on the job's end time; ``name`` matches exactly;
    ``states`` any of them; ``before_id`` pages on; ``max_position`` leaves out what was retired after
    that log position (the caller read the live model at it, so those jobs were still live there)."""

    since: float | None = None
    until: float | None = None
    user: str | None = None
    project: str | None = None
    states: tuple[str, ...] = ()
    name: str | None = None
    array_parent: int | None = None
    before_id: int | None = None
    max_position: int | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class Usage:
    """Totals of one project over a window: jobs finished, slot-seconds their last runs used, and the
    byte-seconds of claims released in it (size times life)."""

    project: str
    jobs: int = 0
    slot_seconds: float = 0.0
    claims: int = 0
    claim_byte_seconds: float = 0.0
    user: str = ""  # one user's share of the project (``UsageQuery.by_user``); "" the project's whole
    cpu_seconds: float = 0.0  # user + system CPU seconds of those jobs' last runs
    gpu_seconds: float = 0.0  # GPU-seconds of those jobs' last runs: GPUs held times seconds run


@dataclass(frozen=True, slots=True)
class UsageQuery:
    """Jobs that ended and claims released in [``since``, ``until``); ``user`` limits both to one
    owner; ``max_position`` as in ``HistoryQuery``."""

    since: float | None = None
    until: float | None = None
    user: str | None = None
    project: str | None = None
    max_position: int | None = None
    by_user: bool = False  # a row per project and user (jobs by owner, claims by owner), not per project
