"""The one suite every ``Store`` backend passes.

A backend's test module subclasses ``StoreContract`` and provides a
``make_store`` fixture: a callable that opens a *new handle* (a new
connection) on the same, initially empty storage for the current test.  The
contract opens as many handles as it needs and closes them all afterwards.

Lease expiry is tested with short TTLs and bounded polling, never with a
sleep standing in for the condition.
"""

from __future__ import annotations

import threading
import time
from typing import Callable

import pytest

from xce.store import (ArchivedClaim, ArchivedJob, AuditQuery, AuditRecord, HistoryQuery, LeaseLost, PositionConflict,
                       Record, Snapshot, StaleEpoch, Store, Usage, UsageQuery)
from xce.store.base import ARCHIVE_IDS

SHORT_TTL = 0.3   # seconds; leases that must expire during a test
LONG_TTL = 120.0  # seconds; leases that must not


def recs(first: int, n: int, tag: str = "") -> list[Record]:
    """``n`` records at positions first..first+n-1 with distinguishable fields."""
    return [Record(position=p, type=f"T{p % 3}", version=1 + p % 2, payload=f'{{"p":{p},"tag":"{tag}"}}')
            for p in range(first, first + n)]


def stripped(records: list[Record]) -> list[tuple]:
    """Records without their epoch, for comparing what was written with what was read."""
    return [(r.position, r.type, r.version, r.payload) for r in records]


