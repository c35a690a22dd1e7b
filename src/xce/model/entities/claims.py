"""What a claim is: its enums, the ``Claim``, its ``Attachment`` and ``Resize`` records, and its names.

Plain data.  How a claim changes is in ``xce.model.claims.lifecycle``; what requests may do to
one is in ``xce.model.claims.decide``; what agents do with its ops is in ``xce.model.claims.agents``
(the discipline every op follows: ``xce.model.ops``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from xce.agentnames import SHARED_AGENT, node_agent
from xce.model.entities.ops import Op


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


class AttachmentState(enum.StrEnum):
    ATTACHING = "ATTACHING"
    ATTACHED = "ATTACHED"
    DETACHING = "DETACHING"


class ResizeState(enum.StrEnum):
    """A resize of a READY claim (the claim stays READY and usable throughout)."""

    REQUESTED = "REQUESTED"  # asked (quota charged); waiting for the scheduler to reserve the growth in its pool
    EXPANDING = "EXPANDING"  # the growth is reserved; the expand op is open
    DONE = "DONE"  # the provider grew it: the claim's size is the new one
    FAILED = "FAILED"  # refused for good, out of attempts, or cancelled: the claim keeps its old size


class ReplicaState(enum.StrEnum):
    """One host's copy of a node-local standalone claim (``Replica``)."""

    PENDING = "PENDING"  # its host named (or to be chosen); waiting for its size to be reserved there
    PREPARING = "PREPARING"  # its host's agent is creating it
    READY = "READY"
    RELEASING = "RELEASING"
    RELEASED = "RELEASED"
    FAILED = "FAILED"
    LOST = "LOST"  # its host was declared lost: not used until its worker, back, has checked it


class Scope(enum.StrEnum):
    """Who prepares a claim: the provisioner (shared storage) or the worker of its host (node-local)."""

    SHARED = "shared"
    NODE = "node"


class Mode(enum.StrEnum):
    """How an attachment (a job's use of a standalone claim) may touch the data."""

    RW = "rw"
    RO = "ro"


S = ClaimState
LIVE = frozenset({S.PENDING, S.PREPARING, S.READY, S.RELEASING, S.FAILED})  # holds its name and quota

# what a job publishes its own template claims as ($XCE_SCRATCH, $XCE_STAGE, $XCE_WORKSPACE): no
# standalone claim may take these names, or it would be mounted over the job's own
RESERVED_NAMES = frozenset({"scratch", "stage", "workspace"})


@dataclass
class Resize:
    """The claim's latest resize: open (REQUESTED, EXPANDING) or how the last one ended."""

    size_bytes: int  # the size asked for
    old_bytes: int  # the claim's size when it was asked
    by: str
    requested: float
    state: ResizeState = ResizeState.REQUESTED
    error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}

    def __post_init__(self) -> None:
        self.state = ResizeState(self.state)

    @property
    def open(self) -> bool:
        return self.state in (ResizeState.REQUESTED, ResizeState.EXPANDING)


@dataclass
class Attachment:
    """One use of a standalone claim on one host (by a job's run, or added by an admin)."""

    id: int
    host: str
    mode: Mode
    created: float
    by: str
    job_id: int | None = None
    run: int | None = None
    state: AttachmentState = AttachmentState.ATTACHED
    op: Op | None = None
    path: str | None = None  # where the claim's data is reachable on the host (from the provider)
    detach_requested: bool = False
    last_error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}

    def __post_init__(self) -> None:
        self.state = AttachmentState(self.state)
        self.mode = Mode(self.mode)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)


