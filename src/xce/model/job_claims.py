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
allocation, until every one is READY/ATTACHED (``blocking``): the readiness
gate.  A claim that fails for good ends the job (``fail_run``).  When the
run ends, ``release_for_run`` lets its claims go: template claims are
deleted (stage-out first), attachments detached.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xce.errors import Conflict, InvalidRequest, NotFound
from xce.model import claims as C
from xce.model import facts as F
from xce.model.claims import AccessMode, AttachmentState, Claim, ClaimForm, ClaimState
from xce.model.facts import Fact
from xce.names import check_name
from xce.units import parse_size

if TYPE_CHECKING:
    from xce.config import Config
    from xce.model.identity import User
    from xce.model.jobs import Job
    from xce.model.state import Model

MAX_REFS = 32
MAX_STAGE_ITEMS = 64


@dataclass(frozen=True)
class JobClaimsSpec:
    """What a submission asks for, as the CLI sends it (paths already absolute where they must be)."""

    claims: tuple[str, ...] = ()  # NAME or NAME:rw / NAME:ro
    scratch: str | None = None  # SIZE or SIZE:CLASS
    stage_in: tuple[str, ...] = ()  # SRC (absolute) or SRC:DEST (DEST relative to $XCE_STAGE)
    stage_out: tuple[str, ...] = ()  # SRC (relative to $XCE_STAGE) or SRC:DEST (DEST absolute)
    stage_size: str | None = None  # room the staging area takes on the host (default: [claims] stage_size)
    app: str | None = None


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
        if r["name"] in C.RESERVED_NAMES:
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


def _absolute(path: str, what: str) -> str:
    if not path or not os.path.isabs(path) or "\0" in path:
        raise InvalidRequest(f"{what} {path!r} must be an absolute path")
    return os.path.normpath(path)


def resolve(model: Model, config: Config, actor: User, project: str, spec: JobClaimsSpec) -> tuple[list, list]:
    """(standalone references, template claim specs) for ``JobSubmitted``; refuses what cannot work."""
    if len(spec.claims) > MAX_REFS:
        raise InvalidRequest(f"at most {MAX_REFS} --claim references")
    refs: list[dict[str, Any]] = []
    for text in spec.claims:
        name, mode = _split_last(text)
        check_name("claim", name)
        claim = C.live_by_name(model, project, name)  # a job uses its own project's claims
        if claim is None:
            raise NotFound(f"claim {name!r} not found in project {project!r} (--claim {text})")
        if mode is None:
            mode = "ro" if claim.access_mode is AccessMode.ROX else "rw"
        if mode not in ("rw", "ro"):
            raise InvalidRequest(f"--claim {text}: the mode is rw or ro")
        if mode == "rw" and claim.access_mode is AccessMode.ROX:
            raise InvalidRequest(f"claim {name!r} is ROX (read-only many): use --claim {name}:ro")
        if claim.delete_requested or claim.state in (ClaimState.RELEASING, ClaimState.FAILED):
            raise Conflict(f"claim {name!r} is {claim.state.value}"
                           + (" and being deleted" if claim.delete_requested else "") + ": it cannot be used")
        if any(r["claim_id"] == claim.id for r in refs):
            raise InvalidRequest(f"claim {name!r} is referenced twice")
        refs.append({"claim_id": claim.id, "name": name, "mode": mode})
    templates: list[dict[str, Any]] = []

    def add_template(kind: str, class_name: str, size: int, **extra: Any) -> None:
        cls = C.class_or_404(config, class_name)
        C.check_quota(model, config, project, class_name, size)
        C.check_fits_a_pool(config, cls, size, f"template claim {kind!r}")
        # node scope: on the run's first host, its host counter; shared: the provisioner makes it in a pool
        templates.append({"kind": kind, "class": class_name, "size_bytes": size, "scope": cls.scope,
                          "counter": cls.counter if cls.scope == "node" else None,
                          "pools": list(cls.pools) if cls.scope == "shared" else [],
                          "stage_in": [], "stage_out": [], **extra})

    if spec.scratch is not None:
        size_text, class_name = _split_last(spec.scratch)
        add_template("scratch", class_name or config.claims.scratch_class, parse_size(size_text, "--scratch size"))
    if spec.stage_in or spec.stage_out:
        if len(spec.stage_in) + len(spec.stage_out) > MAX_STAGE_ITEMS:
            raise InvalidRequest(f"at most {MAX_STAGE_ITEMS} --stage-in/--stage-out items")
        ins = []
        for text in spec.stage_in:
            src, dest = _split_last(text)
            src = _absolute(src, "--stage-in source")
            ins.append([src, _relative(dest if dest else os.path.basename(src), "--stage-in destination")])
        outs = []
        for text in spec.stage_out:
            src, dest = _split_last(text)
            if dest is None:
                raise InvalidRequest(f"--stage-out {text}: give SRC:DEST, DEST an absolute path")
            outs.append([_relative(src, "--stage-out source"), _absolute(dest, "--stage-out destination")])
        cls = C.class_or_404(config, config.claims.stage_class)
        if cls.scope != "node":
            raise InvalidRequest(f"the staging class {cls.name!r} must be node-scope")
        # staged bytes take room on the host: reserved on the class's counter (its scratch), and the
        # node agent refuses a stage-in larger than this before it copies anything
        size = parse_size(spec.stage_size if spec.stage_size is not None else config.claims.stage_size,
                          "--stage-size")
        C.check_quota(model, config, project, cls.name, size)
        templates.append({"kind": "stage", "class": cls.name, "size_bytes": size, "scope": "node",
                          "counter": cls.counter, "pools": [], "stage_in": ins, "stage_out": outs})
    elif spec.stage_size is not None:
        raise InvalidRequest("--stage-size needs --stage-in or --stage-out")
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
                 if t.get("scope") == "shared")


