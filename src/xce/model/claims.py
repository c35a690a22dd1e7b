"""Claims: data and volumes as resources with a lifecycle.  The one module that owns a claim's state.

States (``ClaimState``)::

    PENDING ──▶ PREPARING ──▶ READY ──▶ RELEASING ──▶ RELEASED
       │            │           │            │
       │            ▼           └──(retain)──┼──────▶ RELEASED (retained: the object is kept)
       └──────────▶ FAILED ◀─────────────────┘
                      └──(delete)──▶ RELEASING / RELEASED

A claim's provider work is an *op* (``create`` or ``release``) with a stable
``op_id`` (``c<claim>.<op>.<n>``).  The scheduler places a PENDING claim in a
pool, which opens its ``create`` op; an agent commits an intent (PENDING →
PREPARING), calls the provider, and reports: success moves the claim on,
a retryable failure schedules the next attempt (same op_id: providers are
idempotent by it), and a permanent failure or the last attempt ends FAILED.
Deleting opens ``release`` (policy ``delete``) or records the object as
retained (policy ``retain``); a claim with attachments waits for the last
one to go first, as Kubernetes' pvc-protection does.

``_set_state`` is the only place a claim's state changes: it checks the
transition table, appends the history entry, and the audit record.  Decide
functions (``create``, ``delete``, ``record_intent``, ``record_result``...)
check requests and return facts; the ``apply_*`` folds are pure and total.
"""

from __future__ import annotations

import enum
import random
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.model import facts as F
from xce.model import audit
from xce.model.facts import Fact
from xce.names import check_name
from xce.units import format_size as human, parse_size

if TYPE_CHECKING:
    from xce.config import ClaimClassConfig, ClaimsConfig, Config
    from xce.model.identity import User
    from xce.model.state import Model


class ClaimState(enum.StrEnum):
    PENDING = "PENDING"
    PREPARING = "PREPARING"
    READY = "READY"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"
    FAILED = "FAILED"


class ClaimForm(enum.StrEnum):
    STANDALONE = "standalone"
    TEMPLATE = "template"


class AccessMode(enum.StrEnum):
    RWO = "RWO"  # read-write, jobs on one host at a time
    ROX = "ROX"  # read-only, any hosts
    RWX = "RWX"  # read-write, any hosts
    RWOP = "RWOP"  # read-write, one job at a time


class ReclaimPolicy(enum.StrEnum):
    DELETE = "delete"
    RETAIN = "retain"


class OpKind(enum.StrEnum):
    CREATE = "create"  # a node-scope claim's create is the provider's node_prepare
    RELEASE = "release"
    STAGE_IN = "stage_in"  # template staging claims: copied in by the node agent before the job
    STAGE_OUT = "stage_out"  # ... and out after it
    ATTACH = "attach"  # attachments: a standalone claim made reachable on a job's host
    DETACH = "detach"


class AttachmentState(enum.StrEnum):
    ATTACHING = "ATTACHING"
    ATTACHED = "ATTACHED"
    DETACHING = "DETACHING"


S = ClaimState
TRANSITIONS: dict[ClaimState, frozenset[ClaimState]] = {
    S.PENDING: frozenset({S.PREPARING, S.FAILED, S.RELEASED}),
    S.PREPARING: frozenset({S.READY, S.FAILED}),
    S.READY: frozenset({S.RELEASING, S.RELEASED, S.FAILED}),  # FAILED: its host was lost, data kept there
    S.RELEASING: frozenset({S.RELEASED, S.FAILED}),
    S.FAILED: frozenset({S.RELEASING, S.RELEASED}),
    S.RELEASED: frozenset(),
}
LIVE = frozenset({S.PENDING, S.PREPARING, S.READY, S.RELEASING, S.FAILED})  # holds its name and quota

SHARED_AGENT = "provisioner"
# what a job publishes its own template claims as ($XCE_SCRATCH, $XCE_STAGE, $XCE_WORKSPACE): no
# standalone claim may take these names, or it would be mounted over the job's own
RESERVED_NAMES = frozenset({"scratch", "stage", "workspace"})


def node_agent(host: str) -> str:
    return f"node:{host}"


@dataclass
class Op:
    """The provider call a claim is waiting for.  ``epoch`` is set once an agent committed its intent."""

    op_id: str
    kind: OpKind
    attempts: int = 0
    agent: str | None = None
    epoch: int | None = None
    next_retry: float | None = None  # None: due now

    def __post_init__(self) -> None:
        self.kind = OpKind(self.kind)


@dataclass
class Attachment:
    """One use of a standalone claim on one host (by a job's run, or added by an admin)."""

    id: int
    host: str
    mode: str
    created: float
    by: str
    job_id: int | None = None
    run: int | None = None
    state: AttachmentState = AttachmentState.ATTACHED
    op: Op | None = None
    path: str | None = None  # where the claim's data is reachable on the host (from the provider)
    detach_requested: bool = False
    last_error: str | None = None

    def __post_init__(self) -> None:
        self.state = AttachmentState(self.state)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)


