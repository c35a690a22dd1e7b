"""Retirement (``xce.model.history``): which finished records leave the live model, and that leaving
is a fact like any other (replay and snapshots agree), on models built from facts."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.model.test_job_claims import ADMIN, ALICE, CONFIG, PROVISIONER, World
from xce.model import Model
from xce.model import claims
from xce.model.facts import ClaimPlaced, Fact, RecordsRetired
from xce.model import history
from xce.model import job_claims, jobs
from xce.model.claims import ClaimState
from xce.model.jobs import JobSpec, JobState

KEEP = 60.0


def ended(w: World, held: bool = True, **spec) -> jobs.Job:
    """A job that ends at once: submitted held and killed."""
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], held=held, **spec), w.tick(), CONFIG)
    w.commit(facts)
    w.commit(jobs.kill(w.model, ALICE, job_id, w.tick()))
    return w.model.jobs[job_id]


def retire(w: World, now: float | None = None, limit: int = history.RETIRE_BATCH) -> RecordsRetired | None:
    fact = history.retirable(w.model, w.now + KEEP + 1 if now is None else now, KEEP, limit)
    if fact is not None:
        w.commit([fact])
    return fact


def test_a_finished_job_stays_until_keep_finished_has_passed():
    w = World()
    job = ended(w)
    assert history.retirable(w.model, job.end_time + KEEP - 1, KEEP) is None
    fact = retire(w, job.end_time + KEEP)
    assert fact is not None and fact.jobs == [job.id]
    assert job.id not in w.model.jobs and job.id not in w.model.finished_jobs


def test_live_jobs_never_retire():
    w = World()
    pending = w.submit()
    held = w.submit(held=True)
    running = w.running()
    assert retire(w) is None
    assert {pending.id, held.id, running.id} <= set(w.model.jobs)


def test_retiring_names_what_the_fold_drops_as_the_model_holds_it_before_the_fold():
    w = World()
    job = ended(w)
    kept = w.submit(held=True)
    fact = history.retirable(w.model, w.now + KEEP + 1, KEEP)
    assert fact is not None
    fact = RecordsRetired(time=fact.time, jobs=[*fact.jobs, kept.id, 999], claims=[998])
    assert history.retiring(w.model, fact) == ([job], [])  # a live job and unknown ids are left alone
    w.commit([fact])
    assert job.id not in w.model.jobs and kept.id in w.model.jobs
    assert history.retiring(w.model, fact) == ([], [])  # folded: nothing is left to drop, the same on replay


def test_retirement_drops_the_request_id_so_a_new_submission_with_it_is_a_new_job():
    w = World()
    job = ended(w, request_id="r-1")
    assert w.model.job_requests == {"alice/r-1": job.id}
    retire(w)
    assert w.model.job_requests == {}


def test_a_job_with_a_template_claim_not_yet_released_stays_and_retires_with_its_claims():
    w = World()
    job = w.running(scratch="1Gi")
    scratch = w.claim_of(job, "scratch")
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None))
    assert job.state is JobState.DONE and scratch.state is not ClaimState.RELEASED
    assert retire(w) is None  # the run's scratch is still being released
    for _ in range(3):
        w.run_agent(claims.node_agent("h1"))
    assert scratch.state is ClaimState.RELEASED
    fact = retire(w, max(job.end_time, scratch.history[-1]["time"]) + KEEP + 1)
    assert fact is not None and fact.jobs == [job.id] and scratch.id in fact.claims
    assert job.id not in w.model.jobs and scratch.id not in w.model.claims


def test_a_job_attached_to_a_standalone_claim_stays_while_the_attachment_lives():
    w = World()
    ckpt = w.standalone("ckpt")
    job = w.running(claims=("ckpt:rw",))
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None))
    assert job.state is JobState.DONE and any(a.job_id == job.id for a in ckpt.attachments)
    assert retire(w) is None  # still attached (detaching)
    for _ in range(3):
        w.run_agent(claims.node_agent("h1"))
        w.run_agent(PROVISIONER)
    assert not any(a.job_id == job.id for a in ckpt.attachments)
    fact = retire(w)
    assert fact is not None and fact.jobs == [job.id]
    assert ckpt.id in w.model.claims  # a live standalone claim never retires


def test_a_released_standalone_claim_named_by_a_live_job_stays():
    w = World()
    ckpt = w.standalone("ckpt")
    waiting = w.submit(claims=("ckpt:rw",))
    w.commit(claims.delete(w.model, ADMIN, "ckpt", w.tick()))
    for _ in range(3):
        w.run_agent(PROVISIONER)
    assert ckpt.state is ClaimState.RELEASED
    assert retire(w) is None
    w.commit(jobs.kill(w.model, ALICE, waiting.id, w.tick()))
    fact = retire(w, w.now + KEEP + 1)
    assert fact is not None and fact.jobs == [waiting.id] and fact.claims == [ckpt.id]
    assert w.model.released_names == {}


def test_a_retained_claim_stays_until_it_is_purged():
    w = World()
    facts, claim_id = claims.create(w.model, CONFIG, ADMIN,
                                    claims.ClaimSpec(name="keep", class_name="vol", size="1Gi", access_mode="RWO",
                                                     reclaim_policy="retain"),
                                    w.tick())
    w.commit(facts)
    w.commit([ClaimPlaced(time=w.tick(), claim_id=claim_id, pool="p")])
    w.run_agent(PROVISIONER)
    w.commit(claims.delete(w.model, ADMIN, "keep", w.tick()))
    for _ in range(3):
        w.run_agent(PROVISIONER)
    claim = w.model.claims[claim_id]
    assert claim.state is ClaimState.RELEASED and claim.retained
    assert retire(w) is None
    w.commit(claims.purge(w.model, ADMIN, claim_id, w.tick()))
    for _ in range(3):
        w.run_agent(PROVISIONER)
    assert not claim.retained and not claim.data_exists
    fact = retire(w)
    assert fact is not None and fact.claims == [claim_id]


def test_an_array_retires_whole_and_only_when_every_element_may():
    w = World()
    facts, parent = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name="a[1-3]", held=True), w.tick(), CONFIG)
    w.commit(facts)
    for i in (parent, parent + 1):
        w.commit(jobs.kill(w.model, ALICE, i, w.tick()))
    assert retire(w) is None
    w.commit(jobs.kill(w.model, ALICE, parent + 2, w.tick()))
    fact = retire(w)
    assert fact is not None and fact.jobs == [parent, parent + 1, parent + 2]


def test_a_batch_is_bounded_but_an_array_larger_than_it_goes_whole_alone():
    w = World()
    singles = [ended(w).id for _ in range(5)]
    facts, parent = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name="a[1-4]", held=True), w.tick(), CONFIG)
    w.commit(facts)
    for i in range(parent, parent + 4):
        w.commit(jobs.kill(w.model, ALICE, i, w.tick()))
    first = retire(w, limit=3)
    assert first.jobs == singles[:3]
    second = retire(w, limit=3)
    assert second.jobs == singles[3:]  # the array would overflow this batch: the next one
    third = retire(w, limit=3)
    assert third.jobs == list(range(parent, parent + 4))  # larger than a batch: alone
    assert retire(w, limit=3) is None


def test_a_requeued_finished_job_is_live_again():
    w = World()
    job = ended(w)
    w.commit(jobs.kill(w.model, ADMIN, job.id, w.tick(), requeue=True))
    assert job.state is JobState.PEND and job.id not in w.model.finished_jobs
    assert retire(w) is None


def test_a_retired_claims_name_falls_back_to_an_older_released_one_as_a_rebuild_would():
    w = World()
    ids = []
    for _ in range(2):
        c = w.standalone("ckpt")
        w.commit(claims.delete(w.model, ADMIN, "ckpt", w.tick()))
        for _ in range(3):
            w.run_agent(PROVISIONER)
        ids.append(c.id)
    assert w.model.released_names == {"default/ckpt": ids[1]}
    w.commit([RecordsRetired(time=w.tick(), claims=[ids[1]])])
    assert w.model.released_names == {"default/ckpt": ids[0]}
    rebuilt = Model.from_snapshot(json.loads(json.dumps(w.model.to_snapshot())))
    assert rebuilt == w.model


def test_history_and_usage_of_live_records():
    w = World()
    a, b = ended(w), ended(w)
    q = history.live_history(w.model, history.HistoryQuery(limit=10))
    assert [j.id for j in q] == [b.id, a.id]
    assert [j.id for j in history.live_history(w.model, history.HistoryQuery(before_id=b.id, limit=10))] == [a.id]
    assert history.live_history(w.model, history.HistoryQuery(since=b.end_time + 1, limit=10)) == []
    assert [j.id for j in history.live_history(w.model, history.HistoryQuery(limit=1))] == [b.id]
    assert history.live_usage(w.model, history.UsageQuery()) == [history.Usage(project="default", jobs=2)]


def test_a_history_page_stops_at_its_limit_and_skips_what_is_not_finished_or_not_asked_for():
    w = World()
    first = ended(w)
    f, pending = jobs.submit(w.model, ALICE, JobSpec(command=["x"]), w.tick(), CONFIG)
    w.commit(f)
    second, third = ended(w, name="b"), ended(w)
    assert [j.id for j in history.live_history(w.model, history.HistoryQuery(limit=2))] == [third.id, second.id]
    assert [j.id for j in history.live_history(w.model, history.HistoryQuery(name="b", limit=5))] == [second.id]
    assert [j.id for j in history.live_history(w.model, history.HistoryQuery(before_id=second.id,
                                                                             limit=5))] == [first.id]
    assert pending not in {j.id for j in history.live_history(w.model, history.HistoryQuery(limit=10))}


# ---------------------------------------------------------------- replay: retirement is a fact like any other


OPS = st.lists(st.sampled_from(["end", "array", "pending", "retire", "retire", "requeue"]), min_size=1, max_size=25)


@settings(max_examples=100, deadline=None)
@given(OPS, st.data())
def test_snapshot_plus_tail_equals_the_live_model_with_retirements(ops, data):
    """Jobs end, arrays end, jobs are requeued, and retirement passes run in between; a snapshot taken
    anywhere plus the facts after it gives the live model, and no retired record is lost (each is in
    exactly one retirement fact and nowhere in the live model)."""
    w = World()
    facts: list[Fact] = []
    start = w.model.position

    def commit(fs):
        facts.extend(w.commit(fs))

    for op in ops:
        if op == "end":
            f, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], held=True), w.tick(), CONFIG)
            commit(f)
            commit(jobs.kill(w.model, ALICE, job_id, w.tick()))
        elif op == "array":
            f, parent = jobs.submit(w.model, ALICE, JobSpec(command=["x"], name="a[1-3]", held=True), w.tick(), CONFIG)
            commit(f)
            for i in range(parent, parent + data.draw(st.integers(1, 3))):
                commit(jobs.kill(w.model, ALICE, i, w.tick()))
        elif op == "pending":
            f, _ = jobs.submit(w.model, ALICE, JobSpec(command=["x"]), w.tick(), CONFIG)
            commit(f)
        elif op == "requeue" and w.model.finished_jobs:
            commit(jobs.kill(w.model, ADMIN, next(iter(w.model.finished_jobs)), w.tick(), requeue=True))
        elif op == "retire":
            fact = history.retirable(w.model, w.now + data.draw(st.sampled_from([0.0, KEEP + 1])), KEEP,
                                     data.draw(st.integers(1, 4)))
            if fact is not None:
                commit([fact])
    base = World().model
    cut = data.draw(st.integers(0, len(facts)))
    prefix = Model.from_snapshot(json.loads(json.dumps(base.to_snapshot())))
    for i, f in enumerate(facts[:cut], start=start + 1):
        prefix.apply(i, f)
    restored = Model.from_snapshot(json.loads(json.dumps(prefix.to_snapshot())))
    for i, f in enumerate(facts[cut:], start=start + cut + 1):
        restored.apply(i, f)
    assert restored.to_snapshot() == w.model.to_snapshot()
    assert restored == w.model
    assert list(restored.jobs) == sorted(restored.jobs), "the live model's jobs are not in id order"
    limit = data.draw(st.integers(1, 5))
    newest_first = sorted((w.model.jobs[i] for i in w.model.finished_jobs), key=lambda j: j.id, reverse=True)
    assert history.live_history(restored, history.HistoryQuery(limit=limit)) == newest_first[:limit]
    retired = [j for f in facts if isinstance(f, RecordsRetired) for j in f.jobs]
    assert len(retired) == len(set(retired)) and not set(retired) & set(w.model.jobs)