@dataclass
class Replica:
    """One host's copy of a node-local standalone claim: made, and released, by that host's node agent
    (``node:HOST``) under the one op discipline (``xce.model.claims.replicas``), its size reserved on
    the host's counter of the claim's class once the scheduler placed it."""

    no: int  # its number in the claim: its op ids are ``c<claim>.r<no>.<op>.<n>``
    host: str
    created: float
    state: ReplicaState = ReplicaState.PENDING
    counter: str | None = None  # the host counter its size is reserved on (None: not placed yet)
    op: Op | None = None
    op_counts: dict[str, int] = field(default_factory=dict)
    attempts: int = 0  # of its latest op
    handle: str | None = None
    path: str | None = None
    data_exists: bool = False  # a create was attempted: an object may exist on the host
    last_error: str | None = None
    history: list[dict[str, Any]] = field(default_factory=list)  # {state, time, reason}
    last_used: float | None = None  # READY, or a job's attachment there began or ended (caches evict the oldest)

    def __post_init__(self) -> None:
        self.state = ReplicaState(self.state)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)

    @property
    def placed(self) -> bool:
        return self.counter is not None


@dataclass(slots=True)  # more fields than CPython shares one key table for: see Job
class Claim:
    id: int
    name: str
    form: ClaimForm
    class_name: str
    scope: Scope
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
    resize: Resize | None = None  # the latest resize (``xce claim resize``)
    # a clone: the content source it was made from, {"kind": "snapshot"|"claim", "id", "name", "handle"}
    source: dict[str, Any] | None = None
    # a populated claim: the location (canonical: a URL or REMOTE:path, resolved for its project) its data
    # is copied from after its create; READY only once the copy is complete
    populate_from: str | None = None
    early: bool = False  # a job's shared staging claim, made at submission and staged before hosts are held
    # a node-local standalone claim: a replica per host (``--hosts``), and how many more the scheduler
    # chooses hosts for by free capacity (``--replicas N``)
    replicas: list[Replica] = field(default_factory=list)
    replicas_to_place: int = 0
    # a cache (``--cache``, ROX, filled from its source): replicas are made where its jobs are placed, on
    # demand, and unattached ones evicted least recently used when their host's counter is needed
    cache: bool = False
    counter: str | None = None  # a cache's: the host counter its replicas are reserved on (its class's at creation)
    # ``--snapshot-on-preempt`` (RWO, a class that can snapshot): a run preempted while it had the claim
    # attached has it snapshotted before it is attached again (``xce.model.preempt_snapshots``)
    snapshot_on_preempt: bool = False
    snapshot_before_attach: int | None = None  # that snapshot: attaches wait while it is being made

    def __post_init__(self) -> None:
        self.form = ClaimForm(self.form)
        self.scope = Scope(self.scope)
        self.access_mode = AccessMode(self.access_mode)
        self.reclaim_policy = ReclaimPolicy(self.reclaim_policy)
        self.state = ClaimState(self.state)
        if isinstance(self.op, dict):
            self.op = Op(**self.op)
        self.attachments = [a if isinstance(a, Attachment) else Attachment(**a) for a in self.attachments]
        if isinstance(self.resize, dict):
            self.resize = Resize(**self.resize)
        self.replicas = [r if isinstance(r, Replica) else Replica(**r) for r in self.replicas]

    @property
    def charged_bytes(self) -> int:
        """Quota use: the larger of what was asked and what the provider made, and an open resize's
        size from the moment it is asked (as a new claim is charged before it is placed)."""
        open_resize = self.resize.size_bytes if self.resize is not None and self.resize.open else 0
        return max(self.size_bytes, self.actual_bytes or 0, open_resize) * max(1, self.replica_count)

    @property
    def replicated(self) -> bool:
        """A node-local standalone claim: its data is in its replicas, one per host."""
        return bool(self.replicas) or self.replicas_to_place > 0 or self.cache

    @property
    def replica_count(self) -> int:
        """The replicas it has or will have (each holds its size on its host): released ones are gone."""
        return sum(r.state is not ReplicaState.RELEASED for r in self.replicas) + self.replicas_to_place

    @property
    def replica_charge(self) -> int:
        """What one more replica adds to its quota charge (``charged_bytes``): nothing for the first, which a
        claim is charged from its creation, its size for each after."""
        return max(self.size_bytes, self.actual_bytes or 0) if self.replica_count > 0 else 0

    def replica_on(self, host: str) -> Replica | None:
        """Its replica on ``host`` that is not RELEASED (a host holds one at a time)."""
        return next((r for r in self.replicas if r.host == host and r.state is not ReplicaState.RELEASED), None)

    def unplaced_hosts(self) -> list[str]:
        """The named hosts whose replicas wait for their size to be reserved there."""
        return [r.host for r in self.replicas if not r.placed and r.state is ReplicaState.PENDING]

    @property
    def replicas_waiting(self) -> bool:
        """Replicas wait for the scheduler: on named hosts, or on hosts it is to choose."""
        return self.replicated and self.live and not self.delete_requested and \
            bool(self.replicas_to_place or self.unplaced_hosts())

    def ready_hosts(self) -> list[str]:
        """Where a job can use it: the hosts of its READY replicas."""
        return sorted(r.host for r in self.replicas if r.state is ReplicaState.READY)

    def replica_by_op(self, op_id: str) -> Replica | None:
        return next((r for r in self.replicas if r.op is not None and r.op.op_id == op_id), None)

    @property
    def reserved_bytes(self) -> int:
        """Pool use: as ``charged_bytes``, but a resize counts only once the scheduler reserved it."""
        expanding = self.resize.size_bytes if self.resize is not None and self.resize.state is \
            ResizeState.EXPANDING else 0
        return max(self.size_bytes, self.actual_bytes or 0, expanding)

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def cloning_from(self, kind: str, source_id: int) -> bool:
        """Whether this claim is still being made from that snapshot or claim (its create not done)."""
        return (self.source is not None and self.source.get("kind") == kind and self.source.get("id") == source_id
                and self.state in (ClaimState.PENDING, ClaimState.PREPARING))

    @property
    def agent(self) -> str:
        """Who runs this claim's provider ops: the provisioner, or the node agent of its host."""
        return SHARED_AGENT if self.scope is Scope.SHARED or self.host is None else node_agent(self.host)

    def agent_for(self, attachment: Attachment | None) -> str:
        if attachment is None or self.scope is Scope.SHARED:
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
        busy = next(((r.host, r.op) for r in self.replicas if r.op is not None), None)
        if busy is not None:
            host, op = busy
            return f"{op.kind.value} on {host} (op {op.op_id}" + (f", attempt {op.attempts})" if op.attempts else ")")
        if self.delete_requested and self.attachments and self.state is not ClaimState.RELEASED:
            n = len(self.attachments)
            return f"deletion waits for {n} attachment{'s' if n > 1 else ''} to go"
        ops = self.open_ops()
        if ops:
            op, a = ops[0]
            what = f"{op.kind.value}" + (f" on {a.host}" if a is not None else "") + f" (op {op.op_id}"
            return what + (f", attempt {op.attempts})" if op.attempts else ")")
        return None


@dataclass(frozen=True)
class ContentSource:
    """What a clone is made from (CSI's ``VolumeContentSource``): a READY snapshot, or a READY claim,
    of the same claim class (the provider that holds it is the one that copies it)."""

    kind: str  # "snapshot" or "claim"
    id: int
    name: str
    handle: str
    class_name: str
    project: str
    size_bytes: int
    access_mode: str

    def as_record(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "name": self.name, "handle": self.handle}


# ---------------------------------------------------------------- names


def name_key(project: str, name: str) -> str:
    """Standalone claim names are per project (as Kubernetes' PVCs are per namespace): the key of
    ``model.claim_names``.  Template claims have no entry: nobody can name, squat or take theirs."""
    return f"{project}/{name}"


TEMPLATE_NAME = re.compile(r"^j(?P<job>[0-9]{1,18})\.(?P<run>[0-9]{1,9}):(?P<kind>[a-z0-9][a-z0-9\-_.]{0,62})$")


def template_name(job_id: int, run: int, kind: str) -> str:
    """``j12.1:scratch``: a run's template claim.  The ``:`` is outside the name pattern users
    choose from, so no standalone claim can ever be called that."""
    return f"j{job_id}.{run}:{kind}"

