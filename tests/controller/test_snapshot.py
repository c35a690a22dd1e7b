"""The scheduler's snapshot keeps pending jobs' views between cycles, and a kept view is always the
view it would build afresh."""

from __future__ import annotations

import pytest

from tests.controller.test_applier import ADMIN, CONFIG, World, on
from xce.controller.snapshot import JobViews, build_snapshot
from xce.model import claims as C
from xce.model import jobs


@pytest.fixture
def w() -> World:
    return World()


def test_kept_views_are_the_fresh_ones_and_only_unchanged_plain_jobs_keep_theirs(w):
    w.standalone("data")
    plain, again, uses = w.submit(), w.submit(rerunnable=True), w.submit(claims=("data",))
    views = JobViews()
    first = build_snapshot(w.model, CONFIG, views=views)
    assert first.pending == build_snapshot(w.model, CONFIG).pending

    w.apply(on(again))  # allocated: no longer pending
    w.commit(jobs.kill(w.model, ADMIN, again.id, w.tick(), requeue=True))  # pending again, its run moved on
    w.commit(C.delete(w.model, ADMIN, "data", w.tick()))  # the claim `uses` references is being deleted
    second = build_snapshot(w.model, CONFIG, views=views)
    assert second.pending == build_snapshot(w.model, CONFIG).pending, "a kept view went stale"
    by_id = {v.id: v for v in second.pending}
    was = {v.id: v for v in first.pending}
    assert by_id[plain.id] is was[plain.id], "an unchanged plain job's view was built again"
    assert by_id[again.id].run == again.run == 1 and by_id[again.id] is not was[again.id]
    assert by_id[uses.id].claims[0].state == "BEING_DELETED" != was[uses.id].claims[0].state


def test_views_of_jobs_no_longer_pending_are_not_kept(w):
    a, b = w.submit(), w.submit()
    views = JobViews()
    build_snapshot(w.model, CONFIG, views=views)
    w.apply(on(a))
    assert [v.id for v in build_snapshot(w.model, CONFIG, views=views).pending] == [b.id]
    assert set(views._kept) == {b.id}
