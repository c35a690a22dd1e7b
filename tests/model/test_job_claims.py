"""The one coupling between jobs and claims (``xce.model.job_claims``), on models built from facts.

No processes: a ``World`` folds facts into a ``Model`` and plays the parts the
controller's callers play (a user submitting, the plan applier allocating, the
claim agents running ops, a worker reporting) through the decide functions,
committing the facts they return.
"""

from __future__ import annotations

import random

import pytest

from xce.config import ClaimsConfig, parse_config
from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.model import Model
from xce.model import claims
from xce.model.facts import (
    AttachmentRemoved, ClaimCreated, ClaimOpFailed, ClaimOpSucceeded, ClaimPlaced, Fact, HostRegistered, JobAllocated,
    JobFinished, JobProcessEnded, JobRequeued, JobSubmitted, ProjectDefined, QueueDefined,
)
from xce.model import job_claims, jobs, status
from xce.model.claims import AttachmentState, ClaimState, OpKind
from xce.model.identity import Role, User
from xce.model.job_claims import JobClaimsSpec
from xce.model.jobs import Job, JobSpec, JobState

GiB = 2**30
MiB = 2**20
CONFIG = parse_config("""
[[users]]
name = "admin"
role = "admin"
projects = ["default", "other"]
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
[[claim_classes]]
name = "fast"
provider = "simfs"
pools = ["p"]
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
[[claim_classes]]
name = "stage"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
[[apps]]
name = "serve"
claims = [{ name = "kv-cache", claim_class = "fast", size = "1Gi" }]
""")
RETRIES = ClaimsConfig(max_attempts=3, retry_base=10.0, retry_cap=20.0, retry_jitter=0.0)
ALICE = User(name="alice", role=Role.USER, projects=["default"])
ADMIN = User(name="admin", role=Role.ADMIN, projects=["default", "other"])
PROVISIONER = claims.SHARED_AGENT
NODE1, NODE2 = claims.node_agent("h1"), claims.node_agent("h2")


