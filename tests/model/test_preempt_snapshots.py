"""Snapshots on preemption (``xce.model.preempt_snapshots``), on models built from facts: a preempted run
opens exactly one snapshot of each ``--snapshot-on-preempt`` claim it had attached, taken once its
attachment is gone; the claim's next attach waits while it is being made, READY or FAILED for good;
runs that end otherwise open none; and the option is refused where it cannot hold."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ADMIN, CONFIG, PROVISIONER, RETRIES, World
from xce.errors import InvalidRequest
from xce.model import capabilities, claims, jobs, snapshots, status
from xce.model.claims import AttachmentState, ClaimState, OpKind
from xce.model.facts import JobKillRequested
from xce.model.jobs import Job, JobState
from xce.model.snapshots import SnapshotResult, SnapshotState

CAN = {"create_snapshot": True, "clone": True, "expand": False, "online_expand": False,
       "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}


class PreemptWorld(World):
    def __init__(self, can_snapshot: bool = True) -> None:
        super().__init__()
        self.commit(capabilities.report(self.model, CONFIG, PROVISIONER, PROVISIONER, "vol", "simfs",
                                        {**CAN, "create_snapshot": can_snapshot}, self.tick()))

    def ckpt(self, name: str = "ckpt", access: str = "RWO", on_preempt: bool = True) -> claims.Claim:
        return self.standalone(name, access=access, snapshot_on_preempt=on_preempt)

    def preempt(self, job: Job, preemptor: int = 99) -> None:
        """The applier's order (``jobs.preempt``'s fact), then the worker's word that the process ended."""
        self.commit([JobKillRequested(time=self.tick(), job_id=job.id, run=job.run, by=f"preemption for job {preemptor}",
                                      requeue=job.rerunnable, preemptor=preemptor)])
        self.commit(jobs.report_finished(self.model, job.hosts[0], job.id, job.run, self.tick(), None, 15))

    def snapshot_ops(self) -> list[int]:
        return [s.id for s, _ in snapshots.due_ops(self.model, PROVISIONER, self.tick())]

    def take_snapshot(self, ok: bool = True, retryable: bool = False) -> None:
        epoch = self.epoch(PROVISIONER)
        for snap, op in snapshots.due_ops(self.model, PROVISIONER, self.tick()):
            self.commit(snapshots.record_intent(self.model, PROVISIONER, epoch, op.op_id, snap.id, self.tick()))
            result = SnapshotResult(op_id=op.op_id, snapshot_id=snap.id, ok=ok, handle=f"snap-{snap.id}",
                                    size_bytes=snap.size_bytes, code="" if ok else "IO", message="disk full",
                                    retryable=retryable)
            self.commit(snapshots.record_result(self.model, RETRIES, PROVISIONER, epoch, result, self.tick()))

    def attach_ops_due(self, claim: claims.Claim) -> list[str]:
        return [op.op_id for c, op, a in claims.due_ops(self.model, PROVISIONER, self.tick())
                if c.id == claim.id and op.kind is OpKind.ATTACH]


@pytest.fixture
def w() -> PreemptWorld:
    return PreemptWorld()


def test_a_preempted_run_opens_one_snapshot_taken_after_its_detach_and_before_the_next_attach(w):
    ckpt = w.ckpt()
    job = w.running(rerunnable=True, claims=("ckpt",))
    w.preempt(job)
    assert job.state is JobState.PEND and job.run == 1
    [snap] = w.model.snapshots.values()
    assert (snap.name, snap.owner, snap.project, snap.claim_id, snap.state) == (
        f"ckpt-preempt-{job.id}-r1", ckpt.owner, ckpt.project, ckpt.id, SnapshotState.PENDING)
    assert ckpt.snapshot_before_attach == snap.id
    assert any(f"snapshot ckpt-preempt-{job.id}-r1 before it is attached again (preempted for job 99)" in h["reason"]
               for h in job.history)
    # the run's attachment is detaching: the snapshot is not handed out before its detach is done
    [a] = ckpt.attachments
    assert a.state is AttachmentState.DETACHING
    assert w.snapshot_ops() == []
    w.allocate(job)  # run 2, on the same host: its attach waits for the snapshot
    w.run_agent(PROVISIONER)  # the detach (the new run's attach is not handed out)
    assert [x.run for x in ckpt.attachments] == [2] and ckpt.attachments[0].state is AttachmentState.ATTACHING
    assert w.attach_ops_due(ckpt) == []
    assert status.blocking(w.model, job) == f"claim ckpt: snapshot ckpt-preempt-{job.id}-r1 before re-attach (PENDING)"
    assert w.snapshot_ops() == [snap.id]
    w.take_snapshot()
    assert snap.state is SnapshotState.READY
    assert any(f"snapshot ckpt-preempt-{job.id}-r1 of run 1 taken (READY)" in h["reason"] for h in job.history)
    assert len(w.attach_ops_due(ckpt)) == 1  # the gate opens
    w.make_ready(job)
    assert len(w.model.snapshots) == 1, "exactly one snapshot for one preemption"


