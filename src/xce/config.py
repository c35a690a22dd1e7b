"""Controller configuration: one TOML file, with an embedded default so none is needed.

Unknown keys are errors (a typo must not silently change behaviour).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
import tomllib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from xce.errors import InvalidRequest
from xce.names import check_name
from xce.transfers.site import TransferConfigError, TransferSite, parse_site
from xce.exitvalues import ExitValuesError, parse as parse_exit_values
from xce.units import parse_duration, parse_run_limit, parse_size

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

DEFAULT_CONFIG = """
[controller]
snapshot_every = 50000     # facts between snapshots (replaying 50,000 facts at start takes ~1 s)
lease_ttl = 10.0           # seconds a leader lease lasts without renewal
# advertise = "http://ctl1.example:7600"   # the URL clients are sent to when this controller leads
#                                          # (default: from --advertise, else the --listen address)
max_body_bytes = 1048576   # larger request bodies are refused with 413
host_timeout = 10.0        # seconds without a heartbeat before a host is UNAVAIL
# a run's shepherd kills the run when its worker has had no answer from the controller for fence_time
# seconds; the controller gives a lost host's runs up (requeues them, lets their RWO claims be attached
# elsewhere) only host_timeout + fence_time + fence_margin seconds after it last heard from the host
fence_time = 30.0
fence_margin = 5.0
# a task's blaunch (xce launch) polls for its output and end; a task whose blaunch has not polled for
# launcher_lease seconds (killed, even by SIGKILL) is killed (the job ends with it, unless --keep-going)
launcher_lease = 30.0
terminate_grace = 10.0     # seconds from a kill's SIGINT + SIGTERM to its SIGKILL (a queue may set its own)
max_pending_jobs_per_user = 10000   # PEND and PSUSP jobs one user may have; more are refused
max_array_size = 10000     # elements in one job array submission
queue_depth = 1000         # pending jobs a scheduling cycle considers, highest priority then oldest first;
                           # deeper ones are reached by a full pass when a cycle leaves room unused
# backfill: this many of the top pending jobs that do not fit get a reservation (hosts and a planned
# start, from the run limits of the runs in their way); lower jobs start now only if they end before
# it or leave it what it needs.  1 is EASY backfill, more is closer to conservative, 0 turns it off
reservation_depth = 1
# fair share (on when a [[projects]] table sets shares or user_shares): usage halves every
# fairshare_half_life; it is slot-seconds x fairshare_slot_factor + gpu-seconds (the gpu counter) x
# fairshare_gpu_factor + claim GiB-seconds x fairshare_claim_factor, plus fairshare_run_job_factor for
# each slot held now (LSF's RUN_JOB_FACTOR)
fairshare_half_life = "5h"
fairshare_slot_factor = 1.0
fairshare_gpu_factor = 1.0
fairshare_claim_factor = 0.001
fairshare_run_job_factor = 3.0
# bounded history: DONE/EXIT jobs and RELEASED claims leave the live model this long after they
# ended, into the store's archive (xce hist, xce job show, xce claim show and a listing by job id still
# answer for them); an hour, as LSF's CLEAN_PERIOD, so listings show what ended lately
keep_finished = "1h"
retire_every = 2.0         # seconds between the leader's retirement passes
retire_batch = 1000        # records one retirement fact names at most (an array retires whole)
# refusals are audited, rate-limited per source (client address, or user once authenticated) and
# result code: a token bucket of refusal_audit_burst refilled at refusal_audit_rate per second;
# repeats beyond it are counted and recorded as one fact per refusal_audit_window seconds
refusal_audit_rate = 1.0
refusal_audit_burst = 20
refusal_audit_window = 10.0
refusal_audit_sources = 4096        # sources tracked at once (the oldest is forgotten first)
refusal_audit_global_rate = 50.0    # all sources together (burst: 10 x refusal_audit_burst)
# reverse proxies in front of the controller whose X-Forwarded-For / X-Forwarded-Proto are believed
# (addresses or networks); default none: every request is counted against the address it came from
# trusted_proxies = ["10.0.0.5", "192.168.7.0/24"]
# a job's environment: "submitted" (as LSF: the submitter's environment goes with the job, bsub -env and
# xce submit --env), or "clean" (only variables named one by one: -env "K=V"; the whole environment,
# -env all, is dropped and the job gets the execution host's clean one)
job_environment = "submitted"
# variables that never go with a job (shell patterns: "AWS_SECRET_*"); XCE's tokens (XCE_TOKEN...) never do
private_env = []

[[users]]
name = "admin"
role = "admin"
projects = ["default"]

[[queues]]
name = "default"
priority = 30
description = "default queue"

