"""PostgreSQL store: for a controller pair that fails over, one database shared by both.

Same tables and semantics as the SQLite store (``xce_facts``, ``xce_head``,
``xce_snapshot``, ``xce_lease``, ``xce_audit``).  Every fenced write is one transaction that
first locks the lease row ``FOR SHARE`` (so a new holder's ``acquire_lease``,
which updates that row, waits for in-flight appends and every later append sees
the new epoch) and the head row ``FOR UPDATE`` (so two writers cannot both pass
the continuity check).  Lease times come from the database server's clock, so
controllers on machines whose clocks disagree still agree on expiry.

Three connections, each behind its own lock: one for the log and snapshots, one
for the lease, so a renewal never waits behind a large append in this process,
and one for audit queries, so a large query never holds up group commit.
Audit records are written in the append's transaction, after the head row is
locked: appends are serialized by that lock, so the trail's ``seq`` (an
identity column, assigned at insert) grows in commit order, and a reader
paging by ``seq`` never finds a smaller one committed behind its back.  The
``target`` column has the "C" collation so that a prefix is an index range.
A transaction left open by a paused process is ended by the server after
``IDLE_IN_TRANSACTION_MS`` (it holds the lease row: a standby could not take over).
A connection that breaks is dropped; the call that saw it raises
``StoreUnavailable`` and the next call reconnects.  Calls are never retried
here: a failed append may or may not be durable, and only the caller can
re-read the log to find out.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Sequence, TypeVar

import psycopg
from psycopg import conninfo as pg_conninfo

from xce.store.base import (ARCHIVE_CLAIM_COLUMNS, ARCHIVE_IDS, ARCHIVE_JOB_COLUMNS, AUDIT_COLUMNS, MEMBER_FORGET,
                            ArchivedClaim, ArchivedJob, AuditQuery, AuditRecord, HistoryQuery, Lease, Member, Record,
                            Snapshot, Store, Usage, UsageQuery, archived_claim_row, archived_claim_values,
                            archived_job_row, archived_job_values, audit_row, audit_where, check_continuous,
                            history_where, merge_usage, newest_per_project, usage_sql)
from xce.store.errors import LeaseLost, StaleEpoch, StoreUnavailable

T = TypeVar("T")

#: key for ``pg_advisory_xact_lock`` around schema creation (any constant; "xce" in ASCII)
SCHEMA_LOCK_KEY = 0x786365

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS xce_facts (
        position BIGINT PRIMARY KEY,
        epoch    BIGINT NOT NULL,
        type     TEXT NOT NULL,
        version  INTEGER NOT NULL,
        payload  TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS xce_head (
        id            INTEGER PRIMARY KEY CHECK (id = 1),
        last_position BIGINT NOT NULL
    )""",
    "INSERT INTO xce_head (id, last_position) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
    """CREATE TABLE IF NOT EXISTS xce_snapshot (
        id       INTEGER PRIMARY KEY CHECK (id = 1),
        position BIGINT NOT NULL,
        data     BYTEA NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS xce_lease (
        name       TEXT PRIMARY KEY,
        holder     TEXT,
        epoch      BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "INSERT INTO xce_lease (name, holder, epoch, expires_at) VALUES ('leader', NULL, 0, 0)"
    " ON CONFLICT (name) DO NOTHING",
    """CREATE TABLE IF NOT EXISTS xce_archive_jobs (
        id           BIGINT PRIMARY KEY,
        user_name    TEXT NOT NULL,
        project      TEXT NOT NULL,
        queue        TEXT NOT NULL,
        name         TEXT NOT NULL,
        state        TEXT NOT NULL,
        array_parent BIGINT,
        slots        INTEGER NOT NULL,
        submit_time  DOUBLE PRECISION NOT NULL,
        start_time   DOUBLE PRECISION,
        end_time     DOUBLE PRECISION NOT NULL,
        position     BIGINT NOT NULL,
        doc          TEXT NOT NULL
    )""",
    # an archive written before runs' usage was recorded
    "ALTER TABLE xce_archive_jobs ADD COLUMN IF NOT EXISTS cpu_seconds DOUBLE PRECISION",
    # ... or before GPUs were devices
    "ALTER TABLE xce_archive_jobs ADD COLUMN IF NOT EXISTS gpu_seconds DOUBLE PRECISION",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_end ON xce_archive_jobs (end_time)",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_user ON xce_archive_jobs (user_name, id)",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_project ON xce_archive_jobs (project, id)",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_name ON xce_archive_jobs (name, id)",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_state ON xce_archive_jobs (state, id)",
    "CREATE INDEX IF NOT EXISTS xce_archive_jobs_array ON xce_archive_jobs (array_parent)"
    " WHERE array_parent IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS xce_archive_claims (
        id         BIGINT PRIMARY KEY,
        name       TEXT NOT NULL,
        project    TEXT NOT NULL,
        owner      TEXT NOT NULL,
        form       TEXT NOT NULL,
        class_name TEXT NOT NULL,
        job_id     BIGINT,
        size_bytes BIGINT NOT NULL,
        created    DOUBLE PRECISION NOT NULL,
        released   DOUBLE PRECISION NOT NULL,
        position   BIGINT NOT NULL,
        doc        TEXT NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS xce_archive_claims_name ON xce_archive_claims (name, project, id)",
    "CREATE INDEX IF NOT EXISTS xce_archive_claims_job ON xce_archive_claims (job_id) WHERE job_id IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS xce_archive_claims_released ON xce_archive_claims (released)",
    """CREATE TABLE IF NOT EXISTS xce_audit (
        seq       BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        position  BIGINT NOT NULL,
        idx       INTEGER NOT NULL,
        time      DOUBLE PRECISION NOT NULL,
        user_name TEXT NOT NULL,
        action    TEXT NOT NULL,
        target    TEXT COLLATE "C" NOT NULL,
        result    TEXT NOT NULL,
        detail    TEXT NOT NULL,
        UNIQUE (position, idx)
    )""",
    "CREATE INDEX IF NOT EXISTS xce_audit_user ON xce_audit (user_name, seq)",
    "CREATE INDEX IF NOT EXISTS xce_audit_target ON xce_audit (target, seq)",
    "CREATE INDEX IF NOT EXISTS xce_audit_time ON xce_audit (time)",
    """CREATE TABLE IF NOT EXISTS xce_members (
        holder   TEXT PRIMARY KEY,
        url      TEXT NOT NULL,
        position BIGINT NOT NULL,
        seen_at  DOUBLE PRECISION NOT NULL
    )""",
]

#: the audit records of a batch, from arrays, in the order given (their seq follows that order)
INSERT_AUDIT = (
    "INSERT INTO xce_audit (position, idx, time, user_name, action, target, result, detail)"
    " SELECT p, i, t, u, a, g, r, d FROM unnest(%s::bigint[], %s::int[], %s::float8[], %s::text[], %s::text[],"
    " %s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS x(p, i, t, u, a, g, r, d, n) ORDER BY n")


def _audit_arrays(audit: Sequence[AuditRecord]) -> tuple[list, ...]:
    return ([a.position for a in audit], [a.index for a in audit], [a.time for a in audit],
            [a.user for a in audit], [a.action for a in audit], [a.target for a in audit],
            [a.result for a in audit], [a.detail for a in audit])

#: milliseconds a transaction of ours may sit idle (its process paused) before the server ends it:
#: our transactions send their statements back to back, so only a stopped process waits this long
IDLE_IN_TRANSACTION_MS = 3000

#: the database server's clock, in seconds since the Unix epoch
NOW = "extract(epoch from clock_timestamp())::float8"

#: connection settings applied unless the DSN sets them: bounded connects, and dead peers
#: detected in seconds rather than after the kernel's default TCP timeout (many minutes)
CONNECT_DEFAULTS = {
    "connect_timeout": "10",
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
    "application_name": "xce",
}


def describe_dsn(dsn: str) -> str:
    """``dsn`` without its password, for messages."""
    try:
        params = pg_conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable PostgreSQL DSN>"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{params.get('dbname', '')}"


class _Connection:
    """One psycopg connection behind a lock, opened on first use and reopened after it breaks."""

    def __init__(self, dsn: str, where: str) -> None:
        self._dsn = dsn
        self._where = where
        self._lock = threading.Lock()
        self._conn: psycopg.Connection | None = None
        self._closed = False

    def _connect(self) -> psycopg.Connection:
        conn = psycopg.connect(self._dsn, autocommit=True)
        try:
            # "durable on return" is the Store contract, whatever the server's default
            conn.execute("SET synchronous_commit TO on")
            # a controller paused (SIGSTOP, a VM freeze) inside a fenced write holds the lease row
            # FOR SHARE: the standby's acquire_lease would wait for it forever.  The server ends such
            # a transaction (rolled back: never acknowledged) after this long
            conn.execute(f"SET idle_in_transaction_session_timeout TO {IDLE_IN_TRANSACTION_MS}")
        except BaseException:
            conn.close()
            raise
        return conn

    def run(self, fn: Callable[[psycopg.Connection], T]) -> T:
        """``fn(conn)`` under the lock; psycopg errors become ``StoreUnavailable``."""
        with self._lock:
            if self._closed:
                raise StoreUnavailable(f"PostgreSQL store {self._where} is closed")
            try:
                if self._conn is not None and (self._conn.closed or self._conn.broken):
                    self._drop()
                if self._conn is None:
                    self._conn = self._connect()
                return fn(self._conn)
            except psycopg.Error as e:
                self._drop_unless_idle()
                raise StoreUnavailable(f"PostgreSQL {self._where}: {e}") from e
            except BaseException:
                # StaleEpoch, PositionConflict or LeaseLost (their transaction was rolled back on
                # the way out), or an interrupt that may have left the connection mid-query
                self._drop_unless_idle()
                raise

    def _drop_unless_idle(self) -> None:
        """Keep the connection only if it is healthy and outside any transaction."""
        conn = self._conn
        if conn is not None and (conn.closed or conn.broken
                                 or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE):
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._drop()


class PostgresStore(Store):
    backend = "postgresql"

    def __init__(self, dsn: str) -> None:
        try:
            params = pg_conninfo.conninfo_to_dict(dsn)
        except psycopg.Error as e:
            raise StoreUnavailable(f"bad PostgreSQL DSN: {e}") from e
        extra = {k: v for k, v in CONNECT_DEFAULTS.items() if k not in params}
        self._dsn = pg_conninfo.make_conninfo(dsn, **extra)
        self.where = describe_dsn(dsn)
        self._log = _Connection(self._dsn, self.where)
        self._lease = _Connection(self._dsn, self.where)
        self._read = _Connection(self._dsn, self.where)
        try:
            self._log.run(self._create_schema)
        except StoreUnavailable as e:
            self.close()
            raise StoreUnavailable(f"cannot open PostgreSQL store {self.where}: {e.__cause__ or e}") from e

    @staticmethod
    def _create_schema(conn: psycopg.Connection) -> None:
        # CREATE TABLE IF NOT EXISTS is not safe against a concurrent CREATE of the same
        # table (it can fail on the catalog's unique index), so serialize schema creation
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
            for statement in SCHEMA:
                conn.execute(statement)

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _fence(cur: psycopg.Cursor, epoch: int, head: bool = False) -> int | None:
        """Lock the lease row (shared) and check ``epoch``; with ``head``, lock and return the head."""
        if head:
            row = cur.execute(
                "SELECT l.epoch, h.last_position FROM xce_lease l, xce_head h"
                " WHERE l.name = 'leader' AND h.id = 1 FOR SHARE OF l FOR UPDATE OF h").fetchone()
        else:
            row = cur.execute("SELECT epoch, NULL FROM xce_lease WHERE name = 'leader' FOR SHARE").fetchone()
        current, last = row
        if current != epoch:
            raise StaleEpoch(f"epoch {epoch} is stale: the lease is at epoch {current}")
        return last

    # ------------------------------------------------------------ log

    def append(self, epoch: int, records: Sequence[Record], audit: Sequence[AuditRecord] = (),
               jobs: Sequence[ArchivedJob] = (), claims: Sequence[ArchivedClaim] = ()) -> None:
        if not records and not audit:
            return

        def run(conn: psycopg.Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                last = self._fence(cur, epoch, head=True)
                check_continuous(last, records, audit)
                # the whole batch in one statement, and the head moved in the same one
                cur.execute(
                    "WITH ins AS ("
                    " INSERT INTO xce_facts (position, epoch, type, version, payload)"
                    " SELECT p, %s, t, v, d"
                    " FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::text[]) AS u(p, t, v, d))"
                    " UPDATE xce_head SET last_position = %s WHERE id = 1",
                    (epoch,
                     [r.position for r in records], [r.type for r in records],
                     [r.version for r in records], [r.payload for r in records],
                     records[-1].position))
                if audit:
                    cur.execute(INSERT_AUDIT, _audit_arrays(audit))
                if jobs:
                    cur.executemany(f"INSERT INTO xce_archive_jobs ({ARCHIVE_JOB_COLUMNS}) VALUES"
                                    f" ({', '.join(['%s'] * len(ARCHIVE_JOB_COLUMNS.split(',')))}) ON CONFLICT (id)"
                                    " DO NOTHING",
                                    [archived_job_values(j) for j in jobs])
                if claims:
                    cur.executemany(f"INSERT INTO xce_archive_claims ({ARCHIVE_CLAIM_COLUMNS}) VALUES"
                                    f" ({', '.join(['%s'] * 12)}) ON CONFLICT (id) DO NOTHING",
                                    [archived_claim_values(c) for c in claims])

        self._log.run(run)

    # ------------------------------------------------------------ archive (on the read connection)

    def _select(self, sql: str, params: Sequence[object]) -> list[Any]:
        return self._read.run(lambda conn: conn.execute(sql, tuple(params)).fetchall())

    def archived_jobs(self, ids: Sequence[int]) -> list[ArchivedJob]:
        ids = list(ids)[:ARCHIVE_IDS]
        if not ids:
            return []
        return [archived_job_row(r) for r in self._select(
            f"SELECT {ARCHIVE_JOB_COLUMNS} FROM xce_archive_jobs WHERE id = ANY(%s::bigint[])", [ids])]

    def archived_claims(self, ids: Sequence[int]) -> list[ArchivedClaim]:
        ids = list(ids)[:ARCHIVE_IDS]
        if not ids:
            return []
        return [archived_claim_row(r) for r in self._select(
            f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims WHERE id = ANY(%s::bigint[])", [ids])]

    def archived_claims_named(self, name: str, projects: Sequence[str] | None) -> list[ArchivedClaim]:
        if projects is None:
            rows = self._select(f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims WHERE name = %s"
                                " ORDER BY id DESC LIMIT 1000", [name])
            return newest_per_project([archived_claim_row(r) for r in rows])
        out = []
        for project in projects:
            rows = self._select(f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims"
                                " WHERE name = %s AND project = %s ORDER BY id DESC LIMIT 1", [name, project])
            out.extend(archived_claim_row(r) for r in rows)
        return out

    def query_history(self, query: HistoryQuery) -> list[ArchivedJob]:
        where, params = history_where(query, "%s")
        rows = self._select(f"SELECT {ARCHIVE_JOB_COLUMNS} FROM xce_archive_jobs{where} ORDER BY id DESC LIMIT %s",
                            [*params, max(0, query.limit)])
        return [archived_job_row(r) for r in rows]

    def usage(self, query: UsageQuery) -> list[Usage]:
        jobs, jp, claims, cp = usage_sql(query, "%s")
        return merge_usage(self._select(jobs, jp), self._select(claims, cp))

    # ------------------------------------------------------------ audit

    def backfill_audit(self, epoch: int, audit: Sequence[AuditRecord]) -> int:
        if not audit:
            return 0

        def run(conn: psycopg.Connection) -> int:
            with conn.transaction(), conn.cursor() as cur:
                self._fence(cur, epoch, head=True)  # the head lock orders seq with appends
                have = {p for (p,) in cur.execute(
                    "SELECT DISTINCT position FROM xce_audit WHERE position = ANY(%s::bigint[])",
                    (sorted({a.position for a in audit}),)).fetchall()}
                new = [a for a in audit if a.position not in have]
                if new:
                    cur.execute(INSERT_AUDIT, _audit_arrays(new))
                return len(new)

        return self._log.run(run)

    def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        where, params = audit_where(query, "%s")

        def run(conn: psycopg.Connection) -> list[Any]:
            return conn.execute(f"SELECT {AUDIT_COLUMNS} FROM xce_audit{where} ORDER BY seq DESC LIMIT %s",
                                (*params, max(0, query.limit))).fetchall()

        return [audit_row(r) for r in self._read.run(run)]

    def read_after(self, position: int, limit: int = 10_000) -> list[Record]:
        def run(conn: psycopg.Connection) -> list[Any]:
            return conn.execute(
                "SELECT position, type, version, payload, epoch FROM xce_facts"
                " WHERE position > %s ORDER BY position LIMIT %s", (position, max(0, limit))).fetchall()

        rows = self._log.run(run)
        return [Record(position=p, type=t, version=v, payload=d, epoch=e) for p, t, v, d, e in rows]

    def last_position(self) -> int:
        return self._log.run(
            lambda conn: conn.execute("SELECT last_position FROM xce_head WHERE id = 1").fetchone()[0])

    # ------------------------------------------------------------ snapshots

    def write_snapshot(self, epoch: int, snapshot: Snapshot) -> None:
        def run(conn: psycopg.Connection) -> None:
            with conn.transaction(), conn.cursor() as cur:
                self._fence(cur, epoch)
                cur.execute(
                    "INSERT INTO xce_snapshot (id, position, data) VALUES (1, %s, %s)"
                    " ON CONFLICT (id) DO UPDATE SET position = EXCLUDED.position, data = EXCLUDED.data",
                    (snapshot.position, bytes(snapshot.data)))

        self._log.run(run)

    def load_snapshot(self) -> Snapshot | None:
        row = self._log.run(
            lambda conn: conn.execute("SELECT position, data FROM xce_snapshot WHERE id = 1").fetchone())
        return Snapshot(position=row[0], data=bytes(row[1])) if row else None

    def compact(self, epoch: int, upto: int) -> int:
        def run(conn: psycopg.Connection) -> int:
            with conn.transaction(), conn.cursor() as cur:
                self._fence(cur, epoch)
                cur.execute(
                    "DELETE FROM xce_facts WHERE position <= LEAST(%s,"
                    " COALESCE((SELECT position FROM xce_snapshot WHERE id = 1), 0))", (upto,))
                return cur.rowcount

        return self._log.run(run)

    # ------------------------------------------------------------ lease

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        # One statement: the row lock serializes contenders, and if it had to wait, PostgreSQL
        # re-checks the WHERE clause (clock included) against the row the winner committed.
        row = self._lease.run(lambda conn: conn.execute(
            "UPDATE xce_lease SET holder = %(holder)s,"
            " epoch = CASE WHEN holder IS DISTINCT FROM %(holder)s THEN epoch + 1 ELSE epoch END,"
            f" expires_at = {NOW} + %(ttl)s"
            " WHERE name = 'leader'"
            f" AND (holder IS NULL OR holder = %(holder)s OR expires_at <= {NOW})"
            " RETURNING epoch, expires_at", {"holder": holder, "ttl": float(ttl)}).fetchone())
        if row is None:
            return None
        return Lease(holder=holder, epoch=row[0], expires_at=row[1])

    def renew_lease(self, holder: str, epoch: int, ttl: float) -> Lease:
        def run(conn: psycopg.Connection) -> float:
            with conn.transaction(), conn.cursor() as cur:
                row = cur.execute(
                    f"UPDATE xce_lease SET expires_at = {NOW} + %s"
                    " WHERE name = 'leader' AND holder = %s AND epoch = %s RETURNING expires_at",
                    (float(ttl), holder, epoch)).fetchone()
                if row is None:
                    cur_holder, cur_epoch = cur.execute(
                        "SELECT holder, epoch FROM xce_lease WHERE name = 'leader'").fetchone()
                    raise LeaseLost(f"lease is held by {cur_holder!r} at epoch {cur_epoch}")
                return row[0]

        return Lease(holder=holder, epoch=epoch, expires_at=self._lease.run(run))

    def release_lease(self, holder: str, epoch: int) -> None:
        self._lease.run(lambda conn: conn.execute(
            "UPDATE xce_lease SET holder = NULL, expires_at = 0"
            " WHERE name = 'leader' AND holder = %s AND epoch = %s", (holder, epoch)))

    def current_lease(self) -> Lease | None:
        holder, epoch, expires = self._lease.run(lambda conn: conn.execute(
            "SELECT holder, epoch, expires_at FROM xce_lease WHERE name = 'leader'").fetchone())
        return Lease(holder=holder, epoch=epoch, expires_at=expires) if holder else None

    # ------------------------------------------------------------ members (on the lease connection:
    # a standby's announcement never waits behind the leader's appends in the same process)

    def announce(self, holder: str, url: str, position: int) -> None:
        def run(conn: psycopg.Connection) -> None:
            with conn.transaction():
                conn.execute(f"DELETE FROM xce_members WHERE (url = %s AND holder <> %s) OR seen_at < {NOW} - %s",
                             (url, holder, MEMBER_FORGET))
                conn.execute(f"INSERT INTO xce_members (holder, url, position, seen_at) VALUES (%s, %s, %s, {NOW})"
                             " ON CONFLICT (holder) DO UPDATE SET url = EXCLUDED.url,"
                             " position = EXCLUDED.position, seen_at = EXCLUDED.seen_at", (holder, url, position))

        self._lease.run(run)

    def members(self) -> list[Member]:
        rows = self._lease.run(lambda conn: conn.execute(
            f"SELECT holder, url, position, GREATEST(0, {NOW} - seen_at) FROM xce_members"
            f" WHERE seen_at >= {NOW} - %s ORDER BY url", (MEMBER_FORGET,)).fetchall())
        return [Member(holder=h, url=u, position=p, age=a) for h, u, p, a in rows]

    def leave(self, holder: str) -> None:
        self._lease.run(lambda conn: conn.execute("DELETE FROM xce_members WHERE holder = %s", (holder,)))

    def close(self) -> None:
        self._log.close()
        self._lease.close()
        self._read.close()