def test_a_failed_snapshot_lets_the_claim_be_attached_again_and_the_job_says_so(w):
    ckpt = w.ckpt()
    job = w.running(rerunnable=True, claims=("ckpt",))
    w.preempt(job)
    w.run_agent(PROVISIONER)  # detached
    w.allocate(job)
    w.take_snapshot(ok=False, retryable=True)  # a retry waits: still gated
    [snap] = w.model.snapshots.values()
    assert snap.being_made and w.attach_ops_due(ckpt) == []
    w.now = snap.op.next_retry + 1
    w.take_snapshot(ok=False, retryable=True)  # the last attempt (max_attempts 3: the third)
    w.now = (snap.op.next_retry or w.now) + 1
    w.take_snapshot(ok=False, retryable=True)
    assert snap.state is SnapshotState.FAILED and snap.op is None
    assert any("FAILED" in h["reason"] and "attached again without it" in h["reason"] for h in job.history)
    assert len(w.attach_ops_due(ckpt)) == 1, "a failed snapshot never holds the claim back"
    w.make_ready(job)
    assert ckpt.state is ClaimState.READY


def test_a_preempted_job_that_cannot_rerun_is_killed_and_its_claim_snapshotted_too(w):
    w.ckpt()
    job = w.running(rerunnable=False, claims=("ckpt",))
    w.preempt(job)
    assert job.state is JobState.EXIT
    assert [s.name for s in w.model.snapshots.values()] == [f"ckpt-preempt-{job.id}-r1"]


def test_runs_that_end_otherwise_and_claims_without_the_option_open_none(w):
    w.ckpt()
    w.ckpt("plain", on_preempt=False)
    done = w.running(claims=("ckpt",))
    w.commit(jobs.report_finished(w.model, "h1", done.id, done.run, w.tick(), 0, None))
    killed = w.running(rerunnable=True, claims=("ckpt",))
    w.commit(jobs.kill(w.model, ADMIN, killed.id, w.tick(), requeue=True))
    w.commit(jobs.report_finished(w.model, "h1", killed.id, killed.run, w.tick(), None, 15))
    assert killed.state is JobState.PEND
    other = w.running(rerunnable=True, claims=("plain",))
    w.preempt(other)
    assert other.state is JobState.PEND
    assert w.model.snapshots == {}


def test_a_name_taken_already_gets_a_suffix(w):
    ckpt = w.ckpt()
    facts, _ = snapshots.create(w.model, CONFIG, ADMIN, "ckpt", "ckpt-preempt-3-r1", w.tick())
    w.commit(facts)
    assert snapshots.live_by_name(w.model, ckpt.project, "ckpt-preempt-3-r1") is not None
    from xce.model.preempt_snapshots import snapshot_name
    assert snapshot_name(w.model, ckpt.project, "ckpt", 3, 1) == "ckpt-preempt-3-r1.2"
    assert len(snapshot_name(w.model, ckpt.project, "c" * 63, 123456, 7)) <= 63


@pytest.mark.parametrize("access", ["RWX", "ROX", "RWOP"])
def test_the_option_is_refused_on_a_claim_that_is_not_rwo(w, access):
    with pytest.raises(InvalidRequest, match=f"--snapshot-on-preempt is for RWO claims .*not {access}"):
        w.ckpt(access=access)
    assert w.model.claims == {}


def test_the_option_is_refused_for_a_class_that_cannot_snapshot_or_is_node_local():
    w = PreemptWorld(can_snapshot=False)
    with pytest.raises(InvalidRequest, match="--snapshot-on-preempt: claim class 'vol' cannot take snapshots"):
        w.ckpt()
    with pytest.raises(InvalidRequest, match="--snapshot-on-preempt: claim class 'scratch' cannot take snapshots: "
                                             "it is node-local"):
        claims.create(w.model, CONFIG, ADMIN, claims.ClaimSpec(name="n", class_name="scratch", size="1Gi",
                                                               access_mode="RWO", hosts=("h1",),
                                                               snapshot_on_preempt=True), w.tick())
    assert w.model.claims == {}