@dataclass
class Claim:
    id: int
    name: str
    form: ClaimForm
    class_name: str
    scope: str
    size_bytes: int
    access_mode: AccessMode
    reclaim_policy: ReclaimPolicy
    owner: str
    project: str
    created: float
    params: dict[str, str] = field(default_factory=dict)
    job_id: int | None = None
    state: ClaimState = ClaimState.PENDING
    placed: bool = False
    pool: str | None = None
    host: str | None = None  # node-scope claims: the host whose agent prepares it
    handle: str | None = None
    actual_bytes: int | None = None
    reachable_hosts: list[str] | None = None  # None: every host
    host_labels: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    op: Op | None = None
    op_counts: dict[str, int] = field(default_factory=dict)  # op kind -> ops opened so far (for op ids)
    last_error: str | None = None
    stderr_tail: str = ""
    attachments: list[Attachment] = field(default_factory=list)
    delete_requested: bool = False
    deleted_by: str | None = None
    retained: bool = False  # RELEASED with the provider object kept (policy retain)
    data_exists: bool = False  # a provider object exists (or may: a create was attempted)
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}
    ops: list[dict[str, Any]] = field(default_factory=list)  # every attempt: {op_id, op, attempt, result, time, ...}
    # template claims
    kind: str = ""  # "scratch", "stage", or the application profile's claim name
    run: int | None = None  # the job's run it belongs to
    stage_in: list[list[str]] = field(default_factory=list)  # [source, destination under the claim]
    stage_out: list[list[str]] = field(default_factory=list)  # [source under the claim, destination]
    keep: bool = False  # stage-out failed: the data stays, FAILED, until someone deletes the claim

    def __post_init__(self) -> None:
        self.form = ClaimForm(self.form)
        self.access_mode = AccessMode(self.access_mode)
        self.reclaim_policy = ReclaimPolicy(self.reclaim_policy)
        self.state = ClaimState(self.state)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)
        self.attachments = [a if isinstance(a, Attachment) else Attachment(**a) for a in self.attachments]

    @property
    def charged_bytes(self) -> int:
        """Quota and pool use: the larger of what was asked and what the provider made."""
        return max(self.size_bytes, self.actual_bytes or 0)

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def agent(self) -> str:
        """Who runs this claim's provider ops: the provisioner, or the node agent of its host."""
        return SHARED_AGENT if self.scope == "shared" or self.host is None else node_agent(self.host)

    def agent_for(self, attachment: Attachment | None) -> str:
        if attachment is None or self.scope == "shared":
            return self.agent
        return node_agent(attachment.host)

    def find_op(self, op_id: str) -> tuple[Op, Attachment | None] | None:
        """The open op with this id: the claim's own, or one of its attachments'."""
        if self.op is not None and self.op.op_id == op_id:
            return self.op, None
        for a in self.attachments:
            if a.op is not None and a.op.op_id == op_id:
                return a.op, a
        return None

    def open_ops(self) -> list[tuple[Op, Attachment | None]]:
        out: list[tuple[Op, Attachment | None]] = [(self.op, None)] if self.op is not None else []
        return out + [(a.op, a) for a in self.attachments if a.op is not None]

    def waiting(self) -> str | None:
        """What the claim waits for, in words (None when it waits for nothing)."""
        if self.delete_requested and self.attachments and self.state is not ClaimState.RELEASED:
            n = len(self.attachments)
            return f"deletion waits for {n} attachment{'s' if n > 1 else ''} to go"
        ops = self.open_ops()
        if ops:
            op, a = ops[0]
            what = f"{op.kind.value}" + (f" on {a.host}" if a is not None else "") + f" (op {op.op_id}"
            return what + (f", attempt {op.attempts})" if op.attempts else ")")
        return None


# ---------------------------------------------------------------- decisions


def class_or_404(config: Config, name: str) -> ClaimClassConfig:
    cls = config.claim_class(name)
    if cls is None:
        known = ", ".join(c.name for c in config.claim_classes) or "none configured"
        raise NotFound(f"claim class {name!r} does not exist (classes: {known})")
    return cls


@dataclass(frozen=True)
class ClaimSpec:
    name: str
    class_name: str
    size: str | int
    access_mode: str
    reclaim_policy: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    project: str | None = None


def name_key(project: str, name: str) -> str:
    """Standalone claim names are per project (as Kubernetes' PVCs are per namespace): the key of
    ``model.claim_names``.  Template claims have no entry: nobody can name, squat or take theirs."""
    return f"{project}/{name}"