class World:
    """A model and the hands that move it: every change goes through a decide function and a fact."""

    def __init__(self) -> None:
        self.model = Model(cluster_id="k")
        self.now = 100.0
        self.rng = random.Random(3)
        self.epochs: dict[str, int] = {}
        self.commit([ProjectDefined(time=0, name="default"), ProjectDefined(time=0, name="other"),
                     QueueDefined(time=0, name="default", priority=30)]
                    + [HostRegistered(time=0, name=h, slots=8, counters={"scratch": 100.0 * GiB})
                       for h in ("h1", "h2")])

    def tick(self) -> float:
        self.now += 1.0
        return self.now

    def commit(self, facts):
        for f in facts:
            self.model.apply(self.model.position + 1, f)
        return facts

    # ------------------------------------------------------------ claims and agents

    def standalone(self, name: str, access: str = "RWO", project: str = "default", **spec) -> claims.Claim:
        """A READY standalone claim, the way the scheduler and the provisioner make one (``spec``: more of
        its ``ClaimSpec``)."""
        facts, claim_id = claims.create(self.model, CONFIG, ADMIN,
                                        claims.ClaimSpec(name=name, class_name="vol", size="1Gi", access_mode=access,
                                                         project=project, **spec),
                                        self.tick())
        self.commit(facts)
        self.commit([ClaimPlaced(time=self.tick(), claim_id=claim_id, pool="p")])
        self.run_agent(PROVISIONER)
        claim = self.model.claims[claim_id]
        assert claim.state is ClaimState.READY
        return claim

    def epoch(self, agent: str) -> int:
        if agent not in self.epochs:
            facts, self.epochs[agent] = claims.lease(self.model, agent, "test", self.tick())
            self.commit(facts)
        return self.epochs[agent]

    def intents(self, agent: str) -> list[tuple[claims.Claim, claims.Op, claims.Attachment | None]]:
        """The agent commits an intent for each op due to it."""
        epoch, now = self.epoch(agent), self.tick()
        due = claims.due_ops(self.model, agent, now)
        for claim, op, _ in due:
            self.commit(claims.record_intent(self.model, agent, epoch, op.op_id, claim.id, now))
        return due

    def report(self, agent: str, claim: claims.Claim, op_id: str, ok: bool = True, code: str = "",
               retryable: bool = True, epoch: int | None = None) -> tuple[list[Fact], dict[str, str]]:
        """The agent reports one op's result; the facts are committed."""
        found = claim.find_op(op_id)
        host = found[1].host if found is not None and found[1] is not None else claim.host
        path = f"/data/{host or 'shared'}/{claim.id}"
        result = claims.OpResult(op_id=op_id, claim_id=claim.id, ok=ok, handle=f"obj-{claim.id}",
                                 size_bytes=claim.size_bytes,
                                 path=path, code=code, message="" if ok else "it went wrong", retryable=retryable)
        facts, refused = job_claims.agent_report(self.model, RETRIES, agent,
                                                 self.epoch(agent) if epoch is None else epoch, [result], self.tick(),
                                                 self.rng)
        self.commit(facts)
        return facts, refused

    def run_agent(self, agent: str, **result) -> list[str]:
        """One round of an agent: intents for its due ops, then one result each (default: success)."""
        done = []
        for claim, op, _ in self.intents(agent):
            self.report(agent, claim, op.op_id, **result)
            done.append(op.op_id)
        return done

    def make_ready(self, job: Job) -> None:
        """Agents work until the job's readiness gate opens (a few rounds: create, stage-in, attach)."""
        for _ in range(4):
            for agent in (PROVISIONER, *(claims.node_agent(h) for h in job.hosts)):
                self.run_agent(agent)
        assert status.blocking(self.model, job) is None

    # ------------------------------------------------------------ jobs

    def submit(self, actor: User = ALICE, rerunnable: bool = False, held: bool = False, **claims) -> Job:
        facts, job_id = job_claims.submit(self.model, actor, JobSpec(command=["train"], rerunnable=rerunnable,
                                                                     held=held),
                                          JobClaimsSpec(**claims), self.tick(), CONFIG)
        self.commit(facts)
        return self.model.jobs[job_id]

    def allocate(self, job: Job, hosts: tuple[str, ...] = ("h1",), pools: dict[str, str] | None = None,
                 with_templates: bool = True) -> list[ClaimCreated]:
        """What the plan applier commits for the job's next run: ``JobAllocated``, then its template claims."""
        now, run = self.tick(), job.run + 1
        templates, attachments = job_claims.plan_claims(job, run, list(hosts), self.model.next_claim_id,
                                                        self.model.next_attachment_id,
                                                        pools if pools is not None else {"kv-cache": "p"}, now)
        self.commit([JobAllocated(time=now, job_id=job.id, run=run, hosts=list(hosts),
                                  slots={h: 1 for h in hosts}, attachments=attachments)])
        if with_templates:
            self.commit(templates)
        return templates

    def start(self, job: Job) -> None:
        self.commit(jobs.report_started(self.model, job.hosts[0], job.id, job.run, 4242, self.tick(), "/ws", "", ""))
        assert job.state is JobState.RUN

    def running(self, rerunnable: bool = False, hosts: tuple[str, ...] = ("h1",), **claims) -> Job:
        job = self.submit(rerunnable=rerunnable, **claims)
        self.allocate(job, hosts)
        self.make_ready(job)
        self.start(job)
        return job

    def claim_of(self, job: Job, kind: str) -> claims.Claim:
        return next(c for c in job_claims.run_claims(self.model, job) if c.kind == kind)


@pytest.fixture
def w() -> World:
    return World()


# ---------------------------------------------------------------- submit


def test_submit_resolves_references_in_the_jobs_project_with_their_modes(w):
    data = w.standalone("data")
    weights = w.standalone("weights", access="ROX")
    job = w.submit(claims=("data", "weights"))
    assert job.claim_refs == [{"claim_id": data.id, "name": "data", "mode": "rw"},
                              {"claim_id": weights.id, "name": "weights", "mode": "ro"}], \
        "an RWO claim is used rw unless told; a ROX claim ro"
    job = w.submit(claims=("data:ro",))
    assert job.claim_refs == [{"claim_id": data.id, "name": "data", "mode": "ro"}]


def test_submit_refuses_an_unknown_claim_and_another_projects_claim_alike(w):
    w.standalone("theirs", project="other")
    with pytest.raises(NotFound) as unknown:
        w.submit(claims=("nope",))
    with pytest.raises(NotFound) as foreign:
        w.submit(claims=("theirs",))
    assert "not found in project 'default'" in unknown.value.message
    assert foreign.value.message == unknown.value.message.replace("nope", "theirs"), \
        "another project's claim looks exactly like one that does not exist"
    assert not w.model.jobs


