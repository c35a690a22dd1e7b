"""Staging before hosts are held, and claims populated from a URL: the model's side.

A job whose staging claim is of a shared class gets that claim at submission
(``ClaimCreated``, unplaced); the scheduler places it, the provisioner creates
it and stages in, and only then may the job be allocated (the gate is in the
scheduler's view and the plan applier's re-check).  A standalone claim
made with ``populate_from`` opens a ``populate`` op after its create and is
READY only once that succeeds.
"""

from __future__ import annotations

import pytest

from xce.config import parse_config
from xce.controller.applier import apply_plan
from xce.controller.view import build_view
from xce.errors import Forbidden, InvalidRequest
from xce.model import claims
from xce.model.facts import ClaimCreated, ClaimPlaced, QueueDefined
from xce.model import job_claims, jobs, status
from xce.model.claims import ClaimState, OpKind, Scope
from xce.model.jobs import JobState
from xce.scheduler.core import schedule
from xce.scheduler.plan import Allocation, Plan
from tests.model.test_job_claims import ADMIN, ALICE, CONFIG, PROVISIONER, World

URL = "https://data.example/set/"
EARLY = dict(stage_in=(URL + ":set",), stage_class="vol", stage_size="1Gi")


@pytest.fixture
def w() -> World:
    return World()


def place(w: World, claim: claims.Claim) -> None:
    w.commit([ClaimPlaced(time=w.tick(), claim_id=claim.id, pool="p")])


def cycle(w: World):
    """One scheduling cycle through the controller's own view builder and plan applier."""
    plan = schedule(build_view(w.model, CONFIG))
    outcome = apply_plan(w.model, plan, w.tick(), CONFIG)
    w.commit(outcome.facts)
    return plan, outcome


def test_a_shared_staging_claim_is_made_at_submission_unplaced_for_the_next_run(w):
    job = w.submit(**EARLY)
    claim = job_claims.early_claim(w.model, job)
    assert claim is not None and claim.name == f"j{job.id}.1:stage" and claim.scope is Scope.SHARED
    assert claim.state is ClaimState.PENDING and not claim.placed and claim.op is None
    assert claim.stage_in == [[URL, "set"]] and claim.early and job.run_claims == []
    assert job_claims.pool_needs(job.templates) == (), "placed on its own, not with the allocation"


def test_the_job_is_not_allocated_until_its_staging_claim_is_ready(w):
    job = w.submit(**EARLY)
    plan, outcome = cycle(w)  # places the claim, allocates nothing
    claim = job_claims.early_claim(w.model, job)
    assert not plan.allocations and plan.pending_reasons[job.id].startswith(f"waiting for claim {claim.name}")
    assert claim.placed and claim.op.kind is OpKind.CREATE and claim.agent == PROVISIONER
    w.run_agent(PROVISIONER)  # create
    assert claim.state is ClaimState.PREPARING and claim.op.kind is OpKind.STAGE_IN
    assert claim.agent == PROVISIONER, "shared staging is the provisioner's"
    plan, _ = cycle(w)
    assert not plan.allocations and not job.allocated
    reason = status.status_reason(w.model, job, w.now)
    assert reason.startswith("staging in: "), reason
    shown = status.status_reason(w.model, job, w.now, progress={
        "op_id": claim.op.op_id, "bytes": 1288490189, "total_bytes": 4 * 2**30, "rate": 310 * 2**20})
    assert shown == "staging in: 1.2 GiB of 4.0 GiB, 310 MiB/s", shown
    w.run_agent(PROVISIONER)  # stage-in
    assert claim.state is ClaimState.READY
    ready_at = claim.history[-1]["time"]
    plan, outcome = cycle(w)
    assert [a.job_id for a in plan.allocations] == [job.id] and job.allocated
    assert job.alloc_time > ready_at
    assert job_claims.run_claims(w.model, job) == [claim] and job.early_claim is None
    assert status.blocking(w.model, job) is None, "ready already: dispatch at once"
    assert not any(isinstance(f, ClaimCreated) for f in outcome.facts), "no second staging claim"
    host = job.hosts[0]
    assert [p["env"] for p in job_claims.publish_list(w.model, job, host)] == ["XCE_STAGE"]


def test_the_applier_refuses_an_allocation_whose_staging_claim_is_not_ready(w):
    job = w.submit(**EARLY)
    cycle(w)
    w.run_agent(PROVISIONER)  # created; the stage-in is under way
    claim = job_claims.early_claim(w.model, job)
    plan = Plan(position=w.model.position, allocations=(
        Allocation(job_id=job.id, run=job.run, hosts=("h1",), slots={"h1": 1}, counters={}),))
    outcome = apply_plan(w.model, plan, w.tick(), CONFIG)
    assert outcome.facts == []
    assert outcome.result.rejected == {job.id: f"staging in: claim {claim.name} is PREPARING"}