def live_by_name(model: Model, project: str, name: str) -> Claim | None:
    claim_id = model.claim_names.get(name_key(project, name))
    return model.claims.get(claim_id) if claim_id is not None else None


TEMPLATE_NAME = re.compile(r"^j(?P<job>[0-9]{1,18})\.(?P<run>[0-9]{1,9}):(?P<kind>[a-z0-9][a-z0-9\-_.]{0,62})$")


def template_name(job_id: int, run: int, kind: str) -> str:
    """``j12.1:scratch``: a run's template claim.  The ``:`` is outside the name pattern users
    choose from, so no standalone claim can ever be called that."""
    return f"j{job_id}.{run}:{kind}"


def _template_by_name(model: Model, name: str) -> Claim | None:
    m = TEMPLATE_NAME.match(name)
    if m is None:
        return None
    job_id, run, kind = int(m["job"]), int(m["run"]), m["kind"]
    job = model.jobs.get(job_id)
    ids = job.run_claims if job is not None and job.run == run else model.claims  # an older run: look at all
    for claim_id in ids:
        c = model.claims.get(claim_id)
        if c is not None and c.form is ClaimForm.TEMPLATE and (c.job_id, c.run, c.kind) == (job_id, run, kind):
            return c
    return None


def create(model: Model, config: Config, actor: User, spec: ClaimSpec, now: float) -> tuple[list[Fact], int]:
    """``xce claim create``: check everything, charge quota, return the ``ClaimCreated`` fact."""
    check_name("claim", spec.name)
    cls = class_or_404(config, spec.class_name)
    size = parse_size(spec.size, "size")
    try:
        mode = AccessMode(spec.access_mode)
    except ValueError:
        raise InvalidRequest(f"unknown access mode {spec.access_mode!r}: expected RWO, ROX, RWX or RWOP") from None
    if mode.value not in cls.access_modes:
        raise InvalidRequest(f"claim class {cls.name!r} does not allow access mode {mode.value} "
                             f"(allowed: {', '.join(cls.access_modes)})")
    policy_text = spec.reclaim_policy or cls.reclaim_policy
    try:
        policy = ReclaimPolicy(policy_text)
    except ValueError:
        raise InvalidRequest(f"unknown reclaim policy {policy_text!r}: expected retain or delete") from None
    allowed = set(cls.parameters) | set(cls.allowed_parameters)
    if unknown := sorted(set(spec.params) - allowed):
        raise InvalidRequest(f"claim class {cls.name!r} does not take parameter(s) {', '.join(unknown)}"
                             + (f" (allowed: {', '.join(sorted(allowed))})" if allowed else ""))
    for k, v in spec.params.items():
        check_name("parameter", k)
        if not isinstance(v, str) or len(v) > 1024:
            raise InvalidRequest(f"parameter {k!r}: values are strings of at most 1024 characters")
    project = spec.project or (actor.projects[0] if actor.projects else "default")
    if project not in model.projects:
        raise NotFound(f"project {project!r} does not exist")
    if not actor.is_admin and project not in actor.projects:
        raise Forbidden(f"user {actor.name!r} is not a member of project {project!r}")
    if spec.name in RESERVED_NAMES:
        raise InvalidRequest(f"claim name {spec.name!r} is reserved (jobs publish their own "
                             f"{', '.join(sorted(RESERVED_NAMES))} under these names)")
    if live_by_name(model, project, spec.name) is not None:  # names are per project: this reveals no other's
        raise Conflict(f"a claim named {spec.name!r} already exists in project {project!r}")
    check_quota(model, config, project, cls.name, size)
    check_fits_a_pool(config, cls, size, f"claim {spec.name!r}")
    claim_id = model.next_claim_id
    return [F.ClaimCreated(time=now, claim_id=claim_id, name=spec.name, form=ClaimForm.STANDALONE.value,
                           class_name=cls.name, scope=cls.scope, size_bytes=size, access_mode=mode.value,
                           reclaim_policy=policy.value, owner=actor.name, project=project,
                           params={**cls.parameters, **spec.params})], claim_id


def quota_use(model: Model, project: str, class_name: str | None) -> tuple[int, int]:
    """(claims, bytes) charged to ``project`` (and ``class_name``, None for all): live claims only."""
    count = total = 0
    for c in model.claims.values():
        if c.live and c.project == project and (class_name is None or c.class_name == class_name):
            count += 1
            total += c.charged_bytes
    return count, total


