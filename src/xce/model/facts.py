"""Facts: the typed, versioned records every state change is made of.

A fact is a frozen dataclass registered under a stable ``TYPE`` name with a
``VERSION``.  The log stores ``(type, version, payload)``; ``decode`` turns a
stored record back into a fact, upcasting older versions through the
``UPCASTERS`` table so old logs stay readable.  An undecodable record is a
fatal error (``UndecodableFact``): the model must never silently skip history.

Facts carry every value their fold needs (ids, times): folding is a pure
function of the facts, so replay reproduces the live model exactly.
"""

from __future__ import annotations

import dataclasses
import operator
import orjson
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar


class UndecodableFact(Exception):
    """Raised when a stored record names an unknown fact type or a version we cannot upcast."""


@dataclass(frozen=True, slots=True)
class Fact:
    TYPE: ClassVar[str] = ""
    VERSION: ClassVar[int] = 1
    time: float


REGISTRY: dict[str, type[Fact]] = {}
# (type, from_version) -> function turning a payload of from_version into from_version + 1
UPCASTERS: dict[tuple[str, int], Callable[[dict[str, Any]], dict[str, Any]]] = {}

F = TypeVar("F", bound=type[Fact])


def fact(type_name: str, version: int = 1) -> Callable[[F], F]:
    """Class decorator: register a fact type under a stable name."""

    def register(cls: F) -> F:
        if type_name in REGISTRY:
            raise ValueError(f"fact type {type_name!r} registered twice")
        cls.TYPE = type_name
        cls.VERSION = version
        REGISTRY[type_name] = cls
        return cls

    return register


_FIELDS: dict[type[Fact], tuple[tuple[str, ...], Callable[[Fact], tuple[Any, ...]]]] = {}


def _values_getter(names: tuple[str, ...]) -> Callable[[Fact], tuple[Any, ...]]:
    """``attrgetter`` of several names returns a tuple, of one name the bare value: a tuple either way
    here (every fact has at least its ``time``)."""
    if len(names) > 1:
        several: Callable[[Fact], tuple[Any, ...]] = operator.attrgetter(*names)
        return several
    one = operator.attrgetter(names[0])
    return lambda f: (one(f),)


def payload_of(f: Fact) -> dict[str, Any]:
    spec = _FIELDS.get(type(f))
    if spec is None:  # once per fact type: dataclasses.fields() is slow on the commit path
        names = tuple(fl.name for fl in dataclasses.fields(f))
        spec = _FIELDS[type(f)] = (names, _values_getter(names))
    names, getter = spec
    return dict(zip(names, getter(f)))


def encode(f: Fact) -> tuple[str, int, str]:
    """A fact as stored: type name, version, compact JSON payload."""
    return f.TYPE, f.VERSION, orjson.dumps(payload_of(f), option=orjson.OPT_SORT_KEYS).decode()


def decode(type_name: str, version: int, payload: str | dict[str, Any]) -> Fact:
    cls = REGISTRY.get(type_name)
    if cls is None:
        raise UndecodableFact(f"unknown fact type {type_name!r}")
    data = orjson.loads(payload) if isinstance(payload, str) else dict(payload)
    while version < cls.VERSION:
        up = UPCASTERS.get((type_name, version))
        if up is None:
            raise UndecodableFact(f"no upcaster for {type_name} v{version}")
        data = up(data)
        version += 1
    if version != cls.VERSION:
        raise UndecodableFact(f"{type_name} v{version} is newer than this XCE (v{cls.VERSION})")
    try:
        return cls(**data)
    except TypeError as e:
        raise UndecodableFact(f"{type_name} v{version}: {e}") from e


# ---------------------------------------------------------------- cluster and identities


@fact("cluster.initialized")
@dataclass(frozen=True, slots=True)
class ClusterInitialized(Fact):
    cluster_id: str


@fact("user.defined")
@dataclass(frozen=True, slots=True)
class UserDefined(Fact):
    """A user (or daemon identity) is created or its role/projects change."""

    name: str
    role: str
    projects: list[str] = field(default_factory=list)
    host: str | None = None  # daemon identities may be bound to one host


@fact("token.issued")
@dataclass(frozen=True, slots=True)
class TokenIssued(Fact):
    token_id: str
    user: str
    token_hash: str  # sha256 hex of the secret; the secret itself is never stored
    # when the token stops working (seconds since the epoch), None: never.  Added after v1 shipped: a
    # default, so older records decode unchanged (authentication compares it with the request's clock)
    expires: float | None = None