[[projects]]
name = "default"
description = "default project"
# shares = 2                          # fair share against the other projects (default 1)
# user_shares = {alice = 2, bob = 1}  # and between its users (default 1)

# Claims: storage pools (L2 counters the scheduler reserves claim sizes on) and claim classes.
# A class names a provider; the provider's executable and private config (credentials) live in
# the provisioner's own config file, never here.
[[pools]]
name = "shared"
capacity = "1Ti"
description = "simulated shared filesystem (simfs)"

[[claim_classes]]
name = "simfs"
provider = "simfs"
scope = "shared"
pools = ["shared"]
description = "simulated shared volumes: directories under the provisioner's simfs root"

# Template claims, prepared by the worker of the job's host (node scope).
[[claim_classes]]
name = "scratch"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
description = "per-job local scratch (xce submit --scratch SIZE), on the host's scratch counter"

[[claim_classes]]
name = "stage"
provider = "simfs"
scope = "node"
counter = "scratch"
access_modes = ["RWO"]
description = "per-job staging area (xce submit --stage-in/--stage-out, --stage-size), $XCE_STAGE, on the host's scratch counter"

# Stage-in/out from URLs and object stores (xce transfers list): public https URLs for every project;
# remotes ([[transfers.remotes]]: name, type, schemes, projects) are named here, their credentials only
# in the workers' --transfer-config.
[transfers]
public_schemes = ["https"]