def check_quota(model: Model, config: Config, project: str, class_name: str, size: int) -> None:
    for q in config.quotas:
        if q.project != project or q.claim_class not in ("*", class_name):
            continue
        count, total = quota_use(model, project, None if q.claim_class == "*" else class_name)
        scope = f"project {project}" + ("" if q.claim_class == "*" else f", class {class_name}")
        if q.max_claims is not None and count + 1 > q.max_claims:
            raise Conflict(f"quota exceeded for {scope}: at most {q.max_claims} claims, {count} in use",
                           code="quota_exceeded")
        limit = q.max_bytes_value
        if limit is not None and total + size > limit:
            raise Conflict(f"quota exceeded for {scope}: at most {human(limit)}, {human(total)} in use, "
                           f"{human(size)} asked", code="quota_exceeded")


def check_fits_a_pool(config: Config, cls: ClaimClassConfig, size: int, what: str) -> None:
    """A shared claim larger than every pool its class can place it in would wait forever: refuse it.

    Node-scope classes draw on host counters, which hosts report as they come and go: not checked.
    """
    if cls.scope != "shared":
        return
    pools = [p for p in map(config.pool, cls.pools) if p is not None]
    if not pools:
        return
    largest = max(pools, key=lambda p: p.capacity_bytes)
    if size > largest.capacity_bytes:
        raise Conflict(f"{what} ({human(size)}) is larger than any pool of class {cls.name} can hold: "
                       f"the largest, {largest.name}, has a capacity of {human(largest.capacity_bytes)}",
                       code="larger_than_pools")


def visible(model: Model, actor: User, name: str, project: str | None = None) -> Claim:
    """The claim ``name`` that ``actor`` may see: live (or else the newest released one) in
    ``project``, or in any of the actor's projects (every project, for admins); a run's template
    claim by its ``jN.R:kind`` name.  404 if there is none, 409 if the name is in several of them:
    an unknown name and another project's name look the same."""
    template = _template_by_name(model, name)
    if template is not None:
        if not (actor.is_admin or template.project in actor.projects):
            raise NotFound(f"claim {name!r} not found")
        return template
    for index in (model.claim_names, model.released_names):
        if project is not None:
            keys = [name_key(project, name)] if actor.is_admin or project in actor.projects else []
        elif actor.is_admin:  # every project, those removed from the config too
            keys = sorted(k for k in index if k.partition("/")[2] == name)
        else:
            keys = [name_key(p, name) for p in actor.projects]
        found = [model.claims[i] for k in keys if (i := index.get(k)) in model.claims]
        if len(found) > 1:
            raise Conflict(f"claim {name!r} exists in projects {', '.join(c.project for c in found)}: "
                           f"say which (--project)", code="ambiguous")
        if found:
            return found[0]
    raise NotFound(f"claim {name!r} not found" + (f" in project {project!r}" if project is not None else ""))


def delete(model: Model, actor: User, name: str, now: float, project: str | None = None) -> list[Fact]:
    claim = visible(model, actor, name, project)
    if claim.form is ClaimForm.TEMPLATE and not actor.is_admin:
        raise Conflict(f"claim {name!r} belongs to job {claim.job_id}: it goes with the job")
    if claim.state is ClaimState.RELEASED:
        return []
    if claim.delete_requested and not (claim.state is ClaimState.FAILED and claim.op is None):
        return []  # already on its way; deleting a FAILED claim again retries its release
    return [F.ClaimDeleteRequested(time=now, claim_id=claim.id, by=actor.name)]


def purge(model: Model, actor: User, claim_id: int, now: float) -> list[Fact]:
    claim = model.claims.get(claim_id)
    if claim is None:
        raise NotFound(f"claim {claim_id} not found")
    if not claim.retained:
        raise Conflict(f"claim {claim.name!r} (id {claim.id}) is not a retained object")
    if claim.op is not None:
        return []
    return [F.ClaimPurgeRequested(time=now, claim_id=claim.id, by=actor.name)]


def add_attachment(model: Model, actor: User, name: str, host: str, mode: str, now: float,
                   job_id: int | None = None, project: str | None = None) -> tuple[list[Fact], int]:
    claim = visible(model, actor, name, project)
    check_name("host", host)
    if mode not in ("rw", "ro"):
        raise InvalidRequest(f"attachment mode must be rw or ro, got {mode!r}")
    if claim.state is not ClaimState.READY:
        raise Conflict(f"claim {name!r} is {claim.state.value}: only READY claims can be attached")
    if claim.delete_requested:
        raise Conflict(f"claim {name!r} is being deleted")
    if mode == "rw" and claim.access_mode is AccessMode.ROX:
        raise Conflict(f"claim {name!r} is ROX (read-only): it cannot be attached rw")
    attachment_id = model.next_attachment_id
    return [F.AttachmentAdded(time=now, claim_id=claim.id, attachment_id=attachment_id, host=host, mode=mode,
                              by=actor.name, job_id=job_id)], attachment_id