def node_counters(templates: list[dict[str, Any]]) -> dict[str, float]:
    """Host counters the run's template claims draw on (reserved on its first host)."""
    out: dict[str, float] = {}
    for t in templates:
        if t.get("counter"):
            out[t["counter"]] = out.get(t["counter"], 0.0) + t["size_bytes"]
    return out


# ---------------------------------------------------------------- allocation (folded from JobAllocated)


def on_allocated(model: Model, job: Job, f: F.JobAllocated) -> None:
    """Make the run's template claims and attachments (ids decided by the plan applier)."""
    job.run_claims = []
    job.run_attachments = []
    first = f.hosts[0] if f.hosts else None
    for t in f.templates:
        shared = t.get("scope") == "shared"
        claim = Claim(id=t["claim_id"], name=C.template_name(job.id, f.run, t["kind"]), form=ClaimForm.TEMPLATE,
                      class_name=t["class"], scope="shared" if shared else "node", size_bytes=t["size_bytes"],
                      access_mode=AccessMode.RWX if shared else AccessMode.RWO,
                      reclaim_policy=C.ReclaimPolicy.DELETE, owner=job.user, project=job.project, created=f.time,
                      job_id=job.id, run=f.run, kind=t["kind"], stage_in=[list(x) for x in t["stage_in"]],
                      stage_out=[list(x) for x in t["stage_out"]], placed=True, pool=t.get("pool"),
                      host=None if shared else first)
        if C.add_template_claim(model, claim, f.time):
            job.run_claims.append(claim.id)  # (never otherwise: ``blocking`` then holds the run back)
    for a in f.attachments:
        C.apply_attachment_added(model, F.AttachmentAdded(time=f.time, claim_id=a["claim_id"],
                                                          attachment_id=a["attachment_id"], host=a["host"],
                                                          mode=a["mode"], by=job.user, job_id=job.id, run=f.run))
        job.run_attachments.append([a["claim_id"], a["attachment_id"]])


