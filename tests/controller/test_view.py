"""The scheduler's cluster view keeps pending jobs' views between cycles, and a kept view is always the
view it would build afresh."""

from __future__ import annotations

import pytest

from tests.controller.test_applier import ADMIN, CONFIG, World, on
from xce.controller.view import JobViews, build_view
from xce.model import claims
from xce.model.facts import QueueDefined
from xce.model import job_claims, jobs
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import JobSpec


@pytest.fixture
def w() -> World:
    return World()


def test_kept_views_are_the_fresh_ones_and_only_unchanged_plain_jobs_keep_theirs(w):
    w.standalone("data")
    plain, again, uses = w.submit(), w.submit(rerunnable=True), w.submit(claims=("data",))
    views = JobViews()
    first = build_view(w.model, CONFIG, views=views)
    assert first.pending == build_view(w.model, CONFIG).pending

    w.apply(on(again))  # allocated: no longer pending
    w.commit(jobs.kill(w.model, ADMIN, again.id, w.tick(), requeue=True))  # pending again, its run moved on
    w.commit(claims.delete(w.model, ADMIN, "data", w.tick()))  # the claim `uses` references is being deleted
    second = build_view(w.model, CONFIG, views=views)
    assert second.pending == build_view(w.model, CONFIG).pending, "a kept view went stale"
    by_id = {v.id: v for v in second.pending}
    was = {v.id: v for v in first.pending}
    assert by_id[plain.id] is was[plain.id], "an unchanged plain job's view was built again"
    assert by_id[again.id].run == again.run == 1 and by_id[again.id] is not was[again.id]
    assert by_id[uses.id].claims[0].state == "BEING_DELETED" != was[uses.id].claims[0].state


def test_views_of_jobs_no_longer_pending_are_not_kept(w):
    a, b = w.submit(), w.submit()
    views = JobViews()
    build_view(w.model, CONFIG, views=views)
    w.apply(on(a))
    assert [v.id for v in build_view(w.model, CONFIG, views=views).pending] == [b.id]
    assert set(views._kept) == {b.id}


def test_a_depth_keeps_the_first_pending_jobs_in_the_schedulers_order(w):
    """``queue_depth``: the view holds the jobs the scheduler would take first (highest queue
    priority, then oldest) and counts the rest."""
    old = [w.submit() for _ in range(3)]
    snap = build_view(w.model, CONFIG, depth=2)
    assert [v.id for v in snap.pending] == [old[0].id, old[1].id] and snap.pending_beyond == 1
    w.commit([QueueDefined(time=w.tick(), name="urgent", priority=90)])
    facts, urgent = job_claims.submit(w.model, ADMIN, JobSpec(command=["run"], queue="urgent"), JobClaimsSpec(),
                                      w.tick(), CONFIG)
    w.commit(facts)
    views = JobViews()
    snap = build_view(w.model, CONFIG, views=views, depth=2)
    assert [v.id for v in snap.pending] == [old[0].id, urgent] and snap.pending_beyond == 2
    assert [v.id for v in build_view(w.model, CONFIG, views=views).pending] == [j.id for j in old] + [urgent]
    assert build_view(w.model, CONFIG, depth=10).pending_beyond == 0


def test_the_view_offers_waiting_replicas_and_a_node_local_claims_ready_hosts_as_its_reach(w):
    from tests.controller.test_applier import GiB, ReplicaPlacement, apply_replicas, make_ready, replicated
    named, chosen = replicated(w, "named", hosts=("h1", "h2")), replicated(w, "chosen", replicas=2)
    [a, b] = build_view(w.model, CONFIG).pending_replicas
    assert (a.claim_id, a.hosts, a.more, a.counter, a.size) == (named.id, ("h1", "h2"), 0, "scratch", 10 * GiB)
    assert (b.claim_id, b.hosts, b.more) == (chosen.id, (), 2)
    apply_replicas(w, ReplicaPlacement(named.id, "h1", "scratch", 10 * GiB),
                   ReplicaPlacement(chosen.id, "h2", "scratch", 10 * GiB))
    [a, b] = build_view(w.model, CONFIG).pending_replicas
    assert (a.hosts, b.more, b.taken) == (("h2",), 1, frozenset({"h2"}))
    make_ready(w, named, "h1")
    job = w.submit(claims=("named",))
    [use] = next(j for j in build_view(w.model, CONFIG).pending if j.id == job.id).claims
    assert (use.state, use.reachable, use.replicated) == ("READY", frozenset({"h1"}), True)


def test_hosts_carry_what_their_runs_give_back_and_when_for_reservations(w):
    """Backfill plans from the runs' expected ends: start plus -We, else the run limit; none without either."""
    from xce.model.facts import JobStarted

    limited = w.submit()
    limited.run_limit, limited.run_estimate = 600.0, None
    estimated = w.submit()
    estimated.run_limit, estimated.run_estimate = 3600.0, 120.0
    unlimited = w.submit()
    for job in (limited, estimated, unlimited):
        w.apply(on(job, slots=1))
        w.commit([JobStarted(time=1000.0, job_id=job.id, run=job.run, host="h1", pid=1)])
    view = build_view(w.model, CONFIG, now=1100.0)
    h1 = next(h for h in view.hosts if h.name == "h1")
    assert sorted((end, n) for end, n, _ in h1.releases) == [(1120.0, 1), (1600.0, 1)]
    assert view.now == 1100.0 and view.policy.reservation_depth == 1
    assert build_view(w.model, CONFIG, now=1700.0).hosts[0].releases[0][0] == 1700.0  # past its end: now


def test_hosts_carry_the_gpus_their_runs_give_back_and_when(w):
    """GPUs are planned in time as slots are: a run holding GPUs exclusively gives them back at its
    expected end; one sharing them does not count (its GPU comes free only with its last sharer)."""
    from tests.controller.test_applier import GiB, HostRegistered, gpu_job, gpus_on
    from xce.model.facts import JobStarted

    w.commit([HostRegistered(time=0, name="g1", slots=8, gpus=[
        {"id": i, "uuid": f"GPU-{i}", "model": "NVIDIA A100", "memory": 80 * GiB} for i in range(4)])])
    exclusive, shared = gpu_job(w, "num=2"), gpu_job(w, "num=1:j_exclusive=no")
    for job in (exclusive, shared):
        job.run_limit = 600.0
    w.apply(gpus_on(exclusive, (0, 1)), gpus_on(shared, (2,)))
    for job in (exclusive, shared):
        w.commit([JobStarted(time=1000.0, job_id=job.id, run=job.run, host="g1", pid=1)])
    g1 = next(h for h in build_view(w.model, CONFIG, now=1100.0).hosts if h.name == "g1")
    assert g1.gpu_releases == ((1600.0, (0, 1)),)
    assert sorted(end for end, _, _ in g1.releases) == [1600.0, 1600.0]