def test_submit_refuses_read_write_use_of_a_rox_claim(w):
    w.standalone("weights", access="ROX")
    with pytest.raises(InvalidRequest, match="ROX .*use --claim weights:ro"):
        w.submit(claims=("weights:rw",))
    with pytest.raises(InvalidRequest, match="the mode is rw or ro"):
        w.submit(claims=("weights:wr",))
    assert w.submit(claims=("weights:ro",)).claim_refs[0]["mode"] == "ro"


def test_submit_refuses_names_that_would_be_published_alike(w):
    w.standalone("x-y")
    w.standalone("x_y")
    w.standalone("kv-cache")
    with pytest.raises(InvalidRequest, match=r"would both be published as \$XCE_CLAIM_X_Y"):
        w.submit(claims=("x-y", "x_y"))
    with pytest.raises(InvalidRequest, match="claim kv-cache and template claim kv-cache"):
        w.submit(claims=("kv-cache",), app="serve")
    assert w.submit(claims=("x-y",), app="serve").app == "serve", "each alone is fine"


def test_submit_refuses_a_claim_with_a_name_the_job_publishes_its_own_data_under(w):
    # claim names are reserved at creation; a claim from before that (a replayed log) may hold one
    w.commit([ClaimCreated(time=w.tick(), claim_id=50, name="scratch", form="standalone", class_name="vol",
                           scope="shared", size_bytes=GiB, access_mode="RWO", reclaim_policy="delete",
                           owner="alice", project="default")])
    w.commit([ClaimPlaced(time=w.tick(), claim_id=50, pool="p")])
    w.run_agent(PROVISIONER)
    with pytest.raises(InvalidRequest, match="claim scratch has a reserved name"):
        w.submit(claims=("scratch",))


# ---------------------------------------------------------------- allocation: plan_claims and JobAllocated


def test_an_allocation_makes_the_runs_template_claims_placed_with_create_ops_for_the_right_agents(w):
    job = w.submit(scratch="2Gi", app="serve")
    first_id = w.model.next_claim_id
    created = w.allocate(job, hosts=("h2", "h1"), pools={"kv-cache": "p"})
    assert [f.claim_id for f in created] == [first_id, first_id + 1]
    scratch, kv = w.model.claims[first_id], w.model.claims[first_id + 1]
    assert job.run_claims == [scratch.id, kv.id]
    assert (scratch.name, kv.name) == ("j1.1:scratch", "j1.1:kv-cache")
    assert (scratch.scope, scratch.host, scratch.pool) == (claims.Scope.NODE, "h2", None), "node scope: the first host"
    assert (kv.scope, kv.host, kv.pool) == (claims.Scope.SHARED, None, "p"), "shared: the pool the scheduler chose"
    for claim in (scratch, kv):
        assert claim.placed and claim.state is ClaimState.PENDING and claim.form is claims.ClaimForm.TEMPLATE
        assert (claim.op.kind, claim.op.op_id) == (OpKind.CREATE, f"c{claim.id}.create.1")
        assert claim.owner == "alice" and claim.project == "default" and (claim.job_id, claim.run) == (job.id, 1)
    assert scratch.agent == claims.node_agent("h2") and kv.agent == PROVISIONER
    due = {agent: [op.op_id for _, op, _ in claims.due_ops(w.model, agent, w.now)]
           for agent in (PROVISIONER, NODE1, NODE2)}
    assert due == {PROVISIONER: [kv.op.op_id], NODE1: [], NODE2: [scratch.op.op_id]}
    assert "j1.1:scratch" not in {k.partition("/")[2] for k in w.model.claim_names}, "template claims have no name"


def test_an_allocation_attaches_each_referenced_claim_on_every_host_of_the_run(w):
    data = w.standalone("data")
    weights = w.standalone("weights", access="ROX")
    job = w.submit(claims=("data", "weights"))
    first = w.model.next_attachment_id
    w.allocate(job, hosts=("h1", "h2"))
    assert job.run_attachments == [[data.id, first], [data.id, first + 1], [weights.id, first + 2],
                                   [weights.id, first + 3]]
    for claim, mode in ((data, claims.Mode.RW), (weights, claims.Mode.RO)):
        assert [(a.host, a.mode, a.state, a.op.kind, (a.job_id, a.run)) for a in claim.attachments] == [
            ("h1", mode, AttachmentState.ATTACHING, OpKind.ATTACH, (job.id, 1)),
            ("h2", mode, AttachmentState.ATTACHING, OpKind.ATTACH, (job.id, 1))]
    assert [op.op_id for _, op, _ in claims.due_ops(w.model, PROVISIONER, w.now)] == [
        f"a{first}.attach", f"a{first + 1}.attach", f"a{first + 2}.attach", f"a{first + 3}.attach"], \
        "shared claims are attached by the provisioner"
    assert job.state is JobState.PEND and job.allocated