@fact("token.revoked")
@dataclass(frozen=True, slots=True)
class TokenRevoked(Fact):
    token_id: str


@fact("user.disabled")
@dataclass(frozen=True, slots=True)
class UserDisabled(Fact):
    """A user is disabled (every token of theirs refused) or enabled again; tokens are kept."""

    name: str
    disabled: bool = True


@fact("queue.defined")
@dataclass(frozen=True, slots=True)
class QueueDefined(Fact):
    name: str
    priority: int
    description: str = ""


@fact("project.defined")
@dataclass(frozen=True, slots=True)
class ProjectDefined(Fact):
    name: str
    description: str = ""
    usage_half_life: float | None = None  # fair share's decay ([controller] fairshare_half_life); None: as it was


@fact("project.removed")
@dataclass(frozen=True, slots=True)
class ProjectRemoved(Fact):
    """The configuration no longer has this project; its live claims become orphans (reported)."""

    name: str


# ---------------------------------------------------------------- jobs


@fact("job.submitted")
@dataclass(frozen=True, slots=True)
class JobSubmitted(Fact):
    id: int
    name: str
    user: str
    project: str
    queue: str
    command: list[str]
    slots: int = 1
    resreq: str = ""
    cwd: str | None = None
    stdout: str | None = None
    stderr: str | None = None
    rerunnable: bool = False
    held: bool = False
    array_indices: list[int] = field(default_factory=list)  # one job per index, ids id..id+n-1
    claim_refs: list[dict[str, Any]] = field(default_factory=list)  # standalone: {claim_id, name, mode}
    templates: list[dict[str, Any]] = field(default_factory=list)  # per-run template claim specs
    app: str | None = None
    request_id: str | None = None  # the client's id for the submission (a retry returns this job)
    mem_limit: int | None = None  # -M: bytes the run may use on each host (its cgroup's memory limit)
    shell: bool = False  # command is one command line for /bin/sh -c
    script: str | None = None  # the job is this script; command its arguments
    submit_dir: str | None = None  # where the job starts when cwd is not given
    env: dict[str, str] | None = None  # the submitter's variables that go with the job (private ones gone)
    dependency: str | None = None  # -w as submitted
    dependency_tree: list[Any] | None = None  # resolved to job ids at submission (xce.model.dependencies)
    terminate_orphan: bool = False  # -ti
    array_limit: int | None = None  # NAME[...]%N: elements that may hold hosts at once
    run_limit: float | None = None  # -W, or the queue's run_limit: seconds from the run's start
    run_estimate: float | None = None  # -We, seconds
    warn_signal: int | None = None  # -wa
    warn_time: float | None = None  # -wt: seconds before the run limit
    limit_grace: float | None = None  # the queue's terminate_grace when the run limit ends the run
    user_priority: int = 0  # -sp, or the site's default (half of max_user_priority)
    begin_time: float | None = None  # -b: not started before
    exclusive: bool = False  # -x: its hosts run nothing else
    requeue_exit: str | None = None  # -Q, or the queue's requeue_exit_values (xce.exitvalues)
    max_requeue: int | None = None  # the queue's max_job_requeue
    pre_exec: str | None = None  # -E
    post_exec: str | None = None  # -Ep
    gpu: dict[str, Any] | None = None  # -gpu or rusage[ngpus_physical=]: xce.jobspec_gpu.GpuRequest.as_json


# ---------------------------------------------------------------- audit


@fact("audit.recorded")
@dataclass(frozen=True, slots=True)
class AuditRecorded(Fact):
    """Who did what to which target, and how it ended (``ok`` or the refusal code)."""

    user: str
    action: str
    target: str
    result: str
    detail: str = ""


# ---------------------------------------------------------------- hosts


@fact("host.registered")
@dataclass(frozen=True, slots=True)
class HostRegistered(Fact):
    """A worker (re)joined: what it offers.  ``boot_id`` changes on every worker start."""

    name: str
    slots: int
    attrs: dict[str, str] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    boot_id: str = ""
    gpus: list[dict[str, Any]] = field(default_factory=list)  # {id, uuid, model, memory}: xce.model.entities.hosts.Gpu


@fact("host.state_changed")
@dataclass(frozen=True, slots=True)
class HostStateChanged(Fact):
    name: str
    state: str  # HostState value
    reason: str = ""


