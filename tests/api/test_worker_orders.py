"""What a worker's work poll answers (``api.workers.host_work``): runs to start, and the orders of its runs
it has not seen yet, on models built from facts."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ALICE, World
from tests.model.test_jobs import GRACEFUL
from xce.api.workers import host_work
from xce.model import jobs


@pytest.fixture
def w() -> World:
    return World()


def test_the_work_poll_answers_a_runs_orders_until_the_worker_has_seen_them(w):
    job = w.running()
    assert host_work(w.model, "h1")["orders"] == [], "no orders yet: nothing to answer"
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), config=GRACEFUL))
    assert [o["seq"] for o in host_work(w.model, "h1")["orders"]] == [1]
    assert host_work(w.model, "h1", {(job.id, 1): 1})["orders"] == [], "seen: a poll does not spin on it"
    w.commit(jobs.send_signal(w.model, ALICE, job.id, w.tick(), 10))
    assert [o["seq"] for o in host_work(w.model, "h1", {(job.id, 1): 1})["orders"]] == [2]
