"""The leases of tasks' launchers: a task lives no longer than the ``blaunch`` that launched it.

blaunch asks for its tasks all along (their output, then their ends: long polls of ``api/tasks.py``); each
ask renews its task's lease, and a task with an ask in flight is held.  A task whose launcher has not
asked for ``launcher_lease`` seconds (blaunch killed, even by SIGKILL, or its host cut off) is killed by
an order of its run (``tasks.launchers_lost``: SIGKILL to that task, once), and its end then ends the job
unless it was launched ``--keep-going``.  Signals blaunch can catch it passes on itself.

Level-triggered: each tick looks at the tasks the model says are live (``tasks.live_tasks``), so a
repeated tick orders nothing twice.  Volatile, as heartbeats are: a new leader scans the model once and
gives every live task the whole lease from its own start (it knows nothing of its predecessor's clock).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from xce.controller.commit import Outcome
from xce.controller.core import Controller
from xce.errors import XceError
from xce.model import Model, tasks

log = logging.getLogger("xce.launchers")

TaskId = tuple[int, int, int]  # job, run, task


class Launchers:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self.lease = ctl.config.controller.launcher_lease
        self.heard: dict[TaskId, float] = {}  # live tasks -> when (monotonic) their launcher last asked
        self.asking: dict[TaskId, int] = {}  # asks in flight: their tasks are held
        ctl.listeners.leader.append(self._grace)
        ctl.listeners.background.append(self.run)

    def _grace(self) -> None:
        now = time.monotonic()
        self.heard = {(job.id, job.run, t): now for job in self.ctl.model.jobs.values() if job.tasks
                      for t in tasks.live_tasks(job)}

    def heard_from(self, key: TaskId) -> None:
        self.heard[key] = time.monotonic()

    @contextmanager
    def asking_for(self, key: TaskId) -> Iterator[None]:
        """An ask of the task's launcher, in flight: the task is held until it ends, and the lease counts
        from then."""
        self.heard_from(key)
        self.asking[key] = self.asking.get(key, 0) + 1
        try:
            yield
        finally:
            self.heard_from(key)
            left = self.asking.pop(key, 1) - 1
            if left:
                self.asking[key] = left

    def lapsed(self, model: Model, now: float) -> dict[int, list[int]]:
        """Job -> its tasks whose launcher's lease lapsed; forgets the tasks that are not live any more."""
        out: dict[int, list[int]] = {}
        for key, at in list(self.heard.items()):
            job = model.jobs.get(key[0])
            if job is None or job.run != key[1] or key[2] not in tasks.live_tasks(job):
                del self.heard[key]
            elif now - at > self.lease and key not in self.asking:
                out.setdefault(key[0], []).append(key[2])
        return out

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.lease / 4))
            if not self.ctl.is_leader:
                continue
            for job_id, lost in self.lapsed(self.ctl.model, time.monotonic()).items():
                log.warning("job %d: the launcher (blaunch) of tasks %s has not asked for them for %gs: killing them",
                            job_id, ",".join(map(str, lost)), self.lease)
                try:
                    await self.ctl.execute(
                        lambda m, j=job_id, t=lost: Outcome(tasks.launchers_lost(m, j, t, time.time())))
                except XceError as e:
                    log.warning("could not kill job %d's tasks %s: %s", job_id, lost, e)
