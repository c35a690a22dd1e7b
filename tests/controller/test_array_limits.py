"""Array limits (``NAME[1-100]%N``): the view offers the scheduler only as many elements as the limit
leaves room for, the applier refuses a plan beyond it, and ``xce job why`` says why the rest wait."""

from __future__ import annotations

import pytest

from tests.controller.test_applier import CONFIG, World, on
from tests.model.test_job_claims import ALICE
from xce.controller.view import build_view
from xce.errors import InvalidRequest
from xce.model import jobs, status
from xce.model.fold import Model
from xce.model.jobs import JobSpec, JobState


@pytest.fixture
def w() -> World:
    return World()


def array(w: World, name: str) -> list:
    facts, first = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name=name), w.tick())
    w.commit(facts)
    return [j for j in w.model.jobs.values() if j.array_parent == first]


def pending_ids(w: World) -> list[int]:
    return [v.id for v in build_view(w.model, CONFIG).pending]


def test_the_view_offers_only_the_room_the_limit_leaves_lowest_indices_first(w):
    e = array(w, "sweep[1-6]%2")
    plain = w.submit()
    assert all(j.array_limit == 2 for j in e)
    assert pending_ids(w) == [e[0].id, e[1].id, plain.id]
    assert build_view(w.model, CONFIG).pending_beyond == 0  # held back by the limit, not by the queue depth
    w.apply(on(e[0]))
    assert pending_ids(w) == [e[1].id, plain.id]
    assert status.array_limit_reason(w.model, e[2]) is None  # one of two holds hosts: room for one more
    w.apply(on(e[1]))
    assert pending_ids(w) == [plain.id]
    assert "array limit: at most 2 elements of array %d at once (2 hold hosts)" % e[0].id in \
        status.status_reason(w.model, e[2], w.now)
    w.commit(jobs.kill(w.model, ALICE, e[0].id, w.tick()))  # an element ends: its room goes to the next
    assert pending_ids(w) == [e[2].id, plain.id]


def test_the_applier_refuses_elements_beyond_the_limit_in_one_plan(w):
    e = array(w, "a[1-3]%1")
    result = w.apply(on(e[0]), on(e[1]))
    assert result.accepted == [e[0].id]
    assert result.rejected == {e[1].id: "array limit reached: 1 elements at once"}


def test_a_limit_is_a_positive_number_on_an_array(w):
    for bad in ("a[1-3]%0", "a[1-3]%x", "a[1-3]%"):
        with pytest.raises(InvalidRequest, match="invalid job array limit"):
            array(w, bad)


def test_the_busy_elements_rebuilt_from_a_snapshot_equal_the_folded_ones(w):
    e = array(w, "b[1-4]%3")
    w.apply(on(e[0]), on(e[1]))
    assert w.model.array_busy == {e[0].id: {e[0].id, e[1].id}}
    assert Model.from_snapshot(w.model.to_snapshot()).array_busy == w.model.array_busy
    assert e[2].state is JobState.PEND