def remove_attachment(model: Model, actor: User, name: str, attachment_id: int, now: float,
                      project: str | None = None) -> list[Fact]:
    claim = visible(model, actor, name, project)
    if not any(a.id == attachment_id for a in claim.attachments):
        raise NotFound(f"claim {name!r} has no attachment {attachment_id}")
    return [F.AttachmentRemoved(time=now, claim_id=claim.id, attachment_id=attachment_id, by=actor.name)]


# ---------------------------------------------------------------- agents: leases, work, intents, results


def lease(model: Model, agent: str, holder: str, now: float) -> tuple[list[Fact], int]:
    """A (re)started agent takes a new epoch; reports from older epochs are refused from now on."""
    epoch = model.agent_epochs.get(agent, 0) + 1
    return [F.AgentLeased(time=now, agent=agent, epoch=epoch, holder=holder)], epoch


def check_epoch(model: Model, agent: str, epoch: int) -> None:
    current = model.agent_epochs.get(agent)
    if current != epoch:
        raise Conflict(f"stale epoch {epoch} for agent {agent}: the current epoch is {current}",
                       code="stale_epoch")


def due_ops(model: Model, agent: str, now: float,
            limit: int = 1000) -> list[tuple[Claim, Op, Attachment | None]]:
    """Ops this agent should run now: never intended, or intended by an older epoch (the agent
    restarted: re-drive with the same op_id), and not waiting for a retry."""
    epoch = model.agent_epochs.get(agent)
    out = []
    for claim_id in sorted(model.open_ops):
        claim = model.claims[claim_id]
        for op, attachment in claim.open_ops():
            if claim.agent_for(attachment) != agent:
                continue
            if op.epoch is not None and op.epoch == epoch:
                continue  # in flight with the current agent
            if op.next_retry is not None and op.next_retry > now:
                continue
            out.append((claim, op, attachment))
        if len(out) >= limit:
            break
    return out[:limit]


def next_due(model: Model, agent: str) -> float | None:
    """When the earliest waiting retry of this agent falls due (to bound its long-poll)."""
    times = [op.next_retry for cid in model.open_ops for op, a in model.claims[cid].open_ops()
             if op.next_retry is not None and model.claims[cid].agent_for(a) == agent]
    return min(times) if times else None


def record_intent(model: Model, agent: str, epoch: int, op_id: str, claim_id: int, now: float) -> list[Fact]:
    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    if found is None:
        raise Conflict(f"op {op_id} is not open on claim {claim_id}", code="op_gone")
    if claim.agent_for(found[1]) != agent:
        raise Conflict(f"op {op_id} of claim {claim_id} is not {agent}'s to run", code="op_gone")
    if found[0].epoch == epoch:
        return []  # already recorded for this epoch
    return [F.ClaimOpIntent(time=now, claim_id=claim_id, op_id=op_id, agent=agent, epoch=epoch)]


def retry_delay(cfg: ClaimsConfig, attempt: int, rng: random.Random) -> float:
    base = min(cfg.retry_cap, cfg.retry_base * 2 ** max(0, attempt - 1))
    return base * rng.uniform(1 - cfg.retry_jitter, 1 + cfg.retry_jitter)


def record_result(model: Model, cfg: ClaimsConfig, agent: str, epoch: int, op_id: str, claim_id: int,
                  now: float, ok: bool, *, handle: str | None = None, size_bytes: int | None = None,
                  reachable_hosts: list[str] | None = None, host_labels: dict[str, str] | None = None,
                  path: str | None = None, message: str = "", code: str = "", retryable: bool = True,
                  stderr_tail: str = "", rng: random.Random | None = None) -> list[Fact]:
    """An agent's report on one op.  Only the agent that holds the op's intent may report it: the same
    agent *and* the same epoch (epochs are per agent, so every agent has an epoch 1: the epoch alone
    would let one host's worker report another's op)."""
    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    if found is None:
        return []  # decided already (a duplicate report): nothing to do
    op = found[0]
    if op.agent != agent:
        raise Conflict(f"op {op_id} of claim {claim_id} is not {agent}'s: its intent is "
                       f"{op.agent or 'not recorded'}", code="not_your_op")
    if op.epoch != epoch:
        raise Conflict(f"op {op_id} was not started by epoch {epoch}", code="stale_epoch")
    if ok:
        return [F.ClaimOpSucceeded(time=now, claim_id=claim_id, op_id=op_id, handle=handle, size_bytes=size_bytes,
                                   reachable_hosts=reachable_hosts, host_labels=dict(host_labels or {}),
                                   path=path, message=message[:1024])]
    attempts = op.attempts
    next_retry = None
    if retryable and attempts < cfg.max_attempts:
        next_retry = now + retry_delay(cfg, attempts, rng or random.Random())
    return [F.ClaimOpFailed(time=now, claim_id=claim_id, op_id=op_id, code=code or "ERROR", message=message[:2048],
                            retryable=retryable, next_retry=next_retry, stderr_tail=stderr_tail[-2048:])]


