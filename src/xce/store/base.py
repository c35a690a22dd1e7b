"""The store interface every backend implements (SQLite, PostgreSQL).

The store knows nothing about fact types: it keeps an ordered log of opaque
records, one latest snapshot, the leader lease whose epoch fences every
append, and the audit trail.  ``tests/store/contract.py`` is the one suite
both backends pass.

The audit trail is a table beside the log, not part of the model: it grows
with traffic, so it lives where it is queried (``query_audit``) and never in
memory or in a snapshot.  Its rows arrive with the facts they came from, in
the same transaction (``append(..., audit=...)``), so an acknowledged request
always has its record and a batch that did not commit has none.  Each row is
keyed by the log position of its fact and its index among that fact's rows;
``backfill_audit`` relies on that key to make replay after a restart (and the
migration of an old snapshot's trail) add nothing twice.

The archive is two tables beside the log, too (``xce_archive_jobs``, ``xce_archive_claims``): the
finished jobs and RELEASED claims retired from the live model, each with its indexed columns and
its whole document.  They arrive with their retirement fact (``append(..., jobs=, claims=)``), in
the same transaction, so a retired record is never lost and never half written; they are read by
id, by name, page by page (``query_history``) and summed (``usage``).  Compaction never touches
them: the log before the newest snapshot may go, its archived records are already in their tables.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass
from typing import Sequence

from xce.records import ArchivedClaim, ArchivedJob, AuditQuery, AuditRecord, HistoryQuery, Usage, UsageQuery
from xce.store.errors import PositionConflict


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
class Member:
    """A controller that shares this store, as it last announced itself (``announce``).

    ``url`` is the address it advertises (from its own configuration), ``position`` how far into
    the log its model is, ``age`` the seconds since it last announced, on the store's clock."""

    holder: str
    url: str
    position: int
    age: float


@dataclass(frozen=True, slots=True)
class Snapshot:
    position: int
    data: bytes


class Store(abc.ABC):
    """A durable log with a leader lease.  Methods are thread-safe and blocking."""

    #: name used in ``xce ping`` and metrics
    backend: str = ""

    @abc.abstractmethod
    def append(self, epoch: int, records: Sequence[Record], audit: Sequence[AuditRecord] = (),
               jobs: Sequence[ArchivedJob] = (), claims: Sequence[ArchivedClaim] = ()) -> None:
        """Append ``records``, the ``audit`` records they came with and the ``jobs`` and ``claims``
        their retirement facts archive, atomically, all or nothing, durable on return.  An archived
        id already in its table is kept as it is (ids are never reused).

        Refused with ``StaleEpoch`` unless ``epoch`` is the lease's current
        epoch, and with ``PositionConflict`` unless the positions continue the
        log (first = ``last_position() + 1``, consecutive) and every audit
        record's position is one of this batch's.  The audit records get their
        ``seq`` in the order given.
        """

    @abc.abstractmethod
    def backfill_audit(self, epoch: int, audit: Sequence[AuditRecord]) -> int:
        """Write audit records derived again from facts already in the log; how many were new.

        The records of a position the trail already holds are skipped (all of that position's,
        so replaying a fact never adds to its records).  Fenced like ``append``.  Used when a
        controller replays the log's tail at start-up and when an old snapshot's trail moves in.
        """

    @abc.abstractmethod
    def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """Audit records matching ``query``, newest (highest ``seq``) first, at most ``query.limit``.

        Reads never wait behind an append in progress (backends read on their own connection).
        """

    @abc.abstractmethod
    def archived_jobs(self, ids: Sequence[int]) -> list[ArchivedJob]:
        """The archived jobs among ``ids`` (any order; at most ``ARCHIVE_IDS`` ids)."""

    @abc.abstractmethod
    def archived_claims(self, ids: Sequence[int]) -> list[ArchivedClaim]:
        """The archived claims among ``ids`` (any order; at most ``ARCHIVE_IDS`` ids)."""

    @abc.abstractmethod
    def archived_claims_named(self, name: str, projects: Sequence[str] | None) -> list[ArchivedClaim]:
        """The newest archived claim named ``name`` in each of ``projects`` (None: every project)."""

    @abc.abstractmethod
    def query_history(self, query: HistoryQuery) -> list[ArchivedJob]:
        """Archived jobs matching ``query``, newest (highest id) first, at most ``query.limit``."""

    @abc.abstractmethod
    def usage(self, query: UsageQuery) -> list[Usage]:
        """Per-project totals of the archived jobs that ended and claims released in the window, by project."""

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
    def announce(self, holder: str, url: str, position: int) -> None:
        """Record that controller ``holder`` is alive at ``url`` with its model at ``position``.

        Not fenced: standbys announce too.  A row of another holder with the same ``url`` (an
        earlier life of the same controller) is replaced, and rows not announced for
        ``MEMBER_FORGET`` seconds are dropped.
        """

    @abc.abstractmethod
    def members(self) -> list[Member]:
        """Every controller that announced itself in the last ``MEMBER_FORGET`` seconds, by url."""

    @abc.abstractmethod
    def leave(self, holder: str) -> None:
        """Forget ``holder`` at once (clean shutdown)."""

    @abc.abstractmethod
    def close(self) -> None: ...


