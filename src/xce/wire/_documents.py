"""What the controller answers and what the daemons exchange with it, as ``TypedDict``s.

Each is the decoded JSON itself (a dict at run time), so reading one costs nothing and
``doc["state"]`` reads as before; a type checker knows every key and its type.  The shapes are
made by ``xce.api.views`` (documents) and the agent and worker routes; ``tests/wire`` checks each
type's keys against what a real controller sends, so a key added there fails until it is added
here.  States are strings on the wire; ``xce.client.states`` names them.
"""

from __future__ import annotations  # (annotations stay text until asked for: the CLI starts faster)

from typing import Annotated, Any, TypedDict

from xce.wire._submission import Limit


# "class" is a keyword, so no class body can name it: the documents that carry it inherit it
_Class = TypedDict("_Class", {"class": str})
_MaybeClass = TypedDict("_MaybeClass", {"class": str}, total=False)


class RunUsage(TypedDict):
    """What a run used, as its worker measured it."""

    max_rss_bytes: int | None
    cpu_user_s: float | None
    cpu_sys_s: float | None


class JobClaimDoc(_MaybeClass, total=False):
    """One of a job's claims as ``xce job show`` lists it: its workspace, a template claim, or a
    standalone claim it uses (``form``); keys beyond the first few depend on the form."""

    name: str
    form: str  # template | standalone
    state: str
    mode: str  # rw | ro
    env: str
    attempts: int | None
    last_error: str | None
    path: str | None
    host: str | None
    kind: str
    access_mode: str
    claim_id: int
    attachments: list[dict[str, Any]]



class TaskDoc(TypedDict):
    """A task of a job's run on one of its hosts (``blaunch``)."""

    task: int
    host: str
    command: str
    ended: bool
    exit_code: int | None
    signal: int | None
    reason: str


class _SubmittedKeys(TypedDict, total=False):
    warnings: Annotated[list[str], Limit(description=(
        "POST /v1/jobs's answer only: what the submission names that no host has (a select[] attribute), "
        "for its submitter; the job is submitted all the same"))]


class JobDoc(_SubmittedKeys):
    """A job: ``GET /v1/jobs/{id}``, ``POST /v1/jobs``'s answer, ``xce --json job show``."""

    id: int
    display_id: str  # "12" or "12[3]"
    name: str
    user: str
    project: str
    queue: str
    state: str  # xce.client.states.JobState
    command: list[str]
    submit_time: float
    start_time: float | None
    end_time: float | None
    pending_reason: str | None
    exit_code: int | None
    signal: int | None
    exit_reason: str | None
    hosts: list[str]
    claims: list[JobClaimDoc]
    slots: int
    resreq: str
    cwd: str | None
    stdout: str | None
    stderr: str | None
    rerunnable: bool
    array_parent: int | None
    array_index: int | None
    run: int
    app: str | None
    publish: str | None
    history: list[dict[str, Any]]
    alloc_time: float | None
    held_s: float | None
    mem_limit: int | None
    usage: Annotated[RunUsage | None, Limit(description="what the last run used (null before a run has ended)")]
    shell: Annotated[bool, Limit(description="command is one command line, run by /bin/sh -c")]
    script: Annotated[str | None, Limit(description="the job's script (it was submitted as one; command holds "
                                                    "its arguments)")]
    submit_dir: Annotated[str | None, Limit(description="where the job was submitted from: it starts there "
                                                        "unless cwd says otherwise")]
    note: Annotated[str | None, Limit(description="what its worker noted starting the run (the submission "
                                                  "directory cannot be entered on its host: it started in its "
                                                  "workspace)")]
    dependency: Annotated[str | None, Limit(description="-w: the dependency expression as submitted")]
    terminate_orphan: Annotated[bool, Limit(description="-ti: ended if its dependency can never hold")]
    run_limit: Annotated[float | None, Limit(description="-W (or the queue's run_limit): seconds a run may last")]
    run_estimate: Annotated[float | None, Limit(description="-We: seconds a run is expected to take")]
    user_priority: Annotated[int, Limit(description="-sp: its order within its queue, higher first")]
    begin_time: Annotated[float | None, Limit(description="-b: not started before (seconds since the epoch)")]
    exclusive: Annotated[bool, Limit(description="-x: its hosts run nothing else while it holds them")]
    requeue_exit: Annotated[str | None, Limit(description="-Q (or its queue's requeue_exit_values): exit codes "
                                                          "that send it back to the queue")]
    requeues: Annotated[int, Limit(description="runs requeued by their exit value so far")]
    avoid_hosts: Annotated[list[str], Limit(description="hosts its next runs never go to (an EXCLUDE() exit "
                                                        "value, a failed pre-exec)")]
    pre_exec: Annotated[str | None, Limit(description="-E: run before its command, as it")]
    post_exec: Annotated[str | None, Limit(description="-Ep: run after its command ends")]
    pre_exec_failures: Annotated[int, Limit(description="runs whose -E failed (each requeued to another host)")]
    post_exec_exit: Annotated[int | None, Limit(description="the last run's -Ep exit code (null: it did not run)")]
    gpu: Annotated[dict[str, Any] | None, Limit(description=(
        "-gpu (or rusage[ngpus_physical=]): num (per host), mode, j_exclusive, gmodel, gmem (bytes)"))]
    gpus: Annotated[dict[str, list[dict[str, Any]]], Limit(description=(
        "the GPUs of its current (or last) run on each host: {id, uuid, model} each"))]
    rendezvous: Annotated[str | None, Limit(description="ADDR:PORT on the run's first host (XCE_RDZV_HOST, "
                                                        "XCE_RDZV_PORT)")]
    tasks: Annotated[list[TaskDoc], Limit(description="the run's tasks on its hosts (blaunch)")]


