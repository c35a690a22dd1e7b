"""Claims in jobs: what a submission asks for, what an allocation makes, the readiness gate, and release.

A job uses two kinds of claims:

- **standalone** claims it references (``--claim ckpt:rw``), checked at
  submission; each run *attaches* them on every one of its hosts;
- **template** claims made for each run and released with it: ``--scratch``,
  the staging claim of ``--stage-in``/``--stage-out``, and the claims of an
  application profile (``--app``).  Node-scope ones live on the run's first
  host, prepared by that host's node agent; shared-scope ones are placed in a
  pool with the job and made by the provisioner.  (The job's workspace is
  the first template claim; the worker makes and removes it as the run's
  own start and cleanup, recorded in the job's facts.)

The plan applier's ``JobAllocated`` fact carries the new template claims and
attachments; its fold creates them here.  The job stays PEND, holding its
allocation, until every one is READY/ATTACHED (``blocker``): the readiness
gate.  A claim that fails for good ends the job (``fail_run``).  When the
run ends, ``release_for_run`` lets its claims go: template claims are
deleted (stage-out first), attachments detached.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.model import claims
from xce.model import jobs, preempt_snapshots
from xce.model.jobs import JobSpec, finish_after_stage_out
from xce.model.claims import (
    AccessMode, Attachment, AttachmentState, Claim, ClaimForm, ClaimState, Mode, ReplicaState, Scope,
)
from xce.model.entities.identity import User
from xce.model.entities.jobs import Job, JobState
from xce.model.facts import (
    AttachmentAdded, AttachmentRemoved, ClaimCreated, ClaimOpFailed, ClaimOpSucceeded, Fact, JobAllocated, JobFinished,
    JobProcessEnded, JobRequeued, JobSubmitted, ReplicaLost,
)
from xce.model.state import State
from xce.names import check_name
from xce.resreq import parse_resreq
from xce.transfers.locations import Location, TransferRefused, split_stage_in, split_stage_out
from xce.transfers.locations import resolve as resolve_location
from xce.units import parse_mem_limit, parse_size
from xce.wire import Submission

if TYPE_CHECKING:
    from xce.config import ClaimsConfig, Config

MAX_REFS = 32
MAX_STAGE_ITEMS = 64


@dataclass(frozen=True)
class JobClaimsSpec:
    """What a submission asks for, as the CLI sends it (paths already absolute where they must be)."""

    claims: tuple[str, ...] = ()  # NAME or NAME:rw / NAME:ro
    scratch: str | None = None  # SIZE or SIZE:CLASS
    # SRC or SRC:DEST (DEST relative to $XCE_STAGE); SRC an absolute path, a URL or REMOTE:path
    stage_in: tuple[str, ...] = ()
    # SRC:DEST (SRC relative to $XCE_STAGE); DEST an absolute path or a remote (URL or REMOTE:path)
    stage_out: tuple[str, ...] = ()
    stage_size: str | None = None  # room the staging area takes on the host (default: [claims] stage_size)
    app: str | None = None
    # the staging claim's class (default: [claims] stage_class).  A shared-scope class stages in while the
    # job waits in the queue, before its hosts are allocated (the provisioner copies; URLs and remotes only)
    stage_class: str | None = None


def env_name(name: str) -> str:
    """``XCE_CLAIM_<NAME>``: upper-cased, every other character ``_`` (so ``x-y``, ``x.y`` and ``x_y``
    meet: ``check_published`` refuses a job whose claims would)."""
    return "XCE_CLAIM_" + "".join(ch if ch.isalnum() else "_" for ch in name.upper())


def template_env(kind: str) -> str:
    """The variable a template claim is published as: ``$XCE_SCRATCH``, ``$XCE_STAGE``, or by its kind."""
    return {"scratch": "XCE_SCRATCH", "stage": "XCE_STAGE"}.get(kind) or env_name(kind)


def check_published(refs: list[dict[str, Any]], templates: list[dict[str, Any]]) -> None:
    """Every claim a job publishes needs its own mount point (``claims/<name>``) and its own variable:
    refuse a submission where two would meet, or a standalone claim would hide the job's own
    workspace, scratch or staging area."""
    for r in refs:
        if r["name"] in claims.RESERVED_NAMES:
            raise InvalidRequest(f"claim {r['name']} has a reserved name: it would hide the job's own {r['name']}")
    seen: dict[str, str] = {"workspace": "the workspace", "XCE_WORKSPACE": "the workspace"}
    published = [(t["kind"], template_env(t["kind"]), f"template claim {t['kind']}") for t in templates]
    published += [(r["name"], env_name(r["name"]), f"claim {r['name']}") for r in refs]
    for name, env, what in published:
        for key in (name, env):
            if key in seen:
                where = f"${key}" if key == env else f"the mount point claims/{key}"
                raise InvalidRequest(f"{what} and {seen[key]} would both be published as {where}: "
                                     f"rename one of them")
            seen[key] = what


def _split_last(text: str) -> tuple[str, str | None]:
    head, sep, tail = text.rpartition(":")
    return (head, tail) if sep else (text, None)


def _relative(path: str, what: str) -> str:
    norm = os.path.normpath(path)
    if not path or os.path.isabs(path) or norm == ".." or norm.startswith("../") or "\0" in path:
        raise InvalidRequest(f"{what} {path!r} must be a relative path inside the staging area")
    return norm


def _location(config: Config, project: str, text: str, what: str) -> Location:
    """A stage-in source or stage-out destination as the job's project may use it: a path, a public URL
    or a remote (``xce.transfers``); refused with the reason (403 when the project may not use it)."""
    try:
        return resolve_location(text, config.transfers, project, what)
    except TransferRefused as e:
        raise (Forbidden if e.forbidden else InvalidRequest)(e.message) from None


def stage_class_for(config: Config, spec: JobClaimsSpec, queue: str | None) -> tuple[str, str]:
    """The staging claim's class and where it came from: ``--stage-class``, else the ``--app`` profile's
    ``stage_class``, else the queue's, else ``[claims] stage_class``.  The most specific word wins: a
    profile says what a workload needs, a queue what a part of the cluster does."""
    if spec.stage_class:
        return spec.stage_class, "--stage-class"
    app = config.app(spec.app) if spec.app is not None else None
    if app is not None and app.stage_class:
        return app.stage_class, f"application profile {app.name}'s default"
    q = next((q for q in config.queues if q.name == queue), None)
    if q is not None and q.stage_class:
        return q.stage_class, f"queue {q.name}'s default"
    return config.claims.stage_class, "the site's default"


def resolve(model: State, config: Config, actor: User, project: str, spec: JobClaimsSpec,
            queue: str | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(standalone references, template claim specs) for ``JobSubmitted``; refuses what cannot work.
    ``queue``: the job's (its default staging class)."""
    if len(spec.claims) > MAX_REFS:
        raise InvalidRequest(f"at most {MAX_REFS} --claim references")
    refs: list[dict[str, Any]] = []
    for text in spec.claims:
        name, mode = _split_last(text)
        check_name("claim", name)
        claim = claims.live_by_name(model, project, name)  # a job uses its own project's claims
        if claim is None:
            raise NotFound(f"claim {name!r} not found in project {project!r} (--claim {text})")
        if mode is None:
            mode = "ro" if claim.access_mode is AccessMode.ROX else "rw"
        if mode not in tuple(Mode):
            raise InvalidRequest(f"--claim {text}: the mode is rw or ro")
        if mode == Mode.RW and claim.access_mode is AccessMode.ROX:
            raise InvalidRequest(f"claim {name!r} is ROX (read-only many): use --claim {name}:ro")
        if claim.delete_requested or claim.state in (ClaimState.RELEASING, ClaimState.FAILED):
            raise Conflict(f"claim {name!r} is {claim.state.value}"
                           + (" and being deleted" if claim.delete_requested else "") + ": it cannot be used")
        if any(r["claim_id"] == claim.id for r in refs):
            raise InvalidRequest(f"claim {name!r} is referenced twice")
        refs.append({"claim_id": claim.id, "name": name, "mode": mode})
    templates: list[dict[str, Any]] = []

    def add_template(kind: str, class_name: str, size: int, **extra: Any) -> None:
        cls = claims.class_or_404(config, class_name)
        claims.check_quota(model, config, project, class_name, size)
        claims.check_fits_a_pool(config, cls, size, f"template claim {kind!r}")
        # node scope: on the run's first host, its host counter; shared: the provisioner makes it in a pool
        templates.append({"kind": kind, "class": class_name, "size_bytes": size, "scope": cls.scope,
                          "counter": cls.counter if cls.scope == Scope.NODE else None,
                          "pools": list(cls.pools) if cls.scope == Scope.SHARED else [],
                          "stage_in": [], "stage_out": [], **extra})

    if spec.scratch is not None:
        size_text, class_name = _split_last(spec.scratch)
        add_template("scratch", class_name or config.claims.scratch_class, parse_size(size_text, "--scratch size"))
    if spec.stage_in or spec.stage_out:
        if len(spec.stage_in) + len(spec.stage_out) > MAX_STAGE_ITEMS:
            raise InvalidRequest(f"at most {MAX_STAGE_ITEMS} --stage-in/--stage-out items")
        ins = []
        for text in spec.stage_in:
            src, dest = split_stage_in(text)
            where = _location(config, project, src, "--stage-in source")
            ins.append([where.text, _relative(dest if dest else where.basename, "--stage-in destination")])
        outs = []
        for text in spec.stage_out:
            src, dest = split_stage_out(text)
            if dest is None:
                raise InvalidRequest("--stage-out SRC: give SRC:DEST, DEST an absolute path, a URL or REMOTE:path")
            where = _location(config, project, dest, "--stage-out destination")
            if where.kind == "url":
                raise InvalidRequest(f"--stage-out destination {where.text}: {where.scheme}:// URLs are read-only "
                                     "here: stage out to a path or a remote (xce transfers list)")
            outs.append([_relative(src, "--stage-out source"), where.text])
        class_name, origin = stage_class_for(config, spec, queue)
        cls = claims.class_or_404(config, class_name)
        size = parse_size(spec.stage_size if spec.stage_size is not None else config.claims.stage_size,
                          "--stage-size")
        claims.check_quota(model, config, project, cls.name, size)
        if cls.scope == Scope.SHARED:
            # staged while the job waits in the queue, by the provisioner: it reads and writes where the
            # project's remotes allow, never a path on a host (it would read them as itself, not the user)
            local = [x[0] for x in ins if x[0].startswith("/")] + [x[1] for x in outs if x[1].startswith("/")]
            if local:
                raise InvalidRequest(f"staging class {cls.name!r} ({origin}) is shared: it stages from and to URLs "
                                     f"and remotes only, before hosts are allocated ({local[0]} is a path: use a "
                                     "node-scope staging class for paths, --stage-class CLASS)")
            claims.check_fits_a_pool(config, cls, size, "the staging claim")
            templates.append({"kind": "stage", "class": cls.name, "size_bytes": size, "scope": Scope.SHARED.value,
                              "counter": None, "pools": list(cls.pools), "stage_in": ins, "stage_out": outs,
                              "early": True})
        else:
            # staged bytes take room on the host: reserved on the class's counter (its scratch), and the
            # node agent refuses a stage-in larger than this before it copies anything
            templates.append({"kind": "stage", "class": cls.name, "size_bytes": size, "scope": Scope.NODE.value,
                              "counter": cls.counter, "pools": [], "stage_in": ins, "stage_out": outs})
    elif spec.stage_size is not None:
        raise InvalidRequest("--stage-size needs --stage-in or --stage-out")
    elif spec.stage_class is not None:
        raise InvalidRequest("--stage-class needs --stage-in or --stage-out")
    if spec.app is not None:
        app = config.app(spec.app)
        if app is None:
            known = ", ".join(a.name for a in config.apps) or "none configured"
            raise NotFound(f"application profile {spec.app!r} does not exist (profiles: {known})")
        for c in app.claims:
            add_template(c.name, c.claim_class, parse_size(c.size, "size"))
    check_published(refs, templates)
    return refs, templates