# ---------------------------------------------------------------- folds


def _set_state(model: Model, claim: Claim, new: ClaimState, time: float, reason: str, by: str) -> None:
    """The one place a claim changes state: checked, recorded in its history and in the audit trail."""
    if new not in TRANSITIONS[claim.state]:
        # a fact the decide functions should never have produced; folds stay total, so record it
        reason = f"unexpected {claim.state.value} -> {new.value}: {reason}"
    old = claim.state
    claim.state = new
    claim.history.append({"state": new.value, "time": time, "reason": reason})
    audit.record(model, time, by, "claim.state", f"claim/{claim.name}", new.value,
                 f"{old.value} -> {new.value}: {reason}")
    if new is ClaimState.RELEASED and claim.form is ClaimForm.STANDALONE:
        key = name_key(claim.project, claim.name)
        if model.claim_names.get(key) == claim.id:
            del model.claim_names[key]
        model.released_names[key] = max(claim.id, model.released_names.get(key, 0))


def _index(model: Model, claim: Claim) -> None:
    if claim.op is not None or any(a.op is not None for a in claim.attachments):
        model.open_ops.add(claim.id)
    else:
        model.open_ops.discard(claim.id)


def _open_op(model: Model, claim: Claim, kind: OpKind) -> None:
    n = claim.op_counts.get(kind.value, 0) + 1
    claim.op_counts[kind.value] = n
    claim.op = Op(op_id=f"c{claim.id}.{kind.value}.{n}", kind=kind)
    model.open_ops.add(claim.id)


def _close_op(model: Model, claim: Claim) -> None:
    claim.op = None
    _index(model, claim)


def _open_attachment_op(model: Model, claim: Claim, a: Attachment, kind: OpKind) -> None:
    a.op = Op(op_id=f"a{a.id}.{kind.value}", kind=kind)
    model.open_ops.add(claim.id)


def _drop_attachment(model: Model, claim: Claim, a: Attachment, time: float) -> None:
    claim.attachments = [x for x in claim.attachments if x.id != a.id]
    _index(model, claim)
    _advance_delete(model, claim, time)


def detach(model: Model, claim: Claim, a: Attachment, time: float) -> None:
    """Fold helper: the attachment's user is done with it.  Capacity comes back only once it is gone."""
    if a.op is not None and a.op.kind is OpKind.ATTACH:
        if a.op.epoch is not None:  # the attach is in flight: detach once it has answered
            a.detach_requested = True
            return
        _drop_attachment(model, claim, a, time)  # never reached the provider
    elif a.state is AttachmentState.ATTACHED:
        if a.run is None:  # added by hand (no provider attach was made): nothing to undo
            _drop_attachment(model, claim, a, time)
        else:
            a.state = AttachmentState.DETACHING
            _open_attachment_op(model, claim, a, OpKind.DETACH)


def _advance_delete(model: Model, claim: Claim, time: float) -> None:
    """Carry out a requested deletion once nothing holds the claim (no attachment, no op in flight)."""
    if not claim.delete_requested or claim.attachments or claim.op is not None and claim.op.epoch is not None:
        return
    by = claim.deleted_by or "-"
    if claim.state is ClaimState.PENDING:  # never reached a provider
        _close_op(model, claim)
        _set_state(model, claim, ClaimState.RELEASED, time, "deleted before it was prepared", by)
    elif claim.state in (ClaimState.READY, ClaimState.FAILED):
        if not claim.data_exists:
            _set_state(model, claim, ClaimState.RELEASED, time, "deleted; no provider object exists", by)
        elif claim.reclaim_policy is ReclaimPolicy.RETAIN:
            claim.retained = True
            _set_state(model, claim, ClaimState.RELEASED, time,
                       f"deleted; reclaim policy retain keeps {claim.handle or 'the object'}", by)
        else:
            _set_state(model, claim, ClaimState.RELEASING, time, "deleted; releasing the provider object", by)
            _open_op(model, claim, OpKind.RELEASE)


def _add(model: Model, claim: Claim, time: float, reason: str, detail: str) -> bool:
    """A new claim enters the model, PENDING (False: its id, or a standalone claim's name in its
    project, is taken; nothing changes but the id counter, so the id is never handed out again)."""
    model.next_claim_id = max(model.next_claim_id, claim.id + 1)
    key = name_key(claim.project, claim.name)
    if claim.id in model.claims or claim.form is ClaimForm.STANDALONE and key in model.claim_names:
        return False  # ids and live names are unique: the decide functions never make it otherwise
    claim.history.append({"state": ClaimState.PENDING.value, "time": time, "reason": reason})
    model.claims[claim.id] = claim
    if claim.form is ClaimForm.STANDALONE:
        model.claim_names[key] = claim.id
    audit.record(model, time, claim.owner, "claim.state", f"claim/{claim.name}", ClaimState.PENDING.value, detail)
    return True


