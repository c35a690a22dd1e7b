"""The store contract against SQLite: one database file per test."""

from __future__ import annotations

import pytest

from tests.store.contract import StoreContract
from xce.store.sqlite import SQLiteStore


class TestSQLiteStore(StoreContract):
    expected_backend = "sqlite"

    @pytest.fixture
    def make_store(self, tmp_path):
        path = str(tmp_path / "xce.db")
        return lambda: SQLiteStore(path)


# ---------------------------------------------------------------- leadership between processes

HOLDER = r"""
import sys
from xce.store.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
lease = store.acquire_lease("first", float(sys.argv[2]))
print(lease.epoch, lease.expires_at, flush=True)
sys.stdin.read()  # hold the store (and the lock) open until told to go
if sys.argv[3] == "release":
    store.release_lease("first", lease.epoch)
    store.close()
    print("released", flush=True)
    sys.stdin.read()
"""


def _holder(path: str, ttl: float, then: str = "hold"):
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", HOLDER, path, str(ttl), then], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    epoch, expires = proc.stdout.readline().split()
    return proc, int(epoch), float(expires)


def test_another_process_cannot_lead_while_the_first_lives_even_past_the_rows_ttl(tmp_path):
    import time

    from tests.store.contract import LONG_TTL, SHORT_TTL, poll

    path = str(tmp_path / "xce.db")
    proc, epoch, expires = _holder(path, SHORT_TTL)
    store = SQLiteStore(path)
    try:
        assert store.current_lease().holder == "first"
        poll(lambda: time.time() > expires + 0.1, what="the first process's row to expire")
        # its row has expired, but the first process lives and holds the lock: nobody else leads
        assert store.acquire_lease("second", LONG_TTL) is None
        assert store.current_lease().holder == "first"
        with pytest.raises(Exception):
            store.renew_lease("second", epoch, LONG_TTL)
    finally:
        proc.kill()
        proc.wait()
    # the kernel dropped the dead process's lock: the next acquisition succeeds, fenced by a new epoch
    lease = store.acquire_lease("second", LONG_TTL)
    assert lease is not None and (lease.holder, lease.epoch) == ("second", epoch + 1)
    store.close()


def test_a_killed_leaders_lease_is_taken_at_once_not_after_its_ttl(tmp_path):
    import signal
    import time

    from tests.store.contract import LONG_TTL, recs
    from xce.store import StaleEpoch

    path = str(tmp_path / "xce.db")
    proc, epoch, expires = _holder(path, LONG_TTL)
    store = SQLiteStore(path)
    try:
        assert store.acquire_lease("second", LONG_TTL) is None  # alive: refused
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        lease = store.acquire_lease("second", LONG_TTL)
        taken_at = time.time()
        assert lease is not None and (lease.holder, lease.epoch) == ("second", epoch + 1)
        # taken while the dead leader's row still said it was live: the lock decided, not the TTL
        assert taken_at < expires
        with pytest.raises(StaleEpoch):  # whatever the dead leader had in flight is fenced
            store.append(epoch, recs(1, 1))
        store.append(lease.epoch, recs(1, 1))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        store.close()


def test_a_clean_release_lets_another_process_lead_at_once(tmp_path):
    from tests.store.contract import LONG_TTL

    path = str(tmp_path / "xce.db")
    proc, epoch, _ = _holder(path, LONG_TTL, then="release")
    store = SQLiteStore(path)
    try:
        assert store.acquire_lease("second", LONG_TTL) is None
        proc.stdin.close()  # release and close
        assert proc.stdout.readline().strip() == "released"
        lease = store.acquire_lease("second", LONG_TTL)
        assert lease is not None and lease.epoch == epoch + 1
    finally:
        proc.kill()
        proc.wait()
        store.close()


# ---------------------------------------------------------------- memory

SNAPSHOT_WRITER = r"""
import gc, os, sys
from xce.store import Snapshot
from xce.store.sqlite import SQLiteStore

def rss_mib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024

store = SQLiteStore(sys.argv[1])
epoch = store.acquire_lease("leader", 120.0).epoch
before = rss_mib()
data = os.urandom(64 << 20)
store.write_snapshot(epoch, Snapshot(position=0, data=data))
del data
gc.collect()
print(rss_mib() - before, len(store.load_snapshot().data))
"""


def test_a_written_snapshot_leaves_no_copy_behind(tmp_path):
    """The controller writes a snapshot every few thousand facts and keeps running: the store must not
    hold the last one in memory (a bound parameter stays in SQLite's cached statement)."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", SNAPSHOT_WRITER, str(tmp_path / "xce.db")],
                         capture_output=True, text=True, check=True).stdout.split()
    grown_mib, stored = float(out[0]), int(out[1])
    assert stored == 64 << 20
    assert grown_mib < 16, f"the process kept {grown_mib:.0f} MiB after writing a 64 MiB snapshot"


def test_an_archive_written_before_usage_was_recorded_gains_the_cpu_column_and_keeps_its_rows(tmp_path):
    """A store file from before runs' usage: its archive table has no cpu_seconds.  Opening it adds the
    column; the old rows read back with no CPU measured, and usage sums them as 0."""
    import sqlite3

    from tests.store.contract import ajob
    from xce.records import UsageQuery

    path = str(tmp_path / "old.db")
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE xce_archive_jobs DROP COLUMN cpu_seconds")  # as the table was before
    old = ajob(1, 1)
    db.execute("INSERT INTO xce_archive_jobs (id, user_name, project, queue, name, state, array_parent, slots, "
               "submit_time, start_time, end_time, position, doc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
               (old.id, old.user, old.project, old.queue, old.name, old.state, old.array_parent, old.slots,
                old.submit_time, old.start_time, old.end_time, old.position, old.doc))
    db.commit()
    db.close()
    store = SQLiteStore(path)
    try:
        assert [j.cpu_seconds for j in store.archived_jobs([1])] == [None]
        assert [(u.jobs, u.cpu_seconds) for u in store.usage(UsageQuery())] == [(1, 0.0)]
    finally:
        store.close()
