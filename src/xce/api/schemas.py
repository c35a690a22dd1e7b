"""Request and response shapes of the REST API (the OpenAPI document is generated from these).

Requests are strict: unknown fields, wrong types and out-of-range values are
refused before anything reaches the model.
"""

from __future__ import annotations

import keyword
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from xce.names import NAME_PATTERN
from xce.wire import AgentOp, ClaimDoc, Dispatch, HistoryRow, JobDoc, JobRow, Limit, SnapshotDoc, Submission, TaskDispatch

Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]
Path = Annotated[str, Field(min_length=1, max_length=4096)]
Arg = Annotated[str, Field(max_length=65536)]
# every integer a request carries fits the store's 64-bit JSON (orjson refuses bigger ones: a fact
# holding one could not be written, and an answer echoing one could not be rendered)
Id = Annotated[int, Field(ge=1, le=2**63 - 1)]
Int64 = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _field_type(tp: Any) -> Any:
    """A ``xce.wire`` field type as pydantic takes it: each ``Limit`` mark as a ``Field`` with the same
    constraints, tuples as lists (JSON's arrays), unions and optionals member by member."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *marks = get_args(tp)
        limits = [{k: v for k, v in m.constraints().items() if k != "description"} for m in marks
                  if isinstance(m, Limit)]  # (a description is the field's: _description)
        return Annotated[_field_type(base), Field(**limits[0])] if limits and limits[0] else _field_type(base)
    if origin is tuple:
        return list[_field_type(get_args(tp)[0])]  # type: ignore[misc]
    if origin is dict:
        key, value = get_args(tp)
        return dict[_field_type(key), _field_type(value)]  # type: ignore[misc]
    if origin in (Union, UnionType):
        return Union[tuple(_field_type(a) for a in get_args(tp))]
    return tp


def _description(tp: Any) -> str | None:
    """The description a field's ``Limit`` marks give, wherever in its type they sit."""
    if get_origin(tp) is Annotated:
        base, *marks = get_args(tp)
        said = [m.description for m in marks if isinstance(m, Limit) and m.description]
        return said[0] if said else _description(base)
    if get_origin(tp) in (Union, UnionType):
        return next((d for d in map(_description, get_args(tp)) if d), None)
    return None


def request_model(wire_type: type, name: str) -> type[Strict]:
    """The strict request model of a ``xce.wire`` request type: the same fields (its annotations, in
    order), defaults (on the class) and limits, so the API accepts exactly what the wire type says
    (and the OpenAPI document says so)."""
    spec: dict[str, Any] = {}
    for field, tp in get_type_hints(wire_type, include_extras=True).items():
        described = {"description": d} if (d := _description(tp)) else {}
        if not hasattr(wire_type, field):
            default = Field(..., **described)
        elif getattr(wire_type, field) == ():
            default = Field(default_factory=list, **described)
        else:
            default = Field(getattr(wire_type, field), **described)
        spec[field] = (_field_type(tp), default)
    return create_model(name, __base__=Strict, __module__=__name__, **spec)


# POST /v1/jobs: xce.wire.Submission, field for field
JobSubmitRequest = request_model(Submission, "JobSubmitRequest")


class JobModifyRequest(Strict):
    """``xce mod``/``bmod``: what to change of a pending job (absent: unchanged); ``run_limit`` or
    ``dependency`` empty take it away."""

    queue: Name | None = None
    slots: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    resreq: Annotated[str, Field(max_length=4096)] | None = None
    run_limit: Annotated[str, Field(max_length=20, description="[HH:]MM; empty: none (or the queue's)")] | None = None
    dependency: Annotated[str, Field(max_length=4096, description="a -w expression; empty: none")] | None = None
    user_priority: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    name: Annotated[str, Field(min_length=1, max_length=600)] | None = None
    array_limit: Annotated[int, Field(ge=1, le=1_000_000, description="an array's %N")] | None = None
    whole_array: Annotated[bool, Field(description="the id is an array's: every element still waiting (else "
                                                   "the one job, an element alone)")] = False


