"""Waking long-polls: a waiter per kind of work, woken by the facts that may make new work.

Work is always derived from the model (level-triggered), so this is only
about answering quickly: a missed wake-up costs at most one poll timeout.
On shutdown every waiter returns at once, so the server can drain.
"""

from __future__ import annotations

import asyncio
import time

from xce.controller.core import Controller
from xce.model.facts import (
    AgentLeased, AttachmentAdded, AttachmentRemoved, ClaimDeleteRequested, ClaimOpFailed, ClaimOpSucceeded, ClaimPlaced,
    ClaimPurgeRequested, ClaimResizeReserved, Fact, JobAllocated, JobFinished, JobKillRequested, JobProcessEnded,
    JobRequeued, JobResumed, JobSignalRequested, JobStarted, JobSuspended, OrphanSeen, ReplicaOpFailed, ReplicaOpSucceeded,
    ReplicaPlaced, SnapshotCreated, SnapshotDeleteRequested, SnapshotOpFailed, SnapshotOpSucceeded, TaskEnded,
    TaskLaunched,
)

# workers' polls for dispatches and runs' orders (the readiness gate opens when claims become READY/ATTACHED)
HOST_WORK_WAKE = (JobAllocated, JobKillRequested, JobSignalRequested, JobSuspended, JobResumed,
                  JobFinished, JobRequeued, ClaimOpSucceeded, ReplicaOpSucceeded, TaskLaunched)
# blaunch's waits for its run's start (its secret is known then), its task's end, or its run's
TASK_WAKE = (JobStarted, TaskEnded, JobFinished, JobRequeued, JobProcessEnded)
# claim agents' polls: ops opened (a placed claim's create, a reserved resize's expand, a snapshot's create),
# retried, or released
AGENT_WAKE = (ClaimPlaced, ClaimResizeReserved, ClaimOpSucceeded, ClaimOpFailed, ClaimDeleteRequested,
              ClaimPurgeRequested, AttachmentAdded, AttachmentRemoved, OrphanSeen, AgentLeased, JobAllocated,
              JobProcessEnded, JobFinished, JobRequeued,
              SnapshotCreated, SnapshotOpSucceeded, SnapshotOpFailed, SnapshotDeleteRequested,
              ReplicaPlaced, ReplicaOpSucceeded, ReplicaOpFailed)


class Waker:
    def __init__(self, ctl: Controller, wake_on: tuple[type[Fact], ...]) -> None:
        self.wake_on = wake_on
        self._changed = asyncio.Condition()
        self._closing = False
        ctl.listeners.commit.append(self._on_commit)
        ctl.listeners.shutdown.append(self._close)

    def _on_commit(self, facts: list[Fact]) -> None:
        if any(isinstance(f, self.wake_on) for f in facts):
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    @property
    def closing(self) -> bool:
        """The server is shutting down: waits return at once."""
        return self._closing

    def _close(self) -> None:
        self._closing = True
        asyncio.get_running_loop().create_task(self._notify())

    async def wait(self, timeout: float, due_at: float | None = None) -> None:
        """Until a waking fact is committed, ``timeout`` passes, ``due_at`` (epoch seconds) comes, or shutdown."""
        if self._closing:
            return
        if due_at is not None:
            timeout = max(0.0, min(timeout, due_at - time.time()))
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