def add_template_claim(model: Model, claim: Claim, time: float) -> bool:
    """Fold helper (from ``JobAllocated``): a run's template claim, created with its create op open
    (False: its id was taken, which the plan applier never decides; the run must not use it)."""
    if not _add(model, claim, time, f"created for job {claim.job_id} run {claim.run} on {claim.host}",
                f"created: template {claim.kind} {claim.class_name} for job {claim.job_id}"):
        return False
    _open_op(model, claim, OpKind.CREATE)
    return True


def begin_stage_out(model: Model, claim: Claim, time: float) -> None:
    """Fold helper: the job's process ended; its staging claim copies out before it is released."""
    claim.delete_requested, claim.deleted_by = True, claim.owner
    _set_state(model, claim, ClaimState.RELEASING, time, f"job {claim.job_id} ended: staging out", claim.owner)
    _open_op(model, claim, OpKind.STAGE_OUT)


def keep_data(model: Model, claim: Claim, time: float, reason: str) -> None:
    """Fold helper: the claim's data must stay (nothing that holds data goes without a record)."""
    claim.keep = True
    claim.delete_requested = False
    if claim.op is not None and claim.op.epoch is None:
        _close_op(model, claim)
    if claim.state is not ClaimState.FAILED:
        _set_state(model, claim, ClaimState.FAILED, time, reason, "-")


def release_template(model: Model, claim: Claim, time: float, reason: str) -> None:
    """Fold helper: the run is over; its template claim goes (after any op in flight has answered)."""
    if claim.delete_requested:
        return
    claim.delete_requested, claim.deleted_by = True, claim.owner
    claim.history.append({"state": claim.state.value, "time": time, "reason": reason})
    _advance_delete(model, claim, time)


def apply_claim_created(model: Model, f: F.ClaimCreated) -> None:
    claim = Claim(id=f.claim_id, name=f.name, form=f.form, class_name=f.class_name, scope=f.scope,
                  size_bytes=f.size_bytes, access_mode=f.access_mode, reclaim_policy=f.reclaim_policy,
                  owner=f.owner, project=f.project, created=f.time, params=dict(f.params), job_id=f.job_id)
    _add(model, claim, f.time, "created", f"created: {f.form} {f.class_name} {f.size_bytes} bytes {f.access_mode}")


def apply_claim_placed(model: Model, f: F.ClaimPlaced) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.state is not ClaimState.PENDING or claim.placed:
        return
    claim.placed = True
    claim.pool = f.pool
    claim.host = f.host
    _open_op(model, claim, OpKind.CREATE)


def _open_op_of(model: Model, claim_id: int, op_id: str) -> tuple[Claim, Op, Attachment | None] | None:
    """The claim and its open op ``op_id`` a fact is about (None: decided already, or unknown)."""
    claim = model.claims.get(claim_id)
    found = claim.find_op(op_id) if claim is not None else None
    return (claim, *found) if found is not None else None


def apply_claim_op_intent(model: Model, f: F.ClaimOpIntent) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    op.attempts += 1
    op.agent, op.epoch, op.next_retry = f.agent, f.epoch, None
    claim.ops.append({"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "agent": f.agent,
                      "epoch": f.epoch, "time": f.time, "result": "started", "host": a.host if a else None})
    if a is None and op.kind is OpKind.CREATE:
        claim.data_exists = True  # from here on a provider object may exist: never assume it does not
        if claim.state is ClaimState.PENDING:
            _set_state(model, claim, ClaimState.PREPARING, f.time, f"{f.agent} creating (op {op.op_id})", f.agent)