class _Row(TypedDict):
    """The columns every job listing shows."""

    id: int
    display_id: str
    name: str
    user: str
    project: str
    queue: str
    state: str
    slots: int
    hosts: list[str]
    submit_time: float
    start_time: float | None
    end_time: float | None


class JobRow(_Row):
    """A job as a listing's row shows it (``GET /v1/jobs?view=brief``, what ``xce jobs`` prints)."""


class HistoryRow(_Row):
    """A finished job, live or archived, as ``GET /v1/history/jobs`` lists it (``xce hist``)."""

    exit_code: int | None
    signal: int | None
    exit_reason: str | None
    run_s: float | None
    run: int
    array_parent: int | None
    array_index: int | None
    archived: bool
    usage: RunUsage | None


class OpSummary(TypedDict):
    """A claim's or a snapshot's open op, as its document shows it."""

    op_id: str
    op: str
    attempts: int
    agent: str | None
    epoch: int | None
    next_retry: float | None


class _Operated(_Class):
    """What a claim's and a snapshot's documents share: the object's handle, and its ops (the one open
    and those done), with their attempts, errors and what it waits for."""

    handle: str | None
    created: float
    attempts: int
    last_error: str | None
    stderr_tail: str | None
    next_retry: float | None
    op: OpSummary | None
    op_ids: list[str]
    delete_requested: bool
    data_exists: bool
    waiting: str | None
    history: list[dict[str, Any]]
    ops: list[dict[str, Any]]


class ReplicaDoc(TypedDict):
    """One host's copy of a node-local claim, as its claim's document lists it."""

    host: str
    state: str  # PENDING, PREPARING, READY, RELEASING, RELEASED, FAILED
    placed: bool  # its size is reserved on the host's counter
    handle: str | None
    path: str | None
    attempts: int  # of its latest op
    last_error: str | None
    op: OpSummary | None
    history: list[dict[str, Any]]
    last_used: float | None  # READY, or a job's use there began or ended (a cache evicts the oldest unused)
    progress: dict[str, Any] | None  # while it is filled: {op_id, bytes, total_bytes, rate, time}, its worker's latest


class ClaimDoc(_Operated):
    """A claim: ``GET /v1/claims/{name}``, ``xce --json claim show``."""

    id: int
    name: str
    form: str
    scope: str
    size_bytes: int
    actual_bytes: int | None
    used_bytes: Annotated[int | None, Limit(description="what the provider last listed the claim's data taking "
                                                        "(None: no reading yet)")]
    resize: Annotated[dict[str, Any] | None, Limit(description="the latest resize: state (REQUESTED, EXPANDING, "
                                                               "DONE, FAILED), size_bytes, old_bytes, error, "
                                                               "waiting, history")]
    access_mode: str
    reclaim_policy: str
    state: str  # xce.client.states.ClaimState
    owner: str
    project: str
    params: dict[str, str]
    job_id: int | None
    pool: str | None
    host: str | None
    path: str | None
    reachable_hosts: list[str] | None
    host_labels: dict[str, str]
    attachments: list[dict[str, Any]]
    retained: bool
    source: dict[str, Any] | None
    populate_from: str | None
    transfer: dict[str, Any] | None
    replicas: Annotated[list[ReplicaDoc], Limit(description="a node-local claim's replicas, one per host (empty: "
                                                            "a claim of one object)")]
    replicas_ready: int  # how many replicas are READY: the claim is READY while one is
    replicas_to_place: int  # replicas still to be placed on hosts the scheduler chooses (--replicas N)
    cache: bool  # a cache (--cache): replicas made where its jobs go, unused ones evicted when room is needed
    snapshot_on_preempt: Annotated[bool, Limit(description="--snapshot-on-preempt: a run preempted while it has "
                                                           "the claim attached has it snapshotted (<claim>-preempt-"
                                                           "<job>-r<run>) before it is attached again")]
    stage_in: list[Any]
    stage_out: list[Any]