def pool_needs(templates: list[dict[str, Any]]) -> tuple[tuple[str, tuple[str, ...], int], ...]:
    """(kind, candidate pools, size) of the run's shared template claims, for the scheduler."""
    return tuple((t["kind"], tuple(t.get("pools") or ()), t["size_bytes"]) for t in templates
                 if t.get("scope") == Scope.SHARED and not t.get("early"))  # (early ones are placed on their own)


def node_counters(templates: list[dict[str, Any]]) -> dict[str, float]:
    """Host counters the run's template claims draw on (reserved on its first host)."""
    out: dict[str, float] = {}
    for t in templates:
        if t.get("counter"):
            out[t["counter"]] = out.get(t["counter"], 0.0) + t["size_bytes"]
    return out


# ---------------------------------------------------------------- jobs meet claims: decisions


def request_specs(request: Submission) -> tuple[JobSpec, JobClaimsSpec]:
    """What a submission (``POST /v1/jobs``, ``xce.wire.Submission``) asks of the job and of its claims,
    in the model's terms (``-M`` in bytes: ``InvalidRequest`` if it is not a size)."""
    spec = JobSpec(command=list(request.command), name=request.name, queue=request.queue, project=request.project,
                   slots=request.slots, resreq=request.resreq, cwd=request.cwd, stdout=request.stdout,
                   stderr=request.stderr, rerunnable=request.rerunnable, held=request.hold,
                   request_id=request.request_id, mem_limit=parse_mem_limit(request.mem_limit),
                   shell=request.shell, script=request.script, submit_dir=request.submit_dir,
                   env=dict(request.env) if request.env else None, env_all=request.env_all,
                   dependency=request.dependency, terminate_orphan=request.terminate_orphan,
                   run_limit=request.run_limit, run_estimate=request.run_estimate,
                   warning_action=request.warning_action, warning_time=request.warning_time,
                   user_priority=request.user_priority, begin_time=request.begin_time, exclusive=request.exclusive,
                   requeue_exit=request.requeue_exit, pre_exec=request.pre_exec, post_exec=request.post_exec,
                   gpu=request.gpu)
    claims = JobClaimsSpec(claims=request.claims, scratch=request.scratch, stage_in=request.stage_in,
                           stage_out=request.stage_out, stage_size=request.stage_size, app=request.app,
                           stage_class=request.stage_class)
    return spec, claims