[[apps]]
name = "serve"
description = "a serving replica: a kv-cache scratch claim"
claims = [{ name = "kv-cache", claim_class = "scratch", size = "1Gi" }]
"""


class ConfigError(InvalidRequest):
    """Raised when the configuration file is unreadable or names unknown keys or bad values."""

    code = "bad_config"


@dataclass(frozen=True)
class UserConfig:
    name: str
    role: str = "user"
    projects: list[str] = field(default_factory=lambda: ["default"])
    host: str | None = None


@dataclass(frozen=True)
class QueueConfig:
    name: str
    priority: int = 30
    description: str = ""
    # the staging class of this queue's jobs that stage without --stage-class (else [claims] stage_class);
    # a shared-scope class stages in before hosts are held
    stage_class: str | None = None
    # seconds from a kill's SIGINT + SIGTERM to its SIGKILL for this queue's jobs (LSF's
    # JOB_TERMINATE_INTERVAL); None: [controller] terminate_grace
    terminate_grace: float | None = None
    # LSF's RUNLIMIT, [HH:]MM: the run limit of this queue's jobs that give no -W, and the most a -W may ask
    run_limit: str | None = None
    max_run_limit: str | None = None
    # LSF's REQUEUE_EXIT_VALUES ("3 4", "all ~1", "EXCLUDE(9)": xce.exitvalues): a run of this queue's jobs
    # that exits so goes back to the queue, unless the job gives its own -Q; and LSF's MAX_JOB_REQUEUE: after
    # this many such requeues the job ends EXIT instead (None: no limit, as LSF's default)
    requeue_exit_values: str | None = None
    max_job_requeue: int | None = None
    # LSF's PREEMPTION: "PREEMPTIVE[low other]" (this queue's jobs may preempt those of the queues named,
    # of lower priority) or "PREEMPTIVE" (every queue of lower priority); None: it preempts nothing
    preemption: str | None = None


@dataclass(frozen=True)
class ProjectConfig:
    name: str
    description: str = ""
    # fair share (LSF's USER_SHARES, Slurm's fair-tree): the project's share against the other
    # projects, its users' shares within it (None / not named: 1)
    shares: float | None = None
    user_shares: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class ControllerConfig:
    # a snapshot costs in proportion to the whole model and pauses commits while it is written;
    # the log behind it is compacted, so this also bounds what a restart replays (~1 s for 50,000)
    snapshot_every: int = 50_000
    lease_ttl: float = 10.0
    # the URL a standby names when this controller leads (its 503s send clients here); "" = derived
    # from --advertise or the --listen address.  Never taken from a request.
    advertise: str = ""
    max_body_bytes: int = 1 << 20
    host_timeout: float = 10.0
    # runs are fenced (DESIGN §12, docs/decisions/runs-and-fencing.md): a shepherd ends its run when
    # its worker has had no answer from the controller for fence_time; the controller gives a lost
    # host's runs up host_timeout + fence_time + fence_margin after it last heard from the host
    fence_time: float = 30.0
    fence_margin: float = 5.0
    # a task whose launcher (blaunch) has not asked for its output or end for this long is killed
    # (xce.controller.launchers): its launcher is gone, even one killed with SIGKILL
    launcher_lease: float = 30.0
    terminate_grace: float = 10.0  # a kill's SIGINT + SIGTERM to its SIGKILL, unless the queue says
    # one user cannot flood the scheduler or the model: refused at submission with the limit named
    max_pending_jobs_per_user: int = 10_000
    max_array_size: int = 10_000
    # a scheduling cycle plans the first queue_depth pending jobs in priority order (Slurm's
    # default_queue_depth): its cost, and the event loop's pause to build its snapshot, stop growing
    # with the backlog; a full pass follows a cycle that left room unused (xce.controller.scheduling)
    queue_depth: int = 1000
    # backfill (xce.scheduler.backfill): the top pending jobs that do not fit and get a reservation
    # (Maui's RESERVATIONDEPTH): 1 EASY backfill, more conservative, 0 none (greedy)
    reservation_depth: int = 1
    # fair share (xce.model.fairshare, xce.scheduler.fairshare): usage's half-life (Slurm's
    # PriorityDecayHalfLife, LSF's HIST_HOURS) and the weights of its parts
    fairshare_half_life: str | int | float = "5h"
    fairshare_slot_factor: float = 1.0  # per slot-second
    fairshare_gpu_factor: float = 1.0  # per GPU-second (the gpu counter held)
    fairshare_claim_factor: float = 0.001  # per GiB-second of claims
    fairshare_run_job_factor: float = 3.0  # per slot held now (LSF's RUN_JOB_FACTOR)
    # bounded history (xce.model.history): finished jobs and RELEASED claims older than this (a
    # duration, "5m", or seconds) leave the live model for the store's archive
    keep_finished: str | int | float = "1h"  # LSF's CLEAN_PERIOD
    retire_every: float = 2.0
    retire_batch: int = 1000
    # nobody who can reach the port can grow the log at will (xce.api.refusals)
    refusal_audit_rate: float = 1.0  # audited refusals per second per source and result code, sustained
    refusal_audit_burst: int = 20
    refusal_audit_window: float = 10.0  # repeats held back are summed into one fact per window
    refusal_audit_sources: int = 4096
    # addresses or networks of reverse proxies whose X-Forwarded-For/-Proto headers are believed; none by
    # default, so nobody renames their own address (the refusal limiter counts per client address)
    trusted_proxies: tuple[str, ...] = ()
    refusal_audit_global_rate: float = 50.0
    job_environment: str = "submitted"  # or "clean": the submitter's whole environment stays behind
    private_env: tuple[str, ...] = ()  # name patterns that never go with a job (besides XCE's tokens)
    # LSF's MAX_USER_PRIORITY: -sp takes 1 to this (an admin may go beyond); a job without -sp has half
    max_user_priority: int = 100

    @property
    def fairshare_half_life_seconds(self) -> float:
        return parse_duration(self.fairshare_half_life, "[controller] fairshare_half_life")

    @property
    def keep_finished_seconds(self) -> float:
        return parse_duration(self.keep_finished, "[controller] keep_finished")


@dataclass(frozen=True)
class ResourceConfig:
    """A resource type descriptor (DESIGN 3): an L1 host attribute or an L2 counter with a scope.

    Host-scope counters are offered by workers (``--counter``); cluster-scope ones have an
    ``amount`` here (licenses, say) that the scheduler reserves from; pool-scope counters are
    the ``[[pools]]``.
    """

    name: str
    layer: str = "L2"  # "L1": attribute, matched by select[]; "L2": counter, reserved by rusage[]
    scope: str = "host"  # L2: "host" or "cluster"
    unit: str = ""  # "bytes" shows sizes in binary units; anything else is printed after the amount
    amount: str | int | float | None = None  # cluster scope: the total
    description: str = ""

    @property
    def amount_value(self) -> float:
        if self.amount is None:
            return 0.0
        return float(parse_size(self.amount, f"resource {self.name} amount")) if isinstance(self.amount, str) \
            else float(self.amount)


# descriptors every cluster has; a config's [[resources]] add to them or replace one by name
BUILTIN_RESOURCES = (
    ResourceConfig("slots", "L2", "host", "count", description="job slots (xce submit -n)"),
    ResourceConfig("mem", "L2", "host", "bytes", description="memory a job reserves per slot"),
    ResourceConfig("gpu", "L2", "host", "count", description="GPUs a job reserves per slot"),
    ResourceConfig("scratch", "L2", "host", "bytes", description="local scratch space: --scratch claims draw on it"),
)


@dataclass(frozen=True)
class PoolConfig:
    """A pool-scope L2 counter: storage that claims of the classes drawing on it are placed into."""

    name: str
    capacity: str | int
    description: str = ""

    @property
    def capacity_bytes(self) -> int:
        return parse_size(self.capacity, f"pool {self.name} capacity")


ACCESS_MODES = ("RWO", "ROX", "RWX", "RWOP")
RECLAIM_POLICIES = ("delete", "retain")


@dataclass(frozen=True)
class ClaimClassConfig:
    name: str
    provider: str
    scope: str = "shared"  # "shared": the provisioner prepares it; "node": the worker of the host
    pools: list[str] = field(default_factory=list)
    access_modes: list[str] = field(default_factory=lambda: list(ACCESS_MODES))
    reclaim_policy: str = "delete"
    parameters: dict[str, str] = field(default_factory=dict)  # defaults
    allowed_parameters: list[str] = field(default_factory=list)  # beyond the defaults' keys
    description: str = ""
    counter: str | None = None  # node scope: the host L2 counter its sizes are reserved on


@dataclass(frozen=True)
class AppClaimConfig:
    """A template claim an application profile declares (e.g. a ``kv-cache`` scratch for serving)."""

    name: str
    claim_class: str
    size: str | int


@dataclass(frozen=True)
class AppConfig:
    name: str
    description: str = ""
    claims: list[AppClaimConfig] = field(default_factory=list)
    # the staging class of jobs submitted with --app NAME and no --stage-class (before the queue's)
    stage_class: str | None = None


@dataclass(frozen=True)
class QuotaConfig:
    """Per project and claim class (``*``: all classes together): claim count and total bytes."""

    project: str
    claim_class: str = "*"
    max_claims: int | None = None
    max_bytes: str | int | None = None

    @property
    def max_bytes_value(self) -> int | None:
        return None if self.max_bytes is None else parse_size(self.max_bytes, "quota max_bytes")


@dataclass(frozen=True)
class ClaimsConfig:
    max_attempts: int = 8  # attempts of one provider op before the claim is FAILED
    retry_base: float = 0.5  # seconds before the first retry; doubles each attempt
    retry_cap: float = 30.0
    retry_jitter: float = 0.2  # +-20%
    orphan_grace: float = 300.0  # seconds a provider orphan is reported before it is released
    orphan_scan_interval: float = 30.0
    scratch_class: str = "scratch"  # xce submit --scratch SIZE (without :CLASS)
    stage_class: str = "stage"  # the staging claim of --stage-in/--stage-out
    stage_size: str = "64Mi"  # the staging area's size when a submission does not say (xce submit measures)
    # snapshots one project may have at once (not RELEASED): each takes room in its pool, so a loop
    # of ``xce claim snapshot`` cannot fill the storage behind it, nor the model
    max_snapshots_per_project: int = 100


@dataclass(frozen=True)
class Config:
    controller: ControllerConfig
    users: list[UserConfig]
    queues: list[QueueConfig]
    projects: list[ProjectConfig]
    pools: list[PoolConfig] = field(default_factory=list)
    claim_classes: list[ClaimClassConfig] = field(default_factory=list)
    quotas: list[QuotaConfig] = field(default_factory=list)
    claims: ClaimsConfig = field(default_factory=ClaimsConfig)
    apps: list[AppConfig] = field(default_factory=list)
    resources: list[ResourceConfig] = field(default_factory=lambda: list(BUILTIN_RESOURCES))
    # stage-in/out from URLs and remotes: public schemes, remote names and the projects that may use each
    # (no credentials: those live in the workers' --transfer-config; xce.transfers.site)
    transfers: TransferSite = field(default_factory=TransferSite)
    source: str = "<embedded default>"

    def resource(self, name: str) -> ResourceConfig | None:
        return next((r for r in self.resources if r.name == name), None)

    def cluster_counters(self) -> dict[str, float]:
        return {r.name: r.amount_value for r in self.resources if r.layer == "L2" and r.scope == "cluster"}

    def app(self, name: str) -> AppConfig | None:
        return next((a for a in self.apps if a.name == name), None)

    def preemptable(self) -> dict[str, frozenset[str]]:
        """Queue -> the queues its jobs may preempt (``preemption``; only queues that preempt)."""
        out = {}
        for q in self.queues:
            if q.preemption is not None:
                named = parse_preemption(q.preemption)
                out[q.name] = frozenset(named if named is not None else
                                        (o.name for o in self.queues if o.priority < q.priority))
        return out

    @property
    def fairshare(self) -> bool:
        """Fair share is on: some project sets ``shares`` or ``user_shares``."""
        return any(p.shares is not None or p.user_shares for p in self.projects)

    def run_limits(self, queue: str) -> tuple[float | None, float | None]:
        """A job of ``queue``'s run limit when it gives none, and the most it may give, in seconds (None: none)."""
        q = next((q for q in self.queues if q.name == queue), None)
        if q is None:
            return None, None
        return (parse_run_limit(q.run_limit) if q.run_limit is not None else None,
                parse_run_limit(q.max_run_limit) if q.max_run_limit is not None else None)

    def queue(self, name: str) -> QueueConfig | None:
        return next((q for q in self.queues if q.name == name), None)

    def terminate_grace(self, queue: str) -> float:
        """Seconds from a kill's SIGTERM to its SIGKILL for a job of ``queue``: the queue's, else the cluster's."""
        q = next((q for q in self.queues if q.name == queue), None)
        return q.terminate_grace if q is not None and q.terminate_grace is not None else self.controller.terminate_grace

    @property
    def give_up_after(self) -> float:
        """Seconds after a host was declared lost before its runs are given up: the fence and its margin."""
        return self.controller.fence_time + self.controller.fence_margin

    def claim_class(self, name: str) -> ClaimClassConfig | None:
        return next((c for c in self.claim_classes if c.name == name), None)

    def pool(self, name: str) -> PoolConfig | None:
        return next((p for p in self.pools if p.name == name), None)