def test_a_permanent_stage_in_failure_ends_the_job_exit_without_ever_holding_a_host(w):
    job = w.submit(**EARLY)
    cycle(w)
    w.run_agent(PROVISIONER)
    w.run_agent(PROVISIONER, ok=False, code="ACCESS_DENIED", retryable=False)
    claim = w.model.claims[[c.id for c in w.model.claims.values() if c.job_id == job.id][0]]
    assert job.state is JobState.EXIT and job.exit_reason.startswith("stage-in failed: ACCESS_DENIED")
    assert job.alloc_time is None and job.hosts == []
    assert claim.state in (ClaimState.RELEASING, ClaimState.RELEASED) and claim.delete_requested


def test_a_pending_job_killed_while_staging_lets_its_staging_claim_go(w):
    job = w.submit(**EARLY)
    cycle(w)
    w.run_agent(PROVISIONER)  # created: now staging in
    claim = job_claims.early_claim(w.model, job)
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick()))
    assert job.state is JobState.EXIT and job.early_claim is None and claim.delete_requested
    w.run_agent(PROVISIONER)  # the stage-in that was due runs (nothing cancels a copy mid-way), then release
    w.run_agent(PROVISIONER)
    assert claim.state is ClaimState.RELEASED


def test_a_requeued_job_stages_in_again_for_its_next_run(w):
    job = w.submit(rerunnable=True, **EARLY)
    cycle(w)
    for _ in range(2):
        w.run_agent(PROVISIONER)
    cycle(w)
    first = job_claims.run_claims(w.model, job)[0]
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), requeue=True))
    assert job.state is JobState.PEND and first.delete_requested
    again = job_claims.early_claim(w.model, job)
    assert again is not None and again.id != first.id and again.run == job.run + 1
    assert again.name == f"j{job.id}.{job.run + 1}:stage" and not again.placed


def test_an_array_gets_one_staging_claim_per_element(w):
    facts, parent = job_claims.submit(w.model, ALICE, jobs.JobSpec(command=["x"], name="a[1-3]"),
                                      job_claims.JobClaimsSpec(**EARLY), w.tick(), CONFIG)
    w.commit(facts)
    made = [f for f in facts if isinstance(f, ClaimCreated)]
    assert [f.job_id for f in made] == [parent, parent + 1, parent + 2]
    assert len({f.claim_id for f in made}) == 3
    assert all(job_claims.early_claim(w.model, w.model.jobs[j]) is not None for j in (parent, parent + 1, parent + 2))


def test_shared_staging_refuses_local_paths(w):
    with pytest.raises(InvalidRequest, match="is shared: it stages from and to URLs and remotes only"):
        w.submit(stage_in=("/home/alice/data.csv",), stage_class="vol")
    with pytest.raises(InvalidRequest, match="stages from and to URLs"):
        w.submit(stage_in=(URL,), stage_out=("x:/home/alice/x",), stage_class="vol")
    with pytest.raises(InvalidRequest, match="--stage-class needs --stage-in or --stage-out"):
        w.submit(stage_class="vol")


def test_node_scope_staging_still_waits_for_the_allocation(w):
    job = w.submit(stage_in=(URL,), stage_class="stage")
    assert job.early_claim is None and not any(isinstance(c, claims.Claim) and c.job_id == job.id
                                               for c in w.model.claims.values())


# ---------------------------------------------------------------- populate


def populated(w: World, source: str = "https://models.example/llama/", access: str = "ROX") -> claims.Claim:
    facts, claim_id = claims.create(w.model, CONFIG, ALICE,
                                    claims.ClaimSpec(name="weights", class_name="vol", size="1Gi", access_mode=access,
                                                     populate_from=source),
                                    w.tick())
    w.commit(facts)
    return w.model.claims[claim_id]


def test_a_populated_claim_is_ready_only_once_its_data_is_in(w):
    claim = populated(w)
    assert claim.populate_from == "https://models.example/llama/"
    place(w, claim)
    w.run_agent(PROVISIONER)  # create
    assert claim.state is ClaimState.PREPARING and claim.op.kind is OpKind.POPULATE
    assert claim.op.op_id == f"c{claim.id}.populate.1"
    w.run_agent(PROVISIONER)
    assert claim.state is ClaimState.READY and claim.history[-1]["reason"].startswith("populated from https://")


def test_a_populate_is_retried_with_backoff_then_fails_visibly(w):
    claim = populated(w)
    place(w, claim)
    w.run_agent(PROVISIONER)
    w.run_agent(PROVISIONER, ok=False, code="TRANSFER_FAILED", retryable=True)
    assert claim.state is ClaimState.PREPARING and claim.op.next_retry is not None
    assert claim.last_error.startswith("TRANSFER_FAILED") and claim.op.attempts == 1
    w.now = claim.op.next_retry
    w.run_agent(PROVISIONER, ok=False, code="ACCESS_DENIED", retryable=False)
    assert claim.state is ClaimState.FAILED and claim.data_exists, "the object is there: deletion releases it"
    w.commit(claims.delete(w.model, ALICE, "weights", w.tick()))
    assert claim.state is ClaimState.RELEASING and claim.op.kind is OpKind.RELEASE