# ---------------------------------------------------------------- the readiness gate


def test_the_gate_names_the_claim_its_state_attempt_and_next_retry(w):
    job = w.submit(scratch="1Gi")
    w.allocate(job)
    scratch = w.claim_of(job, "scratch")
    assert status.blocking(w.model, job) == "waiting for claim j1.1:scratch PENDING"
    w.intents(NODE1)
    assert status.blocking(w.model, job) == "waiting for claim j1.1:scratch PREPARING attempt 1"
    w.report(NODE1, scratch, scratch.op.op_id, ok=False, code="UNAVAILABLE", retryable=True)
    assert scratch.op.next_retry == w.now + 10.0, "the retry waits retry_base (no jitter here)"
    assert status.blocking(w.model, job, now=w.now + 4.0) == \
        "waiting for claim j1.1:scratch PREPARING attempt 1, next retry in 6s: UNAVAILABLE: it went wrong"
    assert job.state is JobState.PEND and job.allocated, "a retryable failure leaves the job waiting"
    w.now = scratch.op.next_retry
    w.run_agent(NODE1)
    assert scratch.state is ClaimState.READY and scratch.op is None
    assert status.blocking(w.model, job) is None


def test_the_gate_waits_for_every_attachment_then_opens(w):
    data = w.standalone("data")
    job = w.submit(claims=("data",), scratch="1Gi")
    w.allocate(job, hosts=("h1", "h2"))
    w.run_agent(NODE1)  # the scratch claim is READY
    assert status.blocking(w.model, job) == "waiting for claim data ATTACHING on h1"
    (_, op1, _), (_, op2, _) = w.intents(PROVISIONER)
    w.report(PROVISIONER, data, op1.op_id)
    assert status.blocking(w.model, job) == "waiting for claim data ATTACHING on h2 attempt 1"
    w.report(PROVISIONER, data, op2.op_id)
    assert [a.state for a in data.attachments] == [AttachmentState.ATTACHED] * 2
    assert status.blocking(w.model, job) is None


def test_a_run_missing_a_template_claim_it_declared_is_never_dispatched(w):
    job = w.submit(scratch="1Gi")
    w.allocate(job, with_templates=False)  # a JobAllocated whose ClaimCreated facts never came
    assert job.allocated and job.run_claims == []
    assert status.blocking(w.model, job) == "run 1 lacks template claims it declared: it cannot start"


# ---------------------------------------------------------------- agent reports


def test_a_permanent_create_failure_ends_the_job_or_requeues_it(w):
    plain = w.submit(scratch="1Gi")
    rerun = w.submit(scratch="1Gi", rerunnable=True)
    w.allocate(plain)
    w.allocate(rerun)
    ops = {c.job_id: (c, op.op_id) for c, op, _ in w.intents(NODE1)}
    facts, _ = w.report(NODE1, *ops[plain.id], ok=False, code="INVALID_ARGUMENT", retryable=False)
    assert [type(f) for f in facts] == [ClaimOpFailed, JobFinished]
    assert plain.state is JobState.EXIT and not plain.allocated
    assert plain.exit_reason == "claim j1.1:scratch failed: INVALID_ARGUMENT: it went wrong"
    facts, _ = w.report(NODE1, *ops[rerun.id], ok=False, code="INVALID_ARGUMENT", retryable=False)
    assert [type(f) for f in facts] == [ClaimOpFailed, JobRequeued]
    assert rerun.state is JobState.PEND and not rerun.allocated and rerun.id in w.model.pending_jobs
    assert rerun.pending_reason == "claim j2.1:scratch failed: INVALID_ARGUMENT: it went wrong: requeued"
    for job in (plain, rerun):
        failed = w.model.claims[ops[job.id][0].id]
        assert [h["state"] for h in failed.history][-2:] == ["FAILED", "RELEASED"]
        assert failed.op is None, "the provider made nothing: there is nothing to release"
    w.allocate(rerun)
    assert w.claim_of(rerun, "scratch").name == "j2.2:scratch", "the next run gets claims of its own"