def _proxies(source: str, raw: Any) -> tuple[str, ...]:
    """``[controller] trusted_proxies``: each an IP address or network, as uvicorn's
    ``forwarded_allow_ips`` takes them (never ``*``: that would believe any client)."""
    if not isinstance(raw, (list, tuple)) or not all(isinstance(p, str) for p in raw):
        raise ConfigError(f"{source} [controller]: trusted_proxies is a list of addresses or networks")
    out = []
    for p in raw:
        try:
            out.append(str(ipaddress.ip_network(p.strip(), strict=False)))
        except ValueError:
            raise ConfigError(f"{source} [controller]: trusted_proxies: {p!r} is not an IP address or network") \
                from None
    return tuple(out)


Table = TypeVar("Table", bound="DataclassInstance")


def _build(cls: type[Table], raw: Any, where: str) -> Table:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    if cls in _TYPED:
        return _typed(cls, raw, where)
    try:
        return cls(**raw)
    except TypeError as e:
        raise ConfigError(f"{where}: {e}") from None


def _typed(cls: type[Table], raw: dict[str, Any], where: str) -> Table:
    """A table whose values pydantic checks against the dataclass's annotations (``stage_class = 5`` is
    refused, not kept as a number that breaks a submission later).  Imported here, when a file is read,
    so that clients reading no config never load pydantic."""
    import pydantic

    try:
        return pydantic.TypeAdapter(cls).validate_python(raw)
    except pydantic.ValidationError as e:
        said = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'table'}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"{where}: {said}") from None