class OutputOut(BaseModel):
    """``GET /v1/jobs/{id}/output``: a running job's output from ``offset``, as its worker read it."""

    job_id: int
    host: str
    offset: int = Field(description="the byte the data starts at")
    size: int = Field(description="the output's size when it was read")
    data: str = Field(description="the bytes, base64")


class PeekAnswer(Strict):
    """A worker's answer to an output read it was asked (``GET /v1/hosts/{host}/peeks``)."""

    id: Annotated[int, Field(ge=1)]
    offset: Annotated[int, Field(ge=0, le=2**62)] = 0
    size: Annotated[int, Field(ge=0, le=2**62)] = 0
    data: Annotated[str, Field(max_length=6 << 20)] = ""
    error: Annotated[str, Field(max_length=1024)] = ""
    # a task's output (blaunch's relay): data is its stdout from offset, err_data its stderr from err_offset
    err_offset: Annotated[int, Field(ge=0, le=2**62)] = 0
    err_data: Annotated[str, Field(max_length=6 << 20)] = ""
    eof: bool = False  # the task ended here and this is the last of its output
    missing: bool = False  # no output of the task here (not started yet, or read to its end already)


class SignalRequest(Strict):
    signal: Annotated[str, Field(min_length=1, max_length=32, description="USR1, SIGTERM, or a number 1-64")]


class UserCreateRequest(Strict):
    name: Name
    role: Literal["admin", "user", "daemon", "metrics"] = "user"
    projects: Annotated[list[Name], Field(max_length=256)] = ["default"]
    host: Name | None = None


class TokenCreateRequest(Strict):
    user: Name
    expires: Annotated[float, Field(gt=0, lt=1e11, description="when the token stops working, seconds "
                                    "since the Unix epoch (default: never; revoke it to end it sooner)")] | None = None


class ErrorBody(BaseModel):
    code: str
    message: str
    leader: str | None = Field(None, description="503 from a controller that is not the leader: the leader's "
                                                 "advertised URL (absent or null: unknown); nothing was done")


class ErrorResponse(BaseModel):
    error: ErrorBody


#: the error answers every route may give, documented on every router (``APIRouter(responses=ERRORS)``)
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 413, 422, 503)
}


def response_model(document: type, name: str) -> type[BaseModel]:
    """The response model of a ``xce.wire`` document (a ``TypedDict``), for the OpenAPI document: the
    same keys, required or not, with the same types (nested documents in turn), so what the API says
    it answers is what the typed client reads."""
    hints = get_type_hints(document, include_extras=True)
    spec: dict[str, Any] = {}
    for key, tp in hints.items():
        described = {"description": d} if (d := _description(tp)) else {}
        aliased = {"alias": key} if keyword.iskeyword(key) else {}
        field = Field(... if key in document.__required_keys__ else None, **described, **aliased)
        spec[f"{key}_" if aliased else key] = (_document_type(tp), field)
    return create_model(name, __module__=__name__, __doc__=document.__doc__,
                        __config__=ConfigDict(populate_by_name=True), **spec)


def _document_type(tp: Any) -> Any:
    if get_origin(tp) is Annotated:  # (its marks describe the field: response_model took them)
        return _document_type(get_args(tp)[0])
    if is_typeddict(tp):
        return response_model(tp, tp.__name__ + "Out")
    args = get_args(tp)
    if get_origin(tp) is list:
        return list[_document_type(args[0])]  # type: ignore[misc]
    if get_origin(tp) in (Union, UnionType):
        return Union[tuple(_document_type(a) for a in args)]
    return tp


# the job documents: xce.wire's, key for key (tests/wire checks those against real answers)
JobOut = response_model(JobDoc, "JobOut")
JobBriefOut = response_model(JobRow, "JobBriefOut")
HistoryJobOut = response_model(HistoryRow, "HistoryJobOut")


