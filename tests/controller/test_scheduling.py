"""The scheduling loop in a real controller: a plan the applier keeps rejecting is retried with a
bounded backoff (not at the loop's full pace), counted, and its reason kept and logged once; a fact
that may change the outcome, or a plan that applies, ends the backoff."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable

from tests.controller.test_read_barrier import ADMIN
from xce.api.metrics import Metrics
from xce.config import load_config
from xce.controller.applier import ApplyResult, apply_plan
from xce.controller.core import Controller, Outcome
from xce.controller.retry import Backoff
from xce.model.facts import HostRegistered
from xce.model import jobs
from xce.model.jobs import JobSpec
from xce.store import open_store

FIRST, CAP = 0.005, 0.04  # the test's backoff: the same doubling, in less time
WHY = "injected: the applier disagrees"


async def until(cond: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def most_applies(elapsed: float) -> int:
    """How many applies fit in ``elapsed`` seconds when the waits between them follow the backoff."""
    n, spent = 1, 0.0
    while spent + min(CAP, FIRST * 2 ** (n - 1)) <= elapsed:
        spent += min(CAP, FIRST * 2 ** (n - 1))
        n += 1
    return n


def test_a_persistent_rejection_backs_off_is_counted_and_keeps_its_reason(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="xce.scheduler")

    async def scenario() -> None:
        ctl = Controller(open_store(None, str(tmp_path)), load_config(None), str(tmp_path))
        loop = ctl.scheduling
        # without the backoff every tick (and every cycle's end) would plan, and be rejected, again
        loop.tick = loop.min_interval = FIRST
        loop.rejections.backoff = Backoff(first=FIRST, cap=CAP)
        applies: list[tuple[float, float, int]] = []  # each apply: when, the backoff before it, rejections so far
        disagree = True

        def applier(model, plan, now, config, observed) -> Outcome:
            applies.append((time.monotonic(), loop.rejections.backoff.delay, loop.rejections.total))
            if not disagree:
                return apply_plan(model, plan, now, config, observed)
            return Outcome(result=ApplyResult(rejected={a.job_id: WHY for a in plan.allocations}))

        loop.apply = applier
        await ctl.start()
        assert await ctl.wait_leader(30), "the controller never led"
        try:
            first = await ctl.execute(lambda m: Outcome(*jobs.submit(m, ADMIN, JobSpec(command=["x"]), time.time(),
                                                                     ctl.config)))
            await ctl.execute(lambda m: Outcome([HostRegistered(time=time.time(), name="h1", slots=4)]))
            await until(lambda: loop.rejections.total >= 12, "a dozen rejected plans")
            seen = applies[:12]
            # every retry waited for the backoff, doubling from the normal pace up to the cap
            assert [delay for _, delay, _ in seen] == [0.0] + [min(CAP, FIRST * 2 ** k) for k in range(11)]
            assert [total for _, _, total in seen] == list(range(12)), "each rejection counted once"
            body = Metrics(ctl).render()[0].decode()
            assert f"xce_plan_rejections {float(loop.rejections.total)}" in body
            assert f"xce_plan_retry_delay_seconds {CAP}" in body
            elapsed = seen[-1][0] - seen[0][0]
            assert len(seen) <= most_applies(elapsed), f"{len(seen)} plans in {elapsed:.3f}s: more than the backoff allows"
            reason = loop.pending_reason(first)
            assert reason is not None and f"({WHY}); retrying in {CAP:g}s" in reason and "times in a row" in reason
            assert [r.getMessage() for r in caplog.records].count(
                f"plan rejected for job {first}: {WHY}; retrying in {FIRST:g}s, backing off") == 1

            # a fact that may change the outcome (a submission pokes the loop): planned at once, from the start
            before = len(applies)
            second = await ctl.execute(lambda m: Outcome(*jobs.submit(m, ADMIN, JobSpec(command=["y"]), time.time(),
                                                                      ctl.config)))
            await until(lambda: ("job", second) in loop.rejections.current, "the second job's rejection")
            assert applies[before][1] == 0.0, "the poke did not end the backoff"
            assert loop.rejections.current[("job", first)].times > loop.rejections.current[("job", second)].times
            assert sum(WHY in r.getMessage() for r in caplog.records) == 2, "a reason logged again without a change"

            # a plan that applies ends it: both jobs are allocated, nothing waits, no backoff
            disagree = False
            await until(lambda: not ctl.model.pending_jobs, "the plan to apply")
            await until(lambda: loop.rejections.backoff.delay == 0.0 and not loop.rejections.current, "the backoff to end")
            assert loop.pending_reason(first) is None and loop.pending_reason(second) is None
        finally:
            await ctl.stop()

    asyncio.run(scenario())
