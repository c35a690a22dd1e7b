"""The leader's archive writes (``archive.add_retiring``): a retirement's documents reach the store
with its fact, whichever way it was committed."""

from __future__ import annotations

import asyncio
import time

from tests.controller.test_read_barrier import ADMIN
from xce.config import load_config
from xce.controller.core import Controller, Outcome
from xce.model import jobs
from xce.model.facts import RecordsRetired
from xce.model.jobs import JobSpec
from xce.store import open_store


def test_a_retirement_batched_with_other_commands_archives_what_it_dropped_as_it_was(tmp_path):
    async def scenario() -> None:
        ctl = Controller(open_store(None, str(tmp_path)), load_config(None), str(tmp_path))
        await ctl.start()
        assert await ctl.wait_leader(30), "the controller never led"
        try:
            job_id = await ctl.execute(lambda m: Outcome(*jobs.submit(m, ADMIN, JobSpec(command=["x"], held=True),
                                                                      time.time(), ctl.config)))
            before, batches = ctl.model.position, ctl.stats.batches
            # queued together, so one batch decides both: the kill is folded before the retirement is
            # decided, and the retirement is folded before the batch is written
            killed, retired = await asyncio.gather(
                ctl.execute(lambda m: Outcome(jobs.kill(m, ADMIN, job_id, time.time()), result="killed")),
                ctl.execute(lambda m: Outcome([RecordsRetired(time=time.time(), jobs=[job_id])], result="retired")))
            assert (killed, retired) == ("killed", "retired")
            assert ctl.stats.batches == batches + 1
            assert job_id not in ctl.model.jobs
            [row] = await ctl.read_store(ctl.store.archived_jobs, [job_id])
            assert row.position == ctl.model.position == before + 2
            assert row.state == "EXIT" and row.id == job_id
        finally:
            await ctl.stop()

    asyncio.run(scenario())