class HealthOut(BaseModel):
    ok: bool
    leader: bool = Field(description="whether this controller serves (leads); a standby answers false")


class UsageOut(BaseModel):
    project: str
    user: str | None = Field(None, description="with by=user: the user a row is for (null: the project's total)")
    jobs: int
    slot_hours: float
    cpu_hours: float = Field(description="user + system CPU of those jobs' last runs, as their workers measured")
    claims: int
    claim_byte_hours: float


class FairShareRowOut(BaseModel):
    project: str
    user: str | None = Field(None, description="null: the project's own row (its users' sum)")
    share: float = Field(description="the share, as a fraction of its level (projects; a project's users)")
    usage: float = Field(description="decayed, weighted usage: slot-seconds, GPU-seconds and claim GiB-seconds "
                                     "times their factors, the runs going now included")
    running_slots: int
    priority: float = Field(description="dynamic priority: share / (usage + run_job_factor x (1 + running slots)); "
                                        "higher goes first within a queue")


class FairShareOut(BaseModel):
    enabled: bool = Field(description="fair share orders the queues: some [[projects]] table sets shares or "
                                      "user_shares (else oldest first)")
    half_life: float = Field(description="seconds in which usage halves ([controller] fairshare_half_life)")
    rows: list[FairShareRowOut]


class QueueOut(BaseModel):
    name: str
    priority: int
    description: str
    pending: int
    running: int
    stage_class: str | None = Field(None, description="the staging class of its jobs that stage without "
                                                      "--stage-class or a profile's (none: [claims] stage_class)")


class AppClaimOut(BaseModel):
    name: str
    claim_class: str
    size: str | int


class AppOut(BaseModel):
    name: str
    description: str
    claims: list[AppClaimOut]
    stage_class: str | None = Field(None, description="the staging class of --app jobs without --stage-class")


class ProjectOut(BaseModel):
    name: str
    description: str


class UserOut(BaseModel):
    name: str
    role: str
    projects: list[str]
    host: str | None
    created: float
    disabled: bool


class TokenOut(BaseModel):
    """The one answer that carries a token's secret: the one that creates it."""

    token_id: str
    user: str
    token: str
    expires: float | None


class TokenInfo(BaseModel):
    """A token as listed: never its secret nor its hash."""

    token_id: str
    user: str
    created: float
    expires: float | None
    expired: bool
    revoked: bool
    revoked_time: float | None


class AuditOut(BaseModel):
    seq: int
    time: float
    user: str
    action: str
    target: str
    result: str
    detail: str
    position: int


class ControllerOut(BaseModel):
    url: str
    role: str = Field(description="leader, standby, or unreachable (it stopped announcing itself)")
    log_position: int
    behind: int = Field(description="facts the controller's model lags behind the leader's log")
    seen: float = Field(description="seconds since it last announced itself in the store")


class PingOut(BaseModel):
    version: str
    cluster_id: str
    leader: bool
    leader_epoch: int
    log_position: int
    store: str
    user: str
    role: str
    url: str = Field("", description="the URL this (leading) controller advertises")
    standbys: list[str] = Field(default_factory=list, description="the standbys' URLs, as the store knows them")


# ---------------------------------------------------------------- claims

AccessModeName = Literal["RWO", "ROX", "RWX", "RWOP"]
Size = Annotated[int, Field(ge=1, le=2**63 - 1)] | Annotated[str, Field(min_length=1, max_length=32)]
ParamName = Annotated[str, Field(pattern=NAME_PATTERN, max_length=63)]