@fact("host.removed")
@dataclass(frozen=True, slots=True)
class HostRemoved(Fact):
    """An admin removed a host that is gone (``xce host remove``): nothing held or kept on it."""

    name: str
    by: str


# ---------------------------------------------------------------- job lifecycle


@fact("job.allocated")
@dataclass(frozen=True, slots=True)
class JobAllocated(Fact):
    """The plan applier accepted a placement: slots and counters reserved on these hosts.

    ``run`` numbers the job's attempts (1 for the first, +1 on every requeue) so a
    worker can tell a new dispatch from one it already started.
    """

    job_id: int
    run: int
    hosts: list[str]
    slots: dict[str, int]
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    cluster_counters: dict[str, float] = field(default_factory=dict)  # cluster-scope counters reserved
    # logs before template claims had their own ClaimCreated facts carried the run's templates here
    templates: list[dict[str, Any]] = field(default_factory=list)
    attachments: list[dict[str, Any]] = field(default_factory=list)  # {attachment_id, claim_id, host, mode}
    gpus: dict[str, list[int]] = field(default_factory=dict)  # host -> the ids of the GPUs the run holds there


@fact("job.started")
@dataclass(frozen=True, slots=True)
class JobStarted(Fact):
    job_id: int
    run: int
    host: str
    pid: int
    workspace: str = ""
    stdout: str = ""
    stderr: str = ""
    publish: str = ""  # how its claims were published: "bind" or "symlink" (worker not root)
    note: str = ""  # what the worker noted starting it (a submission directory missing on the host)
    rendezvous: str = ""  # ADDR:PORT its first host reserved for it (XCE_RDZV_HOST, XCE_RDZV_PORT)
    task_key: str = ""  # sha256 of the run's secret (XCE_JOB_TOKEN in its environment): blaunch's proof


@fact("job.task_launched")
@dataclass(frozen=True, slots=True)
class TaskLaunched(Fact):
    """A running job (``blaunch``, ``xce launch``) asked for a task on one of its hosts; that host's worker
    starts it in the run's sandbox.  ``task`` numbers the run's tasks from 1."""

    job_id: int
    run: int
    task: int
    host: str
    command: str  # one command line, for /bin/sh -c (as rsh runs it: mpirun's quoting relies on it)
    cwd: str = ""
    keep_going: bool = False  # its failure does not end the job
    stdin: bool = False  # it reads what its blaunch sends it (blaunch's stdin); else nothing (-n)
    env: dict[str, str] | None = None  # blaunch's environment, as the job's is kept (jobs.kept_environment)


@fact("job.task_ended")
@dataclass(frozen=True, slots=True)
class TaskEnded(Fact):
    """A task's process ended (or could not start, or was lost with its host or worker)."""

    job_id: int
    run: int
    task: int
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""


@fact("job.finished")
@dataclass(frozen=True, slots=True)
class JobFinished(Fact):
    """The job's run ended (or could not start); its reservations are released."""

    job_id: int
    run: int
    state: str  # DONE or EXIT
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    host_lost: bool = False  # its host was declared lost: data on it is kept, not released
    usage: dict[str, Any] | None = None  # what the run used: max_rss_bytes, cpu_user_s, cpu_sys_s
    post_exec_exit: int | None = None  # -Ep's exit code, when it ran


@fact("job.requeued")
@dataclass(frozen=True, slots=True)
class JobRequeued(Fact):
    job_id: int
    run: int
    reason: str = ""
    host_lost: bool = False
    usage: dict[str, Any] | None = None  # what the run that ended used, when it ran
    by_exit_value: bool = False  # its exit code is one of the job's requeue exit values (-Q): counted
    avoid_host: str | None = None  # its next runs never go to this host (-Q EXCLUDE(), a failed pre-exec)
    pre_exec_failed: bool = False  # its -E failed: counted against MAX_PREEXEC_RETRY


@fact("job.process_ended")
@dataclass(frozen=True, slots=True)
class JobProcessEnded(Fact):
    """The run's process ended and its stage-out begins; the job ends (DONE/EXIT) once that is done."""

    job_id: int
    run: int
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    usage: dict[str, Any] | None = None
    post_exec_exit: int | None = None  # -Ep's exit code, when it ran


# Orders to a running job's processes (the kill path, DESIGN §12).  Each is numbered within its run
# (the fold counts them: ``Job.order_seq``); the worker passes on each number once, and its shepherd acts.


