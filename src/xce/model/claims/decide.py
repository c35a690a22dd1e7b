"""What requests may do to claims: create and resize (with quota and pool checks), find, delete, purge,
attach.

Each decide function checks a request against the model and returns the facts
to commit (it changes nothing itself); a refusal is an ``XceError`` that
changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound
from xce.model import capabilities
from xce.model.entities.claims import (
    RESERVED_NAMES, TEMPLATE_NAME, AccessMode, Claim, ClaimForm, ClaimState, ContentSource, Mode, ReclaimPolicy,
    ReplicaState, Scope, name_key,
)
from xce.model.entities.identity import User
from xce.model.facts import (
    AttachmentAdded, AttachmentRemoved, ClaimCreated, ClaimDeleteRequested, ClaimPurgeRequested, ClaimResizeRequested,
    Fact, ReplicaEvicted, ReplicasAdded,
)
from xce.model.state import State
from xce.names import check_name
from xce.transfers.locations import TransferRefused
from xce.transfers.locations import resolve as resolve_location
from xce.units import format_size, parse_size

if TYPE_CHECKING:
    from xce.config import ClaimClassConfig, Config, QuotaConfig


def class_or_404(config: Config, name: str) -> ClaimClassConfig:
    cls = config.claim_class(name)
    if cls is None:
        known = ", ".join(c.name for c in config.claim_classes) or "none configured"
        raise NotFound(f"claim class {name!r} does not exist (classes: {known})")
    return cls


@dataclass(frozen=True)
class ClaimSpec:
    """A standalone claim to create.  A clone (``source``) takes its class and access mode from its
    source unless given, and its size (at least the source's)."""

    name: str
    class_name: str | None
    size: str | int | None
    access_mode: str | None
    reclaim_policy: str | None = None
    params: dict[str, str] = field(default_factory=dict)
    project: str | None = None
    populate_from: str | None = None  # a URL or REMOTE:path the claim is filled from (``--source``)
    # a node-scope class's claim: a replica on each of these hosts (``--hosts``), or on this many hosts
    # the scheduler chooses by free capacity (``--replicas``)
    hosts: tuple[str, ...] = ()
    replicas: int | None = None
    cache: bool = False  # a node-local ROX claim filled from its source, its replicas made where its jobs go
    snapshot_on_preempt: bool = False  # snapshotted when a run that had it attached is preempted


def live_by_name(model: State, project: str, name: str) -> Claim | None:
    claim_id = model.claim_names.get(name_key(project, name))
    return model.claims.get(claim_id) if claim_id is not None else None



def _template_by_name(model: State, name: str) -> Claim | None:
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


def create(model: State, config: Config, actor: User, spec: ClaimSpec, now: float,
           source: ContentSource | None = None) -> tuple[list[Fact], int]:
    """``xce claim create``: check everything, charge quota, return the ``ClaimCreated`` fact.  With a
    ``source`` (resolved, and checked visible and READY, by ``xce.model.snapshots.clone``) the claim
    is a clone: its provider makes it from that object, so it must be of the same class."""
    check_name("claim", spec.name)
    if source is not None and spec.populate_from is not None:
        raise InvalidRequest("a claim is either a clone (--from-snapshot/--from-claim) or populated (--source), "
                             "not both")
    if source is not None and spec.class_name is not None and spec.class_name != source.class_name:
        raise InvalidRequest(f"a clone is made by the provider that holds its source: {source.kind} "
                             f"{source.name!r} is of class {source.class_name!r}, not {spec.class_name!r}")
    class_name = spec.class_name or (source.class_name if source is not None else None)
    if class_name is None:
        raise InvalidRequest("a claim needs a class")
    cls = class_or_404(config, class_name)
    if source is not None:
        capabilities.require(model, cls, "clone")
    if spec.size is not None:
        size = parse_size(spec.size, "size")
    elif source is not None:
        size = source.size_bytes
    else:
        raise InvalidRequest("a claim needs a size")
    if source is not None and size < source.size_bytes:
        raise InvalidRequest(f"a clone of {source.kind} {source.name!r} needs at least its size, "
                             f"{format_size(source.size_bytes)}; {format_size(size)} asked")
    access_text = spec.access_mode or (source.access_mode if source is not None else None)
    if access_text is None:
        raise InvalidRequest(f"a claim needs an access mode: {', '.join(AccessMode)}")
    try:
        mode = AccessMode(access_text)
    except ValueError:
        raise InvalidRequest(f"unknown access mode {access_text!r}: expected {', '.join(AccessMode)}") from None
    if mode.value not in cls.access_modes:
        raise InvalidRequest(f"claim class {cls.name!r} does not allow access mode {mode.value} "
                             f"(allowed: {', '.join(cls.access_modes)})")
    check_holds_standalone(cls, spec)
    if spec.snapshot_on_preempt:
        check_snapshot_on_preempt(model, cls, mode)
    if spec.cache:
        check_cache(cls, spec, mode)
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
    if source is not None and source.project != project:  # snapshots and claims are per project
        raise InvalidRequest(f"a clone is made in the project of its source: {source.kind} {source.name!r} "
                             f"is in project {source.project!r}, not {project!r}")
    if spec.name in RESERVED_NAMES:
        raise InvalidRequest(f"claim name {spec.name!r} is reserved (jobs publish their own "
                             f"{', '.join(sorted(RESERVED_NAMES))} under these names)")
    if live_by_name(model, project, spec.name) is not None:  # names are per project: this reveals no other's
        raise Conflict(f"a claim named {spec.name!r} already exists in project {project!r}")
    if spec.populate_from is not None and spec.populate_from.startswith(CLAIM_SOURCE) and cls.scope != Scope.SHARED:
        populate_from: str | None = _claim_source(model, actor, project, spec.populate_from)
    else:
        populate_from = _populate_source(config, cls, project, spec.populate_from, source)
    if source is not None and cls.scope != Scope.SHARED:
        raise InvalidRequest(f"claim class {cls.name!r} is node-scope: its replicas are not cloned")
    copies = len(spec.hosts) or spec.replicas or 1  # (a cache: at least one replica will be made)
    check_quota(model, config, project, cls.name, size * copies)
    check_fits_a_pool(config, cls, size, f"claim {spec.name!r}")
    claim_id = model.next_claim_id
    return [ClaimCreated(time=now, claim_id=claim_id, name=spec.name, form=ClaimForm.STANDALONE.value,
                         class_name=cls.name, scope=cls.scope, size_bytes=size, access_mode=mode.value,
                         reclaim_policy=policy.value, owner=actor.name, project=project,
                         params={**cls.parameters, **spec.params},
                         source=source.as_record() if source is not None else None,
                         populate_from=populate_from, replica_hosts=list(spec.hosts),
                         replicas_to_place=spec.replicas or 0, cache=spec.cache,
                         counter=cls.counter if spec.cache else None,
                         snapshot_on_preempt=spec.snapshot_on_preempt)], claim_id


def check_snapshot_on_preempt(model: State, cls: ClaimClassConfig, mode: AccessMode) -> None:
    """``--snapshot-on-preempt``: an RWO claim (one host writes it: a preempted run's is the last word
    before the next run's) of a shared class whose provider takes snapshots.  Refused as bad input,
    nothing created, otherwise: a claim that says it is snapshotted must be."""
    if mode is not AccessMode.RWO:
        raise InvalidRequest(f"--snapshot-on-preempt is for RWO claims (written by one host at a time), not "
                             f"{mode.value}")
    try:
        capabilities.require(model, cls, "create_snapshot")
    except Conflict as e:
        raise InvalidRequest(f"--snapshot-on-preempt: {e.message}") from None


MAX_REPLICAS = 64  # replicas of one node-local claim


def check_holds_standalone(cls: ClaimClassConfig, spec: ClaimSpec) -> None:
    """A node-scope class's claims live on hosts, made by their workers: a standalone claim of one is
    a set of replicas, one per host (``spec.hosts``, or ``spec.replicas`` the scheduler chooses), each
    reserved on the class's host counter.  Refused, never left PENDING with no reason, when the class
    cannot hold one or the request does not say where."""
    where = bool(spec.hosts) or spec.replicas is not None
    if cls.scope == Scope.SHARED:
        if where:
            raise InvalidRequest(f"claim class {cls.name!r} is shared: its claims are reachable from every host; "
                                 "--hosts and --replicas are for node-scope classes")
        return
    if cls.counter is None:
        raise InvalidRequest(f"claim class {cls.name!r} is node-scope and draws on no host counter: it cannot "
                             "hold standalone claims (its claims are a job's own: xce submit --scratch)")
    if not where and not spec.cache:
        raise InvalidRequest(f"claim class {cls.name!r} is node-scope: its claims live on hosts, one replica on "
                             "each; say which hosts (--hosts h1,h2) or how many (--replicas N), or make it a cache "
                             "(--cache: replicas where its jobs go)")
    if spec.hosts and spec.replicas is not None:
        raise InvalidRequest("--hosts names a replica's hosts, --replicas lets the scheduler choose them: not both")
    for host in spec.hosts:
        check_name("host", host)
    if len(set(spec.hosts)) != len(spec.hosts):
        raise InvalidRequest("--hosts names a host twice: a host holds one replica of a claim")
    n = len(spec.hosts) or spec.replicas or 0
    if (n or not spec.cache) and not 1 <= n <= MAX_REPLICAS:
        raise InvalidRequest(f"a claim has 1 to {MAX_REPLICAS} replicas, not {n}")
    if spec.reclaim_policy == ReclaimPolicy.RETAIN.value or spec.reclaim_policy is None and \
            cls.reclaim_policy == ReclaimPolicy.RETAIN.value:
        raise InvalidRequest(f"claim class {cls.name!r} is node-scope: its replicas are released with their "
                             "claim (reclaim policy delete)")


def check_cache(cls: ClaimClassConfig, spec: ClaimSpec, mode: AccessMode) -> None:
    """A cache is copies of one source on the hosts its jobs go to: node-scope, read-only, with a source."""
    if cls.scope == Scope.SHARED:
        raise InvalidRequest(f"claim class {cls.name!r} is shared: its claims are reachable from every host; "
                             "--cache is for node-scope classes")
    if mode is not AccessMode.ROX:
        raise InvalidRequest(f"a cache is read-only (--access ROX): its replicas are copies of one source, not "
                             f"{mode.value}")
    if spec.populate_from is None:
        raise InvalidRequest("a cache is filled from its source: give --source URL|REMOTE:path")


def _replicated(model: State, actor: User, name: str, project: str | None, hosts: tuple[str, ...],
                what: str) -> Claim:
    """The node-local claim ``name`` whose replicas a request names by ``hosts`` (checked), or why not."""
    claim = visible(model, actor, name, project)
    if not claim.replicated:
        raise Conflict(f"claim {name!r} is not node-local (class {claim.class_name}): it has no replicas to {what}")
    if claim.delete_requested or not claim.live:
        raise Conflict(f"claim {name!r} is {'being deleted' if claim.live else claim.state.value}")
    if not hosts:
        raise InvalidRequest(f"say which hosts to {what} (--hosts h1,h2)")
    for host in hosts:
        check_name("host", host)
    if len(set(hosts)) != len(hosts):
        raise InvalidRequest("--hosts names a host twice")
    return claim


def warm(model: State, config: Config, actor: User, name: str, hosts: tuple[str, ...], now: float,
         project: str | None = None) -> tuple[list[Fact], int]:
    """``xce claim warm``: a replica more on each of ``hosts`` (charged to the quota as each is), made and
    filled as the claim's first ones were.  Refused for a host that holds one (in any state but
    RELEASED: a FAILED one is evicted first), and for a claim none of whose replicas could be made."""
    claim = _replicated(model, actor, name, project, hosts, "warm")
    if claim.state is ClaimState.FAILED:
        raise Conflict(f"claim {name!r} is FAILED (no replica could be made): delete it and create it again")
    for host in hosts:
        if (r := claim.replica_on(host)) is not None:
            hint = "; evict it first (xce claim evict)" if r.state is ReplicaState.FAILED else ""
            raise Conflict(f"claim {name!r} has a replica on {host} already ({r.state.value}){hint}",
                           code="exists")
    if claim.replica_count + len(hosts) > MAX_REPLICAS:
        raise InvalidRequest(f"a claim has at most {MAX_REPLICAS} replicas: {name!r} has {claim.replica_count}")
    # (a cache with no replica was charged its first from its creation)
    more = claim.replica_charge + max(claim.size_bytes, claim.actual_bytes or 0) * (len(hosts) - 1)
    check_quota(model, config, claim.project, claim.class_name, more, new_claims=0)
    return [ReplicasAdded(time=now, claim_id=claim.id, hosts=list(hosts), by=actor.name)], claim.id


def evict(model: State, actor: User, name: str, hosts: tuple[str, ...], now: float,
          project: str | None = None) -> tuple[list[Fact], int]:
    """``xce claim evict``: release the claim's replica on each of ``hosts``, its host's agent removing
    the object.  Refused while a job on that host has it attached (its data is in use there), while
    the replica's op is in flight (evict once it has answered), and for a claim's last replica but a
    cache's (which makes replicas on demand): that is ``xce claim delete``."""
    claim = _replicated(model, actor, name, project, hosts, "evict")
    going = [claim.replica_on(host) for host in hosts]
    for host, r in zip(hosts, going):
        if r is None or r.state is ReplicaState.RELEASING:
            raise Conflict(f"claim {name!r} has no replica on {host}" + (" (it is being released)" if r else ""),
                           code="not_found")
    if claim.replica_count - len(hosts) <= 0 and not claim.cache:
        raise Conflict(f"{', '.join(hosts)} hold{'s' if len(hosts) == 1 else ''} the last replica of claim "
                       f"{name!r}: delete the claim instead (xce claim delete {name})", code="last_replica")
    for host, r in zip(hosts, going):
        assert r is not None
        users = sorted({a.job_id for a in claim.attachments if a.host == host and a.job_id is not None})
        if any(a.host == host for a in claim.attachments):
            jobs = f" by job{'s' if len(users) > 1 else ''} {', '.join(map(str, users))}" if users else ""
            raise Conflict(f"claim {name!r} is attached on {host}{jobs}: its replica there is evicted once they "
                           "are done", code="in_use")
        if r.op is not None and r.op.epoch is not None:
            raise Conflict(f"claim {name!r}'s replica on {host} is in the middle of its {r.op.kind.value} (op "
                           f"{r.op.op_id}): evict it once that has answered", code="busy")
    return [ReplicaEvicted(time=now, claim_id=claim.id, host=h, by=actor.name, reason=f"evicted by {actor.name}")
            for h in hosts], claim.id


CLAIM_SOURCE = "claim:"  # a node-local claim's --source: a shared claim's data, copied into each replica


def _claim_source(model: State, actor: User, project: str, text: str) -> str:
    """``--source claim:NAME`` of a node-local claim: a READY shared claim of the same project, whose data
    every host reaches (each replica's worker copies it in).  Canonical: ``claim:NAME``."""
    name = text.removeprefix(CLAIM_SOURCE)
    src = visible(model, actor, name, project)
    if src.form is not ClaimForm.STANDALONE or src.scope is not Scope.SHARED:
        raise InvalidRequest(f"--source {text}: claim {name!r} is not a shared standalone claim (only those are "
                             "reachable from every host)")
    if src.state is not ClaimState.READY or src.delete_requested:
        what = "being deleted" if src.delete_requested else src.state.value
        raise Conflict(f"--source {text}: claim {name!r} is {what}: only a READY claim is copied")
    return CLAIM_SOURCE + src.name


def populating_from(model: State, claim: Claim) -> list[str]:
    """The live claims of its project whose replicas are filled from ``claim`` (``--source claim:NAME``)."""
    return sorted(c.name for c in model.claims.values() if c.live and c.project == claim.project
                  and c.populate_from == CLAIM_SOURCE + claim.name)


def _populate_source(config: Config, cls: ClaimClassConfig, project: str, text: str | None,
                     source: ContentSource | None) -> str | None:
    """Where a populated claim's data comes from, resolved for its project as a stage-in source is (the
    same remotes, the same refusals naming the project), canonical; None: not populated."""
    if text is None or source is not None:  # (both: refused first thing)
        return None
    # a shared claim is filled by the provisioner; a node-local claim's replicas each by its host's worker
    who = "the provisioner does" if cls.scope == Scope.SHARED else "the workers do"
    if text.startswith("snapshot:"):
        raise InvalidRequest(f"--source {text}: a snapshot is copied by a clone (--from-snapshot) of a shared class; "
                             "a node-local claim is filled from that clone (--source claim:NAME), a URL or a "
                             "REMOTE:path")
    if text.startswith(CLAIM_SOURCE):
        raise InvalidRequest(f"--source {text}: a shared claim is copied by a clone (--from-claim)")
    try:
        where = resolve_location(text, config.transfers, project, "--source")
    except TransferRefused as e:
        raise (Forbidden if e.forbidden else InvalidRequest)(e.message) from None
    if where.local:
        raise InvalidRequest(f"--source is a URL or REMOTE:path (xce transfers list): {who} not read paths on "
                             "your host")
    return where.text


def quota_use(model: State, project: str, class_name: str | None) -> tuple[int, int]:
    """(claims, bytes) charged to ``project`` (and ``class_name``, None for all): live claims, and the
    bytes of live snapshots (of claims of that class): a snapshot holds data as a claim does, so
    it counts in the bytes, not in the number of claims."""
    count = total = 0
    for c in model.claims.values():
        if c.live and c.project == project and (class_name is None or c.class_name == class_name):
            count += 1
            total += c.charged_bytes
    for s in model.snapshots.values():
        if s.live and s.project == project and (class_name is None or s.class_name == class_name):
            total += s.charged_bytes
    return count, total


def _quotas(model: State, config: Config, project: str, class_name: str) -> Iterator[tuple[QuotaConfig, int, int, str]]:
    """Each quota of ``project`` that covers ``class_name``: (quota, claims, bytes charged, its scope in words)."""
    for q in config.quotas:
        if q.project != project or q.claim_class not in ("*", class_name):
            continue
        claims, total = quota_use(model, project, None if q.claim_class == "*" else class_name)
        yield q, claims, total, f"project {project}" + ("" if q.claim_class == "*" else f", class {class_name}")


def check_quota(model: State, config: Config, project: str, class_name: str, size: int, new_claims: int = 1) -> None:
    """``size`` more bytes (and ``new_claims`` more claims: 0 for a resize or a snapshot, which are
    charged bytes but are no claims) for ``project`` in ``class_name``."""
    for q, claims, total, scope in _quotas(model, config, project, class_name):
        if new_claims and q.max_claims is not None and claims + new_claims > q.max_claims:
            raise Conflict(f"quota exceeded for {scope}: at most {q.max_claims} claims, {claims} in use",
                           code="quota_exceeded")
        limit = q.max_bytes_value
        if limit is not None and total + size > limit:
            raise Conflict(f"quota exceeded for {scope}: at most {format_size(limit)}, {format_size(total)} in use, "
                           f"{format_size(size)} asked", code="quota_exceeded")


def quota_left(model: State, config: Config, project: str, class_name: str) -> tuple[int, str] | None:
    """The bytes ``project`` may still be charged in ``class_name`` under its tightest quota, with that
    quota in words (None: no quota limits its bytes).  A cache's replica started on demand is charged
    its size: the scheduler starts none that would not fit."""
    tightest: tuple[int, str] | None = None
    for q, _, total, scope in _quotas(model, config, project, class_name):
        if (limit := q.max_bytes_value) is not None and (tightest is None or limit - total < tightest[0]):
            tightest = (limit - total, f"quota of {scope}: at most {format_size(limit)}, {format_size(total)} in use")
    return tightest


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
        raise Conflict(f"{what} ({format_size(size)}) is larger than any pool of class {cls.name} can hold: "
                       f"the largest, {largest.name}, has a capacity of {format_size(largest.capacity_bytes)}",
                       code="larger_than_pools")


def resize(model: State, config: Config, actor: User, name: str, size: str | int, now: float,
           project: str | None = None) -> tuple[list[Fact], int]:
    """``xce claim resize``: grow a READY claim.  Refused (changing nothing) when it would not grow,
    when its class cannot expand (or only offline, and it is attached), or when the growth would
    exceed the project's quota or its pool; the scheduler then reserves the growth in the pool."""
    claim = visible(model, actor, name, project)
    new = parse_size(size, "size")
    if claim.form is ClaimForm.TEMPLATE:
        raise Conflict(f"claim {name!r} belongs to job {claim.job_id}: template claims are not resized")
    if claim.state is not ClaimState.READY:
        raise Conflict(f"claim {name!r} is {claim.state.value}: only READY claims can be resized")
    if claim.delete_requested:
        raise Conflict(f"claim {name!r} is being deleted")
    if claim.resize is not None and claim.resize.open:
        raise Conflict(f"claim {name!r} is already being resized to {format_size(claim.resize.size_bytes)} "
                       f"({claim.resize.state.value})", code="resize_in_progress")
    current = claim.charged_bytes
    if new <= current:
        raise InvalidRequest(f"claim {name!r} is {format_size(current)}: a resize can only grow it "
                             f"({format_size(new)} asked; shrinking is not supported)")
    if claim.scope is not Scope.SHARED:
        raise Conflict(f"claim {name!r} is node-local (class {claim.class_name}): only shared claims can be resized",
                       code="unsupported")
    cls = class_or_404(config, claim.class_name)
    can_expand = capabilities.can(model, cls.name, "expand")
    if can_expand is None:
        raise Conflict(f"claim class {cls.name} cannot resize claims yet: its provider {cls.provider} has not "
                       f"said what it can do (is the provisioner running?)", code="capabilities_unknown")
    if not can_expand:
        raise Conflict(f"claim class {cls.name} cannot resize claims: its provider {cls.provider} does not "
                       f"expand volumes", code="unsupported")
    if claim.attachments and not capabilities.can(model, cls.name, "online_expand"):
        hosts = ", ".join(sorted({a.host for a in claim.attachments}))
        raise Conflict(f"claim class {cls.name} can expand claims only offline: claim {name!r} is attached on "
                       f"{hosts}; resize it once its jobs are done", code="attached")
    check_quota(model, config, claim.project, cls.name, new - current, new_claims=0)
    if claim.pool is not None and (pool := config.pool(claim.pool)) is not None and new > pool.capacity_bytes:
        raise Conflict(f"claim {name!r} cannot grow to {format_size(new)}: its pool {pool.name} has a capacity of "
                       f"{format_size(pool.capacity_bytes)}", code="larger_than_pools")
    return [ClaimResizeRequested(time=now, claim_id=claim.id, size_bytes=new, by=actor.name)], claim.id


def may_see(actor: User, claim: Claim) -> bool:
    """Live or archived: a standalone claim is its project's members' to see; a job's template claim
    (its workspace, scratch, staging: the job's paths, stage-in sources and stage-out destinations)
    only whoever may see the job, its owner (``history.may_see_job``), as their jobs are nobody
    else's; admins see every claim."""
    if actor.is_admin:
        return True
    if claim.form is ClaimForm.TEMPLATE:
        return claim.owner == actor.name
    return claim.project in actor.projects


def listing_match(actor: User, project: str | None, states: set[ClaimState] | None, every_state: bool,
                  retained: bool) -> Callable[[Claim], bool]:
    """A claim listing's filter: what ``actor`` may see, of ``project``; of ``states``, else live claims
    (RELEASED ones too with ``every_state``); or, for admins, released claims whose object is kept."""
    if retained and not actor.is_admin:
        raise Forbidden("only admins list retained objects")

    def match(c: Claim) -> bool:
        if not may_see(actor, c) or project is not None and c.project != project:
            return False
        if retained:
            return c.retained
        if states is not None:
            return c.state in states
        return c.state is not ClaimState.RELEASED or every_state
    return match


def visible_by_id(model: State, actor: User, claim_id: int) -> Claim:
    """The claim ``claim_id`` if ``actor`` may see it (``may_see``); 404 otherwise, worded as for a
    claim that does not exist."""
    claim = model.claims.get(claim_id)
    if claim is None or not may_see(actor, claim):
        raise NotFound(f"claim {claim_id} not found")
    return claim


def visible(model: State, actor: User, name: str, project: str | None = None) -> Claim:
    """The claim ``name`` that ``actor`` may see: live (or else the newest released one) in
    ``project``, or in any of the actor's projects (every project, for admins); a run's template
    claim by its ``jN.R:kind`` name.  404 if there is none, 409 if the name is in several of them:
    an unknown name and another project's name look the same."""
    template = _template_by_name(model, name)
    if template is not None:
        if not may_see(actor, template):
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


def delete(model: State, actor: User, name: str, now: float, project: str | None = None) -> list[Fact]:
    claim = visible(model, actor, name, project)
    if claim.form is ClaimForm.TEMPLATE and not actor.is_admin:
        raise Conflict(f"claim {name!r} belongs to job {claim.job_id}: it goes with the job")
    if claim.state is ClaimState.RELEASED:
        return []
    if claim.delete_requested and not (claim.state is ClaimState.FAILED and claim.op is None):
        return []  # already on its way; deleting a FAILED claim again retries its release
    # its snapshots outlive it (as CSI's do), but one being taken needs it until it is made
    if taking := sorted(s.name for s in model.snapshots.values() if s.claim_id == claim.id and s.being_made):
        raise Conflict(f"claim {name!r} cannot be deleted while snapshot(s) {', '.join(taking)} of it are being "
                       f"taken: delete it once they are READY", code="in_use")
    if cloning := sorted(c.name for c in model.claims.values() if c.cloning_from("claim", claim.id)):
        raise Conflict(f"claim {name!r} cannot be deleted while claim(s) {', '.join(cloning)} are being made "
                       f"from it", code="in_use")
    if readers := populating_from(model, claim):
        raise Conflict(f"claim {name!r} is the source of node-local claim(s) {', '.join(readers)} (their replicas "
                       "are filled from it): delete them first", code="in_use")
    return [ClaimDeleteRequested(time=now, claim_id=claim.id, by=actor.name)]


def purge(model: State, actor: User, claim_id: int, now: float) -> list[Fact]:
    claim = model.claims.get(claim_id)
    if claim is None:
        raise NotFound(f"claim {claim_id} not found")
    if not claim.retained:
        raise Conflict(f"claim {claim.name!r} (id {claim.id}) is not a retained object")
    if claim.op is not None:
        return []
    return [ClaimPurgeRequested(time=now, claim_id=claim.id, by=actor.name)]


def add_attachment(model: State, actor: User, name: str, host: str, mode: str, now: float,
                   job_id: int | None = None, project: str | None = None) -> tuple[list[Fact], int]:
    claim = visible(model, actor, name, project)
    check_name("host", host)
    if mode not in tuple(Mode):
        raise InvalidRequest(f"attachment mode must be rw or ro, got {mode!r}")
    if claim.state is not ClaimState.READY:
        raise Conflict(f"claim {name!r} is {claim.state.value}: only READY claims can be attached")
    if claim.delete_requested:
        raise Conflict(f"claim {name!r} is being deleted")
    if claim.resize is not None and claim.resize.open and capabilities.can(model, claim.class_name,
                                                                           "online_expand") is False:
        raise Conflict(f"claim {name!r} is being resized and its class {claim.class_name} expands only offline")
    if mode == Mode.RW and claim.access_mode is AccessMode.ROX:
        raise Conflict(f"claim {name!r} is ROX (read-only): it cannot be attached rw")
    attachment_id = model.next_attachment_id
    return [AttachmentAdded(time=now, claim_id=claim.id, attachment_id=attachment_id, host=host, mode=mode,
                            by=actor.name, job_id=job_id)], attachment_id


def remove_attachment(model: State, actor: User, name: str, attachment_id: int, now: float,
                      project: str | None = None) -> list[Fact]:
    claim = visible(model, actor, name, project)
    if not any(a.id == attachment_id for a in claim.attachments):
        raise NotFound(f"claim {name!r} has no attachment {attachment_id}")
    return [AttachmentRemoved(time=now, claim_id=claim.id, attachment_id=attachment_id, by=actor.name)]


