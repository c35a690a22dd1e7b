"""Bounded history: which finished jobs and RELEASED claims leave the live model, and how they leave.

The live model holds live state.  A job that ended (DONE or EXIT) and a claim that was RELEASED
longer than ``[controller] keep_finished`` ago are *retired*: one ``RecordsRetired`` fact names
them, the store writes their whole documents (every field and their history) into its archive
tables in the same transaction as that fact, and its fold here drops them from the model and from
every index that names them.  Replay folds the same fact and drops the same records, so a snapshot
plus the tail still equals the live model, and snapshots stay proportional to live state.

What stays live, whatever its age (``retirable`` decides; the leader's retirement pass asks it):

- a job any live claim still names: a template claim of it that is not RELEASED (a stage-out that
  failed keeps its data in a FAILED claim), or an attachment of a standalone claim;
- every element of a job array while any element does: an array retires as a whole, in one fact,
  so ``xce jobs --array`` and its parent never see half of it (an array larger than the batch goes
  alone);
- a standalone claim a live job names (``--claim``): ``xce job show`` lists it;
- a RELEASED claim whose provider object was kept (reclaim ``retain``): admins list and purge it,
  and the orphan scan knows the object by it (it leaves once purged);
- a job's template claims stay while their job does, and retire with it (its ``job show`` lists
  them, from the archive then);
- a job that a waiting job's dependency names (``-w``, ``State.dependents``): its outcome is read
  when the dependency is judged again.

Where the documents go: before the leader folds a retirement it asks ``retiring`` for the records
the fold will drop, as the model holds them, and gives their documents to ``Store.append`` with the
fact.  A standby or a replay folds the same fact and writes nothing: the leader wrote them.
"""

from __future__ import annotations

from typing import Any

from xce.errors import Conflict, NotFound
from xce.model import dependencies, identity
from xce.model.facts import RecordsRetired
from xce.model.claims import Claim, ClaimForm, ClaimState, may_see, name_key
from xce.model.jobs import request_key
from xce.model.entities.identity import User
from xce.model.entities.jobs import Job
from xce.model.state import State
from xce.records import HistoryQuery, Usage, UsageQuery

#: records one retirement fact names at most (an array larger than this retires alone)
RETIRE_BATCH = 1000


def released_time(claim: Claim) -> float:
    """When the claim became RELEASED (its creation if its history does not say)."""
    times = [h["time"] for h in claim.history if h.get("state") == ClaimState.RELEASED.value]
    return max(times) if times else claim.created


def retirable(model: State, now: float, keep: float, limit: int = RETIRE_BATCH) -> RecordsRetired | None:
    """The records old and unreferenced enough to leave the live model now, at most about ``limit``
    of them (None: nothing to retire).  Pure: the leader commits what it returns.

    Jobs are taken oldest-finished first from ``model.finished_jobs``; the scan stops at the first
    job that ended after ``now - keep`` (finish order is end-time order on the live path; a job
    finished out of order waits for the next pass)."""
    cutoff = now - keep
    # what live claims name: a job's template claims, and jobs attached to standalone claims
    claims_of: dict[int, list[Claim]] = {}
    attached: set[int] = set()
    for c in model.claims.values():
        if c.job_id is not None and c.form is ClaimForm.TEMPLATE:
            claims_of.setdefault(c.job_id, []).append(c)
        for a in c.attachments:
            if a.job_id is not None:
                attached.add(a.job_id)

    def job_ok(job: Job | None) -> bool:
        if job is None or not job.finished or job.end_time is None or job.end_time > cutoff:
            return False
        if job.id in attached or job.id in model.dependents:  # a waiting job's dependency reads its outcome
            return False
        return all(c.state is ClaimState.RELEASED for c in claims_of.get(job.id, ()))

    jobs: list[int] = []
    seen_arrays: set[int] = set()
    for job_id in model.finished_jobs:
        if len(jobs) >= limit:
            break
        job = model.jobs.get(job_id)
        if job is None:
            continue
        if job.end_time is not None and job.end_time > cutoff:
            break
        if job.array_parent is None:
            if job_ok(job):
                jobs.append(job.id)
            continue
        parent = job.array_parent
        if parent in seen_arrays:
            continue
        seen_arrays.add(parent)
        elements = [model.jobs[i] for i in dependencies.array_elements(model, parent)]
        if elements and all(job_ok(e) for e in elements) and (not jobs or len(jobs) + len(elements) <= limit):
            jobs.extend(e.id for e in elements)
    retiring = set(jobs)
    claims = [c.id for j in jobs for c in claims_of.get(j, ())]
    if len(jobs) + len(claims) < limit:
        named: set[int] | None = None  # the claims live jobs name (--claim): a scan of every job, made once one may go
        for c in model.claims.values():
            if len(jobs) + len(claims) >= limit:
                break
            if c.state is not ClaimState.RELEASED or released_time(c) > cutoff:
                continue
            if c.retained or c.data_exists:
                continue  # its object is kept: listed (--retained), purged, and not an orphan while it is live
            if c.form is ClaimForm.TEMPLATE and c.job_id in model.jobs:
                continue  # it goes with its job
            if named is None:
                named = {r["claim_id"] for j in model.jobs.values() if j.claim_refs and j.id not in retiring
                         for r in j.claim_refs}
            if c.id in named:
                continue
            claims.append(c.id)
    if not jobs and not claims:
        return None
    return RecordsRetired(time=now, jobs=jobs, claims=sorted(set(claims)))