def test_the_last_retryable_failure_ends_the_job_too(w):
    job = w.submit(scratch="1Gi")
    w.allocate(job)
    scratch = w.claim_of(job, "scratch")
    for attempt in range(1, RETRIES.max_attempts + 1):
        w.now = scratch.op.next_retry or w.now
        w.intents(NODE1)
        facts, _ = w.report(NODE1, scratch, scratch.op.op_id, ok=False, code="UNAVAILABLE", retryable=True)
        assert (job.state is JobState.EXIT) == (attempt == RETRIES.max_attempts)
    assert job.exit_reason == "claim j1.1:scratch failed: UNAVAILABLE: it went wrong"


def test_a_permanent_attach_failure_ends_the_job(w):
    data = w.standalone("data")
    job = w.submit(claims=("data",))
    w.allocate(job)
    (_, op, a), = w.intents(PROVISIONER)
    facts, _ = w.report(PROVISIONER, data, op.op_id, ok=False, code="NOT_REACHABLE", retryable=False)
    assert job.state is JobState.EXIT
    assert job.exit_reason == "claim data could not be attached on h1: NOT_REACHABLE: it went wrong"
    assert data.attachments == [] and data.state is ClaimState.READY, "the claim itself is unharmed"


def test_a_report_from_the_wrong_agent_or_epoch_is_refused(w):
    job = w.submit(scratch="1Gi")
    w.allocate(job)
    scratch = w.claim_of(job, "scratch")
    w.intents(NODE1)
    op_id = scratch.op.op_id
    w.epoch(NODE2)
    facts, refused = w.report(NODE2, scratch, op_id)
    assert facts == [] and "is not node:h2's" in refused[op_id], "another host's agent, even in the same epoch"
    old = w.epochs.pop(NODE1)
    new = w.epoch(NODE1)  # the node agent restarted
    assert new == old + 1
    with pytest.raises(Conflict) as stale:
        claims.check_epoch(w.model, NODE1, old)  # what the agents' routes ask before anything else
    assert stale.value.code == "stale_epoch"
    facts, refused = w.report(NODE1, scratch, op_id, epoch=new)
    assert facts == [] and refused[op_id] == f"op {op_id} was not started by epoch {new}", \
        "the new epoch has not taken the op over yet"
    assert [op.op_id for _, op, _ in claims.due_ops(w.model, NODE1, w.now)] == [op_id], \
        "the new epoch re-drives the op the old one started, with the same op_id"
    w.intents(NODE1)
    assert (scratch.op.op_id, scratch.op.epoch, scratch.op.attempts) == (op_id, new, 2)
    facts, refused = w.report(NODE1, scratch, op_id, epoch=old, ok=False, code="X", retryable=False)
    assert facts == [] and refused[op_id] == f"op {op_id} was not started by epoch {old}"
    assert scratch.state is ClaimState.PREPARING and job.state is JobState.PEND and job.allocated
    w.report(NODE1, scratch, op_id)
    assert scratch.state is ClaimState.READY


# ---------------------------------------------------------------- the end of a run: stage-out


def test_a_run_that_stages_out_ends_its_process_then_its_stage_out_finishes_it_done(w):
    job = w.running(stage_in=("/src/in.csv",), stage_out=("out.txt:/home/alice/out.txt",))
    stage = w.claim_of(job, "stage")
    assert stage.ops[-1]["op"] == "stage_in" and stage.state is ClaimState.READY
    facts = job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None)
    assert [type(f) for f in facts] == [JobProcessEnded], "the stage-out decides, not the process alone"
    w.commit(facts)
    assert job.state is JobState.STAGE_OUT and job.process_exit == {"exit_code": 0, "signal": None, "reason": ""}
    assert stage.state is ClaimState.RELEASING and stage.op.kind is OpKind.STAGE_OUT and stage.agent == NODE1
    assert job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None) == [], \
        "a repeated end report changes nothing"
    (_, op, _), = w.intents(NODE1)
    facts, _ = w.report(NODE1, stage, op.op_id)
    assert [type(f) for f in facts] == [ClaimOpSucceeded, JobFinished]
    assert job.state is JobState.DONE and job.exit_code == 0
    assert stage.op.kind is OpKind.RELEASE, "staged out: now the data goes"
    w.run_agent(NODE1)
    assert stage.state is ClaimState.RELEASED


def test_a_stage_out_after_a_failed_process_still_ends_the_job_exit(w):
    job = w.running(stage_out=("out.txt:/home/alice/out.txt",))
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 3, None))
    w.run_agent(NODE1)
    assert job.state is JobState.EXIT and job.exit_reason == "nonzero exit code 3"