@fact("job.kill_requested")
@dataclass(frozen=True, slots=True)
class JobKillRequested(Fact):
    """End the run: SIGINT and SIGTERM once, SIGKILL after ``grace`` seconds (None: logs from before
    the grace was chosen at the request; the run's queue's, as folded)."""

    job_id: int
    run: int
    by: str
    requeue: bool = False
    grace: float | None = None
    preemptor: int | None = None  # added later: the pending job the run is preempted for (None: not preemption)


@fact("job.signal_requested")
@dataclass(frozen=True, slots=True)
class JobSignalRequested(Fact):
    """``xce kill -s SIGNAL``: that one signal to the run's processes, once; nothing follows it.  With
    ``task``: to that task of the run only (its ``blaunch`` passing on a signal it got, or SIGKILL when
    its ``blaunch`` is gone: ``tasks.launchers_lost``)."""

    job_id: int
    run: int
    by: str
    signal: int
    task: int | None = None


@fact("job.suspended")
@dataclass(frozen=True, slots=True)
class JobSuspended(Fact):
    """``xce stop``: the run's processes frozen (USUSP) until resumed."""

    job_id: int
    run: int
    by: str


@fact("job.resumed")
@dataclass(frozen=True, slots=True)
class JobResumed(Fact):
    job_id: int
    run: int
    by: str


@fact("job.held")
@dataclass(frozen=True, slots=True)
class JobHeld(Fact):
    job_id: int
    by: str


@fact("job.released")
@dataclass(frozen=True, slots=True)
class JobReleased(Fact):
    job_id: int
    by: str


@fact("job.modified")
@dataclass(frozen=True, slots=True)
class JobModified(Fact):
    """``xce mod``/``bmod``: new values of a waiting job, or of every waiting element of an array
    (``xce.model.job_changes``): queue, slots, resreq, run_limit, dependency (and its resolved tree),
    user_priority, name, array_limit."""

    job_ids: list[int]
    by: str
    changes: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- claims
#
# A claim's state changes only in ``xce.model.claims`` (its folds); these facts
# say what happened, the fold works out the state that follows.


@fact("claim.created")
@dataclass(frozen=True, slots=True)
class ClaimCreated(Fact):
    claim_id: int
    name: str
    form: str  # ClaimForm
    class_name: str
    scope: str  # "shared" or "node"
    size_bytes: int
    access_mode: str
    reclaim_policy: str
    owner: str
    project: str
    params: dict[str, str] = field(default_factory=dict)
    job_id: int | None = None  # template claims: the job they belong to
    # template claims (made by the plan applier with their run's allocation, placed already):
    run: int | None = None  # the job's run they belong to
    kind: str = ""  # "scratch", "stage", or the application profile's claim name
    host: str | None = None  # node scope: the run's first host, whose worker prepares it
    pool: str | None = None  # shared scope: the pool the scheduler chose
    stage_in: list[list[str]] = field(default_factory=list)
    stage_out: list[list[str]] = field(default_factory=list)
    # a clone: its content source {"kind": "snapshot"|"claim", "id", "name", "handle"} (added later:
    # a default, so older records decode unchanged)
    source: dict[str, Any] | None = None
    # added later too: a claim filled from a URL or remote after its create (canonical location)
    populate_from: str | None = None
    # a job's shared staging claim made at submission for its next run (``run``): placed by the scheduler
    # like a standalone claim and staged in before the run's hosts are allocated
    early: bool = False
    # added later: a node-local standalone claim's replicas, one per named host, and how many more the
    # scheduler chooses hosts for
    replica_hosts: list[str] = field(default_factory=list)
    replicas_to_place: int = 0
    cache: bool = False  # a node-local ROX claim whose replicas are made on demand, where its jobs go
    counter: str | None = None  # a cache: the host counter its replicas are reserved on (its class's, then)
    snapshot_on_preempt: bool = False  # added later: snapshotted when a run that had it is preempted


@fact("claim.placed")
@dataclass(frozen=True, slots=True)
class ClaimPlaced(Fact):
    """The plan applier accepted a placement: the claim's size is reserved in ``pool``."""

    claim_id: int
    pool: str | None
    host: str | None = None  # node-scope claims: the host that prepares it


@fact("claim.op_intent")
@dataclass(frozen=True, slots=True)
class ClaimOpIntent(Fact):
    """An agent is about to call the provider for this op (committed before it does)."""

    claim_id: int
    op_id: str
    agent: str
    epoch: int


