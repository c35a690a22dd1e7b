"""The scheduling loop: view -> ``schedule`` -> plan applier, whenever something changed.

Level-triggered: a poke (a job submitted or finished, a host joined) or a
periodic tick starts a cycle; a cycle always plans from the whole current
state, so a missed poke costs at most one tick.  Pokes that arrive during a
cycle, or within ``min_interval`` of its start, are served by one next cycle:
under a burst of submissions the controller plans a few times a second, not
once per request.  ``schedule`` itself runs on a thread (it only reads its
immutable view), so the event loop keeps answering requests meanwhile.

A cycle plans the first ``[controller] queue_depth`` pending jobs in priority
order, as Slurm's main scheduler does (``default_queue_depth``): with a
backlog of 10,000, a view of all of them held the event loop for 25 ms of
CPU per cycle, the plan as much again on its thread, and their garbage made
the collector's full passes (150-450 ms each, during which nothing is
answered) several times more frequent.  Jobs deeper in the queue are not
forgotten: a cycle that leaves a free slot while jobs lie beyond the depth
is followed, at most once per ``tick``, by a full pass over every pending job.

A cycle whose plan the applier rejected, in part or whole, is retried with a
bounded backoff (``retry.py``), not at once: a persistent rejection must not
replan at the loop's full pace forever.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time

from xce.config import Config
from xce.controller.applier import ApplyResult, apply_plan
from xce.controller.commit import Committer, Outcome
from xce.controller.listeners import Listeners
from xce.controller.observed import Observed
from xce.controller.retry import MAX_RETRY_DELAY, Backoff, Rejections
from xce.controller.term import Term
from xce.errors import XceError
from xce.model import Model, dependencies
from xce.model.facts import (
    ClaimCreated, ClaimOpFailed, ClaimOpSucceeded, ClaimResizeRequested, Fact, HostRegistered, HostStateChanged,
    JobFinished, JobModified, JobReleased, JobRequeued, JobSubmitted, ReplicaEvicted, ReplicaOpFailed, ReplicaOpSucceeded,
    ReplicasAdded,
)
from xce.model.claims import ClaimState, ResizeState
from xce.model.hosts import HostState
from xce.scheduler.core import schedule
from xce.scheduler.plan import JobReservation
from xce.controller.view import JobViews, build_view

log = logging.getLogger("xce.scheduler")

# facts after which a new plan may place more jobs
_POKE = (JobSubmitted, JobFinished, JobRequeued, JobReleased, JobModified, HostRegistered, HostStateChanged,
         ClaimCreated, ClaimOpSucceeded, ClaimOpFailed, ClaimResizeRequested, ReplicaOpSucceeded, ReplicaOpFailed,
         ReplicasAdded, ReplicaEvicted)


class SchedulerLoop:
    """One per controller (``Controller.scheduling``); only the leader's plans.

    Its latest word on what waits (``pending_reason``, ``claim_reason``, ``resize_reason``) is
    volatile: recomputed every cycle from the model, never a fact, and lost with the leader.
    """

    def __init__(self, commit: Committer, term: Term, listeners: Listeners, config: Config, observed: Observed,
                 tick: float = 1.0, min_interval: float = 0.05) -> None:
        self.commit = commit
        self.term = term
        self.config = config
        self.observed = observed
        self.tick = tick
        self.min_interval = min_interval
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-scheduler")
        self.cycles = 0
        self._views = JobViews()  # pending jobs' views, kept between cycles
        self._full_pass_at = 0.0  # monotonic time of the next full pass: due once room went unused
        self._last_full_pass = float("-inf")
        self._wake = asyncio.Event()
        self._releases = 0  # model.dependency_releases when a commit last looked
        self.apply = apply_plan  # the plan applier (a test puts one in that rejects)
        self.rejections = Rejections(Backoff(first=min_interval, cap=MAX_RETRY_DELAY))
        self._retry_at: float | None = None  # monotonic time of a rejected plan's retry (None: not backing off)
        # the latest cycle's reasons: pending jobs', and every pending job's when no host has room at all
        self.pending_reasons: dict[int, str] = {}
        self.idle_reason: str | None = None
        self.reserved: dict[int, JobReservation] = {}  # the latest plan's reservations (backfill), by job
        self._preempts = bool(config.preemptable())  # a full cluster is when preemption is needed: always plan
        # when the latest cycle planned only the first queue_depth pending jobs: what the others are
        # told, and what the latest full pass said of each
        self.beyond_depth_reason: str | None = None
        self.full_pass_reasons: dict[int, str] = {}
        self.claim_reasons: dict[int, str] = {}  # the same for standalone claims waiting for a pool
        self.resize_reasons: dict[int, str] = {}  # ... and for resizes waiting for room in their pool
        listeners.commit.append(self._on_commit)
        listeners.leader.append(self._wake.set)
        listeners.background.append(self.run)

    def pending_reason(self, job_id: int) -> str | None:
        """The latest word on a pending job (what ``xce job why`` shows beside the job's own state)."""
        reason = self.pending_reasons.get(job_id)
        if reason is None and self.beyond_depth_reason is not None:
            reason = self.full_pass_reasons.get(job_id) or self.beyond_depth_reason
        return reason or self.idle_reason

    def claim_reason(self, claim_id: int) -> str | None:
        """Why a standalone claim still waits for a pool, if it does."""
        return self.claim_reasons.get(claim_id)

    def resize_reason(self, claim_id: int) -> str | None:
        """Why a claim's resize still waits for room in its pool, if it does."""
        return self.resize_reasons.get(claim_id)

    def _on_commit(self, facts: list[Fact]) -> None:
        # a job whose dependency came to hold (a start it waited for: -w started()) pokes too; a start
        # that released nothing does not (a cycle then would hold the next one back by min_interval)
        releases, self._releases = self._releases, self.commit.model.dependency_releases
        if releases != self._releases or any(isinstance(f, _POKE) for f in facts):
            self.rejections.backoff.reset()  # it may change what the applier says: plan at once
            self._wake.set()

    async def run(self) -> None:
        while True:
            # a rejected plan's retry stands in for the tick: a persistent rejection is not replanned every tick
            wait = self.tick if self._retry_at is None else max(0.0, self._retry_at - time.monotonic())
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
            self._wake.clear()
            self._retry_at = None
            if not self.term.is_leader:
                continue
            started = time.monotonic()
            try:
                await self.cycle()
            except XceError as e:
                log.warning("scheduling cycle not applied: %s", e)
            except Exception:
                log.exception("scheduling cycle failed")
            await asyncio.sleep(max(0.0, self.min_interval - (time.monotonic() - started)))

    async def cycle(self) -> None:
        self._retried(await self._plan_and_apply())

    def _retried(self, result: ApplyResult | None) -> None:
        """After a cycle's apply (None: nothing to apply): back off if any of the plan was rejected,
        and tell each rejected decision why it waits."""
        delay = self.rejections.note(result)
        self._retry_at = None if delay is None else time.monotonic() + delay
        self.pending_reasons.update(self.rejections.reasons("job"))
        self.claim_reasons.update(self.rejections.reasons("claim"))
        self.resize_reasons.update(self.rejections.reasons("resize"))

    async def _plan_and_apply(self) -> ApplyResult | None:
        await self.commit.read_barrier()
        config = self.config
        model = self.commit.model
        if model.dependency_blocked and dependencies.orphans(model):
            await self.commit.execute(lambda m: Outcome(facts=dependencies.terminate_orphans(m, time.time())))
        idle = _no_room(model)
        if idle and not _claims_waiting(model) and not self._preempts:
            # nothing can be placed: skip the view (O(pending jobs)), one reason fits them all but the
            # reserved jobs' (their planned start stands: only an end, which frees a slot, moves it)
            self.pending_reasons = {j: self.pending_reasons[j] for j in self.reserved
                                    if j in self.pending_reasons and j in model.pending_jobs}
            self.claim_reasons, self.idle_reason = {}, idle
            self.resize_reasons = {}
            self.beyond_depth_reason = None
            return None
        self.idle_reason = None
        full = time.monotonic() >= self._full_pass_at
        depth = config.controller.queue_depth
        view = build_view(model, config, self.observed, self._views, depth=None if full else depth,
                          now=time.time(), reserved=frozenset(self.reserved))
        if not view.pending and not view.pending_claims and not view.pending_resizes and not view.pending_replicas:
            self.pending_reasons = {}
            self.claim_reasons = {}
            self.resize_reasons = {}
            self.beyond_depth_reason = None
            return None
        plan = await asyncio.get_running_loop().run_in_executor(self._pool, schedule, view)
        self.cycles += 1
        self.pending_reasons = dict(plan.pending_reasons)
        self.reserved = {r.job_id: r for r in plan.reservations}
        self._after_depth(view.pending_beyond, plan.room_left, full, depth)
        self.claim_reasons = dict(plan.claim_reasons)
        self.resize_reasons = dict(plan.resize_reasons)
        if not (plan.allocations or plan.placements or plan.resizes or plan.replicas or plan.evictions or plan.preemptions):
            return None
        observed, apply = self.observed, self.apply
        result: ApplyResult = await self.commit.execute(lambda m: apply(m, plan, time.time(), config, observed))
        return result

    def _after_depth(self, beyond: int, room_left: bool, full: bool, depth: int) -> None:
        """What the jobs behind the queue depth are told, and when the next full pass is due."""
        now = time.monotonic()
        if full:
            self._last_full_pass = now
            self._full_pass_at = float("inf")  # capped cycles, until one leaves a slot free
            self.full_pass_reasons = self.pending_reasons
            self.beyond_depth_reason = None
            return
        if not beyond:
            self.beyond_depth_reason, self.full_pass_reasons = None, {}  # every pending job was planned
            return
        self.beyond_depth_reason = (
            f"not planned in the latest cycle: behind the first {depth} pending jobs in priority order "
            f"([controller] queue_depth); a full pass reaches it when a cycle leaves a slot free")
        if room_left:
            # OBSERVATION: a slot is free and jobs this cycle did not see may fit it: a full pass, soon
            self._full_pass_at = min(self._full_pass_at, max(now, self._last_full_pass + self.tick))


def _no_room(model: Model) -> str | None:
    """Why no pending job can be placed now, if that is so (None: some host has a free slot)."""
    hosts = [h for h in model.hosts.values() if h.state is HostState.OK]
    if not hosts:
        return "no hosts are available"
    if all(h.slots <= h.slots_used for h in hosts):
        return f"every host is full ({len(hosts)} host{'s' if len(hosts) != 1 else ''}, no free slot)"
    return None


def _claims_waiting(model: Model) -> bool:
    return any(c.state is ClaimState.PENDING and not c.placed or c.resize is not None and c.resize.state
               is ResizeState.REQUESTED or c.replicas_waiting for c in model.claims.values())