def test_a_stage_out_failure_ends_the_job_exit_and_keeps_the_data(w):
    job = w.running(stage_out=("out.txt:/home/alice/out.txt",))
    stage = w.claim_of(job, "stage")
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None))
    w.run_agent(NODE1, ok=False, code="NO_SPACE", retryable=False)
    assert job.state is JobState.EXIT
    assert job.exit_reason == "stage-out failed: NO_SPACE: it went wrong"
    assert stage.state is ClaimState.FAILED and stage.keep and not stage.delete_requested and stage.op is None
    assert stage.data_exists and "the data is kept" in stage.history[-1]["reason"]
    assert claims.due_ops(w.model, NODE1, w.now + 1000) == [], "nobody releases the kept data"


def test_a_killed_run_does_not_stage_out(w):
    job = w.running(stage_out=("out.txt:/home/alice/out.txt",))
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick()))
    facts = job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), None, 15)
    assert [type(f) for f in facts] == [JobFinished]
    w.commit(facts)
    assert job.state is JobState.EXIT and job.exit_reason == "killed by alice"
    assert w.claim_of(job, "stage").op.kind is OpKind.RELEASE


def test_a_run_without_stage_out_finishes_at_once_and_releases_its_claims(w):
    job = w.running(scratch="1Gi")
    facts = job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None)
    assert [type(f) for f in facts] == [JobFinished]
    w.commit(facts)
    scratch = w.claim_of(job, "scratch")
    assert job.state is JobState.DONE
    assert scratch.state is ClaimState.RELEASING and scratch.op.kind is OpKind.RELEASE


# ---------------------------------------------------------------- host loss


def test_host_loss_requeues_rerunnable_jobs_and_ends_the_others(w):
    plain = w.running()
    rerun = w.running(rerunnable=True)
    elsewhere = w.running(hosts=("h2",))
    waiting = w.submit()
    w.allocate(waiting)  # allocated, not started: requeued whatever -r says
    facts = job_claims.host_lost(w.model, "h1", w.tick())
    w.commit(facts)
    assert plain.state is JobState.EXIT and plain.exit_reason == "host lost (h1)"
    assert rerun.state is JobState.PEND and rerun.pending_reason == "host h1 lost: requeued"
    assert waiting.state is JobState.PEND and not waiting.allocated
    assert elsewhere.state is JobState.RUN
    assert all(f.host_lost for f in facts if isinstance(f, (JobFinished, JobRequeued)))


def test_host_loss_fences_the_attachments_on_that_host_only(w):
    data = w.standalone("data", access="RWX")
    job = w.running(claims=("data",), hosts=("h1", "h2"))
    other = w.running(claims=("data",), hosts=("h2",))
    facts = job_claims.host_lost(w.model, "h1", w.tick())
    fenced = [f for f in facts if isinstance(f, AttachmentRemoved)]
    assert [(f.claim_id, f.by) for f in fenced] == [(data.id, "host h1 lost: fenced")]
    w.commit(facts)
    assert job.state is JobState.EXIT
    assert [(a.host, a.job_id, a.state) for a in data.attachments] == [
        ("h2", job.id, AttachmentState.DETACHING), ("h2", other.id, AttachmentState.ATTACHED)], \
        "the lost host's attachment is gone; the job's other host detaches through its agent"


def test_host_loss_before_stage_out_keeps_the_staging_data_there(w):
    job = w.running(rerunnable=True, scratch="1Gi", stage_out=("out.txt:/home/alice/out.txt",))
    stage, scratch = w.claim_of(job, "stage"), w.claim_of(job, "scratch")
    w.commit(job_claims.host_lost(w.model, "h1", w.tick()))
    assert job.state is JobState.PEND
    assert stage.state is ClaimState.FAILED and stage.keep and stage.data_exists
    assert stage.history[-1]["reason"] == "host h1 lost before stage-out: the data is kept there"
    assert scratch.state is ClaimState.RELEASING and scratch.op.kind is OpKind.RELEASE, \
        "scratch holds nothing to keep: it goes once the host's agent can release it"


# ---------------------------------------------------------------- release_for_run