# tables checked by type with pydantic (the others by hand, as they were first written)
_TYPED: tuple[type, ...] = (QueueConfig, AppConfig)


def parse_preemption(text: str) -> tuple[str, ...] | None:
    """LSF's ``PREEMPTIVE[low other]``: the queues named (None for a bare ``PREEMPTIVE``: every queue of
    lower priority)."""
    m = re.fullmatch(r"\s*PREEMPTIVE\s*(?:\[([^\]]*)\])?\s*", text)
    if m is None:
        raise ValueError(f"preemption is \"PREEMPTIVE\" or \"PREEMPTIVE[queue ...]\", got {text!r}")
    if m.group(1) is None:
        return None
    names = tuple(m.group(1).split())
    if not names:
        raise ValueError("preemption: PREEMPTIVE[] names no queue")
    return names


def parse_config(text: str, source: str = "<string>") -> Config:
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{source}: {e}") from None
    unknown = sorted(set(raw) - {"controller", "users", "queues", "projects", "pools", "claim_classes",
                                 "quotas", "claims", "apps", "resources", "transfers"})
    if unknown:
        raise ConfigError(f"{source}: unknown section(s) {', '.join(unknown)}")
    ctl = _build(ControllerConfig, raw.get("controller", {}), f"{source} [controller]")
    users = [_build(UserConfig, u, f"{source} [[users]] #{i + 1}") for i, u in enumerate(raw.get("users", []))]
    queues = [_build(QueueConfig, q, f"{source} [[queues]] #{i + 1}") for i, q in enumerate(raw.get("queues", []))]
    projects = [_build(ProjectConfig, p, f"{source} [[projects]] #{i + 1}")
                for i, p in enumerate(raw.get("projects", []))]
    pools = [_build(PoolConfig, p, f"{source} [[pools]] #{i + 1}") for i, p in enumerate(raw.get("pools", []))]
    classes = [_build(ClaimClassConfig, c, f"{source} [[claim_classes]] #{i + 1}")
               for i, c in enumerate(raw.get("claim_classes", []))]
    quotas = [_build(QuotaConfig, q, f"{source} [[quotas]] #{i + 1}") for i, q in enumerate(raw.get("quotas", []))]
    claims = _build(ClaimsConfig, raw.get("claims", {}), f"{source} [claims]")
    declared = [_build(ResourceConfig, r, f"{source} [[resources]] #{i + 1}")
                for i, r in enumerate(raw.get("resources", []))]
    names = {r.name for r in declared}
    resources = [r for r in BUILTIN_RESOURCES if r.name not in names] + declared
    apps = []
    for i, a in enumerate(raw.get("apps", [])):
        where = f"{source} [[apps]] #{i + 1}"
        a = dict(a) if isinstance(a, dict) else a
        if isinstance(a, dict):
            a["claims"] = [_build(AppClaimConfig, c, f"{where} claims #{j + 1}") for j, c in enumerate(a.get("claims", []))]
        apps.append(_build(AppConfig, a, where))
    for kind, items in (("user", users), ("queue", queues), ("project", projects), ("pool", pools),
                        ("claim class", classes), ("application profile", apps), ("resource", declared)):
        item_names = [it.name for it in items]
        for n in item_names:
            try:
                check_name(kind, n)
            except InvalidRequest as e:
                raise ConfigError(f"{source}: {e.message}") from None
        if len(set(item_names)) != len(item_names):
            raise ConfigError(f"{source}: duplicate {kind} names")
    if not any(u.role == "admin" for u in users):
        raise ConfigError(f"{source}: at least one user with role = \"admin\" is required")
    project_names = {p.name for p in projects}
    user_names = {u.name for u in users}
    for p in projects:
        where = f"{source} [[projects]] {p.name!r}"
        if p.shares is not None and (isinstance(p.shares, bool) or not isinstance(p.shares, (int, float))
                                     or p.shares <= 0):
            raise ConfigError(f"{where}: shares is a number > 0, got {p.shares!r}")
        if not isinstance(p.user_shares, dict):
            raise ConfigError(f"{where}: user_shares is a table of user = share ({{alice = 2, bob = 1}})")
        for name, share in p.user_shares.items():
            if name not in user_names:
                raise ConfigError(f"{where}: user_shares names unknown user {name!r}")
            if isinstance(share, bool) or not isinstance(share, (int, float)) or share <= 0:
                raise ConfigError(f"{where}: user_shares: {name}'s share is a number > 0, got {share!r}")
    for u in users:
        missing = [p for p in u.projects if p not in project_names]
        if missing:
            raise ConfigError(f"{source}: user {u.name!r} names unknown project(s) {', '.join(missing)}")
    if ctl.snapshot_every < 1 or ctl.lease_ttl <= 0 or ctl.max_body_bytes < 1024:
        raise ConfigError(f"{source} [controller]: snapshot_every >= 1, lease_ttl > 0, max_body_bytes >= 1024")
    try:
        ctl.keep_finished_seconds
    except ValueError as e:
        raise ConfigError(f"{source}: {e}") from None
    if ctl.retire_every <= 0 or ctl.retire_batch < 1:
        raise ConfigError(f"{source} [controller]: retire_every > 0, retire_batch >= 1")
    if ctl.host_timeout <= 0 or ctl.fence_time < 1 or ctl.fence_margin < 0 or not 0 <= ctl.terminate_grace <= 86400:
        raise ConfigError(f"{source} [controller]: host_timeout > 0, fence_time >= 1, fence_margin >= 0, "
                          "0 <= terminate_grace <= 86400")
    if not 1 <= ctl.launcher_lease <= 86400:
        raise ConfigError(f"{source} [controller]: 1 <= launcher_lease <= 86400")
    for q in queues:
        if q.terminate_grace is not None and not 0 <= q.terminate_grace <= 86400:
            raise ConfigError(f"{source}: queue {q.name!r}: 0 <= terminate_grace <= 86400")
        try:
            limits = [parse_run_limit(v, k) for k, v in (("run_limit", q.run_limit), ("max_run_limit", q.max_run_limit))
                      if v is not None]
        except ValueError as e:
            raise ConfigError(f"{source}: queue {q.name!r}: {e}") from None
        if len(limits) == 2 and limits[0] > limits[1]:
            raise ConfigError(f"{source}: queue {q.name!r}: run_limit above max_run_limit")
        if q.preemption is not None:
            try:
                named = parse_preemption(q.preemption)
            except ValueError as e:
                raise ConfigError(f"{source}: queue {q.name!r}: {e}") from None
            prio = {other.name: other.priority for other in queues}
            for name in named or ():
                if name not in prio:
                    raise ConfigError(f"{source}: queue {q.name!r}: preemption names unknown queue {name!r}")
                if prio[name] >= q.priority:
                    raise ConfigError(f"{source}: queue {q.name!r}: preemption: queue {name!r} is not of lower "
                                      f"priority ({prio[name]} >= {q.priority})")
        if q.requeue_exit_values is not None:
            try:
                parse_exit_values(q.requeue_exit_values)
            except ExitValuesError as e:
                raise ConfigError(f"{source}: queue {q.name!r}: {e}") from None
        if q.max_job_requeue is not None and not (isinstance(q.max_job_requeue, int) and q.max_job_requeue >= 0):
            raise ConfigError(f"{source}: queue {q.name!r}: max_job_requeue is a number >= 0")
    if not isinstance(ctl.max_user_priority, int) or ctl.max_user_priority < 1:
        raise ConfigError(f"{source} [controller]: max_user_priority is a number >= 1")
    if ctl.job_environment not in ("submitted", "clean"):
        raise ConfigError(f"{source} [controller]: job_environment is \"submitted\" or \"clean\", got "
                          f"{ctl.job_environment!r}")
    if not isinstance(ctl.private_env, (list, tuple)) or not all(isinstance(p, str) and p for p in ctl.private_env):
        raise ConfigError(f"{source} [controller]: private_env is a list of variable name patterns")
    ctl = dataclasses.replace(ctl, private_env=tuple(ctl.private_env))
    if ctl.queue_depth < 1:
        raise ConfigError(f"{source} [controller]: queue_depth >= 1, got {ctl.queue_depth}")
    if not isinstance(ctl.reservation_depth, int) or ctl.reservation_depth < 0:
        raise ConfigError(f"{source} [controller]: reservation_depth >= 0 (0: no backfill reservations), "
                          f"got {ctl.reservation_depth!r}")
    if ctl.fairshare_half_life_seconds <= 0:
        raise ConfigError(f"{source} [controller]: fairshare_half_life must be positive")
    for key in ("fairshare_slot_factor", "fairshare_gpu_factor", "fairshare_claim_factor", "fairshare_run_job_factor"):
        if not isinstance(getattr(ctl, key), (int, float)) or getattr(ctl, key) < 0:
            raise ConfigError(f"{source} [controller]: {key} is a number >= 0, got {getattr(ctl, key)!r}")
    if ctl.advertise and not re.fullmatch(r"https?://[^/\s?#,@]+(/[^\s?#,]*)?", ctl.advertise):
        raise ConfigError(f"{source} [controller]: advertise must be http[s]://HOST[:PORT][/PREFIX], "
                          f"got {ctl.advertise!r}")
    if ctl.max_pending_jobs_per_user < 1 or not 1 <= ctl.max_array_size <= 10_000:
        # an array is listed (and killed, held...) through one GET /v1/jobs?array=ID of at most 10,000
        raise ConfigError(f"{source} [controller]: max_pending_jobs_per_user >= 1, 1 <= max_array_size <= 10000")
    if ctl.refusal_audit_rate <= 0 or ctl.refusal_audit_burst < 1 or ctl.refusal_audit_window <= 0 \
            or ctl.refusal_audit_sources < 1 or ctl.refusal_audit_global_rate <= 0:
        raise ConfigError(f"{source} [controller]: refusal_audit_rate > 0, refusal_audit_burst >= 1, "
                          "refusal_audit_window > 0, refusal_audit_sources >= 1, refusal_audit_global_rate > 0")
    ctl = dataclasses.replace(ctl, trusted_proxies=_proxies(source, ctl.trusted_proxies))
    _check_claims(source, pools, classes, quotas, claims, project_names)
    _check_apps(source, apps, classes)
    _check_stage_classes(source, queues, apps, classes)
    _check_resources(source, resources)
    try:
        transfers = parse_site(raw.get("transfers"), source, daemon=False, projects=project_names)
    except TransferConfigError as e:
        raise ConfigError(str(e)) from None
    return Config(controller=ctl, users=users, queues=queues, projects=projects, pools=pools,
                  claim_classes=classes, quotas=quotas, claims=claims, apps=apps, resources=resources,
                  transfers=transfers, source=source)