#: seconds after which a controller that stopped announcing itself is forgotten
MEMBER_FORGET = 600.0


def check_continuous(last: int, records: Sequence[Record], audit: Sequence[AuditRecord] = ()) -> None:
    for i, r in enumerate(records):
        if r.position != last + 1 + i:
            raise PositionConflict(
                f"append at position {r.position} does not continue the log at {last + i}")
    if audit:
        lo, hi = (records[0].position, records[-1].position) if records else (1, 0)
        for a in audit:
            if not lo <= a.position <= hi:
                raise PositionConflict(f"audit record at position {a.position} is not from this batch ({lo}..{hi})")


def prefix_bound(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in code-point order (which
    is UTF-8 byte order, SQLite's BINARY and PostgreSQL's "C" collation): a prefix filter becomes
    the index-friendly range ``prefix <= x < bound``.  None when there is no such bound."""
    p = prefix.rstrip("\U0010ffff")
    if not p:
        return None
    nxt = ord(p[-1]) + 1
    return p[:-1] + chr(0xE000 if 0xD800 <= nxt <= 0xDFFF else nxt)  # surrogates are not characters


def audit_where(query: AuditQuery, ph: str) -> tuple[str, list[object]]:
    """The WHERE clause (with ``ph`` as the placeholder) and parameters of ``query``, for both
    backends: one definition of what each filter means."""
    clauses: list[str] = []
    params: list[object] = []

    def add(sql: str, *values: object) -> None:
        clauses.append(sql.replace("?", ph))
        params.extend(values)

    if query.since is not None:
        add("time >= ?", query.since)
    if query.until is not None:
        add("time < ?", query.until)
    if query.user is not None:
        add("user_name = ?", query.user)
    if query.action is not None:
        add("action = ?", query.action)
    if query.result is not None:
        add("result = ?", query.result)
    if query.target:
        bound = prefix_bound(query.target)
        if bound is None:
            add("target >= ?", query.target)
        else:
            add("target >= ? AND target < ?", query.target, bound)
    if query.before_seq is not None:
        add("seq < ?", query.before_seq)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


AUDIT_COLUMNS = "seq, time, user_name, action, target, result, detail, position, idx"


def audit_row(row: Sequence) -> AuditRecord:
    seq, time, user, action, target, result, detail, position, index = row
    return AuditRecord(time=time, user=user, action=action, target=target, result=result, detail=detail,
                       position=position, index=index, seq=seq)


#: ids one ``archived_jobs``/``archived_claims`` call takes at most
ARCHIVE_IDS = 500

ARCHIVE_JOB_COLUMNS = ("id, user_name, project, queue, name, state, array_parent, slots, submit_time, start_time,"
                       " end_time, position, doc, cpu_seconds, gpu_seconds")
ARCHIVE_CLAIM_COLUMNS = "id, name, project, owner, form, class_name, job_id, size_bytes, created, released, position, doc"


def archived_job_values(j: ArchivedJob) -> tuple:
    return (j.id, j.user, j.project, j.queue, j.name, j.state, j.array_parent, j.slots, j.submit_time,
            j.start_time, j.end_time, j.position, j.doc, j.cpu_seconds, j.gpu_seconds)


def archived_claim_values(c: ArchivedClaim) -> tuple:
    return (c.id, c.name, c.project, c.owner, c.form, c.class_name, c.job_id, c.size_bytes, c.created,
            c.released, c.position, c.doc)


def archived_job_row(row: Sequence) -> ArchivedJob:
    (id_, user, project, queue, name, state, parent, slots, submit, start, end, position, doc, cpu, gpu) = row
    return ArchivedJob(id=id_, user=user, project=project, queue=queue, name=name, state=state, array_parent=parent,
                       slots=slots, submit_time=submit, start_time=start, end_time=end, position=position,
                       doc=doc if isinstance(doc, str) else bytes(doc).decode(), cpu_seconds=cpu, gpu_seconds=gpu)


def archived_claim_row(row: Sequence) -> ArchivedClaim:
    id_, name, project, owner, form, class_name, job_id, size, created, released, position, doc = row
    return ArchivedClaim(id=id_, name=name, project=project, owner=owner, form=form, class_name=class_name,
                         job_id=job_id, size_bytes=size, created=created, released=released, position=position,
                         doc=doc if isinstance(doc, str) else bytes(doc).decode())


class _Where:
    def __init__(self, ph: str) -> None:
        self.ph = ph
        self.clauses: list[str] = []
        self.params: list[object] = []

    def add(self, sql: str, *values: object) -> None:
        self.clauses.append(sql.replace("?", self.ph))
        self.params.extend(values)

    def sql(self) -> str:
        return (" WHERE " + " AND ".join(self.clauses)) if self.clauses else ""


def history_where(query: HistoryQuery, ph: str) -> tuple[str, list[object]]:
    """The WHERE clause of ``query`` over ``xce_archive_jobs`` (one definition for both backends)."""
    w = _Where(ph)
    if query.since is not None:
        w.add("end_time >= ?", query.since)
    if query.until is not None:
        w.add("end_time < ?", query.until)
    if query.user is not None:
        w.add("user_name = ?", query.user)
    if query.project is not None:
        w.add("project = ?", query.project)
    if query.name is not None:
        w.add("name = ?", query.name)
    if query.states:
        w.add(f"state IN ({', '.join('?' * len(query.states))})", *query.states)
    if query.array_parent is not None:
        w.add("array_parent = ?", query.array_parent)
    if query.before_id is not None:
        w.add("id < ?", query.before_id)
    if query.max_position is not None:
        w.add("position <= ?", query.max_position)
    return w.sql(), w.params


def usage_where(query: UsageQuery, ph: str, time_column: str, user_column: str) -> tuple[str, list[object]]:
    w = _Where(ph)
    if query.since is not None:
        w.add(f"{time_column} >= ?", query.since)
    if query.until is not None:
        w.add(f"{time_column} < ?", query.until)
    if query.user is not None:
        w.add(f"{user_column} = ?", query.user)
    if query.project is not None:
        w.add("project = ?", query.project)
    if query.max_position is not None:
        w.add("position <= ?", query.max_position)
    return w.sql(), w.params


def usage_sql(query: UsageQuery, ph: str) -> tuple[str, list[object], str, list[object]]:
    """The two aggregate queries (jobs by end time, claims by release time) and their parameters: a row
    per project, or per project and owner (``by_user``)."""
    jw, jp = usage_where(query, ph, "end_time", "user_name")
    cw, cp = usage_where(query, ph, "released", "owner")
    # (PostgreSQL refuses a constant in GROUP BY: the project's whole is grouped by project alone)
    job_user, job_by, claim_user, claim_by = (("user_name", ", user_name", "owner", ", owner") if query.by_user
                                              else ("''", "", "''", ""))
    jobs = (f"SELECT project, {job_user}, COUNT(*), COALESCE(SUM((end_time - start_time) * slots), 0), "
            f"COALESCE(SUM(cpu_seconds), 0), COALESCE(SUM(gpu_seconds), 0) FROM xce_archive_jobs{jw} "
            f"GROUP BY project{job_by}")
    claims = (f"SELECT project, {claim_user}, COUNT(*), COALESCE(SUM(size_bytes * (released - created)), 0) "
              f"FROM xce_archive_claims{cw} GROUP BY project{claim_by}")
    return jobs, jp, claims, cp


def merge_usage(job_rows: Sequence[Sequence], claim_rows: Sequence[Sequence]) -> list[Usage]:
    out: dict[tuple[str, str], Usage] = {}
    for project, user, n, seconds, cpu, gpu in job_rows:
        out[(project, user)] = Usage(project=project, user=user, jobs=int(n), slot_seconds=float(seconds),
                                     cpu_seconds=float(cpu), gpu_seconds=float(gpu))
    for project, user, n, byte_seconds in claim_rows:
        u = out.get((project, user), Usage(project=project, user=user))
        out[(project, user)] = dataclasses.replace(u, claims=int(n), claim_byte_seconds=float(byte_seconds))
    return [out[k] for k in sorted(out)]


def newest_per_project(rows: Sequence[ArchivedClaim]) -> list[ArchivedClaim]:
    """The first (newest) row of each project, in the order given."""
    seen: set[str] = set()
    out = []
    for r in rows:
        if r.project not in seen:
            seen.add(r.project)
            out.append(r)
    return out
