"""The read barrier under a steady stream of writes: a read waits for the batch in flight, not for
the writes to stop, and it never sees a fact that is not durable.  A retirement in flight holds no
read: it is folded only once durable."""

from __future__ import annotations

import asyncio
import threading
import time

from xce.config import load_config
from xce.controller.core import MAX_BATCH, Controller, Outcome
from xce.model import jobs
from xce.model.facts import RecordsRetired, UserDefined
from xce.model.identity import Role, User
from xce.model.jobs import JobSpec
from xce.store import open_store

ADMIN = User(name="admin", role=Role.ADMIN, projects=["default"])

WRITES = 200_000  # a bound: the stream must still be going when the reads are done
BACKLOG = 3 * MAX_BATCH


def test_reads_wait_for_one_commit_while_writes_keep_coming(tmp_path):
    async def scenario() -> None:
        ctl = Controller(open_store(None, str(tmp_path)), load_config(None), str(tmp_path))
        await ctl.start()
        assert await ctl.wait_leader(30), "the controller never led"
        sent = 0
        reads_done = False
        writes: list[asyncio.Task] = []

        answered = 0

        def count_answer(_: asyncio.Task) -> None:
            nonlocal answered
            answered += 1

        def define(i: int):
            return lambda model: Outcome(facts=[UserDefined(time=0.0, name=f"u{i}", role="user")])

        async def stream() -> None:
            """Commands faster than commits, up to a backlog of three full batches: the commit queue
            is never empty while this runs, and never grows without bound."""
            nonlocal sent
            while not reads_done and sent < WRITES:
                if sent - answered < BACKLOG:
                    for _ in range(8):
                        write = asyncio.create_task(ctl.execute(define(sent)))
                        write.add_done_callback(count_answer)
                        writes.append(write)
                        sent += 1
                await asyncio.sleep(0)

        producer = asyncio.create_task(stream())
        try:
            while ctl.stats.batches < 3:  # the stream is flowing through the commit loop
                await asyncio.sleep(0.01)
            for _ in range(20):
                before = ctl.stats.batches
                await ctl.read_barrier()
                assert ctl.model.position == ctl.committed, "a read saw facts not yet durable"
                assert ctl.stats.batches - before <= 1, "a read waited for more than the batch in flight"
                assert not producer.done(), "the read waited until the writes stopped"
        finally:
            reads_done = True
            await producer
            await asyncio.gather(*writes, return_exceptions=True)
            await ctl.stop()
        assert all(not t.exception() for t in writes)

    asyncio.run(scenario())


def test_a_retirement_in_flight_holds_no_read_and_is_seen_only_once_durable(tmp_path):
    async def scenario() -> None:
        ctl = Controller(open_store(None, str(tmp_path)), load_config(None), str(tmp_path))
        await ctl.start()
        assert await ctl.wait_leader(30), "the controller never led"
        writer_free = threading.Event()
        try:
            job_id = await ctl.execute(lambda m: Outcome(*jobs.submit(m, ADMIN, JobSpec(command=["x"], held=True),
                                                                      time.time(), ctl.config)))
            await ctl.execute(lambda m: Outcome(jobs.kill(m, ADMIN, job_id, time.time())))
            before = ctl.model.position
            # the writer thread is busy: the retirement's commit stays in flight until it is free
            ctl._writer.submit(writer_free.wait, 60)
            decided = asyncio.Event()

            def retire(model):
                decided.set()  # the commit loop goes on to hand the fact to the (busy) writer
                return Outcome([RecordsRetired(time=time.time(), jobs=[job_id])], result=1)

            retirement = asyncio.create_task(ctl.execute(retire, fold_after_commit=True))
            await asyncio.wait_for(decided.wait(), 30)
            await asyncio.wait_for(ctl.read_barrier(), 30)  # the commit in flight holds no read ...
            assert job_id in ctl.model.jobs, "the retirement was folded before it was durable"
            assert ctl.model.position == ctl.committed == before  # ... which sees only durable facts
            assert not retirement.done()
            assert await ctl.read_store(ctl.store.archived_jobs, [job_id]) == []

            writer_free.set()
            assert await retirement == 1
            assert job_id not in ctl.model.jobs and ctl.model.position == ctl.committed == before + 1
            [row] = await ctl.read_store(ctl.store.archived_jobs, [job_id])
            assert row.position == before + 1 and row.state == "EXIT"
        finally:
            writer_free.set()
            await ctl.stop()

    asyncio.run(scenario())
