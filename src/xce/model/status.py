"""Where a job stands, in words: what ``xce job why``, ``xce job show`` and the job's document say.

The decisions are elsewhere and say *what* holds a job: the readiness gate
(``job_claims.blocker``), the staging claim made ahead of a run (``job_claims.early_claim``), the
transfer being followed (``job_claims.staging_claim``), the scheduler's pending reason.  Here
they become sentences, with a claim's state, attempts, next retry and last error, and, while a
transfer runs, how far it is (``progress``: the copying agent's latest reading, kept in the
leader's memory).  Nothing here decides anything: change the words without touching a decision.
"""

from __future__ import annotations

import time
from typing import Any

from xce.model import dependencies, job_claims
from xce.model.claims.agents import snapshot_first
from xce.model.entities.claims import AttachmentState, Claim, ClaimForm, ClaimState
from xce.model.entities.jobs import Job, JobState
from xce.model.entities.ops import Op, OpKind
from xce.model.state import State
from xce.units import format_transfer

__all__ = ["array_limit_reason", "blocking", "blocking_stage_out", "dependency_reason", "describe", "staging_text", "status_reason"]


def describe(claim: Claim, op: Op | None, last_error: str | None, state: str, where: str = "",
             now: float | None = None) -> str:
    """``j1.1:scratch PREPARING attempt 2, next retry in 4s: UNAVAILABLE: ...`` (``now``: say when a
    waiting retry comes)."""
    text = f"{claim.name} {state}{where}"
    if op is not None and op.attempts:
        text += f" attempt {op.attempts}"
    if op is not None and op.next_retry is not None and now is not None:
        text += f", next retry in {max(0.0, op.next_retry - now):.0f}s"
    if last_error:
        text += f": {last_error}"
    return text


def staging_text(claim: Claim, progress: dict[str, Any] | None, now: float | None = None) -> str:
    """``staging in: 1.2 GiB of 4.0 GiB, 310 MiB/s`` (``progress``: the agent's latest reading, kept in
    the leader's memory), else what the staging claim waits for."""
    verb = "populating" if claim.populate_from is not None and claim.form is ClaimForm.STANDALONE else \
        "staging out" if claim.op is not None and claim.op.kind is OpKind.STAGE_OUT else "staging in"
    if progress is not None and claim.op is not None and progress.get("op_id") == claim.op.op_id:
        text = f"{verb}: " + format_transfer(int(progress.get("bytes") or 0), progress.get("total_bytes"),
                                             progress.get("rate"))
        return text + (f" (attempt {claim.op.attempts})" if claim.op.attempts > 1 else "")
    if claim.state is ClaimState.FAILED:
        return f"{verb} failed: {claim.last_error}"
    return f"{verb}: " + describe(claim, claim.op, claim.last_error, claim.state.value, now=now)


def blocking(model: State, job: Job, now: float | None = None) -> str | None:
    """Why an allocated job cannot be dispatched yet, in words (None: the readiness gate is open,
    ``job_claims.blocker``).  With ``now``, a waiting retry says when it comes."""
    b = job_claims.blocker(model, job)
    if b is None:
        return None
    if b.kind == "templates":
        return f"run {job.run} lacks template claims it declared: it cannot start"
    if b.kind == "detached":
        return f"waiting for claim {b.claim_id} to be attached again"
    claim, a = b.claim, b.attachment
    assert claim is not None
    if a is not None:
        if (snap := snapshot_first(model, claim)) is not None and a.state is AttachmentState.ATTACHING:
            return f"claim {claim.name}: snapshot {snap.name} before re-attach ({snap.state.value}" + (
                f", attempt {snap.op.attempts}" if snap.op is not None and snap.op.attempts else "") + ")"
        return "waiting for claim " + describe(claim, a.op, a.last_error, a.state.value, f" on {a.host}", now)
    return "waiting for claim " + describe(claim, claim.op, claim.last_error, claim.state.value, now=now)


def status_reason(model: State, job: Job, now: float, scheduler_reason: str | None = None,
                  progress: dict[str, Any] | None = None) -> str | None:
    """Why a job is where it is, in words (``xce job why``): held, waiting for the scheduler (its
    word), staging in before allocation (``progress``: the agent's latest reading of its staging
    claim), waiting for a claim (the readiness gate), or staging out."""
    if job.state is JobState.STAGE_OUT:
        return blocking_stage_out(model, job, now, progress)
    # the scheduler's word is about waiting jobs (its idle reason, "no hosts are available", is not about a
    # finished one: a job shows the same document live and archived)
    reason = job.pending_reason or dependency_reason(model, job) or begin_reason(job, now) or \
        array_limit_reason(model, job) or (scheduler_reason if job.state in (JobState.PEND, JobState.PSUSP) else None)
    if job.state in (JobState.PEND, JobState.PSUSP) and not job.allocated and \
            (claim := job_claims.early_claim(model, job)) is not None and claim.state is not ClaimState.READY:
        staging = staging_text(claim, progress, now)
        return f"{job.pending_reason}; {staging}" if job.pending_reason else staging
    if job.state is JobState.PEND and job.allocated:
        reason = blocking(model, job, now) or reason  # the readiness gate names the claim
        claim = job_claims.staging_claim(model, job)
        if claim is not None and claim.state is ClaimState.PREPARING and claim.op is not None and \
                progress is not None and progress.get("op_id") == claim.op.op_id and \
                reason is not None and reason.startswith(f"waiting for claim {claim.name} "):
            reason = staging_text(claim, progress, now)  # the gate waits for its copy: how far it is
    if reason is None and job.state is JobState.PEND:
        reason = "waiting for the next scheduling cycle"
    return reason


def dependency_reason(model: State, job: Job) -> str | None:
    """Why ``job`` waits for its dependency, and which part of it does not hold (None: it does not wait)."""
    verdict = model.dependency_blocked.get(job.id)
    if verdict is None or job.dependency_tree is None:
        return None
    head = dependencies.NEVER_REASON if verdict == dependencies.Verdict.NEVER else \
        "dependency condition not satisfied"
    return f"{head}: {dependencies.unmet(model, job.dependency_tree)}"


def begin_reason(job: Job, now: float) -> str | None:
    """Why a pending job waits for its begin time (-b), in the controller's local time (None: it does not)."""
    if job.begin_time is None or job.begin_time <= now or job.state is not JobState.PEND or job.allocated:
        return None
    at = time.strftime("%Y-%m-%d %H:%M", time.localtime(job.begin_time))
    return f"begin time (-b) {at} not reached"


def array_limit_reason(model: State, job: Job) -> str | None:
    """Why a pending element of a limited array waits for its siblings (None: it does not)."""
    if job.array_limit is None or job.array_parent is None or job.state is not JobState.PEND or job.allocated:
        return None
    busy = len(model.array_busy.get(job.array_parent, ()))
    if busy < job.array_limit:
        return None
    return (f"array limit: at most {job.array_limit} elements of array {job.array_parent} at once "
            f"({busy} hold hosts)")


def blocking_stage_out(model: State, job: Job, now: float | None = None,
                       progress: dict[str, Any] | None = None) -> str:
    """What a job in STAGE_OUT waits for: its staging claim's copy out, and how far it is."""
    for claim in job_claims.run_claims(model, job):
        if claim.op is not None and claim.op.kind is OpKind.STAGE_OUT:
            if progress is not None and progress.get("op_id") == claim.op.op_id:
                return "process ended; " + staging_text(claim, progress, now)
            return "process ended; staging out: " + describe(claim, claim.op, claim.last_error,
                                                             ClaimState.RELEASING.value, now=now)
    return "process ended; staging out"