def test_the_end_of_a_run_lets_go_only_of_that_runs_claims(w):
    data = w.standalone("data", access="RWX")
    mine = w.running(claims=("data",), scratch="1Gi")
    theirs = w.running(claims=("data",), scratch="1Gi")
    w.commit(claims.add_attachment(w.model, ADMIN, "data", "h1", "rw", w.tick())[0])  # an admin's, by hand
    w.commit(job_claims.report_finished(w.model, "h1", mine.id, mine.run, w.tick(), 0, None))
    assert w.claim_of(mine, "scratch").state is ClaimState.RELEASING
    assert w.claim_of(theirs, "scratch").state is ClaimState.READY
    states = {(a.job_id, a.run): a.state for a in data.attachments}
    assert states == {(mine.id, 1): AttachmentState.DETACHING, (theirs.id, 1): AttachmentState.ATTACHED,
                      (None, None): AttachmentState.ATTACHED}
    assert data.state is ClaimState.READY and not data.delete_requested, "a standalone claim outlives its jobs"
    w.run_agent(PROVISIONER)  # the detach
    w.run_agent(NODE1)  # the scratch release
    assert {(a.job_id, a.run) for a in data.attachments} == {(theirs.id, 1), (None, None)}
    assert w.claim_of(mine, "scratch").state is ClaimState.RELEASED
    assert mine.run_claims and mine.run_attachments, "xce job show still lists what the run had"


def test_a_requeued_runs_claims_go_and_the_next_run_gets_its_own(w):
    job = w.running(rerunnable=True, scratch="1Gi")
    first = w.claim_of(job, "scratch")
    w.commit(jobs.kill(w.model, ALICE, job.id, w.tick(), requeue=True))
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), None, 15))
    assert job.state is JobState.PEND and first.state is ClaimState.RELEASING
    w.allocate(job)
    second = w.claim_of(job, "scratch")
    assert second.id != first.id and second.name == "j1.2:scratch"
    assert job_claims.run_claims(w.model, job) == [second]
    w.run_agent(NODE1)
    assert first.state is ClaimState.RELEASED and second.state is ClaimState.READY


# ---------------------------------------------------------------- status_reason and publish_list


def test_the_status_reason_says_why_a_job_is_where_it_is(w):
    held = w.submit(held=True)
    assert status.status_reason(w.model, held, w.now) == "held by user"
    waiting = w.submit()
    assert status.status_reason(w.model, waiting, w.now) == "waiting for the next scheduling cycle"
    assert status.status_reason(w.model, waiting, w.now, "not enough slots") == "not enough slots"
    job = w.submit(scratch="1Gi", stage_out=("out.txt:/home/alice/out.txt",))
    w.allocate(job)
    assert status.status_reason(w.model, job, w.now, "stale scheduler word") == \
        "waiting for claim j3.1:scratch PENDING", "the readiness gate names the claim"
    w.make_ready(job)
    assert status.status_reason(w.model, job, w.now) == "dispatching to h1"
    w.start(job)
    assert status.status_reason(w.model, job, w.now) is None
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None))
    assert status.status_reason(w.model, job, w.now) == "process ended; staging out: j3.1:stage RELEASING"
    w.intents(NODE1)
    assert status.status_reason(w.model, job, w.now) == \
        "process ended; staging out: j3.1:stage RELEASING attempt 1"


def test_publish_list_gives_each_host_the_claims_it_can_reach(w):
    w.standalone("data")
    w.standalone("weights", access="ROX")
    w.standalone("ckpt")
    job = w.running(hosts=("h1", "h2"), scratch="1Gi", app="serve", claims=("data:ro", "weights", "ckpt:rw"))
    by_host = {h: {p["name"]: p for p in job_claims.publish_list(w.model, job, h)} for h in ("h1", "h2")}
    assert sorted(by_host["h1"]) == ["ckpt", "data", "kv-cache", "scratch", "weights"]
    assert sorted(by_host["h2"]) == ["ckpt", "data", "kv-cache", "weights"], "node-scope claims: first host only"
    one = by_host["h1"]
    assert (one["scratch"]["env"], one["scratch"]["claim"], one["scratch"]["form"]) == \
        ("XCE_SCRATCH", "j1.1:scratch", "template")
    assert (one["kv-cache"]["env"], one["kv-cache"]["claim"]) == ("XCE_CLAIM_KV_CACHE", "j1.1:kv-cache")
    assert {n: p["readonly"] for n, p in one.items()} == {
        "scratch": False, "kv-cache": False, "data": True, "weights": True, "ckpt": False}, \
        ":ro and ROX claims are published read-only"
    for host in ("h1", "h2"):
        for name in ("data", "weights", "ckpt"):
            claim = claims.live_by_name(w.model, "default", name)
            assert by_host[host][name]["path"] == f"/data/{host}/{claim.id}", "each host's own attachment path"
            assert by_host[host][name]["env"] == f"XCE_CLAIM_{name.upper()}"