class SnapshotDoc(_Operated):
    """A snapshot: ``GET /v1/snapshots/{name}``, ``xce --json snapshot show``."""

    id: int
    name: str
    project: str
    owner: str
    claim: str
    claim_id: int
    state: str  # xce.client.states.SnapshotState
    size_bytes: int
    actual_bytes: int | None
    preempted: Annotated[dict[str, Any] | None, Limit(description="a snapshot taken because a run was preempted "
                                                                  "(--snapshot-on-preempt): {job_id, run}; else null")]


class _AgentOpKeys(TypedDict):
    op_id: str
    op: str  # create, attach, stage_in, create_snapshot, ...
    attempt: int
    claim_id: int
    claim_name: str
    class_name: str
    scope: str
    provider: str | None
    size_bytes: int
    access_mode: str
    params: dict[str, str]
    handle: str | None
    host: str | None
    path: str | None
    tags: dict[str, str]


class AgentOp(_AgentOpKeys, total=False):
    """An op a claim agent runs (``POST /v1/agents/{agent}/work``): what the provider, or the agent
    itself, needs, with the owner tags every object it makes carries; the keys below only for some."""

    snapshot_id: int  # a snapshot's op (claim_id is then the claim it is of)
    source_handle: str  # a clone's create: the provider copies its source
    user: str  # stage_in, stage_out: done as the job's user; a replica's populate: as its claim's owner
    items: list[Any]  # stage_in, stage_out: what to copy
    source: str | None  # populate: the URL or REMOTE:path to fill the claim (or the replica) from
    must_exist: str  # a replica's create re-driven on its host's return: the object it must find, not make


class _OpReportKeys(TypedDict):
    op_id: str
    claim_id: int
    ok: bool


class OpReport(_OpReportKeys, total=False):
    """An op's result as an agent reports it (``POST /v1/agents/{agent}/reports``, ``results``)."""

    snapshot_id: int | None
    handle: str | None
    size_bytes: int | None
    reachable_hosts: list[str] | None
    host_labels: dict[str, str]
    path: str | None
    message: str
    code: str
    retryable: bool
    stderr_tail: str
    used_bytes: int | None


class Dispatch(TypedDict):
    """A run a worker is to start (``GET /v1/hosts/{host}/work``, ``dispatch``)."""

    job_id: int
    run: int
    display_id: str
    user: str
    name: str
    command: list[str]
    cwd: str | None
    stdout: str | None
    stderr: str | None
    hosts: list[str]
    slots: int  # on this host
    total_slots: int
    array_index: int | None
    array_parent: int | None
    queue: str
    project: str
    claims: list[dict[str, Any]]  # what the worker publishes into the run (xce.model.job_claims.publish_list)
    mem_limit: int | None
    alloc_slots: dict[str, int]  # slots on each of hosts (LSB_MCPU_HOSTS, LSB_DJOB_HOSTFILE)
    shell: bool  # command is one command line for /bin/sh -c
    script: str | None  # the job is this script; command its arguments
    submit_dir: str | None  # where it starts when cwd is not given (falling back to its workspace)
    env: dict[str, str] | None  # the submitter's variables that go with it
    run_limit: float | None  # seconds from the run's start; its shepherd ends it then (-W)
    warn_signal: int | None  # sent once, warn_time seconds before the run limit (-wa)
    warn_time: float | None  # (-wt)
    limit_grace: float | None  # SIGTERM to SIGKILL when the run limit ends it
    pre_exec: str | None  # -E: run before the command, as the job (sandbox.STEPS)
    post_exec: str | None  # -Ep: run after the command ends
    gpus: list[dict[str, Any]]  # the GPUs it holds on this host: {id, uuid} each (CUDA_VISIBLE_DEVICES)
    gpu_mode: str  # -gpu's mode ("shared", "exclusive_process"; "" without GPUs): the devices' compute mode


class TaskDispatch(TypedDict):
    """A task of a running job (``blaunch``) a worker is to start in the run's sandbox on its host
    (``GET /v1/hosts/{host}/work``, ``tasks``)."""

    run: Dispatch  # the run, as its worker on this host would start it (its env, claims, output)
    task: int  # numbered within the run from 1
    command: str  # one command line, for /bin/sh -c
    cwd: str  # where blaunch was called ("": the run's own)
    env: dict[str, str] | None  # blaunch's environment (the job's part of the task's: as a job's is kept)
    rendezvous: str  # ADDR:PORT on the job's first host (XCE_RDZV_HOST, XCE_RDZV_PORT)
    stdin: bool  # it reads what its blaunch sends (a FIFO the worker fills); else nothing (blaunch -n)
