"""The controller's side of the claim agents' channel: who has work, and waking their long-polls.

Agents (the provisioner, and each worker's node agent) long-poll for claim
ops.  Work is derived from the model every time (level-triggered: an op is
due until its result is recorded), so a missed wake-up costs at most one
poll; this class only makes the common case fast.
"""

from __future__ import annotations

import asyncio
import time

from xce.controller.core import Controller
from xce.model import facts as F

# facts after which some agent may have new work
_WAKE = (F.ClaimPlaced, F.ClaimOpSucceeded, F.ClaimOpFailed, F.ClaimDeleteRequested, F.ClaimPurgeRequested,
         F.AttachmentAdded, F.AttachmentRemoved, F.OrphanSeen, F.AgentLeased, F.JobAllocated, F.JobProcessEnded,
         F.JobFinished, F.JobRequeued)


class AgentChannel:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._changed = asyncio.Condition()
        self._closing = False
        ctl.commit_listeners.append(self._on_commit)
        ctl.shutdown_listeners.append(self._close)

    def _on_commit(self, facts: list[F.Fact]) -> None:
        if any(isinstance(f, _WAKE) for f in facts):
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def _close(self) -> None:
        self._closing = True
        asyncio.get_running_loop().create_task(self._notify())

    async def wait(self, timeout: float, due_at: float | None = None) -> None:
        """Until a claim fact is committed, ``timeout`` passes, a retry falls due, or shutdown."""
        if self._closing:
            return
        if due_at is not None:
            timeout = max(0.0, min(timeout, due_at - time.time()))
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                pass