def _check_resources(source: str, resources: list[ResourceConfig]) -> None:
    for r in resources:
        where = f"{source}: resource {r.name!r}"
        if r.layer not in ("L1", "L2"):
            raise ConfigError(f"{where}: layer must be L1 (attribute) or L2 (counter)")
        if r.layer == "L2" and r.scope not in ("host", "cluster"):
            raise ConfigError(f"{where}: an L2 counter's scope is host or cluster (pool counters are [[pools]])")
        if r.scope == "cluster" and r.amount is None:
            raise ConfigError(f"{where}: a cluster-scope counter needs an amount")
        if r.scope != "cluster" and r.amount is not None:
            raise ConfigError(f"{where}: only cluster-scope counters have an amount (hosts report theirs)")
        try:
            if r.amount_value < 0:
                raise ConfigError(f"{where}: amount must be >= 0")
        except (InvalidRequest, ValueError) as e:
            raise ConfigError(f"{where}: bad amount {r.amount!r}") from e


def _check_stage_classes(source: str, queues: list[QueueConfig], apps: list[AppConfig],
                         classes: list[ClaimClassConfig]) -> None:
    """A queue's or a profile's default staging class must exist: a typo would otherwise refuse every
    staging submission of that queue, long after the controller started."""
    names = sorted(c.name for c in classes)
    for kind, items in (("queue", queues), ("application profile", apps)):
        for it in items:
            if it.stage_class is not None and it.stage_class not in names:
                raise ConfigError(f"{source}: {kind} {it.name!r}: stage_class {it.stage_class!r} is no claim class "
                                  f"(classes: {', '.join(names) or 'none'})")