def plan_claims(model: Model, job: Job, hosts: list[str], next_claim: int, next_attachment: int,
                pools: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """The template claims and attachments a new run of ``job`` on ``hosts`` gets (for JobAllocated);
    ``pools`` places its shared template claims (kind -> pool, chosen by the scheduler)."""
    templates = [dict(t, claim_id=next_claim + i, pool=(pools or {}).get(t["kind"]))
                 for i, t in enumerate(job.templates)]
    attachments = []
    for ref in job.claim_refs:
        for host in hosts:
            attachments.append({"attachment_id": next_attachment + len(attachments), "claim_id": ref["claim_id"],
                                "host": host, "mode": ref["mode"]})
    return templates, attachments


def unusable_ref(model: Model, job: Job) -> str | None:
    """Why a referenced standalone claim cannot be attached now (the plan applier's re-check)."""
    for ref in job.claim_refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is None or claim.state is not ClaimState.READY or claim.delete_requested:
            state = "gone" if claim is None else "being deleted" if claim.delete_requested else claim.state.value
            return f"claim {ref['name']} is {state}"
    return None


# ---------------------------------------------------------------- the readiness gate


def run_claims(model: Model, job: Job) -> list[Claim]:
    """The current run's template claims: only those made for this job's run (a job never touches a
    claim it was not allocated, whatever ids its lists hold)."""
    out = []
    for claim_id in job.run_claims:
        claim = model.claims.get(claim_id)
        if claim is not None and claim.form is ClaimForm.TEMPLATE and (claim.job_id, claim.run) == (job.id, job.run):
            out.append(claim)
    return out


def _attachment(model: Model, job: Job, claim_id: int, attachment_id: int):
    """The run's attachment ``attachment_id`` of claim ``claim_id`` (None, None: not this run's)."""
    claim = model.claims.get(claim_id)
    a = next((a for a in claim.attachments if a.id == attachment_id), None) if claim is not None else None
    if a is None or (a.job_id, a.run) != (job.id, job.run):
        return claim, None
    return claim, a


def _describe(claim: Claim, op, last_error: str | None, state: str, where: str = "",
              now: float | None = None) -> str:
    text = f"{claim.name} {state}{where}"
    if op is not None and op.attempts:
        text += f" attempt {op.attempts}"
    if op is not None and op.next_retry is not None and now is not None:
        text += f", next retry in {max(0.0, op.next_retry - now):.0f}s"
    if last_error:
        text += f": {last_error}"
    return text


def blocking(model: Model, job: Job, now: float | None = None) -> str | None:
    """Why an allocated job cannot be dispatched yet (None: every claim is ready: dispatch it).
    With ``now``, a waiting retry says when it comes.  A run missing any template claim it declared
    is never dispatched."""
    if len(run_claims(model, job)) != len(job.templates):
        return f"run {job.run} lacks template claims it declared: it cannot start"
    for claim in run_claims(model, job):
        if claim.state is not ClaimState.READY:
            return "waiting for claim " + _describe(claim, claim.op, claim.last_error, claim.state.value, now=now)
    for claim_id, attachment_id in job.run_attachments:
        claim, a = _attachment(model, job, claim_id, attachment_id)
        if claim is None or a is None:
            return f"waiting for claim {claim_id} to be attached again"
        if a.state is not AttachmentState.ATTACHED:
            return "waiting for claim " + _describe(claim, a.op, a.last_error, a.state.value, f" on {a.host}",
                                                    now)
    return None


def fail_run(model: Model, job_id: int | None, run: int | None, what: str, now: float) -> list[Fact]:
    """A claim of an allocated, not yet started run failed for good: the job ends (or is requeued)."""
    from xce.model.jobs import JobState

    job = model.jobs.get(job_id) if job_id is not None else None
    if job is None or job.run != run or job.state is not JobState.PEND or not job.alloc_slots:
        return []
    if job.rerunnable:
        return [F.JobRequeued(time=now, job_id=job.id, run=job.run, reason=f"{what}: requeued")]
    return [F.JobFinished(time=now, job_id=job.id, run=job.run, state=JobState.EXIT.value, reason=what)]


def consequences(model: Model, claim_id: int, op_id: str, result: Fact, now: float) -> list[Fact]:
    """What an op's result means for the job it serves (decided before ``result`` is folded)."""
    from xce.model.jobs import finish_after_stage_out

    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    if found is None:
        return []
    op, a = found
    if isinstance(result, F.ClaimOpSucceeded):
        if a is None and op.kind is C.OpKind.STAGE_OUT and claim.job_id is not None:
            return finish_after_stage_out(model, claim.job_id, claim.run, None, now)
        return []
    if not isinstance(result, F.ClaimOpFailed) or result.next_retry is not None:
        return []
    error = f"{result.code}: {result.message}"
    if a is not None:
        if op.kind is C.OpKind.ATTACH:
            return fail_run(model, a.job_id, a.run, f"claim {claim.name} could not be attached on {a.host}: {error}",
                            now)
        return []
    if op.kind is C.OpKind.STAGE_OUT and claim.job_id is not None:
        return finish_after_stage_out(model, claim.job_id, claim.run, f"stage-out failed: {error}", now)
    if op.kind in (C.OpKind.CREATE, C.OpKind.STAGE_IN) and claim.form is ClaimForm.TEMPLATE:
        what = "stage-in failed" if op.kind is C.OpKind.STAGE_IN else f"claim {claim.name} failed"
        return fail_run(model, claim.job_id, claim.run, f"{what}: {error}", now)
    return []


# ---------------------------------------------------------------- the end of a run (fold helpers)


def start_stage_out(model: Model, job: Job, time: float) -> bool:
    """The process ended: stage-out begins (True) if the run has a staging claim with items to copy."""
    for claim in run_claims(model, job):
        if claim.stage_out and claim.state is ClaimState.READY:
            C.begin_stage_out(model, claim, time)
            return True
    return False


def release_for_run(model: Model, job: Job, time: float, host_lost: bool = False) -> None:
    """The run is over: its template claims go (unless a failed stage-out keeps one), attachments detach."""
    for claim in run_claims(model, job):
        if claim.keep or claim.state is ClaimState.RELEASED:
            continue
        if host_lost and claim.stage_out and claim.data_exists:
            C.keep_data(model, claim, time, f"host {claim.host} lost before stage-out: the data is kept there")
            continue
        C.release_template(model, claim, time, f"job {job.display_id} run {job.run} ended")
    for claim_id, attachment_id in job.run_attachments:
        claim, a = _attachment(model, job, claim_id, attachment_id)
        if a is not None:
            C.detach(model, claim, a, time)
    # the lists stay (xce job show lists what the run had) until the next run's allocation


def claims_json(model: Model, job: Job) -> list[dict[str, Any]]:
    """The job's claims as ``xce job show`` lists them (workspace first)."""
    if job.state.value == "RUN":
        workspace_state = "READY"  # the worker made it before it started the job
    elif job.start_time is not None or job.finished:
        workspace_state = "RELEASED"  # removed with the run's cleanup
    else:
        workspace_state = "PENDING"
    out: list[dict[str, Any]] = [{
        "name": "workspace", "form": "template", "class": "workspace", "mode": "rw", "path": job.workspace,
        "state": workspace_state, "attempts": None, "last_error": None, "env": "XCE_WORKSPACE"}]
    for claim in run_claims(model, job):
        env = template_env(claim.kind)
        out.append({"name": claim.name, "form": "template", "class": claim.class_name, "kind": claim.kind,
                    "state": claim.state.value, "mode": "rw", "path": claim.path, "env": env,
                    "host": claim.host, "attempts": claim.op.attempts if claim.op else None,
                    "last_error": claim.last_error, "claim_id": claim.id})
    for ref in job.claim_refs:
        claim = model.claims.get(ref["claim_id"])
        if claim is None:
            continue
        attached = [{"id": a.id, "host": a.host, "state": a.state.value, "path": a.path,
                     "attempts": a.op.attempts if a.op else None, "last_error": a.last_error}
                    for a in claim.attachments if a.job_id == job.id and a.run == job.run]
        out.append({"name": claim.name, "form": "standalone", "class": claim.class_name, "state": claim.state.value,
                    "mode": ref["mode"], "access_mode": claim.access_mode.value, "env": env_name(claim.name),
                    "attempts": claim.op.attempts if claim.op else None, "last_error": claim.last_error,
                    "attachments": attached, "claim_id": claim.id})
    return out


def blocking_stage_out(model: Model, job: Job, now: float | None = None) -> str:
    for claim in run_claims(model, job):
        if claim.op is not None and claim.op.kind is C.OpKind.STAGE_OUT:
            return "process ended; staging out: " + _describe(claim, claim.op, claim.last_error, "RELEASING",
                                                              now=now)
    return "process ended; staging out"


def publish_list(model: Model, job: Job, host: str) -> list[dict[str, Any]]:
    """What the worker publishes into the run's sandbox on ``host``: each claim's data path, the name
    the job knows it by, its environment variable, and whether it is read-only."""
    out = []
    for claim in run_claims(model, job):
        if claim.scope == "node" and claim.host != host:
            continue  # node-scope claims live on the run's first host; shared ones are reachable anywhere
        env = template_env(claim.kind)
        out.append({"name": claim.kind, "claim": claim.name, "env": env, "path": claim.path, "readonly": False,
                    "form": "template"})
    for claim_id, attachment_id in job.run_attachments:
        claim, a = _attachment(model, job, claim_id, attachment_id)
        if a is None or a.host != host:
            continue
        readonly = a.mode == "ro" or claim.access_mode is AccessMode.ROX
        out.append({"name": claim.name, "claim": claim.name, "env": env_name(claim.name), "path": a.path,
                    "readonly": readonly, "form": "standalone"})
    return out