class ClaimCreateRequest(Strict):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    name: Name
    claim_class: Name | None = Field(None, alias="class", description="required unless the claim is a clone")
    size: Size | None = Field(None, description="bytes, or with a unit: 500Mi, 10Gi, 2T; a clone's defaults to "
                                                "its source's (and may not be smaller)")
    access_mode: AccessModeName | None = Field(
        None, description="required unless the claim is a clone (which takes its source's)")
    reclaim_policy: Literal["retain", "delete"] | None = None
    params: Annotated[dict[ParamName, Annotated[str, Field(max_length=1024)]],
                      Field(max_length=64)] = Field(default_factory=dict)
    project: Name | None = None
    from_snapshot: Name | None = Field(None, description="a clone: its content is this READY snapshot's")
    from_claim: Name | None = Field(None, description="a clone: its content is this READY claim's")
    populate_from: Annotated[str, Field(min_length=1, max_length=4096)] | None = Field(
        None, description="a URL or REMOTE:path (xce transfers list) the claim is filled from by the provisioner "
                          "(a node-local claim's replicas: each by its host's worker); READY once the data is complete")
    hosts: Annotated[list[Name], Field(max_length=64)] = Field(
        default_factory=list, description="a node-scope class's claim: a replica on each of these hosts")
    replicas: Annotated[int, Field(ge=1, le=64)] | None = Field(
        None, description="a node-scope class's claim: replicas on this many hosts the scheduler chooses by free "
                          "capacity (instead of hosts)")
    cache: bool = Field(False, description="a node-scope ROX claim with a source: replicas made on demand where its "
                                           "jobs go, unused ones evicted least recently used when room is needed")
    snapshot_on_preempt: bool = Field(
        False, description="an RWO claim of a class that takes snapshots: a run preempted while it has the claim "
                           "attached has it snapshotted (<claim>-preempt-<job>-r<run>) before it is attached again")

    @model_validator(mode="after")
    def _snapshot_on_preempt_is_rwo(self) -> ClaimCreateRequest:
        if self.snapshot_on_preempt and self.access_mode not in (None, "RWO"):
            raise ValueError(f"snapshot_on_preempt is for RWO claims (written by one host at a time), not "
                             f"{self.access_mode}")
        return self


class SnapshotCreateRequest(Strict):
    name: Name
    claim: Name = Field(description="the standalone claim to take a snapshot of")
    project: Name | None = Field(None, description="the claim's project, when yours are in several")


SnapshotOut = response_model(SnapshotDoc, "SnapshotOut")


class ClaimResizeRequest(Strict):
    size: Size = Field(description="the new size: bytes, or with a unit (500Mi, 10Gi, 2T); larger than the claim's")


class ReplicaHostsRequest(Strict):
    hosts: Annotated[list[Name], Field(min_length=1, max_length=64)] = Field(
        description="warm: a replica more on each of these hosts; evict: release the replica on each")


class AttachmentRequest(Strict):
    host: Name
    mode: Literal["rw", "ro"] = "rw"
    job_id: Id | None = None


ClaimOut = response_model(ClaimDoc, "ClaimOut")


class AttachmentOut(BaseModel):
    id: int
    host: str
    mode: str
    job_id: int | None
    run: int | None
    state: str
    path: str | None
    created: float
    by: str


class ClaimClassOut(BaseModel):
    name: str
    provider: str
    scope: str
    pools: list[str]
    access_modes: list[str]
    reclaim_policy: str
    parameters: dict[str, str]
    allowed_parameters: list[str]
    description: str
    capabilities: dict[str, Any] | None = Field(description="what the class's provider can do (null: no agent "
                                                            "has asked it yet)")


class PoolOut(BaseModel):
    name: str
    capacity_bytes: int
    configured_bytes: int
    used_bytes: int
    snapshot_bytes: int
    free_bytes: int
    available_bytes: int | None
    data_bytes: int | None
    description: str


class OrphanOut(BaseModel):
    """A provider object no claim owns (``kind`` provider_object), or a claim left without a reason to
    live (``kind`` claim): the keys after ``claim_id`` are one kind's."""

    kind: Literal["provider_object", "claim"]
    claim_id: int | None
    handle: str | None = None
    class_: str = Field(alias="class")
    provider: str | None = None
    tags: dict[str, str] | None = None
    size_bytes: int | None = None
    first_seen: float | None = None
    age: float
    retain: bool | None = None
    object_kind: str | None = None
    host: str | None = None  # a node object's host (None: a shared object)
    releases_in: float | None = None
    name: str | None = None
    state: str | None = None
    project: str | None = None
    reason: str | None = None


