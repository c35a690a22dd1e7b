"""SQLite store: the embedded default, one file in the state directory.

WAL journal with ``synchronous=FULL`` so a committed append survives power
loss; each append is one ``BEGIN IMMEDIATE`` transaction that checks the lease
epoch and the log head before inserting, so fencing and continuity are atomic,
and inserts the batch's audit records in the same transaction.  Audit queries
run on a second connection: WAL readers never wait for the writer, so a large
query does not hold up group commit.

Leadership is a lock that dies with its process.  The lease row keeps the
holder and the epoch that fences every append, but whether another *process*
may take it is decided by an OS lock (``flock``) on ``<database>.lock``, beside
the database: the process that leads holds it for as long as it has the store
open, and the kernel drops it the moment that process dies, ``kill -9``
included.  So a controller restarted after a crash leads at once, without
waiting out the old row's TTL, and a second controller on the same file can
never lead while the first lives.  Within one process (several handles, as the
contract tests use) the row's TTL decides between holders as before.  The
lock is taken on the lock file's open file description: a process that forks
without exec would share it with its child (the controller never does).
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import threading
import time
from typing import Sequence

from xce.store.base import (ARCHIVE_CLAIM_COLUMNS, ARCHIVE_IDS, ARCHIVE_JOB_COLUMNS, AUDIT_COLUMNS, MEMBER_FORGET, ArchivedClaim,
                            ArchivedJob, AuditQuery, AuditRecord, HistoryQuery, Lease, Member, Record, Snapshot, Store,
                            Usage, UsageQuery, archived_claim_row, archived_claim_values, archived_job_row,
                            archived_job_values, audit_row, audit_where, check_continuous, history_where, merge_usage,
                            newest_per_project, usage_sql)
from xce.store.errors import LeaseLost, StaleEpoch, StoreUnavailable

SCHEMA = """
CREATE TABLE IF NOT EXISTS xce_facts (
    position INTEGER PRIMARY KEY,
    epoch    INTEGER NOT NULL,
    type     TEXT NOT NULL,
    version  INTEGER NOT NULL,
    payload  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS xce_head (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    last_position INTEGER NOT NULL
);
INSERT OR IGNORE INTO xce_head (id, last_position) VALUES (1, 0);
CREATE TABLE IF NOT EXISTS xce_snapshot (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    position INTEGER NOT NULL,
    data     BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS xce_lease (
    name       TEXT PRIMARY KEY,
    holder     TEXT,
    epoch      INTEGER NOT NULL,
    expires_at REAL NOT NULL
);
INSERT OR IGNORE INTO xce_lease (name, holder, epoch, expires_at) VALUES ('leader', NULL, 0, 0);
CREATE TABLE IF NOT EXISTS xce_audit (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    position  INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    time      REAL NOT NULL,
    user_name TEXT NOT NULL,
    action    TEXT NOT NULL,
    target    TEXT NOT NULL,
    result    TEXT NOT NULL,
    detail    TEXT NOT NULL,
    UNIQUE (position, idx)
);
CREATE INDEX IF NOT EXISTS xce_audit_user ON xce_audit (user_name, seq);
CREATE INDEX IF NOT EXISTS xce_audit_target ON xce_audit (target, seq);
CREATE INDEX IF NOT EXISTS xce_audit_time ON xce_audit (time);
CREATE TABLE IF NOT EXISTS xce_archive_jobs (
    id           INTEGER PRIMARY KEY,
    user_name    TEXT NOT NULL,
    project      TEXT NOT NULL,
    queue        TEXT NOT NULL,
    name         TEXT NOT NULL,
    state        TEXT NOT NULL,
    array_parent INTEGER,
    slots        INTEGER NOT NULL,
    submit_time  REAL NOT NULL,
    start_time   REAL,
    end_time     REAL NOT NULL,
    position     INTEGER NOT NULL,
    doc          TEXT NOT NULL,
    cpu_seconds  REAL,
    gpu_seconds  REAL
);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_end ON xce_archive_jobs (end_time);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_user ON xce_archive_jobs (user_name, id);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_project ON xce_archive_jobs (project, id);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_name ON xce_archive_jobs (name, id);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_state ON xce_archive_jobs (state, id);
CREATE INDEX IF NOT EXISTS xce_archive_jobs_array ON xce_archive_jobs (array_parent) WHERE array_parent IS NOT NULL;
CREATE TABLE IF NOT EXISTS xce_archive_claims (
    id         INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    project    TEXT NOT NULL,
    owner      TEXT NOT NULL,
    form       TEXT NOT NULL,
    class_name TEXT NOT NULL,
    job_id     INTEGER,
    size_bytes INTEGER NOT NULL,
    created    REAL NOT NULL,
    released   REAL NOT NULL,
    position   INTEGER NOT NULL,
    doc        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS xce_archive_claims_name ON xce_archive_claims (name, project, id);
CREATE INDEX IF NOT EXISTS xce_archive_claims_job ON xce_archive_claims (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS xce_archive_claims_released ON xce_archive_claims (released);
CREATE TABLE IF NOT EXISTS xce_members (
    holder   TEXT PRIMARY KEY,
    url      TEXT NOT NULL,
    position INTEGER NOT NULL,
    seen_at  REAL NOT NULL
);
"""

AUDIT_INSERT_COLUMNS = "position, idx, time, user_name, action, target, result, detail"

#: rows one INSERT statement carries at most.  Statements are cut in powers of two (37 rows: 32, 4
#: and 1), so a connection's statement cache holds a few shapes, not one per batch size: a
#: prepared statement of thousands of variables is hundreds of KiB of SQLite's memory
INSERT_ROWS = 256


def _insert_all(cur: sqlite3.Cursor, insert: str, table: str, columns: str, rows: Sequence[tuple]) -> None:
    """``rows`` into ``table`` in a few multi-row statements (``VALUES (...), (...)``).

    ``executemany`` steps once per row and gives the GIL back at each step; while another thread is
    busy (the event loop, serving), the writer waits up to a switch interval (5 ms) to take it back,
    at every row: a 5,000-job retirement's archive took 4-9 s so under load, and 24 s beside one
    spinning thread, against 45 ms idle.  A statement gives the GIL back once: 5,000 rows in 21
    statements take 160-190 ms beside that thread, 22-27 ms idle.  ``insert``: ``INSERT`` or
    ``INSERT OR IGNORE``."""
    row = "(" + ",".join("?" * (columns.count(",") + 1)) + ")"
    i = 0
    while i < len(rows):
        n = min(INSERT_ROWS, 1 << ((len(rows) - i).bit_length() - 1))  # the largest power of two left
        chunk = rows[i:i + n]
        cur.execute(f"{insert} INTO {table} ({columns}) VALUES {','.join([row] * n)}", [v for r in chunk for v in r])
        i += n


#: positions looked up per statement when backfilling (SQLite bounds a statement's variables)
CHUNK = 500


def _audit_values(audit: Sequence[AuditRecord]) -> list[tuple]:
    return [(a.position, a.index, a.time, a.user, a.action, a.target, a.result, a.detail) for a in audit]


class _LeaderLock:
    """This process's hold on a database's leadership lock file, shared by all its handles on it.

    ``flock`` is per open file description, so two handles of one process would refuse each other;
    leadership between processes is what the lock is for, so a process opens the file once.
    ``taken`` names the holders that took the lease row through this process: a live row naming
    anyone else belongs to a process that no longer holds the lock, so it is dead (or has let go).
    """

    _all: dict[str, _LeaderLock] = {}
    _guard = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd: int | None = None
        self.handles = 0
        self.taken: set[str] = set()
        self.mutex = threading.Lock()

    @classmethod
    def open(cls, db_path: str) -> _LeaderLock:
        path = os.path.realpath(db_path) + ".lock"
        with cls._guard:
            lock = cls._all.get(path)
            if lock is None:
                lock = cls._all[path] = _LeaderLock(path)
            lock.handles += 1
            return lock

    def close_handle(self) -> None:
        with self._guard:
            self.handles -= 1
            if self.handles > 0:
                return
            self._all.pop(self.path, None)
        self.release()

    def try_hold(self) -> bool:
        """Hold the lock (non-blocking); False if another process holds it."""
        with self.mutex:
            if self.fd is not None:
                return True
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as e:
                os.close(fd)
                if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    return False
                raise
            self.fd = fd
            self.taken.clear()  # whatever the row says was written by a process that let go
            return True

    def release(self) -> None:
        with self.mutex:
            if self.fd is not None:
                os.close(self.fd)  # closing the only descriptor drops the flock
                self.fd = None
            self.taken.clear()


class SQLiteStore(Store):
    backend = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._read_lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False,
                                       timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(xce_archive_jobs)")}
            if "cpu_seconds" not in columns:  # an archive written before runs' usage was recorded
                self._db.execute("ALTER TABLE xce_archive_jobs ADD COLUMN cpu_seconds REAL")
            if "gpu_seconds" not in columns:  # ... or before GPUs were devices
                self._db.execute("ALTER TABLE xce_archive_jobs ADD COLUMN gpu_seconds REAL")
            self._reader = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        except sqlite3.Error as e:
            raise StoreUnavailable(f"cannot open SQLite store {path}: {e}") from e
        # leadership between processes (None for an in-memory database: one process only)
        self._leader_lock = _LeaderLock.open(path) if path != ":memory:" and not path.startswith("file:") else None
        self._closed = False

    def _hold_leader_lock(self) -> bool:
        try:
            return self._leader_lock is None or self._leader_lock.try_hold()
        except OSError as e:
            raise StoreUnavailable(f"cannot lock {self._leader_lock.path}: {e}") from e

    # ------------------------------------------------------------ helpers

    def _tx(self, fn):
        """Run ``fn(cursor)`` in one IMMEDIATE transaction under the connection lock."""
        with self._lock:
            cur = self._db.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                try:
                    out = fn(cur)
                except BaseException:
                    cur.execute("ROLLBACK")
                    raise
                cur.execute("COMMIT")
                return out
            except sqlite3.Error as e:
                raise StoreUnavailable(f"SQLite: {e}") from e

    @staticmethod
    def _fence(cur: sqlite3.Cursor, epoch: int) -> None:
        (current,) = cur.execute("SELECT epoch FROM xce_lease WHERE name='leader'").fetchone()
        if current != epoch:
            raise StaleEpoch(f"epoch {epoch} is stale: the lease is at epoch {current}")

    # ------------------------------------------------------------ log

    def append(self, epoch: int, records: Sequence[Record], audit: Sequence[AuditRecord] = (),
               jobs: Sequence[ArchivedJob] = (), claims: Sequence[ArchivedClaim] = ()) -> None:
        if not records and not audit:
            return

        def run(cur: sqlite3.Cursor) -> None:
            self._fence(cur, epoch)
            (last,) = cur.execute("SELECT last_position FROM xce_head WHERE id=1").fetchone()
            check_continuous(last, records, audit)
            _insert_all(cur, "INSERT", "xce_facts", "position, epoch, type, version, payload",
                        [(r.position, epoch, r.type, r.version, r.payload) for r in records])
            cur.execute("UPDATE xce_head SET last_position=? WHERE id=1", (records[-1].position,))
            if audit:
                _insert_all(cur, "INSERT", "xce_audit", AUDIT_INSERT_COLUMNS, _audit_values(audit))
            if jobs:
                _insert_all(cur, "INSERT OR IGNORE", "xce_archive_jobs", ARCHIVE_JOB_COLUMNS,
                            [archived_job_values(j) for j in jobs])
            if claims:
                _insert_all(cur, "INSERT OR IGNORE", "xce_archive_claims", ARCHIVE_CLAIM_COLUMNS,
                            [archived_claim_values(c) for c in claims])

        self._tx(run)

    # ------------------------------------------------------------ archive (read on the reader connection)

    def _read(self, sql: str, params: Sequence[object]) -> list[tuple]:
        try:
            with self._read_lock:
                return self._reader.execute(sql, tuple(params)).fetchall()
        except sqlite3.Error as e:
            raise StoreUnavailable(f"SQLite: {e}") from e

    def archived_jobs(self, ids: Sequence[int]) -> list[ArchivedJob]:
        ids = list(ids)[:ARCHIVE_IDS]
        if not ids:
            return []
        rows = self._read(f"SELECT {ARCHIVE_JOB_COLUMNS} FROM xce_archive_jobs WHERE id IN "
                          f"({','.join('?' * len(ids))})", ids)
        return [archived_job_row(r) for r in rows]

    def archived_claims(self, ids: Sequence[int]) -> list[ArchivedClaim]:
        ids = list(ids)[:ARCHIVE_IDS]
        if not ids:
            return []
        rows = self._read(f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims WHERE id IN "
                          f"({','.join('?' * len(ids))})", ids)
        return [archived_claim_row(r) for r in rows]

    def archived_claims_named(self, name: str, projects: Sequence[str] | None) -> list[ArchivedClaim]:
        if projects is None:
            rows = self._read(f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims WHERE name = ?"
                              " ORDER BY id DESC LIMIT 1000", [name])
            return newest_per_project([archived_claim_row(r) for r in rows])
        out = []
        for project in projects:
            rows = self._read(f"SELECT {ARCHIVE_CLAIM_COLUMNS} FROM xce_archive_claims WHERE name = ? AND project = ?"
                              " ORDER BY id DESC LIMIT 1", [name, project])
            out.extend(archived_claim_row(r) for r in rows)
        return out

    def query_history(self, query: HistoryQuery) -> list[ArchivedJob]:
        where, params = history_where(query, "?")
        rows = self._read(f"SELECT {ARCHIVE_JOB_COLUMNS} FROM xce_archive_jobs{where} ORDER BY id DESC LIMIT ?",
                          [*params, max(0, query.limit)])
        return [archived_job_row(r) for r in rows]

    def usage(self, query: UsageQuery) -> list[Usage]:
        jobs, jp, claims, cp = usage_sql(query, "?")
        return merge_usage(self._read(jobs, jp), self._read(claims, cp))

    # ------------------------------------------------------------ audit

    def backfill_audit(self, epoch: int, audit: Sequence[AuditRecord]) -> int:
        if not audit:
            return 0

        def run(cur: sqlite3.Cursor) -> int:
            self._fence(cur, epoch)
            positions = sorted({a.position for a in audit})
            have: set[int] = set()
            for i in range(0, len(positions), CHUNK):
                chunk = positions[i:i + CHUNK]
                have.update(p for (p,) in cur.execute(
                    f"SELECT DISTINCT position FROM xce_audit WHERE position IN ({','.join('?' * len(chunk))})",
                    chunk))
            new = [a for a in audit if a.position not in have]
            _insert_all(cur, "INSERT", "xce_audit", AUDIT_INSERT_COLUMNS, _audit_values(new))
            return len(new)

        return self._tx(run)

    def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        where, params = audit_where(query, "?")
        try:
            with self._read_lock:
                rows = self._reader.execute(f"SELECT {AUDIT_COLUMNS} FROM xce_audit{where} ORDER BY seq DESC LIMIT ?",
                                            (*params, max(0, query.limit))).fetchall()
        except sqlite3.Error as e:
            raise StoreUnavailable(f"SQLite: {e}") from e
        return [audit_row(r) for r in rows]

    def read_after(self, position: int, limit: int = 10_000) -> list[Record]:
        with self._lock:
            rows = self._db.execute(
                "SELECT position, type, version, payload, epoch FROM xce_facts"
                " WHERE position > ? ORDER BY position LIMIT ?", (position, limit)).fetchall()
        return [Record(position=p, type=t, version=v, payload=d, epoch=e) for p, t, v, d, e in rows]

    def last_position(self) -> int:
        with self._lock:
            return self._db.execute("SELECT last_position FROM xce_head WHERE id=1").fetchone()[0]

    # ------------------------------------------------------------ snapshots

    def write_snapshot(self, epoch: int, snapshot: Snapshot) -> None:
        """The snapshot goes in through SQLite's incremental blob I/O, not as a bound parameter: a
        statement keeps a copy of the values bound to it until it is bound again, and the cached
        INSERT would hold the last snapshot (10-15 MiB in bench/history.py) for as long as the
        controller runs."""
        def run(cur: sqlite3.Cursor) -> None:
            self._fence(cur, epoch)
            cur.execute("INSERT OR REPLACE INTO xce_snapshot (id, position, data) VALUES (1, ?, zeroblob(?))",
                        (snapshot.position, len(snapshot.data)))
            with self._db.blobopen("xce_snapshot", "data", 1) as blob:
                blob.write(snapshot.data)

        self._tx(run)

    def load_snapshot(self) -> Snapshot | None:
        with self._lock:
            row = self._db.execute("SELECT position, data FROM xce_snapshot WHERE id=1").fetchone()
        return Snapshot(position=row[0], data=bytes(row[1])) if row else None

    def compact(self, epoch: int, upto: int) -> int:
        def run(cur: sqlite3.Cursor) -> int:
            self._fence(cur, epoch)
            row = cur.execute("SELECT position FROM xce_snapshot WHERE id=1").fetchone()
            limit = min(upto, row[0] if row else 0)
            return cur.execute("DELETE FROM xce_facts WHERE position <= ?", (limit,)).rowcount

        return self._tx(run)

    # ------------------------------------------------------------ lease

    def acquire_lease(self, holder: str, ttl: float) -> Lease | None:
        """Another process holding the leadership lock refuses us whatever the row says; holding
        it, a live row of a holder that did not take it through this process is a dead process's
        (the kernel dropped its lock) and is taken over at once, with the next epoch."""
        if self._closed:
            raise StoreUnavailable("SQLite store is closed")
        if not self._hold_leader_lock():
            return None
        taken = self._leader_lock.taken if self._leader_lock is not None else None

        def run(cur: sqlite3.Cursor) -> Lease | None:
            now = time.time()
            cur_holder, epoch, expires = cur.execute(
                "SELECT holder, epoch, expires_at FROM xce_lease WHERE name='leader'").fetchone()
            ours = taken is None or cur_holder in taken  # the row's TTL decides within this process
            if cur_holder is not None and cur_holder != holder and expires > now and ours:
                return None
            if cur_holder != holder:
                epoch += 1
            cur.execute("UPDATE xce_lease SET holder=?, epoch=?, expires_at=? WHERE name='leader'",
                        (holder, epoch, now + ttl))
            if taken is not None:
                taken.add(holder)
            return Lease(holder=holder, epoch=epoch, expires_at=now + ttl)

        return self._tx(run)

    def renew_lease(self, holder: str, epoch: int, ttl: float) -> Lease:
        if not self._closed and not self._hold_leader_lock():
            raise LeaseLost(f"another process holds the leadership lock {self._leader_lock.path}")

        def run(cur: sqlite3.Cursor) -> Lease:
            now = time.time()
            cur_holder, cur_epoch = cur.execute(
                "SELECT holder, epoch FROM xce_lease WHERE name='leader'").fetchone()
            if cur_holder != holder or cur_epoch != epoch:
                raise LeaseLost(f"lease is held by {cur_holder!r} at epoch {cur_epoch}")
            cur.execute("UPDATE xce_lease SET expires_at=? WHERE name='leader'", (now + ttl,))
            return Lease(holder=holder, epoch=epoch, expires_at=now + ttl)

        return self._tx(run)

    def release_lease(self, holder: str, epoch: int) -> None:
        def run(cur: sqlite3.Cursor) -> str | None:
            cur.execute("UPDATE xce_lease SET holder=NULL, expires_at=0 WHERE name='leader' AND holder=? AND epoch=?",
                        (holder, epoch))
            return cur.execute("SELECT holder FROM xce_lease WHERE name='leader'").fetchone()[0]

        left = self._tx(run)
        lock = self._leader_lock
        if lock is not None and (left is None or left not in lock.taken):
            lock.release()  # nobody in this process leads: another process may, at once

    def current_lease(self) -> Lease | None:
        with self._lock:
            holder, epoch, expires = self._db.execute(
                "SELECT holder, epoch, expires_at FROM xce_lease WHERE name='leader'").fetchone()
        return Lease(holder=holder, epoch=epoch, expires_at=expires) if holder else None

    # ------------------------------------------------------------ members

    def announce(self, holder: str, url: str, position: int) -> None:
        def run(cur: sqlite3.Cursor) -> None:
            now = time.time()
            cur.execute("DELETE FROM xce_members WHERE (url = ? AND holder <> ?) OR seen_at < ?",
                        (url, holder, now - MEMBER_FORGET))
            cur.execute("INSERT INTO xce_members (holder, url, position, seen_at) VALUES (?,?,?,?)"
                        " ON CONFLICT (holder) DO UPDATE SET url = excluded.url, position = excluded.position,"
                        " seen_at = excluded.seen_at", (holder, url, position, now))

        self._tx(run)

    def members(self) -> list[Member]:
        now = time.time()
        with self._lock:
            rows = self._db.execute("SELECT holder, url, position, seen_at FROM xce_members WHERE seen_at >= ?"
                                    " ORDER BY url", (now - MEMBER_FORGET,)).fetchall()
        return [Member(holder=h, url=u, position=p, age=max(0.0, now - s)) for h, u, p, s in rows]

    def leave(self, holder: str) -> None:
        self._tx(lambda cur: cur.execute("DELETE FROM xce_members WHERE holder = ?", (holder,)))

    def close(self) -> None:
        with self._lock:
            self._db.close()
        with self._read_lock:
            self._reader.close()
        if self._leader_lock is not None and not self._closed:
            self._leader_lock.close_handle()
        self._closed = True
