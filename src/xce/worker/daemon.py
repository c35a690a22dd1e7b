"""``xce worker``: register, heartbeat, long-poll for dispatches, run jobs, report.

Threads: one long-polls for work, one heartbeats, one sends queued reports
in batches and retries until the controller has them, and one watches each
running job.  Jobs are started with ``os.posix_spawn`` under a shepherd
(see ``sandbox``), never fork, each in a cgroup of its own (``cgroups``).

The worker never signals a job itself: it passes the controller's orders for a run (end it, a signal,
freeze, thaw) to the run's shepherd through the run's control files, each order once (``control``),
and renews the lease every shepherd keeps its run on each time the controller answers a heartbeat:
a worker that is gone or cut off lets its runs be fenced (DESIGN §12).

Every run has a directory ``runs/<job>.<run>/`` made *before* its shepherd
is spawned (intent before action), so a restarted worker never starts the
same run twice.  The shepherd writes the job's status there, and the
directory goes only once the controller has the final report.  A restarted
worker therefore adopts runs that are still going, reports the real status
of runs that ended while it was away, and reports as lost only runs whose
shepherd died too.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import queue
import shutil
import threading
import time
import uuid
from typing import Any

from xce.agentnames import node_agent
from xce.agents.agent import ClaimAgent, Provider
from xce.agents.provisioner import SIMFS_COMMAND
from xce.client import ApiError, Client, ClientError
from xce.transfers import TransferSite
from xce.units import format_run_limit, format_size
from xce.worker import control, sandbox, staging
from xce.worker.cgroups import CgroupError, Hierarchy, Limits, RunCgroup, Usage
from xce.worker.gpus import DEFAULT_MODE, EXCLUSIVE_PROCESS, DeviceSource, Gpu, device_rules
from xce.worker.relay import Relay
from xce.worker.rendezvous import Ports, new_secret
from xce.worker.storage import StorageRoots
from xce.worker.tasks import TaskRuns
from xce.wire import AgentOp, Dispatch, TaskDispatch

log = logging.getLogger("xce.worker")

ADOPT_POLL = 0.5
POLL_WAIT = 20  # seconds the controller may hold a work long-poll
# seconds a call may wait for an answer (a long-poll: beyond its wait).  A controller that stopped
# answering (paused, cut off) is given up on after this, and the call goes to another controller
DAEMON_TIMEOUT = 15.0
ENDED_KEPT = 10_000  # ended runs remembered against late dispatches (far more than answers in flight)


class Worker:
    def __init__(self, host: str, url: str, token: str, slots: int, attrs: dict[str, str],
                 counters: dict[str, float], work_dir: str, heartbeat: float = 2.0,
                 run_as_users: bool = False, providers: dict[str, Provider] | None = None,
                 storage_roots: list[str] | None = None, allow_system_users: bool = False,
                 transfers: TransferSite | None = None, cgroups: Hierarchy | None = None,
                 allow_no_openat2: bool = False, gpus: list[Gpu] | None = None,
                 address: str | None = None, gpu_source: DeviceSource | None = None) -> None:
        self.host = host
        self.gpus = list(gpus or ())  # found by NVML or configured (xce.worker.gpus): reported at registration
        self.gpu_source = gpu_source  # where they were found: their compute modes are set there
        self.address = address or host  # where the other hosts reach this one (a run's XCE_RDZV_HOST)
        self.url = url  # the controller(s): a run's blaunch calls them (XCE_JOB_URL)
        self.ports = Ports()  # the rendezvous ports of the runs started here
        # several controllers: calls follow the leader; every call the worker makes is idempotent
        # (runs are keyed by job and run number), so one whose answer was lost is sent again
        self.client = Client(url, token, timeout=DAEMON_TIMEOUT, retry_mutations=True)
        self.slots, self.attrs, self.counters = slots, attrs, counters
        self.work_dir = work_dir
        self.heartbeat_interval = heartbeat
        self.run_as_users = run_as_users
        self.allow_system_users = allow_system_users  # run as root / uid < UID_MIN too (sandbox.run_as_for)
        self.transfers = transfers  # remotes and their credentials (--transfer-config): stage-in/out of URLs
        self.allow_no_openat2 = allow_no_openat2
        self.run_cgroups: dict[tuple[int, ...], RunCgroup] = {}  # runs', and tasks' with a cgroup of their own
        self.confine(cgroups)
        self.applied: dict[tuple[int, int], int] = {}  # run -> the newest order passed on to its shepherd
        self.fence: float | None = None  # seconds a lease lasts (the controller says, in every answer)
        self.lease_until = 0.0  # until when (control.clock) this host's runs may go on without word
        self.boot_id = uuid.uuid4().hex
        self.runs_dir = os.path.join(work_dir, "runs")
        self.jobs_dir = os.path.join(work_dir, "jobs")
        self.output_dir = os.path.join(work_dir, "output")
        self.tasks = TaskRuns(os.path.join(work_dir, "tasks"))  # tasks of runs (blaunch) on this host
        # their output, relayed to their blaunch through the controller
        self.relay = Relay(os.path.join(work_dir, "spool"), self.tasks.is_running, self.tasks.has_ended,
                           self._answer_peek, self._end_input)
        for d in (self.runs_dir, self.jobs_dir, self.output_dir, self.tasks.dir, self.relay.dir):
            os.makedirs(d, exist_ok=True)
            os.chmod(d, 0o711)  # users reach their own workspace, claims and output, and list nobody's
        self.running: set[tuple[int, int]] = set()
        # runs of this life that ended, newest last (bounded): a dispatch answered before a run's start
        # was committed may reach us after the run ended and its directory went (two paths dispatch: the
        # work poll and the node agent's reports), and must not start it again
        self.ended: dict[tuple[int, int], None] = {}
        self._lock = threading.Lock()
        self._reports: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._stop = threading.Event()
        if providers is None:
            providers = default_node_providers(work_dir, set_owner=run_as_users)
        # claim data is published into jobs (and staged into) only from these directories
        self.storage = StorageRoots.of(providers, storage_roots or ())
        # the node agent: prepares and releases this host's node-scope claims, stages files in and out,
        # lists its node objects (orphan scans) and releases its orphans
        # (its reports' answers name the runs whose claims it just made ready: started at once, as if the
        # work poll had said so, rather than after a wake-up of that poll)
        self.node_agent = ClaimAgent(self.client, node_agent(host), providers,  # one client: one view of the leader
                                     local_ops={
                                         "stage_in": self._stage, "stage_out": self._stage,
                                         "populate": self._populate},
                                     on_dispatch=self._dispatched)

    def confine(self, cgroups: Hierarchy | None) -> None:
        """Each run in a cgroup of ``cgroups`` (None: runs are not confined).  A run's slots are whole
        CPUs of its own when this host's slots are its CPUs; else a CPU quota."""
        self.cgroups = cgroups
        cpus = cgroups.cpus if cgroups is not None else ()
        self.bind_cores = cgroups is not None and len(cpus) == self.slots and cgroups.binds_cores
        self.free_cores: set[int] = set(cpus) if self.bind_cores else set()

    def _stage(self, item: AgentOp):
        return staging.run_stage_op(item, self.host, self.run_as_users, self.storage,
                                    allow_system_users=self.allow_system_users, site=self.transfers,
                                    report=self.node_agent.report_progress)

    def _populate(self, item: AgentOp):
        return staging.run_populate_op(item, self.host, self.run_as_users, self.storage, site=self.transfers,
                                       report=self.node_agent.report_progress)

    # ------------------------------------------------------------ run directories

    def _run_dir(self, job_id: int, run: int) -> str:
        return os.path.join(self.runs_dir, f"{job_id}.{run}")

    def _write_journal(self, run_dir: str, data: dict[str, Any]) -> None:
        """The run's intent (or how it failed to start), whole or not at all, before it acts.  Not
        fsynced: it guards against this worker's death, which leaves the page cache to the next worker;
        a crash of the host that loses it also ends every run it could have told about, and the next
        worker's register lists no run directory for them, so the controller requeues them or ends them lost
        (``reconcile_host``)."""
        path = os.path.join(run_dir, "journal.json")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:  # (one write of the C encoder's text: json.dump to a file encodes in Python, chunk by chunk)
            os.write(fd, json.dumps(data).encode())
        finally:
            os.close(fd)
        os.replace(path + ".tmp", path)

    def _read_journal(self, run_dir: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(run_dir, "journal.json"), "rb") as fh:
                return json.loads(fh.read())
        except (OSError, ValueError):
            return None

    def _recover(self) -> None:
        """After a restart: adopt runs still going, report those that ended or were lost."""
        known: set[str] = set()
        for name in sorted(os.listdir(self.runs_dir)):
            run_dir = os.path.join(self.runs_dir, name)
            data = self._read_journal(run_dir)
            if data is None:  # the mkdir happened, the intent did not: nothing was spawned
                shutil.rmtree(run_dir, ignore_errors=True)
                continue
            key = (data["job_id"], data["run"])
            known.add(os.path.basename(data["workspace"]))
            self._adopt_cgroup(key, data.get("cgroup"))
            if data.get("rendezvous"):
                self.ports.adopt(key, int(data["rendezvous"].rpartition(":")[2]))
            if "failed" in data:
                self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": 127,
                                                "reason": data["failed"]}))
                continue
            pid = sandbox.read_int(os.path.join(run_dir, "shepherd.pid"))
            if pid is not None and sandbox.shepherd_alive(pid, run_dir):
                log.info("adopting run %d.%d (shepherd %d) from an earlier life", *key, pid)
                with self._lock:
                    self.running.add(key)
                    self.applied[key] = control.applied(run_dir)
                self._reports.put(("started", {"job_id": key[0], "run": key[1], "pid": pid,
                                               "workspace": data["workspace"],
                                               "rendezvous": data.get("rendezvous", ""),
                                               "task_key": data.get("task_key", "")}))
                threading.Thread(target=self._watch_adopted, args=(key, pid, run_dir, data),
                                 daemon=True, name=f"job-{key[0]}.{key[1]}").start()
            else:
                self._finish(key, run_dir, data)
        known.update(self._recover_tasks())
        for name in os.listdir(self.jobs_dir):  # workspaces no run knows about: never started
            if name not in known:
                sandbox.clean_workspace(os.path.join(self.jobs_dir, name))
        if self.cgroups is not None:  # the cgroups no adopted run holds go
            log.info("removed %d run cgroups of earlier lives", self.cgroups.recover())

    def _recover_tasks(self) -> set[str]:
        """After a restart: adopt the tasks still going, report those that ended; the names of the
        workspaces they keep."""
        known: set[str] = set()
        for name in sorted(os.listdir(self.tasks.dir)):
            task_dir = os.path.join(self.tasks.dir, name)
            data = self._read_journal(task_dir)
            if data is None:  # the mkdir happened, the intent did not: nothing was spawned
                shutil.rmtree(task_dir, ignore_errors=True)
                continue
            key = (data["job_id"], data["run"], data["task"])
            run = key[:2]
            known.add(os.path.basename(data["workspace"]))
            if not os.path.isdir(self._run_dir(*run)):  # not the run's first host: the tasks' workspace
                self.tasks.workspaces.setdefault(run, data["workspace"])
            own = RunCgroup.from_json(data["cgroup"]) if data.get("cgroup") else None
            if own is not None:
                self._adopt_cgroup(key, data["cgroup"])
            self.tasks.adopt(key, task_dir)
            if "failed" in data:
                self._task_ended(key, own, {"exit_code": 127, "reason": data["failed"]})
                continue
            pid = sandbox.read_int(os.path.join(task_dir, "shepherd.pid"))
            threading.Thread(target=self._watch_adopted_task, args=(key, pid, task_dir, own), daemon=True,
                             name=f"task-{key[0]}.{key[1]}.{key[2]}").start()
        return known

    def _adopt_cgroup(self, key: tuple[int, ...], saved: dict[str, Any] | None) -> None:
        """The cgroup a run of an earlier life holds, as its journal kept it."""
        if self.cgroups is None or saved is None:
            return
        rc = RunCgroup.from_json(saved)
        self.cgroups.adopt(rc)
        with self._lock:
            self.run_cgroups[key] = rc
            self.free_cores.difference_update(rc.cores)

    # ------------------------------------------------------------ controller calls

    def _confirmed(self, sent: float, reply: dict[str, Any]) -> None:
        """The controller answered a call sent at ``sent`` (``control.clock``): every run here may go on
        for the fence from then.  (From when it was sent, not answered: the controller heard from this
        host no sooner, so the shepherds stop no later than the fence after its last word of us.)"""
        fence = reply.get("fence")
        if not isinstance(fence, (int, float)) or fence <= 0:
            return
        if self.fence != fence:
            self.fence = float(fence)
            if fence < 3 * self.heartbeat_interval:
                log.warning("the controller's fence_time (%gs) is under three heartbeats (%gs each): runs may be "
                            "fenced by a late heartbeat", fence, self.heartbeat_interval)
        with self._lock:  # (the heartbeat's and the work poll's threads both renew: a lease only grows)
            if sent + fence > self.lease_until:
                self.lease_until = sent + fence
                control.renew_lease(self.work_dir, self.lease_until)

    def register(self) -> None:
        # every run with a directory: still going, or ended with its final report not yet delivered
        # (so the controller does not take a run whose report is on its way for lost)
        running = [{"job_id": int(j), "run": int(r)}
                   for j, _, r in (name.partition(".") for name in sorted(os.listdir(self.runs_dir)))]
        sent = control.clock()
        reply = self.client.post(f"/v1/hosts/{self.host}/register", {
            "slots": self.slots, "attrs": self.attrs, "counters": self.counters,
            "gpus": [g.as_json() for g in self.gpus],
            "boot_id": self.boot_id, "running": running})
        self._confirmed(sent, reply)
        for k in reply.get("kill", []):
            self._end_now(k["job_id"], k["run"])
        log.info("registered %s: %d slots, attrs %s, counters %s, GPUs %s", self.host, self.slots, self.attrs,
                 self.counters, ",".join(str(g.id) for g in self.gpus) or "none")

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                sent = control.clock()
                self._confirmed(sent, self.client.post(f"/v1/hosts/{self.host}/heartbeat", {}))
            except ApiError as e:
                if e.code == "reregister":
                    self._try(self.register)
            except ClientError as e:
                log.warning("heartbeat failed: %s", e.message)

    def _reporter_loop(self) -> None:
        while not self._stop.is_set() or not self._reports.empty():
            try:
                first = self._reports.get(timeout=0.5)
            except queue.Empty:
                continue
            batch = [first]
            while True:
                try:
                    batch.append(self._reports.get_nowait())
                except queue.Empty:
                    break
            body = {"started": [r for k, r in batch if k == "started"],
                    "finished": [r for k, r in batch if k == "finished"],
                    "tasks_finished": [r for k, r in batch if k == "task_finished"]}
            delay = 0.2
            while True:
                try:
                    reply = self.client.post(f"/v1/hosts/{self.host}/reports", body)
                    break
                except ClientError as e:
                    log.warning("report failed, retrying in %.1fs: %s", delay, e.message)
                    if self._stop.wait(delay) and isinstance(e, ApiError):
                        return
                    delay = min(delay * 2, 5.0)
            for r in body["finished"]:  # the controller has it: the run's directory is done
                sandbox.remove_tree(self._run_dir(r["job_id"], r["run"]))
            for r in body["tasks_finished"]:
                sandbox.remove_tree(self.tasks.task_dir((r["job_id"], r["run"], r["task"])))
            for k in reply.get("kill", []):
                self._end_now(k["job_id"], k["run"])

    def _try(self, fn) -> bool:
        try:
            fn()
            return True
        except ClientError as e:
            log.warning("%s failed: %s", getattr(fn, "__name__", "call"), e.message)
            return False

    # ------------------------------------------------------------ runs

    def _dispatched(self, jobs: list[Dispatch]) -> None:
        """Runs the controller says may start (a node agent's report opened their readiness gate)."""
        for job in jobs:
            if not self._stop.is_set():
                self._start(job)

    def _start(self, job: Dispatch) -> None:
        key = (job["job_id"], job["run"])
        run_dir = self._run_dir(*key)
        if self.fence is not None and control.clock() >= self.lease_until:
            # OBSERVATION: no word from the controller for the whole fence (a dispatch from a node agent's
            # report, after an outage): its shepherd would fence it at once.  The next poll, answered,
            # renews the lease and dispatches it again.
            log.info("run %d.%d not started yet: this host's lease ran out; waiting for the controller", *key)
            return
        with self._lock:
            if key in self.running or key in self.ended:
                return  # already started (its report may still be on its way), or over
            try:
                os.mkdir(run_dir, 0o711)  # the job passes through to its claims' mount points
            except FileExistsError:
                return  # started by an earlier life of this worker (adopted), or its end not yet reported
        workspace = os.path.join(self.jobs_dir, f"{key[0]}.{key[1]}")
        intent: dict[str, Any] = {"job_id": key[0], "run": key[1], "workspace": workspace, "user": job["user"]}
        try:
            run_as = sandbox.run_as_for(job["user"], self.host, self.allow_system_users) if self.run_as_users else None
            cgroup = self._make_cgroup(key, job)
            if cgroup is not None:
                intent["cgroup"] = cgroup.as_json()
            # the run's rendezvous here (its first host) and its secret, which only its environment holds
            port = self.ports.reserve(key)
            secret, task_key = new_secret()
            intent.update(rendezvous=f"{self.address}:{port}", task_key=task_key)
            own_env = {"XCE_RDZV_HOST": self.address, "XCE_RDZV_PORT": str(port), "XCE_JOB_TOKEN": secret,
                       "XCE_JOB_URL": self.url}
            exclusive = [g["id"] for g in job.get("gpus") or []] if job.get("gpu_mode") == EXCLUSIVE_PROCESS else []
            if exclusive:
                intent["compute_mode"] = exclusive  # (given back at the run's end, by this life or the next)
            self._write_journal(run_dir, intent)  # intent before action
            self._compute_mode(key, exclusive, EXCLUSIVE_PROCESS)
            if job.get("run_limit"):
                control.set_run_limit(run_dir, job["run_limit"], job.get("warn_time"), job.get("warn_signal"),
                                      job.get("limit_grace"))
            # fenced on the lease once the controller has said how long it lasts (it has, before any dispatch)
            lease = control.lease_path(self.work_dir) if self.fence is not None else None
            confinement = sandbox.Confinement(cgroup=cgroup, lease=lease,
                                              allow_system_users=self.allow_system_users,
                                              allow_no_openat2=self.allow_no_openat2)
            try:  # the port's lock goes to the shepherd: the reservation lasts as long as the run
                started = sandbox.start(job, self.host, run_dir, workspace, self.output_dir, self.storage, run_as,
                                        confinement, own_env, hold=self.ports.lock_fd(key))
            finally:
                self.ports.handed_over(key)
        except (sandbox.StartFailed, CgroupError, OSError) as e:
            reason = f"failed to start: {e}" if not isinstance(e, sandbox.StartFailed) else str(e)
            self._drop_cgroup(key)
            self.ports.release(key)
            self._compute_mode(key, intent.get("compute_mode") or [], DEFAULT_MODE)
            sandbox.clean_workspace(workspace)
            self._write_journal(run_dir, dict(intent, failed=reason))
            self._ended(key)
            self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": 127,
                                            "reason": reason}))
            return
        with self._lock:
            self.running.add(key)
        threading.Thread(target=self._watch_child, args=(key, started, run_dir, intent), daemon=True,
                         name=f"job-{key[0]}.{key[1]}").start()

    def _compute_mode(self, key: tuple[int, int], ids: list[int], mode: str) -> None:
        """The run's GPUs to compute ``mode`` (``-gpu mode=exclusive_process``, and back at its end).  A
        failure is said and the run goes on: the scheduler's sharing rule still keeps other jobs off them."""
        if not ids or self.gpu_source is None:
            return
        try:
            self.gpu_source.set_compute_mode(ids, mode)
        except Exception as e:  # NVMLError_NoPermission (not root), _NotSupported (a GeForce)...
            log.warning("run %d.%d: could not set GPUs %s to compute mode %s: %s", *key,
                        ",".join(map(str, ids)), mode, e)

    def _make_cgroup(self, key: tuple[int, ...], job: Dispatch) -> RunCgroup | None:
        """The run's cgroup, its limits written: ``mem_limit`` (-M, or the mem it reserved here), and its
        slots here as whole cores (when this host's slots are its cores) or as a CPU quota."""
        if self.cgroups is None:
            return None
        slots = max(1, int(job.get("slots") or 1))
        with self._lock:
            cores: tuple[int, ...] = ()
            if self.bind_cores and len(self.free_cores) >= slots:
                cores = tuple(sorted(self.free_cores)[:slots])
                self.free_cores.difference_update(cores)
        # the GPUs it does not hold: their device nodes denied (none on a host without GPU device nodes)
        deny = tuple(device_rules(self.gpus, [g["id"] for g in job.get("gpus") or []])) if self.gpus else ()
        limits = Limits(memory_bytes=job.get("mem_limit"), cores=cores, cpu_quota=None if cores else float(slots),
                        deny_devices=deny)
        try:
            rc = self.cgroups.make(limits)
        except CgroupError:
            with self._lock:
                self.free_cores.update(cores)
            raise
        with self._lock:
            self.run_cgroups[key] = rc
        return rc

    def _drop_cgroup(self, key: tuple[int, ...], used: Usage | None = None) -> None:
        """The run's cgroup idle again and its cores free (its processes are gone; ``used``: its usage)."""
        with self._lock:
            rc = self.run_cgroups.pop(key, None)
            if rc is not None:
                self.free_cores.update(rc.cores)
        if rc is not None and self.cgroups is not None:
            self.cgroups.give_back(rc, used)

    def _watch_child(self, key: tuple[int, int], started: sandbox.Started, run_dir: str,
                     intent: dict[str, Any]) -> None:
        """Report the run started once its command was exec'd (with what the launcher noted: a working
        directory it could not use), then wait for its end."""
        note = started.notes()
        self._reports.put(("started", {"job_id": key[0], "run": key[1], "pid": started.pid,
                                       "workspace": started.workspace, "stdout": started.stdout,
                                       "stderr": started.stderr, "publish": started.publish, "note": note,
                                       "rendezvous": intent["rendezvous"], "task_key": intent["task_key"]}))
        os.waitpid(started.pid, 0)  # the shepherd: it has written the job's status by now
        self._finish(key, run_dir, intent)

    def _watch_adopted(self, key: tuple[int, int], pid: int, run_dir: str, journal: dict[str, Any]) -> None:
        while sandbox.shepherd_alive(pid, run_dir):  # not our child: we cannot wait for it
            time.sleep(ADOPT_POLL)
        self._finish(key, run_dir, journal)

    def _finish(self, key: tuple[int, int], run_dir: str, journal: dict[str, Any]) -> None:
        """The shepherd is gone (it killed what the job left in its cgroup): read what the run used,
        clean up, report how it ended.  ``journal``: the run's intent, as written at its start."""
        workspace = journal["workspace"]
        rc = self.run_cgroups.get(key)
        if rc is None:  # no cgroup: whatever the job left behind in its process group goes with it
            sandbox.kill_group(run_dir)
        self._compute_mode(key, journal.get("compute_mode") or [], DEFAULT_MODE)
        cg = self.cgroups.usage(rc) if rc is not None and self.cgroups is not None else None
        self._drop_cgroup(key, cg)
        pre_failed, post_exit = sandbox.exec_steps(workspace)
        sandbox.clean_workspace(workspace)
        status = sandbox.read_int(os.path.join(run_dir, "status"))
        ended = control.ended(run_dir)
        usage = {"max_rss_bytes": ended.max_rss_bytes,
                 "cpu_user_s": cg.cpu_user_s if cg and cg.cpu_user_s is not None else ended.cpu_user_s,
                 "cpu_sys_s": cg.cpu_sys_s if cg and cg.cpu_sys_s is not None else ended.cpu_sys_s}
        usage = usage if any(v is not None for v in usage.values()) else None
        if ended.fenced:
            report = {"job_id": key[0], "run": key[1], "lost": True, "usage": usage,
                      "reason": f"fenced: the worker on {self.host} had no answer from the controller for "
                                f"{self.fence or 0:g}s"}
        elif ended.limited:
            limit = control.run_limit(run_dir)
            exit_code, sig = sandbox.exit_status(status) if status is not None else (None, None)
            report = {"job_id": key[0], "run": key[1], "exit_code": exit_code, "signal": sig, "usage": usage,
                      "reason": f"run limit {format_run_limit(limit) if limit else '?'} reached"}
        elif status is None:
            report = {"job_id": key[0], "run": key[1], "lost": True,
                      "reason": f"lost: the job's shepherd on {self.host} died"}
        elif status == sandbox.PUBLISH_FAILED and (err := sandbox.publish_error(run_dir)):
            report = {"job_id": key[0], "run": key[1], "exit_code": status,
                      "reason": f"failed to start: could not publish its claims: {err}"}
        elif status in (sandbox.LAUNCH_FAILED, sandbox.NOT_FOUND) and (err := sandbox.launch_error(run_dir)):
            report = {"job_id": key[0], "run": key[1], "exit_code": status, "reason": f"failed to start: {err}"}
        else:
            exit_code, sig = sandbox.exit_status(status)
            report = {"job_id": key[0], "run": key[1], "exit_code": exit_code, "signal": sig, "usage": usage}
            if cg is not None and cg.oom_kills and exit_code != 0 and cg.memory_limit is not None:
                report["reason"] = f"memory limit {format_size(cg.memory_limit, iec=True)} exceeded"
            elif pre_failed is not None and pre_failed == exit_code:
                report["pre_exec_failed"] = True  # the command never ran: requeued to another host
            if post_exit is not None:
                report["post_exec_exit"] = post_exit
        self._ended(key)
        self._reports.put(("finished", report))

    def _ended(self, key: tuple[int, int]) -> None:
        self.ports.release(key)
        with self._lock:
            self.running.discard(key)
            self.applied.pop(key, None)
            self.ended[key] = None
            while len(self.ended) > ENDED_KEPT:
                del self.ended[next(iter(self.ended))]

    def _pass_on(self, orders: dict[str, Any]) -> None:
        """The controller's orders for one of our runs, to its shepherd, each order once."""
        key = (orders["job_id"], orders["run"])
        task_dirs = self.tasks.of_run(key)  # its tasks here (blaunch) are ordered as the run is
        with self._lock:
            if (key not in self.running and not task_dirs) or orders["seq"] <= self.applied.get(key, 0):
                return  # OBSERVATION: over, or passed on already (the answer raced our last poll's)
            self.applied[key] = orders["seq"]
            mine = key in self.running
        if mine:
            control.pass_on(self._run_dir(*key), orders)
        for task, task_dir in task_dirs.items():
            control.pass_on(task_dir, orders, task)

    def _end_now(self, job_id: int, run: int) -> None:
        """A run that is not this host's any more (the controller gave it up, or never gave it here): its
        shepherd kills it at once, and its end is reported as any other."""
        key = (job_id, run)
        with self._lock:
            if key not in self.running:
                return
        log.warning("run %d.%d is not this host's any more (given up while this worker was away): ending it", *key)
        control.end_now(self._run_dir(*key))

    # ------------------------------------------------------------ tasks (blaunch)

    def _start_task(self, task: TaskDispatch) -> None:
        """A task of a running job on this host, in the run's sandbox here: its first host's run's cgroup
        (joined), else a cgroup of its own; the run's workspace here."""
        job = task["run"]
        run = (job["job_id"], job["run"])
        key = (*run, task["task"])
        if self.fence is not None and control.clock() >= self.lease_until:
            return  # (as _start: its shepherd would fence it at once; the next answered poll has it again)
        task_dir = self.tasks.claim(key)
        if task_dir is None:
            return  # started already, or its run is over
        workspace = os.path.join(self.jobs_dir, f"{run[0]}.{run[1]}")
        with self._lock:
            main = self.run_cgroups.get(run) if run in self.running else None
            first_host = run in self.running or run in self.ended
        if not first_host:
            self.tasks.workspaces.setdefault(run, workspace)
        intent: dict[str, Any] = {"job_id": run[0], "run": run[1], "task": key[2], "workspace": workspace}
        own: RunCgroup | None = None
        try:
            run_as = sandbox.run_as_for(job["user"], self.host, self.allow_system_users) if self.run_as_users else None
            if main is None and self.cgroups is not None:
                own = self._make_cgroup(key, job)
                intent["cgroup"] = own.as_json() if own is not None else None
            self._write_journal(task_dir, intent)  # intent before action (a failure below is written too)
            lease = control.lease_path(self.work_dir) if self.fence is not None else None
            confinement = sandbox.Confinement(cgroup=own, joins=main, lease=lease,
                                              allow_system_users=self.allow_system_users,
                                              allow_no_openat2=self.allow_no_openat2)
            address, _, port = task["rendezvous"].rpartition(":")
            own_env = {"XCE_TASK": str(key[2]), "XCE_RDZV_HOST": address, "XCE_RDZV_PORT": port}
            stdin = bool(task.get("stdin"))
            spool = self.relay.make(key, run_as.uid if run_as else None, run_as.gid if run_as else None, stdin)
            started = sandbox.start(job, self.host, task_dir, workspace, self.output_dir, self.storage, run_as,
                                    confinement, own_env, task, output=spool,
                                    stdin=self.relay.input_path(key) if stdin else None)
        except (sandbox.StartFailed, CgroupError, OSError) as e:
            reason = f"failed to start: {e}" if not isinstance(e, sandbox.StartFailed) else str(e)
            self._write_journal(task_dir, dict(intent, failed=reason))
            self._task_ended(key, own, {"exit_code": 127, "reason": reason})
            return
        threading.Thread(target=self._watch_task, args=(key, started, task_dir, own), daemon=True,
                         name=f"task-{key[0]}.{key[1]}.{key[2]}").start()

    def _watch_task(self, key: tuple[int, int, int], started: sandbox.Started, task_dir: str,
                    own: RunCgroup | None) -> None:
        started.notes()  # (its exec, or its failure to get there)
        os.waitpid(started.pid, 0)
        self._task_done(key, task_dir, own)

    def _watch_adopted_task(self, key: tuple[int, int, int], pid: int | None, task_dir: str,
                            own: RunCgroup | None) -> None:
        while pid is not None and sandbox.shepherd_alive(pid, task_dir):  # not our child: we cannot wait for it
            time.sleep(ADOPT_POLL)
        self._task_done(key, task_dir, own)

    def _task_done(self, key: tuple[int, int, int], task_dir: str, own: RunCgroup | None) -> None:
        """The task's shepherd is gone: how it ended, to the controller."""
        status = sandbox.read_int(os.path.join(task_dir, "status"))
        if own is None:  # no cgroup of its own: what it left in its process group goes with it
            sandbox.kill_group(task_dir)
        if status is None:
            end: dict[str, Any] = {"reason": f"lost: the task's shepherd on {self.host} died"}
        elif status in (sandbox.PUBLISH_FAILED, sandbox.LAUNCH_FAILED, sandbox.NOT_FOUND) and \
                (err := sandbox.publish_error(task_dir) or sandbox.launch_error(task_dir)):
            end = {"exit_code": status, "reason": f"failed to start: {err}"}
        else:
            exit_code, sig = sandbox.exit_status(status)
            end = {"exit_code": exit_code, "signal": sig}
        self._task_ended(key, own, end)

    def _task_ended(self, key: tuple[int, int, int], own: RunCgroup | None, end: dict[str, Any]) -> None:
        if own is not None:
            self._drop_cgroup(key)
        spent = self.tasks.finished(key)
        if spent is not None:
            sandbox.clean_workspace(spent)
        self._reports.put(("task_finished", {"job_id": key[0], "run": key[1], "task": key[2], **end}))

    def _end_input(self, key: tuple[int, int, int]) -> None:
        """blaunch's input for the task is over: its shepherd closes its write end of the task's FIFO."""
        task_dir = self.tasks.of_run(key[:2]).get(key[2])
        if task_dir is not None:
            control.end_input(task_dir)

    def _runs_over(self, runs: list[tuple[int, int]]) -> None:
        """The controller says these runs are over: their tasks here end now, their workspaces here go."""
        for run in runs:
            for task_dir in self.tasks.of_run(run).values():
                control.end_now(task_dir)
            self.relay.drop_run(run)  # (its blaunch is gone with it)
        for workspace in self.tasks.ended_runs(runs):
            sandbox.clean_workspace(workspace)

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        """Recover, register, then serve until ``stop``; pending reports get a few seconds to go out."""
        self._recover()
        while not self._stop.is_set():
            if self._try(self.register):
                break
            self._stop.wait(1.0)
        threads = [threading.Thread(target=self._heartbeat_loop, daemon=True, name="heartbeat"),
                   threading.Thread(target=self._reporter_loop, daemon=True, name="reporter"),
                   threading.Thread(target=self._poll_loop, daemon=True, name="poll"),
                   threading.Thread(target=self._peek_loop, daemon=True, name="peeks"),
                   threading.Thread(target=self.relay.run, args=(self._stop,), daemon=True, name="relay"),
                   threading.Thread(target=self.node_agent.run, daemon=True, name="node-agent")]
        for t in threads:
            t.start()
        # a timed wait: a signal the kernel delivers to another thread wakes the main thread only
        # at its next check (an untimed wait would never see it)
        while not self._stop.wait(0.5):
            pass
        threads[1].join(10)  # the poll may sit in a long-poll: it is a daemon thread and dies with us
        return 0

    def _peek_loop(self) -> None:
        """Answer the controller's questions about the output of runs here (``bpeek``) and hand those
        about tasks' output (blaunch's relay) to the relay, which holds them until there is output."""
        while not self._stop.is_set():
            try:
                asked = self.client.get(f"/v1/hosts/{self.host}/peeks",
                                        [("wait", POLL_WAIT), *(("held", i) for i in self.relay.held())],
                                        timeout=POLL_WAIT + DAEMON_TIMEOUT)
            except ClientError as e:
                log.warning("peek poll failed, retrying in 1s: %s", e.message)
                self._stop.wait(1.0)
                continue
            for a in asked or []:
                if a.get("kind") in ("task_output", "task_input"):
                    self.relay.ask(a)
                else:
                    reply = self._peek(a)
                    self._try(lambda: self._answer_peek(reply))

    def _answer_peek(self, reply: dict[str, Any]) -> None:
        self.client.post(f"/v1/hosts/{self.host}/peeks", reply)

    def _peek(self, asked: dict[str, Any]) -> dict[str, Any]:
        key = (asked["job_id"], asked["run"])
        with self._lock:
            here = key in self.running
        pid = sandbox.read_int(os.path.join(self._run_dir(*key), "pgid")) if here else None
        if pid is None:
            return {"id": asked["id"], "error": "its process is not running here"}
        try:
            offset, size, data = sandbox.read_output(pid, asked["offset"], asked["limit"])
        except OSError as e:
            return {"id": asked["id"], "error": f"cannot read its output: {e.strerror or e}"}
        return {"id": asked["id"], "offset": offset, "size": size, "data": base64.b64encode(data).decode()}

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            with self._lock:  # the orders we have: the poll answers only newer ones
                seen = [f"{j}.{r}.{seq}" for (j, r), seq in self.applied.items() if seq]
            task_runs = [f"{j}.{r}" for j, r in sorted(self.tasks.runs() | self.relay.runs())]
            sent = control.clock()
            try:
                work = self.client.get(f"/v1/hosts/{self.host}/work", [("wait", POLL_WAIT), *(("seen", x) for x in seen),
                                                                      *(("tasks", x) for x in task_runs)],
                                       timeout=POLL_WAIT + DAEMON_TIMEOUT)
            except ApiError as e:
                if e.code == "reregister":
                    self._try(self.register)
                else:
                    log.warning("work poll refused: %s", e.message)
                    self._stop.wait(1.0)
                continue
            except ClientError as e:
                log.warning("work poll failed: %s", e.message)
                self._stop.wait(1.0)
                continue
            if self._stop.is_set():
                return
            self._confirmed(sent, work)
            for orders in work["orders"]:
                self._pass_on(orders)
            for job in work["dispatch"]:
                self._start(job)
            self._runs_over([(r["job_id"], r["run"]) for r in work.get("over", [])])
            for task in work.get("tasks", []):
                self._start_task(task)

    def stop(self) -> None:
        """Stop polling; running jobs are left to the next life of this worker to reconcile."""
        self._stop.set()
        self.node_agent.stop()


def default_node_providers(work_dir: str, set_owner: bool = False) -> dict[str, Provider]:
    """Without a provider config: simfs for node-scope classes, its root under the work dir, run in
    the worker's own process (node-local directories need no process of their own).  With
    ``set_owner`` (jobs run as their users) each object's data belongs to the claim's owner."""
    root = os.path.join(work_dir, "simfs")
    os.makedirs(root, mode=0o711, exist_ok=True)
    os.chmod(root, 0o711)  # users pass through to their own objects; nobody lists the others
    config: dict[str, Any] = {"root": root, "set_owner": True} if set_owner else {"root": root}
    return {"simfs": Provider(name="simfs", command=SIMFS_COMMAND, timeout=60.0, config=config, in_process=True)}