@fact("claim.op_succeeded")
@dataclass(frozen=True, slots=True)
class ClaimOpSucceeded(Fact):
    claim_id: int
    op_id: str
    handle: str | None = None
    size_bytes: int | None = None
    reachable_hosts: list[str] | None = None
    host_labels: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    message: str = ""


@fact("claim.op_failed")
@dataclass(frozen=True, slots=True)
class ClaimOpFailed(Fact):
    """One attempt failed.  ``next_retry`` None means no more attempts: the claim is FAILED."""

    claim_id: int
    op_id: str
    code: str
    message: str
    retryable: bool
    next_retry: float | None = None
    stderr_tail: str = ""


@fact("claim.replica_placed")
@dataclass(frozen=True, slots=True)
class ReplicaPlaced(Fact):
    """The plan applier accepted a replica's placement: its size is reserved on ``host``'s ``counter``
    (a named host's replica, or a new one on a host the scheduler chose)."""

    claim_id: int
    host: str
    counter: str
    size_bytes: int


@fact("claim.replicas_added")
@dataclass(frozen=True, slots=True)
class ReplicasAdded(Fact):
    """``xce claim warm``: a replica more on each of ``hosts`` (PENDING until the scheduler reserves its
    size there, as a named host's)."""

    claim_id: int
    hosts: list[str]
    by: str


@fact("claim.replica_evicted")
@dataclass(frozen=True, slots=True)
class ReplicaEvicted(Fact):
    """A replica released while its claim lives on: ``xce claim evict`` (by a person), or the plan
    applier making room on its host for a cache's replica (``make_room``: its bytes go to that one at
    once; its object is released after)."""

    claim_id: int
    host: str
    by: str
    reason: str = ""
    make_room: bool = False


@fact("claim.replica_lost")
@dataclass(frozen=True, slots=True)
class ReplicaLost(Fact):
    """The host of a READY replica was declared lost: no job goes there until its worker, back, has
    checked the replica (``ReplicaState.LOST``)."""

    claim_id: int
    host: str


@fact("claim.replica_object_gone")
@dataclass(frozen=True, slots=True)
class ReplicaObjectGone(Fact):
    """A READY replica's object was not in its host's listing (its worker's orphan scan): its data is
    gone.  A populated claim's replica is made and filled again; any other's is FAILED (its data, written
    by jobs, cannot be made again)."""

    claim_id: int
    host: str
    handle: str


@fact("claim.replica_op_intent")
@dataclass(frozen=True, slots=True)
class ReplicaOpIntent(Fact):
    """A node agent is about to call its provider for a replica's op (committed before it does)."""

    claim_id: int
    op_id: str
    agent: str
    epoch: int


@fact("claim.replica_op_succeeded")
@dataclass(frozen=True, slots=True)
class ReplicaOpSucceeded(Fact):
    claim_id: int
    op_id: str
    handle: str | None = None
    size_bytes: int | None = None
    path: str | None = None
    message: str = ""


@fact("claim.replica_op_failed")
@dataclass(frozen=True, slots=True)
class ReplicaOpFailed(Fact):
    """One attempt of a replica's op failed.  ``next_retry`` None: no more attempts."""

    claim_id: int
    op_id: str
    code: str
    message: str
    retryable: bool
    next_retry: float | None = None
    stderr_tail: str = ""


@fact("claim.resize_requested")
@dataclass(frozen=True, slots=True)
class ClaimResizeRequested(Fact):
    """``xce claim resize``: grow a READY claim to ``size_bytes`` (quota charged from now on)."""

    claim_id: int
    size_bytes: int
    by: str


@fact("claim.resize_reserved")
@dataclass(frozen=True, slots=True)
class ClaimResizeReserved(Fact):
    """The plan applier reserved the resize's growth in the claim's pool: its expand op opens."""

    claim_id: int
    size_bytes: int


@fact("claim.delete_requested")
@dataclass(frozen=True, slots=True)
class ClaimDeleteRequested(Fact):
    claim_id: int
    by: str


@fact("claim.purge_requested")
@dataclass(frozen=True, slots=True)
class ClaimPurgeRequested(Fact):
    """An admin asked for a retained object to be released by its provider after all."""

    claim_id: int
    by: str