def poll(cond: Callable[[], object], timeout: float = 15.0, what: str = "condition"):
    """Call ``cond`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def read_all(store: Store) -> list[Record]:
    return store.read_after(0, limit=1_000_000)


def arec(position: int, index: int = 0, *, time: float = 1000.0, user: str = "alice", action: str = "POST /v1/jobs",
         target: str = "job/1", result: str = "ok", detail: str = "") -> AuditRecord:
    return AuditRecord(time=time, user=user, action=action, target=target, result=result, detail=detail,
                       position=position, index=index)


def unseq(records: list[AuditRecord]) -> list[AuditRecord]:
    """Records without their store-assigned seq, for comparing what was written with what was read."""
    return [AuditRecord(**{**{f: getattr(r, f) for f in AuditRecord.__slots__}, "seq": 0}) for r in records]


def trail(store: Store, **filters) -> list[AuditRecord]:
    return store.query_audit(AuditQuery(limit=1_000_000, **filters))


def walk(store: Store, limit: int, before: int | None = None, **filters) -> list[AuditRecord]:
    """Every record matching ``filters`` (below seq ``before``), page by page."""
    out: list[AuditRecord] = []
    while True:
        page = store.query_audit(AuditQuery(limit=limit, before_seq=before, **filters))
        assert len(page) <= limit
        out += page
        if len(page) < limit:
            return out
        before = page[-1].seq


def ajob(id_: int, position: int, *, user: str = "alice", project: str = "default", name: str = "train",
         state: str = "DONE", end: float = 1000.0, start: float | None = 900.0, slots: int = 2,
         parent: int | None = None, cpu: float | None = None, gpu: float | None = None) -> ArchivedJob:
    return ArchivedJob(id=id_, user=user, project=project, queue="normal", name=name, state=state, array_parent=parent,
                       slots=slots, submit_time=800.0, start_time=start, end_time=end, position=position,
                       doc=f'{{"id":{id_},"history":[{{"state":"{state}","reason":"é ✓ \\u0000"}}]}}', cpu_seconds=cpu,
                       gpu_seconds=gpu)


def aclaim(id_: int, position: int, *, name: str = "ckpt", project: str = "default", owner: str = "alice",
           size: int = 1000, created: float = 100.0, released: float = 1100.0, job_id: int | None = None,
           form: str = "standalone") -> ArchivedClaim:
    return ArchivedClaim(id=id_, name=name, project=project, owner=owner, form=form, class_name="simfs",
                         job_id=job_id, size_bytes=size, created=created, released=released, position=position,
                         doc=f'{{"id":{id_},"name":"{name}"}}')


def history_walk(store: Store, limit: int, **filters) -> list[ArchivedJob]:
    out: list[ArchivedJob] = []
    before = None
    while True:
        page = store.query_history(HistoryQuery(limit=limit, before_id=before, **filters))
        assert len(page) <= limit
        assert [j.id for j in page] == sorted((j.id for j in page), reverse=True)
        out += page
        if len(page) < limit:
            return out
        before = page[-1].id


class StoreContract:
    """Subclass with a ``make_store`` fixture returning ``() -> Store`` on this test's storage."""

    expected_backend: str = ""

    @pytest.fixture
    def open_store(self, make_store):
        opened: list[Store] = []

        def open_() -> Store:
            s = make_store()
            opened.append(s)
            return s

        yield open_
        for s in opened:
            try:
                s.close()
            except Exception:
                pass

    @pytest.fixture
    def store(self, open_store) -> Store:
        return open_store()

    @pytest.fixture
    def epoch(self, store) -> int:
        """The epoch of a long lease held by 'leader' on ``store``."""
        lease = store.acquire_lease("leader", LONG_TTL)
        assert lease is not None
        return lease.epoch

    # ------------------------------------------------------------ empty store

    def test_backend_name(self, store):
        assert store.backend == self.expected_backend

    def test_new_store_is_empty(self, store):
        assert store.last_position() == 0
        assert store.read_after(0) == []
        assert store.load_snapshot() is None
        assert store.current_lease() is None

    # ------------------------------------------------------------ append and read

    def test_append_then_read_in_order_with_epoch(self, store, epoch):
        batch = recs(1, 5)
        store.append(epoch, batch)
        got = store.read_after(0)
        assert stripped(got) == stripped(batch)
        assert [r.position for r in got] == [1, 2, 3, 4, 5]
        assert all(r.epoch == epoch for r in got)
        assert store.last_position() == 5

    def test_epoch_stored_is_the_appenders_not_the_records(self, store, epoch):
        store.append(epoch, [Record(position=1, type="X", version=3, payload="{}", epoch=999)])
        (r,) = store.read_after(0)
        assert r == Record(position=1, type="X", version=3, payload="{}", epoch=epoch)

    def test_batches_continue_each_other(self, store, epoch):
        store.append(epoch, recs(1, 3, "a"))
        store.append(epoch, recs(4, 1, "b"))
        store.append(epoch, recs(5, 4, "c"))
        got = read_all(store)
        assert [r.position for r in got] == list(range(1, 9))
        assert stripped(got) == stripped(recs(1, 3, "a") + recs(4, 1, "b") + recs(5, 4, "c"))
        assert store.last_position() == 8

    def test_large_batch_in_one_append(self, store, epoch):
        batch = recs(1, 7000, "big")  # more variables than one SQLite statement binds
        store.append(epoch, batch)
        assert stripped(read_all(store)) == stripped(batch)
        assert store.last_position() == 7000

    def test_payloads_round_trip_exactly(self, store, epoch):
        payloads = ["", "plain", 'quote " and \' and \\ backslash', "tab\tnew\nline\r\n",
                    "unicode: žluťoučký kůň, 日本語, emoji 🚀", "\\N", "{\"json\": [1, 2.5, null]}",
                    "x" * 100_000, "comma,separated,values", "%s %(name)s {}"]
        batch = [Record(position=i + 1, type=f"type with spaces {i}", version=i, payload=p)
                 for i, p in enumerate(payloads)]
        store.append(epoch, batch)
        got = read_all(store)
        assert [r.payload for r in got] == payloads
        assert [(r.type, r.version) for r in got] == [(b.type, b.version) for b in batch]

    def test_empty_append_is_a_no_op(self, store, epoch):
        store.append(epoch, [])
        assert store.last_position() == 0
        assert store.read_after(0) == []
        store.append(epoch, recs(1, 2))
        store.append(epoch, [])
        assert store.last_position() == 2
        assert [r.position for r in read_all(store)] == [1, 2]

    def test_read_after_a_position(self, store, epoch):
        store.append(epoch, recs(1, 10))
        assert [r.position for r in store.read_after(7)] == [8, 9, 10]
        assert store.read_after(10) == []
        assert store.read_after(1000) == []
        assert [r.position for r in store.read_after(-5)] == list(range(1, 11))

    def test_read_after_with_limit_pages_through_the_log(self, store, epoch):
        batch = recs(1, 23)
        store.append(epoch, batch)
        assert [r.position for r in store.read_after(0, limit=5)] == [1, 2, 3, 4, 5]
        assert [r.position for r in store.read_after(20, limit=5)] == [21, 22, 23]
        assert store.read_after(0, limit=0) == []
        pages, pos = [], 0
        while True:
            page = store.read_after(pos, limit=4)
            if not page:
                break
            assert len(page) <= 4
            pages.append(page)
            pos = page[-1].position
        assert len(pages) == 6
        assert stripped([r for p in pages for r in p]) == stripped(batch)

    def test_default_limit_is_ten_thousand(self, store, epoch):
        store.append(epoch, recs(1, 10_005))
        got = store.read_after(0)
        assert len(got) == 10_000
        assert got[-1].position == 10_000
        assert [r.position for r in store.read_after(10_000)] == [10_001, 10_002, 10_003, 10_004, 10_005]

    # ------------------------------------------------------------ fencing and continuity

    def test_append_without_the_current_epoch_is_refused_atomically(self, store, epoch):
        store.append(epoch, recs(1, 3))
        for bad in (epoch + 1, epoch - 1, 0, 12345):
            with pytest.raises(StaleEpoch):
                store.append(bad, recs(4, 3, "stale"))
        assert store.last_position() == 3
        assert stripped(read_all(store)) == stripped(recs(1, 3))
        store.append(epoch, recs(4, 1, "after"))  # the log still continues at 4
        assert store.last_position() == 4

    @pytest.mark.parametrize("first", [0, 1, 3, 5, 100, -1])
    def test_append_that_does_not_continue_is_refused_atomically(self, store, epoch, first):
        store.append(epoch, recs(1, 3))
        with pytest.raises(PositionConflict):
            store.append(epoch, recs(first, 2, "bad"))
        assert store.last_position() == 3
        assert stripped(read_all(store)) == stripped(recs(1, 3))

    @pytest.mark.parametrize("positions", [[1, 2, 4], [1, 1, 2], [1, 3, 2], [1, 2, 3, 3], [2, 3, 4]])
    def test_non_consecutive_batch_is_refused_whole(self, store, epoch, positions):
        batch = [Record(position=p, type="T", version=1, payload=str(p)) for p in positions]
        with pytest.raises(PositionConflict):
            store.append(epoch, batch)
        assert store.last_position() == 0
        assert store.read_after(0) == []
        store.append(epoch, recs(1, 1))
        assert store.last_position() == 1

    def test_stale_epoch_is_checked_before_positions(self, store, epoch):
        # a deposed writer is told it was deposed, whatever its positions
        with pytest.raises(StaleEpoch):
            store.append(epoch + 1, recs(7, 1))
        assert store.last_position() == 0

    # ------------------------------------------------------------ snapshots

    def test_snapshot_round_trip_is_byte_exact(self, store, epoch):
        data = bytes(range(256)) * 4096 + b"\x00\x00end"
        store.append(epoch, recs(1, 3))
        store.write_snapshot(epoch, Snapshot(position=3, data=data))
        snap = store.load_snapshot()
        assert snap == Snapshot(position=3, data=data)
        assert type(snap.data) is bytes

    def test_empty_snapshot_data(self, store, epoch):
        store.write_snapshot(epoch, Snapshot(position=0, data=b""))
        assert store.load_snapshot() == Snapshot(position=0, data=b"")

    def test_latest_snapshot_replaces_the_previous(self, store, epoch):
        store.append(epoch, recs(1, 10))
        store.write_snapshot(epoch, Snapshot(position=4, data=b"first, and longer than the second"))
        store.write_snapshot(epoch, Snapshot(position=9, data=b"second"))
        assert store.load_snapshot() == Snapshot(position=9, data=b"second")
        store.write_snapshot(epoch, Snapshot(position=10, data=b"third"))
        assert store.load_snapshot() == Snapshot(position=10, data=b"third")

    def test_snapshot_write_is_fenced(self, store, epoch):
        store.write_snapshot(epoch, Snapshot(position=0, data=b"good"))
        with pytest.raises(StaleEpoch):
            store.write_snapshot(epoch + 1, Snapshot(position=0, data=b"stale"))
        with pytest.raises(StaleEpoch):
            store.write_snapshot(0, Snapshot(position=0, data=b"stale"))
        assert store.load_snapshot() == Snapshot(position=0, data=b"good")

    def test_fenced_snapshot_on_empty_store_writes_nothing(self, store, epoch):
        with pytest.raises(StaleEpoch):
            store.write_snapshot(epoch + 1, Snapshot(position=0, data=b"stale"))
        assert store.load_snapshot() is None

    # ------------------------------------------------------------ compaction

    def test_compact_without_a_snapshot_removes_nothing(self, store, epoch):
        store.append(epoch, recs(1, 5))
        assert store.compact(epoch, 5) == 0
        assert [r.position for r in read_all(store)] == [1, 2, 3, 4, 5]

    def test_compact_stops_at_upto_below_the_snapshot(self, store, epoch):
        store.append(epoch, recs(1, 10))
        store.write_snapshot(epoch, Snapshot(position=8, data=b"s"))
        assert store.compact(epoch, 3) == 3
        assert [r.position for r in read_all(store)] == list(range(4, 11))
        assert store.last_position() == 10

    def test_compact_never_passes_the_snapshot(self, store, epoch):
        store.append(epoch, recs(1, 10))
        store.write_snapshot(epoch, Snapshot(position=6, data=b"s"))
        assert store.compact(epoch, 9) == 6
        assert [r.position for r in read_all(store)] == [7, 8, 9, 10]
        assert store.last_position() == 10
        assert store.compact(epoch, 9) == 0  # nothing left at or below the snapshot
        assert store.compact(epoch, 1_000_000) == 0
        assert [r.position for r in read_all(store)] == [7, 8, 9, 10]

    def test_compact_everything_keeps_the_head_and_appends_continue(self, store, epoch):
        store.append(epoch, recs(1, 7))
        store.write_snapshot(epoch, Snapshot(position=7, data=b"all"))
        assert store.compact(epoch, 7) == 7
        assert store.read_after(0) == []
        assert store.last_position() == 7
        with pytest.raises(PositionConflict):
            store.append(epoch, recs(1, 1))  # the log does not restart
        store.append(epoch, recs(8, 2, "after"))
        assert stripped(read_all(store)) == stripped(recs(8, 2, "after"))
        assert store.last_position() == 9

    def test_compact_is_fenced(self, store, epoch):
        store.append(epoch, recs(1, 5))
        store.write_snapshot(epoch, Snapshot(position=5, data=b"s"))
        with pytest.raises(StaleEpoch):
            store.compact(epoch + 1, 5)
        assert [r.position for r in read_all(store)] == [1, 2, 3, 4, 5]

    # ------------------------------------------------------------ lease

    def test_acquire_free_lease_gives_epoch_one(self, store):
        lease = store.acquire_lease("a", LONG_TTL)
        assert lease is not None
        assert (lease.holder, lease.epoch) == ("a", 1)
        assert store.current_lease() == lease

    def test_lease_expiry_is_ttl_from_now_on_the_store_clock(self, store):
        # expires_at is on the store's clock; for a store on this machine that is our clock
        before = time.time()
        lease = store.acquire_lease("a", 50.0)
        after = time.time()
        assert before + 50.0 - 2.0 <= lease.expires_at <= after + 50.0 + 2.0

    def test_reacquire_by_the_holder_keeps_the_epoch_and_extends(self, store):
        first = store.acquire_lease("a", 10.0)
        again = store.acquire_lease("a", LONG_TTL)
        assert again is not None
        assert (again.holder, again.epoch) == ("a", first.epoch)
        assert again.expires_at >= first.expires_at + (LONG_TTL - 10.0) - 1.0
        assert store.current_lease() == again

    def test_another_holder_is_refused_while_the_lease_is_live(self, store):
        lease = store.acquire_lease("a", LONG_TTL)
        assert store.acquire_lease("b", LONG_TTL) is None
        assert store.acquire_lease("b", 0.01) is None
        assert store.current_lease() == lease

    def test_another_holder_takes_an_expired_lease_with_the_next_epoch(self, store):
        a = store.acquire_lease("a", SHORT_TTL)
        b = poll(lambda: store.acquire_lease("b", LONG_TTL), what="a's lease to expire")
        assert (b.holder, b.epoch) == ("b", a.epoch + 1)
        assert store.current_lease() == b
        assert store.acquire_lease("a", LONG_TTL) is None

    def test_epoch_grows_with_every_change_of_holder(self, store):
        epochs = []
        for holder in ("a", "b", "a", "c"):
            lease = poll(lambda: store.acquire_lease(holder, SHORT_TTL), what=f"lease for {holder}")
            epochs.append(lease.epoch)
        assert epochs == [1, 2, 3, 4]

    def test_renew_by_the_holder_extends(self, store):
        lease = store.acquire_lease("a", 10.0)
        renewed = store.renew_lease("a", lease.epoch, LONG_TTL)
        assert (renewed.holder, renewed.epoch) == ("a", lease.epoch)
        assert renewed.expires_at >= lease.expires_at + (LONG_TTL - 10.0) - 1.0
        assert store.current_lease() == renewed
        assert store.acquire_lease("b", LONG_TTL) is None

    def test_renew_keeps_a_short_lease_alive(self, store):
        lease = store.acquire_lease("a", SHORT_TTL)
        renewed = store.renew_lease("a", lease.epoch, LONG_TTL)
        # a's original lease would have expired by now; the renewal keeps b out
        poll(lambda: time.time() > lease.expires_at + 0.2, what="the original expiry to pass")
        assert store.acquire_lease("b", LONG_TTL) is None
        assert store.current_lease() == renewed

    def test_renew_after_another_holder_took_it_raises_lease_lost(self, store):
        a = store.acquire_lease("a", SHORT_TTL)
        b = poll(lambda: store.acquire_lease("b", LONG_TTL), what="a's lease to expire")
        with pytest.raises(LeaseLost):
            store.renew_lease("a", a.epoch, LONG_TTL)
        assert store.current_lease() == b  # the failed renewal changed nothing

    def test_renew_with_the_wrong_epoch_or_holder_raises_lease_lost(self, store):
        lease = store.acquire_lease("a", LONG_TTL)
        with pytest.raises(LeaseLost):
            store.renew_lease("a", lease.epoch + 1, LONG_TTL)
        with pytest.raises(LeaseLost):
            store.renew_lease("a", lease.epoch - 1, LONG_TTL)
        with pytest.raises(LeaseLost):
            store.renew_lease("b", lease.epoch, LONG_TTL)
        assert store.current_lease() == lease

    def test_renew_of_a_never_held_lease_raises_lease_lost(self, store):
        with pytest.raises(LeaseLost):
            store.renew_lease("a", 0, LONG_TTL)
        with pytest.raises(LeaseLost):
            store.renew_lease("a", 1, LONG_TTL)
        assert store.current_lease() is None

    def test_release_frees_the_lease_at_once(self, store):
        a = store.acquire_lease("a", LONG_TTL)
        store.release_lease("a", a.epoch)
        assert store.current_lease() is None
        b = store.acquire_lease("b", LONG_TTL)
        assert b is not None
        assert (b.holder, b.epoch) == ("b", a.epoch + 1)
        with pytest.raises(LeaseLost):
            store.renew_lease("a", a.epoch, LONG_TTL)

    def test_reacquire_after_release_is_a_new_epoch(self, store):
        a = store.acquire_lease("a", LONG_TTL)
        store.release_lease("a", a.epoch)
        again = store.acquire_lease("a", LONG_TTL)
        assert again.epoch == a.epoch + 1

    def test_release_by_someone_else_or_an_old_epoch_changes_nothing(self, store):
        a = store.acquire_lease("a", SHORT_TTL)
        b = poll(lambda: store.acquire_lease("b", LONG_TTL), what="a's lease to expire")
        store.release_lease("a", a.epoch)     # deposed holder, old epoch
        store.release_lease("c", b.epoch)     # never held it
        store.release_lease("b", b.epoch + 1)  # wrong epoch
        assert store.current_lease() == b
        assert store.acquire_lease("c", LONG_TTL) is None

    def test_deposed_holder_is_fenced_everywhere(self, store):
        a = store.acquire_lease("a", SHORT_TTL)
        store.append(a.epoch, recs(1, 3, "a"))
        store.write_snapshot(a.epoch, Snapshot(position=2, data=b"a's"))
        b = poll(lambda: store.acquire_lease("b", LONG_TTL), what="a's lease to expire")
        with pytest.raises(StaleEpoch):
            store.append(a.epoch, recs(4, 2, "a-late"))
        with pytest.raises(StaleEpoch):
            store.write_snapshot(a.epoch, Snapshot(position=3, data=b"a-late"))
        with pytest.raises(StaleEpoch):
            store.compact(a.epoch, 2)
        with pytest.raises(LeaseLost):
            store.renew_lease("a", a.epoch, LONG_TTL)
        assert store.last_position() == 3
        assert store.load_snapshot() == Snapshot(position=2, data=b"a's")
        assert len(read_all(store)) == 3
        # the new holder carries on from where the log is
        store.append(b.epoch, recs(4, 2, "b"))
        got = read_all(store)
        assert [(r.position, r.epoch) for r in got] == [(1, a.epoch), (2, a.epoch), (3, a.epoch),
                                                         (4, b.epoch), (5, b.epoch)]

    # ------------------------------------------------------------ audit trail

    def test_new_store_has_an_empty_trail(self, store):
        assert trail(store) == []

    def test_audit_records_are_written_with_their_batch_and_read_newest_first(self, store, epoch):
        written = [arec(1, 0, target="job/1"), arec(1, 1, target="claim/a", action="claim.state", result="READY"),
                   arec(3, 0, user="bob", target="job/2", result="forbidden", detail="no")]
        store.append(epoch, recs(1, 3), written)
        got = trail(store)
        assert unseq(got) == unseq(written)[::-1]
        assert [r.seq for r in got] == sorted((r.seq for r in got), reverse=True)
        assert len({r.seq for r in got}) == 3 and all(r.seq > 0 for r in got)
        store.append(epoch, recs(4, 1), [arec(4)])
        newest = trail(store)[0]
        assert (newest.position, newest.seq > got[0].seq) == (4, True)

    def test_audit_text_round_trips_exactly(self, store, epoch):
        texts = ["", 'quote " and \' and \\ backslash', "tab\tnew\nline", "žluťoučký 日本語 🚀", "%_ like*", "x" * 4000]
        written = [arec(1, i, user=t[:63], action=t, target=t, result=t, detail=t, time=1000.5 + i)
                   for i, t in enumerate(texts)]
        store.append(epoch, recs(1, 1), written)
        assert unseq(trail(store))[::-1] == unseq(written)

    @pytest.mark.parametrize("positions", [[0], [1], [4], [2, 5]])
    def test_audit_records_outside_their_batch_refuse_the_whole_append(self, store, epoch, positions):
        store.append(epoch, recs(1, 1), [arec(1)])
        with pytest.raises(PositionConflict):
            store.append(epoch, recs(2, 2), [arec(p, i) for i, p in enumerate(positions)])
        with pytest.raises(PositionConflict):
            store.append(epoch, [], [arec(2)])  # audit records never come without their facts
        assert store.last_position() == 1
        assert [r.position for r in trail(store)] == [1]

    def test_a_refused_append_writes_no_audit_record(self, store, epoch):
        with pytest.raises(StaleEpoch):
            store.append(epoch + 1, recs(1, 1), [arec(1)])
        with pytest.raises(PositionConflict):
            store.append(epoch, recs(2, 1), [arec(2)])
        assert trail(store) == []
        store.append(epoch, recs(1, 1), [arec(1)])
        assert len(trail(store)) == 1

    def test_a_duplicate_audit_key_fails_the_whole_batch(self, store, epoch):
        with pytest.raises(Exception):
            store.append(epoch, recs(1, 2), [arec(1, 0), arec(1, 0)])
        assert store.last_position() == 0 and trail(store) == []

    def test_audit_query_filters(self, store, epoch):
        rows = [arec(1, 0, time=100.0, user="alice", target="job/1", action="POST /v1/jobs"),
                arec(2, 0, time=200.0, user="alice", target="job/12", action="POST /v1/jobs/{job_id}/kill"),
                arec(3, 0, time=300.0, user="bob", target="job/2", result="forbidden"),
                arec(4, 0, time=400.0, user="-", target="claim/ckpt", action="claim.state", result="READY"),
                arec(4, 1, time=400.0, user="-", target="claim/ckpt2", action="claim.state", result="READY"),
                arec(5, 0, time=500.0, user="carol", target="claim/data", action="claim.state", result="PENDING"),
                arec(6, 0, time=600.0, user="dave", target="claim/日本", action="orphan", result="seen"),
                arec(7, 0, time=700.0, user="erin", target="100%_done", action="x", result="ok")]
        store.append(epoch, recs(1, 7), rows)

        def pos(**f) -> list[tuple[int, int]]:
            return [(r.position, r.index) for r in trail(store, **f)]

        assert pos(since=300.0) == [(7, 0), (6, 0), (5, 0), (4, 1), (4, 0), (3, 0)]
        assert pos(until=300.0) == [(2, 0), (1, 0)]
        assert pos(since=200.0, until=400.0) == [(3, 0), (2, 0)]
        assert pos(since=450.0, until=450.0) == []
        assert pos(user="alice") == [(2, 0), (1, 0)]
        assert pos(user="nobody") == []
        assert pos(target="job/1") == [(2, 0), (1, 0)]  # a prefix: job/12 too
        assert pos(target="job/12") == [(2, 0)]
        assert pos(target="job/") == [(3, 0), (2, 0), (1, 0)]
        assert pos(target="claim/ckpt") == [(4, 1), (4, 0)]
        assert pos(target="claim/") == [(6, 0), (5, 0), (4, 1), (4, 0)]
        assert pos(target="claim/日") == [(6, 0)]
        assert pos(target="100%") == [(7, 0)]  # no wildcard: % and _ are plain characters
        assert pos(target="1_0") == [] and pos(target="%") == []
        assert pos(target="JOB/") == []  # case-sensitive
        assert pos(action="claim.state") == [(5, 0), (4, 1), (4, 0)]
        assert pos(action="claim.state", result="READY") == [(4, 1), (4, 0)]
        assert pos(result="forbidden") == [(3, 0)]
        assert pos(user="alice", target="job/12", since=150.0) == [(2, 0)]
        assert pos(user="alice", target="claim/") == []
        assert [r.position for r in store.query_audit(AuditQuery(limit=2))] == [7, 6]
        assert store.query_audit(AuditQuery(limit=0)) == []

    def test_audit_paging_walks_every_record_once_newest_first(self, store, epoch):
        for p in range(1, 24):
            store.append(epoch, recs(p, 1), [arec(p, i, user="alice" if i % 2 else "bob") for i in range(p % 3)])
        everything = trail(store)
        assert len(everything) == 24
        for limit in (1, 2, 5, 24, 25, 100):
            assert walk(store, limit) == everything
        assert walk(store, 3, user="bob") == trail(store, user="bob")
        before = everything[4].seq
        assert store.query_audit(AuditQuery(limit=3, before_seq=before)) == everything[5:8]

    def test_audit_paging_is_stable_under_concurrent_appends(self, open_store):
        writer, reader = open_store(), open_store()
        lease = writer.acquire_lease("a", LONG_TTL)
        for p in range(1, 41):
            writer.append(lease.epoch, recs(p, 1), [arec(p, 0), arec(p, 1, user="bob")])
        first = trail(reader)
        stop = threading.Event()
        errors: list[BaseException] = []

        def keep_appending() -> None:
            try:
                p = 41
                while not stop.is_set():
                    writer.append(lease.epoch, recs(p, 1), [arec(p, 0), arec(p, 1, user="bob")])
                    p += 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=keep_appending)
        t.start()
        try:
            poll(lambda: reader.last_position() > 45, what="appends to be under way")
            newest = reader.query_audit(AuditQuery(limit=7))
            walked = newest + walk(reader, 7, before=newest[-1].seq)
        finally:
            stop.set()
            t.join(30)
        assert not errors, errors
        seqs = [r.seq for r in walked]
        assert seqs == sorted(set(seqs), reverse=True)  # newest first, never twice
        # every record older than the first page's newest is there exactly once, the 80 from before included
        assert walked == trail(reader, before_seq=walked[0].seq + 1)
        assert set(unseq(first)) <= set(unseq(walked))

    def test_racing_appends_give_seq_in_commit_order(self, open_store):
        handles = [open_store(), open_store()]
        lease = handles[0].acquire_lease("a", LONG_TTL)
        start = threading.Barrier(2)
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            s = handles[i]
            try:
                start.wait()
                done = 0
                while done < 40:
                    last = s.last_position()
                    try:
                        s.append(lease.epoch, [Record(position=last + 1, type="W", version=i, payload="")],
                                 [arec(last + 1, 0, user=f"w{i}"), arec(last + 1, 1, user=f"w{i}")])
                        done += 1
                    except PositionConflict:
                        pass
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, errors
        got = trail(handles[1])[::-1]
        assert len(got) == 160
        assert [(r.position, r.index) for r in got] == [(p, i) for p in range(1, 81) for i in (0, 1)]

    def test_backfill_adds_only_positions_the_trail_lacks(self, store, epoch):
        store.append(epoch, recs(1, 3), [arec(1, 0), arec(2, 0), arec(2, 1)])
        # a replay derives the records of positions 1..3 again, position 3 having had none before
        replayed = [arec(1, 0), arec(2, 0), arec(2, 1), arec(2, 2, detail="a newer fold's extra line"), arec(3, 0)]
        assert store.backfill_audit(epoch, replayed) == 1
        assert [(r.position, r.index) for r in trail(store)] == [(3, 0), (2, 1), (2, 0), (1, 0)]
        assert store.backfill_audit(epoch, replayed) == 0  # idempotent
        assert store.backfill_audit(epoch, []) == 0
        legacy = [arec(0, i, time=float(i)) for i in range(1, 6)]  # an old snapshot's trail: position 0
        assert store.backfill_audit(epoch, legacy) == 5
        assert store.backfill_audit(epoch, legacy) == 0
        got = trail(store)
        assert [(r.position, r.index) for r in got[:5]] == [(0, 5), (0, 4), (0, 3), (0, 2), (0, 1)]
        assert len(got) == 9 and len({r.seq for r in got}) == 9

    def test_backfill_is_fenced(self, store, epoch):
        store.append(epoch, recs(1, 1))
        with pytest.raises(StaleEpoch):
            store.backfill_audit(epoch + 1, [arec(1)])
        assert trail(store) == []

    def test_the_trail_survives_compaction_and_reopening(self, open_store):
        first = open_store()
        lease = first.acquire_lease("a", LONG_TTL)
        first.append(lease.epoch, recs(1, 5), [arec(p) for p in range(1, 6)])
        first.write_snapshot(lease.epoch, Snapshot(position=5, data=b"s"))
        assert first.compact(lease.epoch, 5) == 5
        before = trail(first)
        first.close()
        again = open_store()
        assert trail(again) == before and len(before) == 5
        again.append(lease.epoch, recs(6, 1), [arec(6)])
        assert trail(again)[0].seq > before[0].seq

    # ------------------------------------------------------------ several handles

    def test_two_handles_see_each_others_appends(self, open_store):
        one, two = open_store(), open_store()
        lease = one.acquire_lease("a", LONG_TTL)
        assert two.current_lease() == lease
        one.append(lease.epoch, recs(1, 3, "one"))
        assert two.last_position() == 3
        assert stripped(two.read_after(0)) == stripped(recs(1, 3, "one"))
        two.append(lease.epoch, recs(4, 2, "two"))
        assert one.last_position() == 5
        assert stripped(one.read_after(3)) == stripped(recs(4, 2, "two"))
        with pytest.raises(PositionConflict):
            one.append(lease.epoch, recs(4, 1, "one-again"))  # two got there first
        two.write_snapshot(lease.epoch, Snapshot(position=5, data=b"by two"))
        assert one.load_snapshot() == Snapshot(position=5, data=b"by two")
        assert one.compact(lease.epoch, 2) == 2
        assert [r.position for r in two.read_after(0)] == [3, 4, 5]

    def test_lease_taken_through_another_handle_fences_this_one(self, open_store):
        one, two = open_store(), open_store()
        a = one.acquire_lease("a", SHORT_TTL)
        one.append(a.epoch, recs(1, 1))
        b = poll(lambda: two.acquire_lease("b", LONG_TTL), what="a's lease to expire")
        assert one.current_lease() == b
        with pytest.raises(StaleEpoch):
            one.append(a.epoch, recs(2, 1))
        with pytest.raises(LeaseLost):
            one.renew_lease("a", a.epoch, LONG_TTL)
        assert one.acquire_lease("a", LONG_TTL) is None
        two.append(b.epoch, recs(2, 1))
        assert one.last_position() == 2

    def test_close_and_reopen_gives_the_same_state(self, open_store):
        first = open_store()
        lease = first.acquire_lease("a", LONG_TTL)
        first.append(lease.epoch, recs(1, 6, "kept"))
        first.write_snapshot(lease.epoch, Snapshot(position=4, data=b"\x00snap\xff"))
        first.compact(lease.epoch, 2)
        first.close()
        again = open_store()
        assert again.last_position() == 6
        assert stripped(again.read_after(0)) == stripped(recs(3, 4, "kept"))
        assert all(r.epoch == lease.epoch for r in again.read_after(0))
        assert again.load_snapshot() == Snapshot(position=4, data=b"\x00snap\xff")
        assert again.current_lease() == lease
        again.append(lease.epoch, recs(7, 1))  # the holder carries on across handles
        assert again.last_position() == 7

    def test_calls_after_close_fail_rather_than_silently_reconnect(self, store, epoch):
        store.close()
        with pytest.raises(Exception) as info:
            store.append(epoch, recs(1, 1))
        assert not isinstance(info.value, (StaleEpoch, PositionConflict, LeaseLost))

    # ------------------------------------------------------------ concurrency

    def test_racing_writers_on_two_handles_never_break_the_log(self, open_store):
        handles = [open_store(), open_store()]
        lease = handles[0].acquire_lease("a", LONG_TTL)
        per_writer, conflicts, errors = 60, [0, 0], []
        start = threading.Barrier(2)

        def writer(i: int) -> None:
            s = handles[i]
            try:
                start.wait()
                done = 0
                while done < per_writer:
                    last = s.last_position()
                    try:
                        s.append(lease.epoch, [Record(position=last + 1, type="W", version=i,
                                                      payload=f"{i}:{done}")])
                        done += 1
                    except PositionConflict:
                        conflicts[i] += 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        got = read_all(handles[0])
        assert [r.position for r in got] == list(range(1, 2 * per_writer + 1))
        for i in range(2):  # every acknowledged append is there, once, in its writer's order
            mine = [r.payload for r in got if r.version == i]
            assert mine == [f"{i}:{n}" for n in range(per_writer)]

    def test_racing_acquirers_elect_exactly_one(self, open_store):
        handles = [open_store() for _ in range(4)]
        start = threading.Barrier(len(handles))
        results: list = [None] * len(handles)

        def acquire(i: int) -> None:
            start.wait()
            results[i] = handles[i].acquire_lease(f"h{i}", LONG_TTL)

        threads = [threading.Thread(target=acquire, args=(i,)) for i in range(len(handles))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [r for r in results if r is not None]
        assert len(winners) == 1
        assert winners[0].epoch == 1
        assert handles[0].current_lease() == winners[0]

    def test_one_handle_shared_by_threads(self, store, epoch):
        errors: list[BaseException] = []
        per_thread = 40

        def worker(i: int) -> None:
            try:
                done = 0
                while done < per_thread:
                    last = store.last_position()
                    try:
                        store.append(epoch, [Record(position=last + 1, type="S", version=i, payload=str(done))])
                        done += 1
                    except PositionConflict:
                        pass
                    store.read_after(max(0, last - 5))
                    store.current_lease()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors
        assert [r.position for r in read_all(store)] == list(range(1, 4 * per_thread + 1))

    # ------------------------------------------------------------ members (who shares the store)

    def test_members_announce_update_and_leave(self, make_store, store):
        other = make_store()
        assert store.members() == []
        store.announce("a", "http://a:1", 5)
        other.announce("b", "http://b:1", 3)
        store.announce("a", "http://a:1", 7)  # a later announcement replaces the first
        got = {m.holder: m for m in other.members()}
        assert {h: (m.url, m.position) for h, m in got.items()} == {"a": ("http://a:1", 7), "b": ("http://b:1", 3)}
        assert all(0.0 <= m.age < 60.0 for m in got.values())
        other.leave("b")
        assert [m.holder for m in store.members()] == ["a"]
        store.leave("nobody")  # changes nothing
        assert [m.holder for m in store.members()] == ["a"]

    def test_a_new_life_at_the_same_url_replaces_the_old(self, store):
        store.announce("a-old", "http://a:1", 5)
        store.announce("b", "http://b:1", 5)
        store.announce("a-new", "http://a:1", 0)
        assert sorted((m.holder, m.url) for m in store.members()) == [("a-new", "http://a:1"), ("b", "http://b:1")]

    # ------------------------------------------------------------ the archive (bounded history)

    def test_a_new_store_has_an_empty_archive(self, store):
        assert store.query_history(HistoryQuery()) == []
        assert store.archived_jobs([1, 2]) == [] and store.archived_claims([1]) == []
        assert store.archived_claims_named("ckpt", None) == []
        assert store.usage(UsageQuery()) == []

    def test_archived_records_are_written_with_their_fact_and_read_back_exactly(self, store, epoch):
        jobs = [ajob(1, 1), ajob(2, 1, start=None, user="bob")]
        claims = [aclaim(7, 1, job_id=1, form="template", name="j1.1:scratch")]
        store.append(epoch, recs(1, 1), [arec(1)], jobs=jobs, claims=claims)
        assert sorted(store.archived_jobs([2, 1, 99]), key=lambda j: j.id) == jobs
        assert store.archived_claims([7, 8]) == claims
        assert store.archived_claims_named("j1.1:scratch", None) == claims

    def test_a_large_retirement_is_archived_whole_and_exactly(self, store, epoch):
        """A 5,000-element array retires in one fact: more rows than one SQLite statement binds."""
        jobs = [ajob(i, 1, end=1796397289.6612345 + i / 7, start=None if i % 2 else 1796397000.1 + i / 3,
                     name=f"h-é{i}", parent=1) for i in range(1, 5001)]
        store.append(epoch, recs(1, 1), jobs=jobs)
        got = [j for i in range(1, 5001, ARCHIVE_IDS) for j in store.archived_jobs(list(range(i, i + ARCHIVE_IDS)))]
        assert sorted(got, key=lambda j: j.id) == jobs
        ids = [j.id for j in history_walk(store, 1000)]
        assert sorted(ids) == list(range(1, 5001)) and len(ids) == 5000

    def test_a_refused_append_archives_nothing(self, store, epoch):
        store.append(epoch, recs(1, 1))
        with pytest.raises(PositionConflict):
            store.append(epoch, recs(5, 1), jobs=[ajob(1, 5)], claims=[aclaim(1, 5)])
        with pytest.raises(StaleEpoch):
            store.append(epoch + 1, recs(2, 1), jobs=[ajob(1, 2)], claims=[aclaim(1, 2)])
        assert store.archived_jobs([1]) == [] and store.archived_claims([1]) == []

    def test_an_id_archived_twice_keeps_the_first_document(self, store, epoch):
        store.append(epoch, recs(1, 1), jobs=[ajob(1, 1, name="first")])
        store.append(epoch, recs(2, 1), jobs=[ajob(1, 2, name="second")])
        assert [j.name for j in store.archived_jobs([1])] == ["first"]

    def test_history_filters(self, store, epoch):
        jobs = [ajob(1, 1, user="alice", end=100.0), ajob(2, 1, user="bob", project="physics", end=200.0),
                ajob(3, 2, state="EXIT", end=300.0, name="eval"), ajob(4, 2, parent=4, end=400.0),
                ajob(5, 3, parent=4, end=500.0)]
        store.append(epoch, recs(1, 3), jobs=jobs)

        def ids(**kw) -> list[int]:
            return [j.id for j in store.query_history(HistoryQuery(limit=100, **kw))]

        assert ids() == [5, 4, 3, 2, 1]
        assert ids(user="bob") == [2]
        assert ids(project="physics") == [2]
        assert ids(states=("EXIT",)) == [3]
        assert ids(states=("EXIT", "DONE")) == [5, 4, 3, 2, 1]
        assert ids(name="eval") == [3]
        assert ids(since=200.0, until=400.0) == [3, 2]
        assert ids(array_parent=4) == [5, 4]
        assert ids(max_position=2) == [4, 3, 2, 1]
        assert ids(before_id=3) == [2, 1]
        assert ids(user="nobody") == []

    def test_history_paging_walks_every_record_once_while_more_arrive(self, store, epoch):
        store.append(epoch, recs(1, 1), jobs=[ajob(i, 1) for i in range(1, 101)])
        seen: list[int] = []
        before = None
        position = 2
        while True:
            page = store.query_history(HistoryQuery(limit=7, before_id=before))
            seen += [j.id for j in page]
            # newer jobs are retired between pages: they have higher ids, in front of the first page
            store.append(epoch, recs(position, 1), jobs=[ajob(1000 + position, position)])
            position += 1
            if len(page) < 7:
                break
            before = page[-1].id
        assert seen == list(range(100, 0, -1))
        assert len(history_walk(store, 13)) == 100 + position - 2

    def test_claims_by_name_newest_per_project(self, store, epoch):
        store.append(epoch, recs(1, 1), claims=[aclaim(1, 1), aclaim(5, 1), aclaim(3, 1, project="physics"),
                                                 aclaim(4, 1, name="other")])
        assert [c.id for c in store.archived_claims_named("ckpt", None)] == [5, 3]
        assert [c.id for c in store.archived_claims_named("ckpt", ["physics"])] == [3]
        assert [c.id for c in store.archived_claims_named("ckpt", ["default", "nope"])] == [5]
        assert store.archived_claims_named("ckpt", []) == []

    def test_usage_sums_per_project_in_the_window(self, store, epoch):
        store.append(epoch, recs(1, 2), jobs=[
            ajob(1, 1, start=900.0, end=1000.0, slots=2),            # 200 slot-seconds
            ajob(2, 1, start=None, end=1000.0),                      # never started: counted, 0 slot-seconds
            ajob(3, 2, project="physics", start=0.0, end=10.0, slots=1, user="bob"),
            ajob(4, 2, start=5000.0, end=5100.0)],                   # outside the window below
            claims=[aclaim(1, 1, size=10, created=100.0, released=1100.0),  # 10 * 1000 byte-seconds
                    aclaim(2, 2, project="physics", size=1, created=0.0, released=5.0, owner="bob")])
        got = store.usage(UsageQuery(since=0.0, until=2000.0))
        assert got == [Usage(project="default", jobs=2, slot_seconds=200.0, claims=1, claim_byte_seconds=10_000.0),
                       Usage(project="physics", jobs=1, slot_seconds=10.0, claims=1, claim_byte_seconds=5.0)]
        assert store.usage(UsageQuery(user="bob")) == [
            Usage(project="physics", jobs=1, slot_seconds=10.0, claims=1, claim_byte_seconds=5.0)]
        assert store.usage(UsageQuery(project="default", max_position=1, until=2000.0)) == [
            Usage(project="default", jobs=2, slot_seconds=200.0, claims=1, claim_byte_seconds=10_000.0)]

    def test_usage_per_user_sums_cpu_seconds_and_claims_by_their_owners(self, store, epoch):
        store.append(epoch, recs(1, 2), jobs=[
            ajob(1, 1, start=900.0, end=1000.0, slots=2, cpu=3.5),
            ajob(2, 1, start=990.0, end=1000.0, slots=1, cpu=None),   # not measured: counts no CPU
            ajob(3, 2, start=0.0, end=10.0, slots=1, user="bob", cpu=1.25)],
            claims=[aclaim(1, 1, size=10, created=100.0, released=1100.0, owner="bob")])
        by_user = store.usage(UsageQuery(by_user=True))
        assert by_user == [
            Usage(project="default", user="alice", jobs=2, slot_seconds=210.0, cpu_seconds=3.5),
            Usage(project="default", user="bob", jobs=1, slot_seconds=10.0, cpu_seconds=1.25, claims=1,
                  claim_byte_seconds=10_000.0)]
        assert store.usage(UsageQuery()) == [Usage(project="default", jobs=3, slot_seconds=220.0, cpu_seconds=4.75,
                                                   claims=1, claim_byte_seconds=10_000.0)]
        assert [j.cpu_seconds for j in store.archived_jobs([1, 2, 3])] == [3.5, None, 1.25]

    def test_usage_sums_the_gpu_seconds_of_jobs_that_held_gpus(self, store, epoch):
        store.append(epoch, recs(1, 2), jobs=[
            ajob(1, 1, start=900.0, end=1000.0, gpu=400.0),  # 4 GPUs for 100 s
            ajob(2, 1, start=990.0, end=1000.0),  # no GPU
            ajob(3, 2, user="bob", gpu=7200.0)])
        assert store.usage(UsageQuery(by_user=True)) == [
            Usage(project="default", user="alice", jobs=2, slot_seconds=220.0, gpu_seconds=400.0),
            Usage(project="default", user="bob", jobs=1, slot_seconds=200.0, gpu_seconds=7200.0)]
        assert [j.gpu_seconds for j in store.archived_jobs([1, 2, 3])] == [400.0, None, 7200.0]

    def test_the_archive_survives_compaction_and_reopening(self, open_store):
        first = open_store()
        lease = first.acquire_lease("a", LONG_TTL)
        first.append(lease.epoch, recs(1, 3), jobs=[ajob(1, 2)], claims=[aclaim(1, 3)])
        first.write_snapshot(lease.epoch, Snapshot(position=3, data=b"s"))
        assert first.compact(lease.epoch, 3) == 3
        first.close()
        again = open_store()
        assert [j.id for j in again.query_history(HistoryQuery())] == [1]
        assert again.archived_claims([1]) == [aclaim(1, 3)]


__all__ = ["LONG_TTL", "SHORT_TTL", "StoreContract", "poll", "read_all", "recs", "stripped"]