def test_a_rox_claim_is_published_read_only_even_to_a_reference_that_says_rw(w):
    weights = w.standalone("weights", access="ROX")
    # submission refuses weights:rw; a job from a log written before it did may still say so
    w.commit([JobSubmitted(time=w.tick(), id=1, name="old", user="alice", project="default", queue="default",
                           command=["serve"], claim_refs=[{"claim_id": weights.id, "name": "weights", "mode": "rw"}])])
    job = w.model.jobs[1]
    w.allocate(job)
    w.make_ready(job)
    (published,) = job_claims.publish_list(w.model, job, "h1")
    assert (published["name"], published["readonly"]) == ("weights", True)


def test_a_submission_sent_again_with_its_request_id_is_the_same_job_and_survives_a_snapshot():
    w = World()
    spec = JobSpec(command=["true"], name="arr[1-3]", request_id="req-00001")
    facts, first = jobs.submit(w.model, ALICE, spec, w.now, CONFIG)
    w.commit(facts)
    again, same = jobs.submit(w.model, ALICE, spec, w.now, CONFIG)
    assert (again, same) == ([], first)  # nothing new: the first submission's job (an array's parent)
    # the same through the path the API takes (the job with its claims)
    assert job_claims.submit(w.model, ALICE, spec, JobClaimsSpec(), w.now, CONFIG) == ([], first)
    # another user's id is theirs alone; no id means a new job every time
    other, theirs = jobs.submit(w.model, ADMIN, spec, w.now, CONFIG)
    assert other and theirs != first
    w.commit(other)
    plain = JobSpec(command=["true"])
    assert jobs.submit(w.model, ALICE, plain, w.now, CONFIG)[0]
    # the index is rebuilt from the jobs: a standby or a restart finds the first job too
    rebuilt = Model.from_snapshot(w.model.to_snapshot())
    assert rebuilt == w.model
    assert jobs.submit(rebuilt, ALICE, spec, w.now, CONFIG) == ([], first)


def test_job_why_follows_a_node_scope_stage_in_and_stage_out_with_the_agents_reading(w):
    job = w.submit(stage_in=("/src/in.bin",), stage_out=("out.bin:/home/alice/out.bin",))
    w.allocate(job)
    w.run_agent(NODE1)  # node_prepare: the staging claim now copies in
    stage = w.claim_of(job, "stage")
    assert stage.op.kind is OpKind.STAGE_IN and job_claims.staging_claim(w.model, job) is stage
    w.intents(NODE1)
    reading = {"op_id": stage.op.op_id, "bytes": 3 * MiB, "total_bytes": 8 * MiB, "rate": 2 * MiB}
    assert status.status_reason(w.model, job, w.now, progress=reading) == "staging in: 3.0 MiB of 8.0 MiB, 2 MiB/s"
    stale = dict(reading, op_id="c0.stage_in.9")  # a reading of another op is not this one's
    assert status.status_reason(w.model, job, w.now, progress=stale).startswith(f"waiting for claim {stage.name}")
    w.report(NODE1, stage, stage.op.op_id)
    w.make_ready(job)
    w.start(job)
    assert job_claims.staging_claim(w.model, job) is None, "no transfer open while the job runs"
    w.commit(job_claims.report_finished(w.model, "h1", job.id, job.run, w.tick(), 0, None))
    assert job.state is JobState.STAGE_OUT and job_claims.staging_claim(w.model, job) is stage
    reading = {"op_id": stage.op.op_id, "bytes": 1 * MiB, "total_bytes": 4 * MiB, "rate": None}
    assert status.status_reason(w.model, job, w.now, progress=reading) == \
        "process ended; staging out: 1.0 MiB of 4.0 MiB"


def test_a_claim_listing_shows_what_its_reader_may_see_and_only_admins_list_retained_objects():
    w = World()
    mine = w.standalone("mine")
    other = w.standalone("theirs", project="other")
    seen = claims.listing_match(ALICE, None, None, False, retained=False)
    assert seen(mine) and not seen(other)  # alice is not of project "other"
    assert claims.listing_match(ADMIN, "other", None, False, retained=False)(other)
    assert not claims.listing_match(ADMIN, "other", None, False, retained=False)(mine)
    assert not claims.listing_match(ADMIN, None, {ClaimState.RELEASED}, False, retained=False)(mine)
    assert not claims.listing_match(ADMIN, None, None, False, retained=True)(mine)  # not released, not kept
    with pytest.raises(Forbidden, match="only admins list retained objects"):
        claims.listing_match(ALICE, None, None, False, retained=True)
