"""Job dependencies (``xce.model.dependencies``) on models built from facts: what a target names,
when a condition holds, the indexes the fold keeps, and what retirement and ``-ti`` make of them."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ADMIN, ALICE, World
from xce.errors import InvalidRequest, NotFound
from xce.model import dependencies, history, jobs, status
from xce.model.entities.identity import Role, User
from xce.model.fold import Model
from xce.model.jobs import JobSpec, JobState

BOB = User(name="bob", role=Role.USER, projects=["default"])


class Deps(World):
    def job(self, actor: User = ALICE, name: str | None = None, dependency: str | None = None,
            ti: bool = False, held: bool = False):
        facts, job_id = jobs.submit(self.model, actor, JobSpec(command=["train"], name=name, dependency=dependency,
                                                               terminate_orphan=ti, held=held), self.tick())
        self.commit(facts)
        return self.model.jobs[job_id]

    def end(self, job, code: int = 0) -> None:
        if not job.allocated and not job.started:
            self.allocate(job, with_templates=False)
        if not job.started:
            self.start(job)
        self.commit(jobs.report_finished(self.model, job.hosts[0], job.id, job.run, self.tick(), code, None))

    def blocked(self, job) -> str | None:
        return self.model.dependency_blocked.get(job.id)


@pytest.fixture
def w() -> Deps:
    return Deps()


def test_a_job_waits_until_done_holds_and_is_released_by_its_parents_end(w):
    parent = w.job()
    child = w.job(dependency=f"done({parent.id})")
    assert w.blocked(child) == "waits"
    assert "dependency condition not satisfied: done(%d) (%d is PEND)" % (parent.id, parent.id) in \
        status.status_reason(w.model, child, w.now)
    w.end(parent)
    assert w.blocked(child) is None
    assert w.model.dependents[parent.id] == {child.id}  # until it starts: a requeue of the parent judges again
    w.allocate(child, with_templates=False)
    assert parent.id not in w.model.dependents and child.id not in w.model.watching


def test_done_of_a_job_that_exited_can_never_hold_and_the_reason_says_so(w):
    parent = w.job()
    child = w.job(dependency=f"done({parent.id})")
    w.end(parent, code=3)
    assert w.blocked(child) == "never"
    assert status.status_reason(w.model, child, w.now).startswith("dependency condition never satisfied")
    assert child.state is JobState.PEND  # LSF's behaviour without -ti: it stays


def test_exit_with_a_code_holds_only_for_that_code(w):
    a, b = w.job(), w.job()
    wants3 = w.job(dependency=f"exit({a.id}, ==3)")
    also3 = w.job(dependency=f"exit({b.id}, 3)")
    w.end(a, code=3)
    w.end(b, code=4)
    assert w.blocked(wants3) is None
    assert w.blocked(also3) == "never"


def test_and_or_not_and_started(w):
    a, b = w.job(), w.job()
    either = w.job(dependency=f"done({a.id}) || done({b.id})")
    both = w.job(dependency=f"done({a.id}) && done({b.id})")
    not_ended = w.job(dependency=f"!ended({b.id})")
    after_start = w.job(dependency=f"started({b.id})")
    assert w.blocked(not_ended) is None  # b has not ended: it holds now
    w.end(a)
    assert w.blocked(either) is None and w.blocked(both) == "waits"
    w.allocate(b, with_templates=False)
    w.start(b)
    assert w.blocked(after_start) is None
    w.end(b, code=1)
    assert w.blocked(both) == "never"


def test_names_are_the_submitters_own_jobs_the_latest_one_unless_a_wildcard_asks_for_all(w):
    old = w.job(name="prep")
    new = w.job(name="prep")
    w.job(actor=BOB, name="prep-bob")
    latest = w.job(dependency='done("prep")')
    every = w.job(dependency="done(prep*)")
    assert latest.dependency_tree[2]["jobs"] == [new.id]
    assert every.dependency_tree[2]["jobs"] == [old.id, new.id]  # not bob's
    with pytest.raises(NotFound, match="no job of that name"):
        w.job(dependency='done("prep-bob")')


def test_another_users_job_by_id_looks_like_no_job_but_an_admin_may_name_it(w):
    bobs = w.job(actor=BOB)
    with pytest.raises(NotFound, match=f"job {bobs.id}, which is not in the system"):
        w.job(dependency=f"done({bobs.id})")
    assert w.job(actor=ADMIN, dependency=f"done({bobs.id})").dependency_tree[2]["jobs"] == [bobs.id]


def test_an_array_is_every_element_an_index_one_and_counts_count_them(w):
    facts, first = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name="sweep[1-4]"), w.tick())
    w.commit(facts)
    elements = [w.model.jobs[first + i] for i in range(4)]
    whole = w.job(dependency=f"done({first})")
    third = w.job(dependency=f"done({first}[3])")
    two = w.job(dependency=f"numdone({first}, >=2)")
    all_ended = w.job(dependency=f"numended({first}, *)")
    assert whole.dependency_tree[2]["jobs"] == [e.id for e in elements]
    w.end(elements[2])
    assert w.blocked(third) is None and w.blocked(whole) == "waits" and w.blocked(two) == "waits"
    w.end(elements[0])
    assert w.blocked(two) is None
    w.end(elements[1], code=1)
    # elements are read from the last: an exited one is found never to be done once those after it end
    assert w.blocked(whole) == "waits" and w.blocked(all_ended) == "waits"
    w.end(elements[3])
    assert w.blocked(all_ended) is None and w.blocked(whole) == "never"


def test_a_count_that_can_no_longer_be_reached_is_never(w):
    facts, first = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name="a[1-3]"), w.tick())
    w.commit(facts)
    three = w.job(dependency=f"numdone({first}, ==3)")
    w.end(w.model.jobs[first], code=2)
    assert w.blocked(three) == "never"


def test_bad_expressions_and_ti_without_w_are_refused(w):
    with pytest.raises(InvalidRequest, match="bad dependency expression.*column"):
        w.job(dependency="done(1")
    with pytest.raises(InvalidRequest, match="-ti .*needs -w"):
        w.job(ti=True)
    with pytest.raises(NotFound):
        w.job(dependency="done(999)")


def test_ti_jobs_whose_condition_can_never_hold_are_the_orphans_ended_exit(w):
    parent = w.job()
    ti = w.job(dependency=f"done({parent.id})", ti=True)
    keep = w.job(dependency=f"done({parent.id})")
    assert dependencies.orphans(w.model) == []
    w.end(parent, code=1)
    assert dependencies.orphans(w.model) == [ti.id]
    w.commit(dependencies.terminate_orphans(w.model, w.tick()))
    assert ti.state is JobState.EXIT and "never satisfied (-ti)" in ti.history[-1]["reason"]
    assert keep.state is JobState.PEND and dependencies.orphans(w.model) == []
    assert ti.id not in w.model.dependency_blocked and ti.id not in w.model.watching


def test_a_held_dependent_is_judged_and_a_started_one_leaves_the_indexes(w):
    parent = w.job()
    held = w.job(dependency=f"done({parent.id})", held=True)
    child = w.job(dependency=f"ended({parent.id})")
    w.end(parent)
    assert w.blocked(held) is None and w.blocked(child) is None
    w.end(child)
    assert child.id not in w.model.watching
    assert w.model.dependents[parent.id] == {held.id}


def test_a_job_a_waiting_dependent_names_is_not_retired_until_the_dependent_starts(w):
    parent, other = w.job(), w.job()
    child = w.job(dependency=f"done({parent.id}) && done({other.id})")
    w.end(parent)
    retire = history.retirable(w.model, now=w.now + 10_000, keep=1.0)
    assert retire is None or parent.id not in retire.jobs
    w.end(other)
    w.end(child)
    retire = history.retirable(w.model, now=w.now + 10_000, keep=1.0)
    assert retire is not None and parent.id in retire.jobs


def test_the_indexes_rebuilt_from_a_snapshot_equal_the_folded_ones(w):
    parent = w.job()
    w.job(dependency=f"done({parent.id})")
    w.job(dependency=f"exit({parent.id})", ti=True)
    back = Model.from_snapshot(w.model.to_snapshot())
    assert back.dependents == w.model.dependents
    assert back.watching == w.model.watching
    assert back.dependency_blocked == w.model.dependency_blocked