def retiring(model: State, f: RecordsRetired) -> tuple[list[Job], list[Claim]]:
    """The records folding ``f`` drops, as the model holds them before the fold: those it names that
    are here and finished (jobs) or RELEASED (claims).  Folds are total: an unknown or live one is
    left alone, the same on replay.  The leader writes these documents to the archive with the fact
    (``controller/archive.py`` ``add_retiring``)."""
    jobs = [j for i in dict.fromkeys(f.jobs) if (j := model.jobs.get(i)) is not None and j.finished]
    claims = [c for i in dict.fromkeys(f.claims)
              if (c := model.claims.get(i)) is not None and c.state is ClaimState.RELEASED]
    return jobs, claims


def apply_records_retired(model: State, f: RecordsRetired) -> None:
    """Drop the records ``retiring`` names and every index entry naming them."""
    jobs, claims = retiring(model, f)
    for job in jobs:
        job_id = job.id
        del model.jobs[job_id]
        model.finished_jobs.pop(job_id, None)
        if job.request_id is not None and model.job_requests.get(request_key(job.user, job.request_id)) == job_id:
            del model.job_requests[request_key(job.user, job.request_id)]
    names: set[str] = set()
    for claim in claims:
        claim_id = claim.id
        del model.claims[claim_id]
        model.open_ops.discard(claim_id)
        if claim.form is ClaimForm.STANDALONE:
            key = name_key(claim.project, claim.name)
            if model.released_names.get(key) == claim_id:
                names.add(key)
    if names:  # the newest released claim of that name is now an older live one, or none (as on a rebuild)
        for key in names:
            del model.released_names[key]
        for c in model.claims.values():
            if c.state is ClaimState.RELEASED and c.form is ClaimForm.STANDALONE:
                key = name_key(c.project, c.name)
                if key in names:
                    model.released_names[key] = max(c.id, model.released_names.get(key, 0))


def usage_of_job(job: Job) -> float:
    """Slot-seconds of the job's last run (0 if it never started)."""
    if job.start_time is None or job.end_time is None:
        return 0.0
    return max(0.0, job.end_time - job.start_time) * job.slots


def gpu_of_job(job: Job) -> float | None:
    """GPU-seconds of the job's last run: the GPUs it held on all its hosts times the seconds it ran
    (None: it held none, or never started)."""
    held = sum(len(ids) for ids in job.run_gpus.values())
    if not held or job.start_time is None or job.end_time is None:
        return None
    return max(0.0, job.end_time - job.start_time) * held


def cpu_of_job(job: Job) -> float | None:
    """User + system CPU seconds of the job's last run, as its worker measured them (None: not measured)."""
    u = job.usage or {}
    if u.get("cpu_user_s") is None and u.get("cpu_sys_s") is None:
        return None
    return float(u.get("cpu_user_s") or 0.0) + float(u.get("cpu_sys_s") or 0.0)


def job_columns(job: Job) -> dict[str, Any]:
    """The archive's indexed columns of a job."""
    return {"id": job.id, "user": job.user, "project": job.project, "queue": job.queue, "name": job.name,
            "state": job.state.value, "array_parent": job.array_parent, "slots": job.slots,
            "submit_time": job.submit_time, "start_time": job.start_time,
            "end_time": job.end_time if job.end_time is not None else 0.0, "cpu_seconds": cpu_of_job(job),
            "gpu_seconds": gpu_of_job(job)}


def may_see_job(actor: User, job: Job) -> bool:
    """Live or archived, a job is its owner's (and every admin's) to see."""
    return actor.is_admin or job.user == actor.name


def may_see_claim(actor: User, claim: Claim) -> bool:
    """Live or archived, the same rule (``claims.may_see``): a standalone claim is its project's
    members', a template claim its job's owner's, every claim every admin's."""
    return may_see(actor, claim)


def visible_archived_job(actor: User, job: Job | None, job_id: int) -> Job:
    """An archived job if ``actor`` may see it: 404 otherwise, worded as for a live job (``jobs.visible_job``)."""
    if job is None or not may_see_job(actor, job):
        raise NotFound(f"job {job_id} not found")
    return job


def archive_projects(actor: User, project: str | None) -> list[str] | None:
    """The projects in which ``actor`` may look an archived claim up by name (None: every project):
    ``project`` if they may see it, else their own (an admin's: all)."""
    if project is not None:
        return [project] if actor.is_admin or project in actor.projects else []
    return None if actor.is_admin else list(actor.projects)


def visible_archived_claim(actor: User, name: str, found: list[Claim]) -> Claim | None:
    """The archived claim called ``name`` that ``actor`` may see among ``found`` (None: none; the
    caller says it is not found, as for a live one).  Names are per project: in several, the
    caller must say which."""
    seen = [c for c in found if may_see_claim(actor, c)]
    if len(seen) > 1:
        raise Conflict(f"claim {name!r} exists in projects {', '.join(sorted(c.project for c in seen))}: "
                       f"say which (--project)", code="ambiguous")
    return seen[0] if seen else None


