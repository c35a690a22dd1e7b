"""The scheduling loop: snapshot -> ``schedule`` -> plan applier, whenever something changed.

Level-triggered: a poke (a job submitted or finished, a host joined) or a
periodic tick starts a cycle; a cycle always plans from the whole current
state, so a missed poke costs at most one tick.
"""

from __future__ import annotations

import asyncio
import logging
import time

from xce.controller.applier import apply_plan
from xce.controller.core import Controller
from xce.errors import XceError
from xce.model import facts as F
from xce.scheduler.core import schedule
from xce.scheduler.snapshot import build_snapshot

log = logging.getLogger("xce.scheduler")

# facts after which a new plan may place more jobs
_POKE = (F.JobSubmitted, F.JobFinished, F.JobRequeued, F.JobReleased, F.HostRegistered, F.HostStateChanged,
         F.ClaimCreated, F.ClaimOpSucceeded, F.ClaimOpFailed)


class SchedulerLoop:
    def __init__(self, ctl: Controller, tick: float = 1.0) -> None:
        self.ctl = ctl
        self.tick = tick
        self.cycles = 0
        self._wake = asyncio.Event()
        ctl.commit_listeners.append(self._on_commit)
        ctl.leader_listeners.append(self._wake.set)
        ctl.background.append(self.run)

    def _on_commit(self, facts: list[F.Fact]) -> None:
        if any(isinstance(f, _POKE) for f in facts):
            self._wake.set()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), self.tick)
            except TimeoutError:
                pass
            self._wake.clear()
            if not self.ctl.is_leader:
                continue
            try:
                await self.cycle()
            except XceError as e:
                log.warning("scheduling cycle not applied: %s", e)
            except Exception:
                log.exception("scheduling cycle failed")

    async def cycle(self) -> None:
        await self.ctl.read_barrier()
        config = self.ctl.config
        snap = build_snapshot(self.ctl.model, config)
        if not snap.pending and not snap.pending_claims:
            self.ctl.pending_reasons = {}
            self.ctl.claim_reasons = {}
            return
        plan = schedule(snap)
        self.cycles += 1
        self.ctl.pending_reasons = dict(plan.pending_reasons)
        self.ctl.claim_reasons = dict(plan.claim_reasons)
        if plan.allocations or plan.placements:
            result = await self.ctl.execute(lambda m: apply_plan(m, plan, time.time(), config))
            for job_id, why in result.rejected.items():
                self.ctl.pending_reasons[job_id] = f"plan rejected ({why}); retrying"
            for claim_id, why in result.claims_rejected.items():
                self.ctl.claim_reasons[claim_id] = f"placement rejected ({why}); retrying"
            if result.rejected or result.claims_rejected:
                self._wake.set()