def submit(model: State, actor: User, spec: JobSpec, claims: JobClaimsSpec, now: float,
           config: Config) -> tuple[list[Fact], int]:
    """``xce submit`` with its claims: the job's checks (``jobs.submit``), the claims resolved in the
    job's project."""
    def resolve_in(project: str, queue: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
        if claims == JobClaimsSpec():
            return [], [], None
        refs, templates = resolve(model, config, actor, project, claims, queue)
        check_one_host(model, refs, spec)
        return refs, templates, claims.app

    facts, job_id = jobs.submit(model, actor, spec, now, config, claims=resolve_in)
    if not facts:  # OBSERVATION: a retry of a submission already made (its request id): nothing new
        return facts, job_id
    return facts + early_claims(model, facts[0], now), job_id


def check_one_host(model: State, refs: list[dict[str, Any]], spec: JobSpec) -> None:
    """An RWO claim is read and written on one host at a time: a job whose request spreads it over
    several (``-n 4 -R "span[ptile=2]"``) cannot have one, and is told so rather than squeezed onto one."""
    rr = parse_resreq(spec.resreq)  # (jobs.submit checked it)
    if rr.ptile is None or spec.slots <= rr.ptile:
        return
    for ref in refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is not None and claim.access_mode is AccessMode.RWO:
            hosts = -(-spec.slots // rr.ptile)
            raise InvalidRequest(f"claim {ref['name']!r} is RWO (read-write on one host at a time): a job on "
                                 f"{hosts} hosts (-n {spec.slots} with span[ptile={rr.ptile}]) cannot use it; use "
                                 "an RWX or ROX claim, or keep the job on one host (span[hosts=1])")


def early_fact(job_id: int, user: str, project: str, run: int, t: dict[str, Any], claim_id: int,
               now: float) -> ClaimCreated:
    """The ``ClaimCreated`` of a job's shared staging claim for its run ``run``, made before that run is
    allocated: PENDING and unplaced, the scheduler places it in a pool as it places standalone claims."""
    return ClaimCreated(time=now, claim_id=claim_id, name=claims.template_name(job_id, run, t["kind"]),
                        form=ClaimForm.TEMPLATE.value, class_name=t["class"], scope=Scope.SHARED.value,
                        size_bytes=t["size_bytes"], access_mode=AccessMode.RWX.value,
                        reclaim_policy=claims.ReclaimPolicy.DELETE.value, owner=user, project=project, job_id=job_id,
                        run=run, kind=t["kind"], stage_in=[list(x) for x in t["stage_in"]],
                        stage_out=[list(x) for x in t["stage_out"]], early=True)


def early_claims(model: State, submitted: Fact, now: float) -> list[ClaimCreated]:
    """A submission's shared staging claims (one per job of an array), made with it: staged in while the
    jobs wait in the queue (the same ``ClaimCreated`` fact and fold as every claim)."""
    if not isinstance(submitted, JobSubmitted):
        return []
    early = [t for t in submitted.templates if t.get("early")]
    if not early:
        return []
    ids = [submitted.id + i for i in range(len(submitted.array_indices))] or [submitted.id]
    out: list[ClaimCreated] = []
    for job_id in ids:
        for t in early:
            out.append(early_fact(job_id, submitted.user, submitted.project, 1, t, model.next_claim_id + len(out),
                                  now))
    return out


def stages_out(model: State, job: Job) -> bool:
    """Does the run copy files out of its staging claim after its process ends?"""
    return any(c.stage_out for c in run_claims(model, job))


def report_finished(model: State, host: str, job_id: int, run: int, now: float, exit_code: int | None,
                    signal: int | None, reason: str = "", usage: dict[str, Any] | None = None,
                    pre_exec_failed: bool = False, post_exec_exit: int | None = None) -> list[Fact]:
    """A worker says a run's process ended (``jobs.report_finished``, told whether it stages out)."""
    job = model.jobs.get(job_id)
    return jobs.report_finished(model, host, job_id, run, now, exit_code, signal, reason,
                                stages_out=job is not None and stages_out(model, job), usage=usage,
                                pre_exec_failed=pre_exec_failed, post_exec_exit=post_exec_exit)


def report_lost(model: State, host: str, job_id: int, run: int, now: float, reason: str,
                usage: dict[str, Any] | None = None) -> list[Fact]:
    """A worker no longer knows how a run ended, or its shepherd fenced it (``jobs.report_lost``, told
    whether it stages out)."""
    job = model.jobs.get(job_id)
    return jobs.report_lost(model, host, job_id, run, now, reason,
                            stages_out=job is not None and stages_out(model, job), usage=usage)


def host_lost(model: State, host: str, now: float) -> list[Fact]:
    """A host is lost: its jobs end or are requeued (``jobs.host_lost``), and every attachment on it is
    fenced (removed): the host can no longer write, so an RWO/RWOP claim may be used elsewhere.
    Template claims on it wait for it to come back; node-local claims' READY replicas on it are LOST
    until it does, and its worker has checked them."""
    out = jobs.host_lost(model, host, now)
    for claim in model.claims.values():
        for a in claim.attachments:
            if a.host == host:
                out.append(AttachmentRemoved(time=now, claim_id=claim.id, attachment_id=a.id,
                                             by=f"host {host} lost: fenced"))
        if claim.replicated and (r := claim.replica_on(host)) is not None and r.state is ReplicaState.READY:
            out.append(ReplicaLost(time=now, claim_id=claim.id, host=host))  # unused until checked on its return
    return out


# ---------------------------------------------------------------- jobs meet claims: folds


def apply_job_allocated(model: State, f: JobAllocated) -> None:
    if (job := jobs.apply_job_allocated(model, f)) is not None:
        on_allocated(model, job, f)


def apply_job_finished(model: State, f: JobFinished) -> None:
    if (job := jobs.apply_job_finished(model, f)) is not None:
        release_for_run(model, job, f.time, host_lost=f.host_lost)
        preempt_snapshots.take(model, job, f.time)
        release_early(model, job, f.time)


def apply_job_requeued(model: State, f: JobRequeued) -> None:
    if (job := jobs.apply_job_requeued(model, f)) is not None:
        release_for_run(model, job, f.time, host_lost=f.host_lost)
        preempt_snapshots.take(model, job, f.time)
        restage_early(model, job, f.time)


def release_early(model: State, job: Job, time: float) -> None:
    """The job is over before its next run was allocated: the staging claim made ahead for it goes."""
    claim = model.claims.get(job.early_claim) if job.early_claim is not None else None
    job.early_claim = None
    if claim is not None and claim.job_id == job.id and claim.state is not ClaimState.RELEASED:
        claims.release_template(model, claim, time, f"job {job.display_id} ended before run {claim.run} was allocated")


def restage_early(model: State, job: Job, time: float) -> None:
    """A requeued job stages in again for its next run, before that run's hosts are held: its new
    staging claim is made here, in the requeue's fold (its id is the model's next: the same on replay),
    through the same fold as every claim."""
    if job.early_claim is not None:
        return
    for t in job.templates:
        if t.get("early"):
            apply_claim_created(model, early_fact(job.id, job.user, job.project, job.run + 1, t, model.next_claim_id,
                                                  time))


def apply_job_process_ended(model: State, f: JobProcessEnded) -> None:
    if (job := jobs.apply_job_process_ended(model, f)) is not None and start_stage_out(model, job, f.time):
        jobs.begin_stage_out(model, job, f.time)


# ---------------------------------------------------------------- allocation (folded from JobAllocated)


def template_fact(job: Job, run: int, hosts: list[str], t: dict[str, Any], now: float) -> ClaimCreated:
    """The ``ClaimCreated`` of one of a run's template claims (``t``: the job's template spec, with the
    ``claim_id`` and ``pool`` the plan applier decided)."""
    shared = t.get("scope") == Scope.SHARED
    return ClaimCreated(time=now, claim_id=t["claim_id"], name=claims.template_name(job.id, run, t["kind"]),
                        form=ClaimForm.TEMPLATE.value, class_name=t["class"],
                        scope=(Scope.SHARED if shared else Scope.NODE).value, size_bytes=t["size_bytes"],
                        access_mode=(AccessMode.RWX if shared else AccessMode.RWO).value,
                        reclaim_policy=claims.ReclaimPolicy.DELETE.value, owner=job.user, project=job.project,
                        job_id=job.id, run=run, kind=t["kind"], host=None if shared or not hosts else hosts[0],
                        pool=t.get("pool"), stage_in=[list(x) for x in t["stage_in"]],
                        stage_out=[list(x) for x in t["stage_out"]])


def apply_claim_created(model: State, f: ClaimCreated) -> None:
    """A claim is made (``claims``' fold); a run's template claim joins its run."""
    if not claims.apply_claim_created(model, f) or f.job_id is None or f.run is None:
        return  # (a template claim whose id was taken never joins: ``blocker`` then holds the run back)
    job = model.jobs.get(f.job_id)
    if f.early:  # made ahead for the job's next run: it joins that run when its hosts are allocated
        if job is not None and job.run + 1 == f.run and not job.finished:
            job.early_claim = f.claim_id
        return
    if job is not None and job.run == f.run and f.claim_id not in job.run_claims:
        job.run_claims.append(f.claim_id)


def on_allocated(model: State, job: Job, f: JobAllocated) -> None:
    """A new run: its attachments (ids decided by the plan applier).  Its template claims follow as
    ``ClaimCreated`` facts; logs written before they did carry them in ``f.templates``."""
    job.run_claims = []
    job.run_attachments = []
    early = model.claims.get(job.early_claim) if job.early_claim is not None else None
    if early is not None and (early.job_id, early.run) == (job.id, f.run):
        job.run_claims.append(early.id)  # staged in already (the plan applier checked it is READY)
    job.early_claim = None
    for t in f.templates:
        apply_claim_created(model, template_fact(job, f.run, list(f.hosts), t, f.time))
    for a in f.attachments:
        claims.apply_attachment_added(model, AttachmentAdded(time=f.time, claim_id=a["claim_id"],
                                                             attachment_id=a["attachment_id"], host=a["host"],
                                                             mode=a["mode"], by=job.user, job_id=job.id, run=f.run))
        job.run_attachments.append([a["claim_id"], a["attachment_id"]])


def plan_claims(job: Job, run: int, hosts: list[str], next_claim: int, next_attachment: int,
                pools: dict[str, str], now: float) -> tuple[list[ClaimCreated], list[dict[str, Any]]]:
    """What a new run of ``job`` on ``hosts`` gets: its template claims (``ClaimCreated`` facts, to
    follow its ``JobAllocated``) and its attachments (in ``JobAllocated``); ``pools`` places its
    shared template claims (kind -> pool, chosen by the scheduler)."""
    made = [t for t in job.templates if not t.get("early")]  # (early ones exist already: staged in)
    templates = [template_fact(job, run, hosts, dict(t, claim_id=next_claim + i, pool=pools.get(t["kind"])), now)
                 for i, t in enumerate(made)]
    attachments: list[dict[str, Any]] = []
    for ref in job.claim_refs:
        for host in hosts:
            attachments.append({"attachment_id": next_attachment + len(attachments), "claim_id": ref["claim_id"],
                                "host": host, "mode": ref["mode"]})
    return templates, attachments


def early_claim(model: State, job: Job) -> Claim | None:
    """The job's shared staging claim made ahead for its next run (None: it has none)."""
    claim = model.claims.get(job.early_claim) if job.early_claim is not None else None
    return claim if claim is not None and (claim.job_id, claim.run) == (job.id, job.run + 1) else None


def staging_claim(model: State, job: Job) -> Claim | None:
    """The claim whose transfer ``xce job why`` follows: the shared staging claim made ahead of the
    next run, else the current run's staging claim while a stage-in or stage-out op is open."""
    early = early_claim(model, job)
    if early is not None:
        return early
    return next((c for c in run_claims(model, job) if c.kind == "stage" and c.op is not None
                 and c.op.kind in (claims.OpKind.STAGE_IN, claims.OpKind.STAGE_OUT)), None)


def early_blocking(model: State, job: Job) -> str | None:
    """Why a job that stages in before allocation may not be allocated yet (None: its data is in, or it
    stages nothing early): the scheduler's gate, re-checked by the plan applier."""
    if not any(t.get("early") for t in job.templates):
        return None
    claim = early_claim(model, job)
    if claim is None:
        return "its staging claim is missing: it cannot start"
    if claim.state is not ClaimState.READY or claim.delete_requested:
        return f"staging in: claim {claim.name} is {claim.state.value}"
    return None


def unusable_ref(model: State, job: Job) -> str | None:
    """Why a referenced standalone claim cannot be attached now (the plan applier's re-check)."""
    for ref in job.claim_refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is None or claim.state is not ClaimState.READY or claim.delete_requested:
            state = "gone" if claim is None else "being deleted" if claim.delete_requested else claim.state.value
            return f"claim {ref['name']} is {state}"
    return None


def unreachable(model: State, job: Job, hosts: list[str] | tuple[str, ...]) -> str | None:
    """Why a referenced node-local claim cannot be used on ``hosts``: its jobs go only where it has a READY
    replica (the plan applier's re-check of the scheduler's view)."""
    for ref in job.claim_refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is None or not claim.replicated:
            continue
        ready = claim.ready_hosts()
        if far := [h for h in hosts if h not in ready]:
            return (f"claim {ref['name']} has no READY replica on {', '.join(far)} (READY on "
                    f"{', '.join(ready) or 'no host'})")
    return None


# ---------------------------------------------------------------- the readiness gate


def run_claims(model: State, job: Job) -> list[Claim]:
    """The current run's template claims: only those made for this job's run (a job never touches a
    claim it was not allocated, whatever ids its lists hold)."""
    out = []
    for claim_id in job.run_claims:
        claim = model.claims.get(claim_id)
        if claim is not None and claim.form is ClaimForm.TEMPLATE and (claim.job_id, claim.run) == (job.id, job.run):
            out.append(claim)
    return out


def _attachment(model: State, job: Job, claim_id: int, attachment_id: int) -> tuple[Claim, Attachment] | None:
    """Claim ``claim_id`` and its attachment ``attachment_id`` for the job's run (None: gone, or not
    this run's)."""
    claim = model.claims.get(claim_id)
    if claim is None:
        return None
    a = next((a for a in claim.attachments if a.id == attachment_id), None)
    if a is None or (a.job_id, a.run) != (job.id, job.run):
        return None
    return claim, a


@dataclass(frozen=True)
class Blocker:
    """What the readiness gate of an allocated run waits for (``status.blocking`` words it)::

        templates    the run lacks a template claim it declared: it never starts
        claim        a template claim of the run is not READY (``claim``)
        attachment   an attachment of the run is not ATTACHED (``claim``, ``attachment``)
        detached     an attachment the run had is gone (``claim_id``: its claim)
    """

    kind: Literal["templates", "claim", "attachment", "detached"]
    claim: Claim | None = None
    attachment: Attachment | None = None
    claim_id: int | None = None


def blocker(model: State, job: Job) -> Blocker | None:
    """What an allocated job waits for before it is dispatched (None: every claim is ready: dispatch
    it): the readiness gate.  A run missing any template claim it declared is never dispatched."""
    if len(run_claims(model, job)) != len(job.templates):
        return Blocker("templates")
    for claim in run_claims(model, job):
        if claim.state is not ClaimState.READY:
            return Blocker("claim", claim=claim)
    for claim_id, attachment_id in job.run_attachments:
        found = _attachment(model, job, claim_id, attachment_id)
        if found is None:
            return Blocker("detached", claim_id=claim_id)
        claim, a = found
        if a.state is not AttachmentState.ATTACHED:
            return Blocker("attachment", claim=claim, attachment=a)
    return None


JobEnd = JobFinished | JobRequeued  # what a failed claim or stage-out decides for its job's run


def fail_run(model: State, job_id: int | None, run: int | None, what: str, now: float) -> list[JobEnd]:
    """A claim of an allocated, not yet started run failed for good: the job ends (or is requeued)."""
    job = model.jobs.get(job_id) if job_id is not None else None
    if job is None or job.run != run or job.state is not JobState.PEND or not job.alloc_slots:
        return []
    if job.rerunnable:
        return [JobRequeued(time=now, job_id=job.id, run=job.run, reason=f"{what}: requeued")]
    return [JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value, reason=what)]


def agent_report(model: State, cfg: ClaimsConfig, agent: str, epoch: int, results: list[claims.OpResult], now: float,
                 rng: random.Random) -> tuple[list[Fact], dict[str, str]]:
    """An agent's report on its ops: the facts of each result, and what each means for the job its
    claim serves (one decision a job); ``refused`` says why an op's result was not taken."""
    facts: list[Fact] = []
    refused: dict[str, str] = {}
    jobs_decided: set[int] = set()
    for r in results:
        try:
            outcome = claims.record_result(model, cfg, agent, epoch, r, now, rng)
        except Conflict as e:
            refused[r.op_id] = e.message
            continue
        facts += outcome
        for fact in outcome:
            for f in consequences(model, r.claim_id, r.op_id, fact, now):
                if f.job_id not in jobs_decided:
                    jobs_decided.add(f.job_id)
                    facts.append(f)
    return facts, refused


def consequences(model: State, claim_id: int, op_id: str, result: Fact, now: float) -> Sequence[JobEnd]:
    """What an op's result means for the job it serves (decided before ``result`` is folded)."""
    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    if claim is None or found is None:
        return []
    op, a = found
    if isinstance(result, ClaimOpSucceeded):
        if a is None and op.kind is claims.OpKind.STAGE_OUT and claim.job_id is not None:
            return finish_after_stage_out(model, claim.job_id, claim.run, None, now)
        return []
    if not isinstance(result, ClaimOpFailed) or result.next_retry is not None:
        return []
    error = f"{result.code}: {result.message}"
    if a is not None:
        if op.kind is claims.OpKind.ATTACH:
            return fail_run(model, a.job_id, a.run, f"claim {claim.name} could not be attached on {a.host}: {error}",
                            now)
        return []
    if op.kind is claims.OpKind.STAGE_OUT and claim.job_id is not None:
        return finish_after_stage_out(model, claim.job_id, claim.run, f"stage-out failed: {error}", now)
    if op.kind in (claims.OpKind.CREATE, claims.OpKind.STAGE_IN) and claim.form is ClaimForm.TEMPLATE:
        what = "stage-in failed" if op.kind is claims.OpKind.STAGE_IN else f"claim {claim.name} failed"
        job = model.jobs.get(claim.job_id) if claim.job_id is not None else None
        if job is not None and job.early_claim == claim.id and not job.allocated and not job.finished:
            # staged before allocation: the job holds nothing; it ends (a requeue would stage the same again)
            return [JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value,
                                reason=f"{what}: {error}")]
        return fail_run(model, claim.job_id, claim.run, f"{what}: {error}", now)
    return []