class SchemeOut(BaseModel):
    scheme: str
    via: str = Field(description="public, or the remote that serves it")
    projects: list[str]


class RemoteOut(BaseModel):
    name: str
    type: str
    schemes: list[str]
    projects: list[str]
    description: str


class TransfersOut(BaseModel):
    schemes: list[SchemeOut]
    remotes: list[RemoteOut]
    remote_names: list[str]


# ---------------------------------------------------------------- hosts and their workers

class HostOut(BaseModel):
    name: str
    state: str
    reason: str
    slots: int
    slots_used: int
    attrs: dict[str, str]
    counters: dict[str, float]
    counters_used: dict[str, float]
    registered: float
    last_heartbeat_age: float | None


class ResourceOut(BaseModel):
    """A resource type: an L1 attribute (its ``values``) or an L2 counter (its ``total`` and ``used``)."""

    name: str
    layer: Literal["L1", "L2"]
    scope: str
    unit: str
    description: str
    values: list[str] | None = None
    total: float | None = None
    used: float | None = None


class RunRefOut(BaseModel):
    job_id: int
    run: int


class KillOut(BaseModel):
    kill: list[RunRefOut] = Field(description="runs the host has that are not its own any more: to end now")


class RegisteredOut(KillOut):
    fence: float = Field(description="how long a run's shepherd keeps it past the worker's last answered heartbeat")


class HostRemovedOut(BaseModel):
    name: str = Field(description="the host removed from the cluster (xce host remove)")
    removed: bool


class HeartbeatOut(BaseModel):
    ok: bool
    fence: float


class KillOrderOut(BaseModel):
    grace: float


class OrdersOut(BaseModel):
    """What a run's processes have been ordered, as the worker passes it to the run's shepherd."""

    job_id: int
    run: int
    seq: int
    kill: KillOrderOut | None
    signals: list[list[Any]]
    suspend: bool


DispatchOut = response_model(Dispatch, "DispatchOut")
TaskDispatchOut = response_model(TaskDispatch, "TaskDispatchOut")


class HostWorkOut(BaseModel):
    dispatch: list[DispatchOut]  # type: ignore[valid-type]
    orders: list[OrdersOut]
    tasks: list[TaskDispatchOut] = Field(  # type: ignore[valid-type]
        default_factory=list, description="tasks of running jobs (blaunch) to start on the host")
    over: list[RunRefOut] = Field(default_factory=list, description="runs the host has tasks of that are over: "
                                                                    "their tasks are to end now")
    fence: float | None = Field(None, description="absent for a host declared lost meanwhile")


# ---------------------------------------------------------------- claim agents

OpId = Annotated[str, Field(min_length=1, max_length=200)]
Label = Annotated[str, Field(max_length=256)]  # a provider's host label: key or value


class LeaseRequest(Strict):
    holder: Annotated[str, Field(min_length=1, max_length=200)]


class IntentRef(Strict):
    op_id: OpId
    claim_id: Id
    snapshot_id: Id | None = None  # a snapshot's op (``claim_id`` is then the claim it is of)


class IntentsRequest(Strict):
    epoch: Id
    ops: Annotated[list[IntentRef], Field(max_length=10_000)]


class OpResult(Strict):
    op_id: OpId
    claim_id: Id
    snapshot_id: Id | None = None
    ok: bool
    handle: Annotated[str, Field(max_length=1024)] | None = None
    size_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    reachable_hosts: Annotated[list[Name], Field(max_length=100_000)] | None = None
    host_labels: dict[Label, Label] = Field(default_factory=dict)
    path: Annotated[str, Field(max_length=4096)] | None = None
    message: Annotated[str, Field(max_length=8192)] = ""
    code: Annotated[str, Field(max_length=64)] = ""
    retryable: bool = True
    stderr_tail: Annotated[str, Field(max_length=8192)] = ""
    # bytes the object's data takes now, if the provider said (a reading: controller/observed.py)
    used_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None