@fact("claim.attachment_added")
@dataclass(frozen=True, slots=True)
class AttachmentAdded(Fact):
    claim_id: int
    attachment_id: int
    host: str
    mode: str  # "rw" or "ro"
    by: str
    job_id: int | None = None
    run: int | None = None  # a job run's attachment: the provider attaches it (None: added by hand, as is)


@fact("claim.attachment_removed")
@dataclass(frozen=True, slots=True)
class AttachmentRemoved(Fact):
    claim_id: int
    attachment_id: int
    by: str


@fact("agent.leased")
@dataclass(frozen=True, slots=True)
class AgentLeased(Fact):
    """A claim agent (the provisioner, or a worker's node agent) started: its reports are fenced by ``epoch``."""

    agent: str
    epoch: int
    holder: str


@fact("claimclass.capabilities")
@dataclass(frozen=True, slots=True)
class ClassCapabilitiesReported(Fact):
    """What a claim class's provider can do, as the agent that runs its ops asked it (``capabilities``):
    ``create_snapshot``, ``clone``, ``expand``, ``online_expand`` (booleans) and ``access_modes``."""

    class_name: str
    provider: str
    agent: str
    capabilities: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------- snapshots
#
# A snapshot's state changes only in ``xce.model.snapshots`` (its folds).


@fact("snapshot.created")
@dataclass(frozen=True, slots=True)
class SnapshotCreated(Fact):
    """``xce claim snapshot``: a read-only point-in-time copy of a claim is asked for (PENDING)."""

    snapshot_id: int
    name: str
    project: str
    owner: str
    claim_id: int  # the claim it is taken of
    claim_name: str
    class_name: str
    size_bytes: int  # the claim's size: the least a claim made from it can have
    access_mode: str  # the claim's: what a clone takes unless told otherwise
    pool: str | None = None  # the claim's pool, where its bytes are reserved (None: logs from before)
    # added later: a snapshot taken because run ``run`` of job ``job_id`` was preempted (the claim's
    # ``--snapshot-on-preempt``): made once that run's attachments are gone, before the claim is attached again
    job_id: int | None = None
    run: int | None = None


@fact("snapshot.op_intent")
@dataclass(frozen=True, slots=True)
class SnapshotOpIntent(Fact):
    snapshot_id: int
    op_id: str
    agent: str
    epoch: int


@fact("snapshot.op_succeeded")
@dataclass(frozen=True, slots=True)
class SnapshotOpSucceeded(Fact):
    snapshot_id: int
    op_id: str
    handle: str | None = None
    size_bytes: int | None = None
    message: str = ""
    used_bytes: int | None = None  # what the provider says the snapshot holds (copy-on-write: maybe less)


@fact("snapshot.op_failed")
@dataclass(frozen=True, slots=True)
class SnapshotOpFailed(Fact):
    """One attempt failed.  ``next_retry`` None means no more attempts."""

    snapshot_id: int
    op_id: str
    code: str
    message: str
    retryable: bool
    next_retry: float | None = None
    stderr_tail: str = ""


@fact("snapshot.delete_requested")
@dataclass(frozen=True, slots=True)
class SnapshotDeleteRequested(Fact):
    snapshot_id: int
    by: str


@fact("orphan.seen")
@dataclass(frozen=True, slots=True)
class OrphanSeen(Fact):
    """A provider object tagged with our cluster id that no claim (and no open op) owns."""

    handle: str
    class_name: str
    provider: str
    claim_id: int | None
    tags: dict[str, str] = field(default_factory=dict)
    size_bytes: int | None = None
    kind: str = "volume"  # as the provider listed it: "volume" or "snapshot" (added later: a default)
    host: str | None = None  # a node object's host, as its worker listed it (None: a shared object)


@fact("orphan.resolved")
@dataclass(frozen=True, slots=True)
class OrphanResolved(Fact):
    """The orphan is gone: released by us after the grace period, or no longer listed by the provider."""

    handle: str
    how: str  # "released" or "gone"


# ---------------------------------------------------------------- history


@fact("history.retired")
@dataclass(frozen=True, slots=True)
class RecordsRetired(Fact):
    """Finished jobs and RELEASED claims leave the live model for the store's archive.

    The leader's retirement pass decides them (``xce.model.history.retirable``); the store writes
    their whole documents into its archive tables in the same transaction as this fact, so a retired
    record is never lost, and replay drops the same records from the model.  An array's elements
    retire together, and a job's template claims with it."""

    jobs: list[int] = field(default_factory=list)
    claims: list[int] = field(default_factory=list)