def visible_archived_claim_by_id(actor: User, claim: Claim | None, claim_id: int) -> Claim:
    """An archived claim if ``actor`` may see it: 404 otherwise, worded as for a live one."""
    if claim is None or not may_see_claim(actor, claim):
        raise NotFound(f"claim {claim_id} not found")
    return claim


def history_scope(actor: User, user: str | None, all_users: bool) -> str | None:
    """Whose jobs a history query reads: a user's own only; an admin's own unless they name a user
    or ask for everyone's (as ``GET /v1/jobs``)."""
    return identity.whose(actor, user, all_users, "users may read only their own history")


def live_history(model: State, query: HistoryQuery) -> list[Job]:
    """The finished jobs still live that match ``query`` (newest id first, at most ``query.limit``):
    what ``xce hist`` shows beside the archive until they are retired.

    It walks ``model.jobs`` newest first and stops at ``limit``, so a page costs the live jobs it
    passes rather than every finished job still live: sorting 20,000 of them held the event loop for
    50-110 ms per ``xce hist`` under bench/history.py."""
    states = set(query.states) if query.states else None

    def matches(job: Job) -> bool:
        end = job.end_time or 0.0
        return not ((query.before_id is not None and job.id >= query.before_id)
                    or (query.since is not None and end < query.since)
                    or (query.until is not None and end >= query.until)
                    or (query.user is not None and job.user != query.user)
                    or (query.project is not None and job.project != query.project)
                    or (query.name is not None and job.name != query.name)
                    or (states is not None and job.state.value not in states)
                    or (query.array_parent is not None and job.array_parent != query.array_parent))

    out: list[Job] = []
    for job_id in reversed(model.jobs):  # newest id first: see State.jobs
        if len(out) >= query.limit:
            break
        if job_id in model.finished_jobs and matches(job := model.jobs[job_id]):
            out.append(job)
    return out


def live_usage(model: State, query: UsageQuery) -> list[Usage]:
    """``Store.usage`` over what is still live: finished jobs and RELEASED claims not yet retired."""
    def inside(t: float) -> bool:
        return (query.since is None or t >= query.since) and (query.until is None or t < query.until)

    totals: dict[tuple[str, str], list[float]] = {}
    for job_id in model.finished_jobs:
        job = model.jobs.get(job_id)
        if job is None or not inside(job.end_time or 0.0) or (query.user is not None and job.user != query.user) \
                or (query.project is not None and job.project != query.project):
            continue
        t = totals.setdefault((job.project, job.user if query.by_user else ""), [0, 0.0, 0, 0.0, 0.0, 0.0])
        t[0] += 1
        t[1] += usage_of_job(job)
        t[4] += cpu_of_job(job) or 0.0
        t[5] += gpu_of_job(job) or 0.0
    for c in model.claims.values():
        if c.state is not ClaimState.RELEASED or (query.user is not None and c.owner != query.user) \
                or (query.project is not None and c.project != query.project):
            continue
        released = released_time(c)
        if not inside(released):
            continue
        t = totals.setdefault((c.project, c.owner if query.by_user else ""), [0, 0.0, 0, 0.0, 0.0, 0.0])
        t[2] += 1
        t[3] += c.size_bytes * (released - c.created)
    return [Usage(project=p, user=u, jobs=int(t[0]), slot_seconds=t[1], claims=int(t[2]), claim_byte_seconds=t[3],
                  cpu_seconds=t[4], gpu_seconds=t[5]) for (p, u), t in sorted(totals.items())]


def with_project_totals(rows: list[Usage]) -> list[Usage]:
    """Per-user rows (``by_user``) with each project's total row first."""
    out: list[Usage] = []
    for project in sorted({u.project for u in rows}):
        mine = [u for u in rows if u.project == project]
        out.append(Usage(project=project, jobs=sum(u.jobs for u in mine), slot_seconds=sum(u.slot_seconds for u in mine),
                         claims=sum(u.claims for u in mine), claim_byte_seconds=sum(u.claim_byte_seconds for u in mine),
                         cpu_seconds=sum(u.cpu_seconds for u in mine), gpu_seconds=sum(u.gpu_seconds for u in mine)))
        out += mine
    return out


def add_usage(a: list[Usage], b: list[Usage]) -> list[Usage]:
    out: dict[tuple[str, str], Usage] = {(u.project, u.user): u for u in a}
    for u in b:
        o = out.get((u.project, u.user))
        out[(u.project, u.user)] = u if o is None else Usage(
            project=u.project, user=u.user, jobs=o.jobs + u.jobs, slot_seconds=o.slot_seconds + u.slot_seconds,
            claims=o.claims + u.claims, claim_byte_seconds=o.claim_byte_seconds + u.claim_byte_seconds,
            cpu_seconds=o.cpu_seconds + u.cpu_seconds, gpu_seconds=o.gpu_seconds + u.gpu_seconds)
    return [out[k] for k in sorted(out)]
