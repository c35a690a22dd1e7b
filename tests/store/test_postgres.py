"""The store contract against PostgreSQL, plus what only a networked backend can get wrong.

One server for the session (``XCE_TEST_PG_DSN``, or a private server started
by ``tests/pg.py``), and a fresh empty database for every test.  Never
skipped: if PostgreSQL cannot start, these tests error.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from tests import pg
from tests.store.contract import LONG_TTL, StoreContract, poll, read_all, recs
from xce.store import PositionConflict, Record, StaleEpoch, StoreUnavailable, open_store
from xce.store.postgres import PostgresStore, describe_dsn


@pytest.fixture(scope="session")
def pg_admin_dsn():
    dsn, stop = pg.server()
    yield dsn
    stop()


@pytest.fixture
def pg_dsn(pg_admin_dsn):
    dsn = pg.fresh_database(pg_admin_dsn)
    yield dsn
    pg.drop_database(pg_admin_dsn, dsn)


class TestPostgresStore(StoreContract):
    expected_backend = "postgresql"

    @pytest.fixture
    def make_store(self, pg_dsn):
        return lambda: PostgresStore(pg_dsn)


# ---------------------------------------------------------------- PostgreSQL only


@pytest.fixture
def admin(pg_admin_dsn):
    with psycopg.connect(pg_admin_dsn, autocommit=True) as conn:
        yield conn


@pytest.fixture
def pstore(pg_dsn):
    s = PostgresStore(pg_dsn)
    yield s
    s.close()


def terminate_backends(admin, dsn: str) -> int:
    """Kill every server process connected to ``dsn``'s database; how many there were."""
    dbname = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    rows = admin.execute(
        "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
        " WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)).fetchall()
    assert all(ok for (ok,) in rows)
    return len(rows)


def test_open_store_picks_postgres_for_a_postgresql_url(pg_dsn, tmp_path):
    assert pg_dsn.startswith("postgresql://")
    s = open_store(pg_dsn, str(tmp_path))
    try:
        assert isinstance(s, PostgresStore)
        assert s.backend == "postgresql"
        assert s.last_position() == 0
    finally:
        s.close()
    assert not (tmp_path / "xce.db").exists()


def test_tables_use_the_xce_prefix(pstore, pg_dsn):
    with psycopg.connect(pg_dsn) as conn:
        tables = {t for (t,) in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'")}
    assert tables == {"xce_facts", "xce_head", "xce_snapshot", "xce_lease", "xce_audit", "xce_members",
                      "xce_archive_jobs", "xce_archive_claims"}


def test_unreachable_server_is_store_unavailable_and_leaks_no_password():
    port = pg.free_port()  # nothing listens there
    dsn = f"postgresql://someone:s3cret-pw@127.0.0.1:{port}/nowhere?connect_timeout=5"
    with pytest.raises(StoreUnavailable) as info:
        PostgresStore(dsn)
    assert "s3cret-pw" not in str(info.value)
    assert "s3cret-pw" not in describe_dsn(dsn)
    assert str(port) in describe_dsn(dsn)


def test_schema_creation_is_safe_when_many_open_at_once(pg_dsn):
    n = 8
    start = threading.Barrier(n)
    stores: list = [None] * n
    errors: list[BaseException] = []

    def open_(i: int) -> None:
        try:
            start.wait()
            stores[i] = PostgresStore(pg_dsn)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert not errors, errors
        with psycopg.connect(pg_dsn) as conn:
            assert conn.execute("SELECT count(*) FROM xce_lease").fetchone() == (1,)
            assert conn.execute("SELECT count(*), max(last_position) FROM xce_head").fetchone() == (1, 0)
        lease = stores[0].acquire_lease("a", LONG_TTL)
        assert lease.epoch == 1
        stores[-1].append(lease.epoch, recs(1, 2))
        assert stores[3].last_position() == 2
    finally:
        for s in stores:
            if s is not None:
                s.close()


def test_reopening_an_existing_store_keeps_its_data(pg_dsn):
    first = PostgresStore(pg_dsn)
    lease = first.acquire_lease("a", LONG_TTL)
    first.append(lease.epoch, recs(1, 3))
    first.close()
    second = PostgresStore(pg_dsn)  # schema creation again: must not reset head or lease
    try:
        assert second.last_position() == 3
        assert second.current_lease() == lease
    finally:
        second.close()


def test_lease_times_come_from_the_server_clock(pstore, admin, monkeypatch):
    pstore.current_lease()  # connect before the local clock goes wrong
    real_time = time.time
    monkeypatch.setattr(time, "time", lambda: real_time() + 86_400.0)  # this host is a day ahead
    lease = pstore.acquire_lease("a", 30.0)
    renewed = pstore.renew_lease("a", lease.epoch, 60.0)
    monkeypatch.undo()
    (server_now,) = admin.execute("SELECT extract(epoch from clock_timestamp())::float8").fetchone()
    assert abs(lease.expires_at - (server_now + 30.0)) < 5.0
    assert abs(renewed.expires_at - (server_now + 60.0)) < 5.0
    assert pstore.current_lease() == renewed


def test_broken_connection_fails_that_call_and_the_next_one_reconnects(pstore, admin, pg_dsn):
    lease = pstore.acquire_lease("a", LONG_TTL)
    pstore.append(lease.epoch, recs(1, 2))
    assert terminate_backends(admin, pg_dsn) >= 2  # the log and the lease connection
    with pytest.raises(StoreUnavailable):
        pstore.last_position()
    assert pstore.last_position() == 2
    with pytest.raises(StoreUnavailable):
        pstore.renew_lease("a", lease.epoch, LONG_TTL)
    assert pstore.renew_lease("a", lease.epoch, LONG_TTL).epoch == lease.epoch
    pstore.append(lease.epoch, recs(3, 1))
    assert [r.position for r in read_all(pstore)] == [1, 2, 3]


def test_append_on_a_broken_connection_is_store_unavailable_then_the_log_tells_the_truth(
        pstore, admin, pg_dsn):
    lease = pstore.acquire_lease("a", LONG_TTL)
    pstore.append(lease.epoch, recs(1, 1))
    terminate_backends(admin, pg_dsn)
    with pytest.raises(StoreUnavailable):
        pstore.append(lease.epoch, recs(2, 3))
    # the caller re-reads the log to learn whether the batch made it (here: it did not)
    assert pstore.last_position() == 1
    pstore.append(lease.epoch, recs(2, 3))
    assert pstore.last_position() == 4


def test_server_side_failure_writes_nothing_and_keeps_the_connection(pstore):
    # PostgreSQL text cannot hold NUL; the append fails as a whole, and the store stays usable
    lease = pstore.acquire_lease("a", LONG_TTL)
    pstore.append(lease.epoch, recs(1, 1))
    bad = recs(2, 3)
    bad[1] = Record(position=3, type="T", version=1, payload="nul\x00byte")
    with pytest.raises(StoreUnavailable):
        pstore.append(lease.epoch, bad)
    assert pstore.last_position() == 1
    assert len(read_all(pstore)) == 1
    pstore.append(lease.epoch, recs(2, 3))
    assert pstore.last_position() == 4


def test_refusals_pass_through_untranslated(pstore):
    lease = pstore.acquire_lease("a", LONG_TTL)
    with pytest.raises(StaleEpoch) as stale:
        pstore.append(lease.epoch + 1, recs(1, 1))
    with pytest.raises(PositionConflict) as conflict:
        pstore.append(lease.epoch, recs(2, 1))
    assert not isinstance(stale.value, StoreUnavailable)
    assert not isinstance(conflict.value, StoreUnavailable)
    pstore.append(lease.epoch, recs(1, 1))  # and the connection is fine afterwards


def test_closed_store_refuses_calls(pstore):
    pstore.close()
    with pytest.raises(StoreUnavailable):
        pstore.last_position()
    with pytest.raises(StoreUnavailable):
        pstore.current_lease()
    pstore.close()  # idempotent


def test_acquire_waits_for_an_in_flight_append_and_then_fences_it(pg_dsn, admin):
    """A takeover serializes with appends: no append of the old epoch commits after it."""
    one, two = PostgresStore(pg_dsn), PostgresStore(pg_dsn)
    dbname = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    try:
        a = one.acquire_lease("a", 0.3)
        # hold the lease row the way an in-flight append does, from a third connection
        with psycopg.connect(pg_dsn) as blocker:
            blocker.execute("SELECT epoch FROM xce_lease WHERE name = 'leader' FOR SHARE")
            took: list = []
            t = threading.Thread(target=lambda: took.append(poll(
                lambda: two.acquire_lease("b", LONG_TTL), what="a's lease to expire")))
            t.start()
            poll(lambda: admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND wait_event_type = 'Lock'",
                (dbname,)).fetchone()[0] == 1, what="the takeover to wait for the row lock")
            assert not took  # it waits for the in-flight transaction
            blocker.rollback()
        t.join(30)
        assert took and took[0].epoch == a.epoch + 1
        with pytest.raises(StaleEpoch):
            one.append(a.epoch, recs(1, 1))
    finally:
        one.close()
        two.close()