def apply_claim_op_succeeded(model: Model, f: F.ClaimOpSucceeded) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    agent = op.agent or "-"
    claim.ops.append({"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "time": f.time,
                      "result": "ok", "message": f.message, "host": a.host if a else None})
    if a is not None:
        a.op, a.last_error = None, None
        _index(model, claim)
        if op.kind is OpKind.ATTACH:
            a.state, a.path = AttachmentState.ATTACHED, f.path
            if a.detach_requested:
                detach(model, claim, a, f.time)
        else:
            _drop_attachment(model, claim, a, f.time)
        return
    claim.last_error, claim.stderr_tail = None, ""
    _close_op(model, claim)
    if op.kind is OpKind.CREATE:
        claim.handle = f.handle
        claim.actual_bytes = f.size_bytes
        claim.reachable_hosts = list(f.reachable_hosts) if f.reachable_hosts is not None else None
        claim.host_labels = dict(f.host_labels)
        claim.path = f.path
        if claim.stage_in:
            _open_op(model, claim, OpKind.STAGE_IN)  # still PREPARING: READY once the files are in
            return
        _set_state(model, claim, ClaimState.READY, f.time, f"created {f.handle} on attempt {op.attempts}", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_IN:
        _set_state(model, claim, ClaimState.READY, f.time, f"staged in {len(claim.stage_in)} item(s)", agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_OUT:
        claim.history.append({"state": claim.state.value, "time": f.time,
                              "reason": f"staged out {len(claim.stage_out)} item(s); releasing"})
        _open_op(model, claim, OpKind.RELEASE)
    else:
        claim.data_exists = False
        if claim.state is ClaimState.RELEASED:  # a purged retained object
            claim.retained = False
            claim.history.append({"state": claim.state.value, "time": f.time,
                                  "reason": f"retained object {claim.handle} released (purged)"})
        else:
            _set_state(model, claim, ClaimState.RELEASED, f.time, f"released {claim.handle}", agent)


def apply_claim_op_failed(model: Model, f: F.ClaimOpFailed) -> None:
    if (found := _open_op_of(model, f.claim_id, f.op_id)) is None:
        return
    claim, op, a = found
    agent = op.agent or "-"
    error = f"{f.code}: {f.message}"
    claim.ops.append({"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts, "time": f.time,
                      "result": f.code, "message": f.message, "retryable": f.retryable,
                      "next_retry": f.next_retry, "host": a.host if a else None})
    if a is not None:
        a.last_error = error
    else:
        claim.last_error, claim.stderr_tail = error, f.stderr_tail
    if f.next_retry is not None:
        op.epoch = None  # the next attempt needs a new intent
        op.next_retry = f.next_retry
        return
    why = f"{op.kind.value} failed after {op.attempts} attempt{'s' if op.attempts != 1 else ''}: {error}"
    if a is not None:
        a.op = None
        _index(model, claim)
        claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"{a.host}: {why}"})
        if op.kind is OpKind.ATTACH:
            _drop_attachment(model, claim, a, f.time)  # nothing is attached
        # a detach that failed for good stays DETACHING (its host may still write): fenced only
        # when the host is declared lost, or removed by an admin
        return
    _close_op(model, claim)
    if op.kind is OpKind.CREATE:
        # a permanent error from the provider means it made nothing; a crash on the last attempt
        # may have left an object, which the orphan scan finds by its op_id tag
        claim.data_exists = False
        _set_state(model, claim, ClaimState.FAILED, f.time, why, agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_IN:
        _set_state(model, claim, ClaimState.FAILED, f.time, why, agent)
        _advance_delete(model, claim, f.time)
    elif op.kind is OpKind.STAGE_OUT:
        claim.keep = True
        claim.delete_requested = False
        _set_state(model, claim, ClaimState.FAILED, f.time, why + "; the data is kept", agent)
    elif claim.state is ClaimState.RELEASED:  # a purge that failed: still retained
        claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"purge failed: {why}"})
    else:
        _set_state(model, claim, ClaimState.FAILED, f.time, why + "; the data still exists", agent)


def apply_claim_delete_requested(model: Model, f: F.ClaimDeleteRequested) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None or claim.state is ClaimState.RELEASED:
        return
    claim.delete_requested = True
    claim.deleted_by = f.by
    _advance_delete(model, claim, f.time)


def apply_claim_purge_requested(model: Model, f: F.ClaimPurgeRequested) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None or not claim.retained or claim.op is not None:
        return
    claim.history.append({"state": claim.state.value, "time": f.time, "reason": f"purge requested by {f.by}"})
    _open_op(model, claim, OpKind.RELEASE)


def apply_attachment_added(model: Model, f: F.AttachmentAdded) -> None:
    claim = model.claims.get(f.claim_id)
    if claim is None:
        return
    a = Attachment(id=f.attachment_id, host=f.host, mode=f.mode, created=f.time, by=f.by, job_id=f.job_id,
                   run=f.run, state=AttachmentState.ATTACHING if f.run is not None else AttachmentState.ATTACHED)
    claim.attachments.append(a)
    if f.run is not None:  # a job's: the provider makes the claim reachable on the host first
        _open_attachment_op(model, claim, a, OpKind.ATTACH)
    model.next_attachment_id = max(model.next_attachment_id, f.attachment_id + 1)


def apply_attachment_removed(model: Model, f: F.AttachmentRemoved) -> None:
    claim = model.claims.get(f.claim_id)
    a = next((x for x in claim.attachments if x.id == f.attachment_id), None) if claim is not None else None
    if a is None:
        return
    claim.history.append({"state": claim.state.value, "time": f.time,
                          "reason": f"attachment #{a.id} on {a.host} removed by {f.by}"})
    _drop_attachment(model, claim, a, f.time)


def apply_agent_leased(model: Model, f: F.AgentLeased) -> None:
    model.agent_epochs[f.agent] = f.epoch