class ProgressItem(Strict):
    op_id: OpId
    claim_id: Id
    bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    total_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    rate: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None  # bytes per second


class ProgressRequest(Strict):
    """Transfers in flight (stage-in, populate): readings kept in the leader's memory, not facts."""

    epoch: Id
    items: Annotated[list[ProgressItem], Field(max_length=10_000)] = Field(default_factory=list)


class ReportsRequest(Strict):
    epoch: Id
    results: Annotated[list[OpResult], Field(max_length=10_000)] = Field(default_factory=list)
    orphans_released: Annotated[list[Annotated[str, Field(max_length=1024)]],
                                Field(max_length=10_000)] = Field(default_factory=list)
    # > 0: also take up to this many ops now due to the agent, their intents committed with the report
    # (what the report opened, e.g. a staging claim's stage_in after its create), as POST .../work does
    take: Annotated[int, Field(ge=0, le=10_000)] = 0


class TakeWorkRequest(Strict):
    epoch: Id


class InventoryObject(BaseModel):
    model_config = ConfigDict(extra="ignore")

    handle: Annotated[str, Field(min_length=1, max_length=1024)]
    tags: dict[Annotated[str, Field(max_length=256)], Annotated[str,
                                                                Field(max_length=1024)]] = Field(default_factory=dict)
    size_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    created: Annotated[float, Field(allow_inf_nan=False)] | None = None
    used_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    kind: Literal["volume", "snapshot"] = "volume"


class InventoryRequest(Strict):
    epoch: Id
    class_name: Name
    provider: Annotated[str, Field(min_length=1, max_length=200)]
    objects: Annotated[list[InventoryObject], Field(max_length=1_000_000)]
    # the class's provider's ``health`` reading (CSI GetCapacity); None: it reports none
    capacity_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None
    available_bytes: Annotated[int, Field(ge=0, le=2**63 - 1)] | None = None


CapabilityValue = bool | Annotated[list[Annotated[str, Field(max_length=8)]], Field(max_length=8)]


class ClassCapabilitiesIn(Strict):
    class_name: Name
    provider: Annotated[str, Field(min_length=1, max_length=200)]
    # the provider's ``capabilities`` reply; None: it answered UNSUPPORTED (it can do none of them)
    capabilities: Annotated[dict[Annotated[str, Field(max_length=64)], CapabilityValue],
                            Field(max_length=16)] | None = None


class CapabilitiesRequest(Strict):
    epoch: Id
    classes: Annotated[list[ClassCapabilitiesIn], Field(max_length=1000)]


AgentOpOut = response_model(AgentOp, "AgentOpOut")


class LeaseOut(BaseModel):
    agent: str
    epoch: int
    cluster_id: str
    orphan_scan_interval: float


class AgentOrphanOut(BaseModel):
    """An orphan due for release, as its agent releases it (a node object's: its host's node agent)."""

    handle: str
    class_name: str
    provider: str
    claim_id: int | None
    op_id: str
    tags: dict[str, str]
    host: str | None = None


class AgentWorkOut(BaseModel):
    ops: list[AgentOpOut]  # type: ignore[valid-type]
    orphans: list[AgentOrphanOut]
    dispatch: list[DispatchOut] | None = Field(  # type: ignore[valid-type]
        None, description="a node agent's: its host's runs whose readiness gate a report opened")


class IntentsOut(BaseModel):
    accepted: list[str]
    refused: dict[str, str]


class AgentReportsOut(BaseModel):
    refused: dict[str, str] = Field(description="op id -> why its result was not taken")
    work: AgentWorkOut | None = Field(None, description="with take > 0: the ops taken")


class ProgressOut(BaseModel):
    taken: int


class CapabilitiesOut(BaseModel):
    changed: int
    refused: dict[str, str]


class InventoryOut(BaseModel):
    new_orphans: int