# ---------------------------------------------------------------- the end of a run (fold helpers)


def start_stage_out(model: State, job: Job, time: float) -> bool:
    """The process ended: stage-out begins (True) if the run has a staging claim with items to copy."""
    for claim in run_claims(model, job):
        if claim.stage_out and claim.state is ClaimState.READY:
            claims.begin_stage_out(model, claim, time)
            return True
    return False


def release_for_run(model: State, job: Job, time: float, host_lost: bool = False) -> None:
    """The run is over: its template claims go (unless a failed stage-out keeps one), attachments detach."""
    for claim in run_claims(model, job):
        if claim.keep or claim.state is ClaimState.RELEASED:
            continue
        if host_lost and claim.stage_out and claim.data_exists:
            claims.keep_data(model, claim, time, f"host {claim.host} lost before stage-out: the data is kept there")
            continue
        claims.release_template(model, claim, time, f"job {job.display_id} run {job.run} ended")
    for claim_id, attachment_id in job.run_attachments:
        if (found := _attachment(model, job, claim_id, attachment_id)) is not None:
            claims.detach(model, *found, time)
    # the lists stay (xce job show lists what the run had) until the next run's allocation


def publish_list(model: State, job: Job, host: str) -> list[dict[str, Any]]:
    """What the worker publishes into the run's sandbox on ``host``: each claim's data path, the name
    the job knows it by, its environment variable, and whether it is read-only."""
    out = []
    for claim in run_claims(model, job):
        if claim.scope is Scope.NODE and claim.host != host:
            continue  # node-scope claims live on the run's first host; shared ones are reachable anywhere
        env = template_env(claim.kind)
        out.append({"name": claim.kind, "claim": claim.name, "env": env, "path": claim.path, "readonly": False,
                    "form": "template"})
    for claim_id, attachment_id in job.run_attachments:
        found = _attachment(model, job, claim_id, attachment_id)
        if found is None or found[1].host != host:
            continue
        claim, a = found
        readonly = a.mode is Mode.RO or claim.access_mode is AccessMode.ROX
        out.append({"name": claim.name, "claim": claim.name, "env": env_name(claim.name), "path": a.path,
                    "readonly": readonly, "form": "standalone"})
    return out