def test_populate_sources_are_checked_like_stage_in_sources(w):
    with pytest.raises(InvalidRequest, match="unknown scheme s3://"):
        populated(w, "s3://models/llama/")
    with pytest.raises(InvalidRequest, match="credentials"):
        populated(w, "https://me:secret@models.example/x")
    with pytest.raises(InvalidRequest, match="URL or REMOTE:path"):
        populated(w, "/etc/shadow")
    with pytest.raises(InvalidRequest, match="either a clone"):
        claims.create(w.model, CONFIG, ALICE, claims.ClaimSpec(name="x", class_name="vol", size="1Gi",
                                                               access_mode="RWO", populate_from=URL),
                      w.tick(), source=claims.ContentSource("claim", 1, "a", "h", "vol", "default", 1, "RWO"))


def test_a_remote_of_another_project_is_refused_naming_the_project(w):
    cfg = parse_config("""
[[users]]
name = "admin"
role = "admin"
[[queues]]
name = "default"
[[projects]]
name = "default"
[[projects]]
name = "other"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[transfers]
[[transfers.remotes]]
name = "lab"
type = "s3"
schemes = ["s3"]
projects = ["other"]
""")
    with pytest.raises(Forbidden, match="project default may not use remote lab"):
        claims.create(w.model, cfg, ALICE, claims.ClaimSpec(name="w", class_name="vol", size="1Gi", access_mode="ROX",
                                                            populate_from="lab:models/x"), w.tick())
    with pytest.raises(Forbidden, match="project default may use no remote for s3://"):
        claims.create(w.model, cfg, ALICE, claims.ClaimSpec(name="w", class_name="vol", size="1Gi", access_mode="ROX",
                                                            populate_from="s3://models/x"), w.tick())


def test_node_scope_claims_are_not_populated(w):
    with pytest.raises(InvalidRequest, match="node-scope"):
        claims.create(w.model, CONFIG, ADMIN, claims.ClaimSpec(name="x", class_name="scratch", size="1Gi",
                                                               access_mode="RWO", populate_from=URL), w.tick())


# A queue's and a profile's default staging class ([[queues]] / [[apps]] stage_class): the most specific word wins
DEFAULTS = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[queues]]
name = "gpu"
stage_class = "vol"
[[projects]]
name = "default"
[[pools]]
name = "p"
capacity = "1Ti"
[[claim_classes]]
name = "vol"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "stage"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
[[apps]]
name = "serve"
stage_class = "vol"
[[apps]]
name = "local"
stage_class = "stage"
""")


def submit_to(w: World, queue: str | None, **claims) -> jobs.Job:
    w.commit([QueueDefined(time=0, name="gpu", priority=30)])
    facts, job_id = job_claims.submit(w.model, ALICE, jobs.JobSpec(command=["x"], queue=queue),
                                      job_claims.JobClaimsSpec(**claims), w.tick(), DEFAULTS)
    w.commit(facts)
    return w.model.jobs[job_id]


@pytest.mark.parametrize("queue, app, flag, expected", [
    ("default", None, None, "stage"),  # the site's [claims] stage_class
    ("gpu", None, None, "vol"),  # the queue's
    ("default", "serve", None, "vol"),  # the profile's
    ("gpu", "local", None, "stage"),  # the profile's before the queue's
    ("gpu", "serve", "stage", "stage"),  # --stage-class before both
])
def test_the_staging_class_comes_from_the_flag_the_profile_the_queue_or_the_site(w, queue, app, flag, expected):
    job = submit_to(w, queue, stage_in=(URL,), app=app, stage_class=flag)
    (stage,) = [t for t in job.templates if t["kind"] == "stage"]
    assert stage["class"] == expected
    assert (job_claims.early_claim(w.model, job) is not None) == (expected == "vol"), "shared: staged before allocation"


def test_a_queues_default_is_used_only_by_jobs_that_stage_and_a_path_names_where_the_shared_class_came_from(w):
    job = submit_to(w, "gpu")
    assert job.templates == [] and job.early_claim is None
    with pytest.raises(InvalidRequest, match=r"staging class 'vol' \(queue gpu's default\) is shared.*--stage-class"):
        submit_to(w, "gpu", stage_in=("/home/alice/data.csv",))
    job = submit_to(w, "gpu", stage_in=("/home/alice/data.csv",), stage_class="stage")
    assert [t["class"] for t in job.templates] == ["stage"]