def _check_apps(source: str, apps: list[AppConfig], classes: list[ClaimClassConfig]) -> None:
    by_name = {c.name: c for c in classes}
    for app in apps:
        names = [c.name for c in app.claims]
        if len(set(names)) != len(names):
            raise ConfigError(f"{source}: application profile {app.name!r} declares a claim twice")
        for c in app.claims:
            where = f"{source}: application profile {app.name!r}, claim {c.name!r}"
            try:
                check_name("claim", c.name)
                parse_size(c.size, "size")
            except InvalidRequest as e:
                raise ConfigError(f"{where}: {e.message}") from None
            if c.claim_class not in by_name:
                raise ConfigError(f"{where}: unknown claim class {c.claim_class!r}")
            if c.name == "workspace":  # every job's first claim: $XCE_WORKSPACE, claims/workspace
                raise ConfigError(f"{where}: the name workspace is reserved for the job's workspace")


def _check_claims(source: str, pools: list[PoolConfig], classes: list[ClaimClassConfig],
                  quotas: list[QuotaConfig], claims: ClaimsConfig, project_names: set[str]) -> None:
    try:
        for p in pools:
            _ = p.capacity_bytes
        for q in quotas:
            _ = q.max_bytes_value
        parse_size(claims.stage_size, "[claims] stage_size")
    except InvalidRequest as e:
        raise ConfigError(f"{source}: {e.message}") from None
    pool_names = {p.name for p in pools}
    for c in classes:
        where = f"{source}: claim class {c.name!r}"
        if c.scope not in ("shared", "node"):
            raise ConfigError(f"{where}: scope must be shared or node")
        if unknown := [p for p in c.pools if p not in pool_names]:
            raise ConfigError(f"{where}: unknown pool(s) {', '.join(unknown)}")
        if bad := [m for m in c.access_modes if m not in ACCESS_MODES]:
            raise ConfigError(f"{where}: unknown access mode(s) {', '.join(bad)} (expected {', '.join(ACCESS_MODES)})")
        if not c.access_modes:
            raise ConfigError(f"{where}: needs at least one access mode")
        if c.reclaim_policy not in RECLAIM_POLICIES:
            raise ConfigError(f"{where}: reclaim_policy must be delete or retain")
        if not all(isinstance(v, str) for v in c.parameters.values()):
            raise ConfigError(f"{where}: parameter defaults must be strings")
        if c.counter is not None and c.scope != "node":
            raise ConfigError(f"{where}: only node-scope classes draw on a host counter")
    class_names = {c.name for c in classes}
    for q in quotas:
        if q.project not in project_names:
            raise ConfigError(f"{source}: quota for unknown project {q.project!r}")
        if q.claim_class != "*" and q.claim_class not in class_names:
            raise ConfigError(f"{source}: quota for unknown claim class {q.claim_class!r}")
        if (q.max_claims is not None and q.max_claims < 0):
            raise ConfigError(f"{source}: quota max_claims must be >= 0")
    if claims.max_attempts < 1 or claims.retry_base <= 0 or claims.retry_cap < claims.retry_base \
            or not 0 <= claims.retry_jitter < 1 or claims.orphan_grace < 0 or claims.orphan_scan_interval <= 0:
        raise ConfigError(f"{source} [claims]: max_attempts >= 1, 0 < retry_base <= retry_cap, "
                          "0 <= retry_jitter < 1, orphan_grace >= 0, orphan_scan_interval > 0")
    if not isinstance(claims.max_snapshots_per_project, int) or claims.max_snapshots_per_project < 0:
        raise ConfigError(f"{source} [claims]: max_snapshots_per_project >= 0, "
                          f"got {claims.max_snapshots_per_project!r}")


def load_config(path: str | None) -> Config:
    if path is None:
        return parse_config(DEFAULT_CONFIG, "<embedded default>")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    return parse_config(text, path)
