"""``xce worker``: register, heartbeat, long-poll for dispatches, run jobs, report.

Threads: one long-polls for work, one heartbeats, one sends queued reports
in batches and retries until the controller has them, and one watches each
running job.  Jobs are started with ``os.posix_spawn`` under a shepherd
(see ``sandbox``), never fork.

Every run has a directory ``runs/<job>.<run>/`` made *before* its shepherd
is spawned (intent before action), so a restarted worker never starts the
same run twice.  The shepherd writes the job's status there, and the
directory goes only once the controller has the final report.  A restarted
worker therefore adopts runs that are still going, reports the real status
of runs that ended while it was away, and reports as lost only runs whose
shepherd died too.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import signal
import threading
import time
import uuid
from typing import Any

from xce.agents.agent import ClaimAgent, Provider
from xce.agents.provisioner import SIMFS_COMMAND
from xce.client import ApiError, Client, ClientError
from xce.model.claims import node_agent
from xce.transfers import TransferSite
from xce.worker import sandbox, staging
from xce.worker.storage import StorageRoots

log = logging.getLogger("xce.worker")

KILL_GRACE = 5.0
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
                 transfers: TransferSite | None = None) -> None:
        self.host = host
        # several controllers: calls follow the leader; every call the worker makes is idempotent
        # (runs are keyed by job and run number), so one whose answer was lost is sent again
        self.client = Client(url, token, timeout=DAEMON_TIMEOUT, retry_mutations=True)
        self.slots, self.attrs, self.counters = slots, attrs, counters
        self.work_dir = work_dir
        self.heartbeat_interval = heartbeat
        self.run_as_users = run_as_users
        self.allow_system_users = allow_system_users  # run as root / uid < UID_MIN too (sandbox.run_as_for)
        self.transfers = transfers  # remotes and their credentials (--transfer-config): stage-in/out of URLs
        self.boot_id = uuid.uuid4().hex
        self.runs_dir = os.path.join(work_dir, "runs")
        self.jobs_dir = os.path.join(work_dir, "jobs")
        self.output_dir = os.path.join(work_dir, "output")
        for d in (self.runs_dir, self.jobs_dir, self.output_dir):
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
        # the node agent: prepares and releases this host's node-scope claims, stages files in and out
        # (its reports' answers name the runs whose claims it just made ready: started at once, as if the
        # work poll had said so, rather than after a wake-up of that poll)
        self.node_agent = ClaimAgent(self.client, node_agent(host), providers,  # one client: one view of the leader
                                     inventory_classes=False, local_ops={
                                         "stage_in": self._stage, "stage_out": self._stage},
                                     on_dispatch=self._dispatched)

    def _stage(self, item: dict[str, Any]):
        return staging.run_stage_op(item, self.host, self.run_as_users, self.storage,
                                    allow_system_users=self.allow_system_users, site=self.transfers,
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
        with open(os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            json.dump(data, fh)
        os.replace(path + ".tmp", path)

    def _read_journal(self, run_dir: str) -> dict[str, Any] | None:
        try:
            with open(os.path.join(run_dir, "journal.json")) as fh:
                return json.load(fh)
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
            if "failed" in data:
                self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": 127,
                                                "reason": data["failed"]}))
                continue
            pid = sandbox.read_int(os.path.join(run_dir, "shepherd.pid"))
            if pid is not None and sandbox.shepherd_alive(pid, run_dir):
                log.info("adopting run %d.%d (shepherd %d) from an earlier life", *key, pid)
                with self._lock:
                    self.running.add(key)
                self._reports.put(("started", {"job_id": key[0], "run": key[1], "pid": pid,
                                               "workspace": data["workspace"]}))
                threading.Thread(target=self._watch_adopted, args=(key, pid, run_dir, data["workspace"]),
                                 daemon=True, name=f"job-{key[0]}.{key[1]}").start()
            else:
                self._finish(key, run_dir, data["workspace"])
        for name in os.listdir(self.jobs_dir):  # workspaces no run knows about: never started
            if name not in known:
                sandbox.clean_workspace(os.path.join(self.jobs_dir, name))

    # ------------------------------------------------------------ controller calls

    def register(self) -> None:
        # every run with a directory: still going, or ended with its final report not yet delivered
        # (so the controller does not take a run whose report is on its way for lost)
        running = [{"job_id": int(j), "run": int(r)}
                   for j, _, r in (name.partition(".") for name in sorted(os.listdir(self.runs_dir)))]
        reply = self.client.post(f"/v1/hosts/{self.host}/register", {
            "slots": self.slots, "attrs": self.attrs, "counters": self.counters,
            "boot_id": self.boot_id, "running": running})
        for k in reply.get("kill", []):
            self._kill(k["job_id"], k["run"])
        log.info("registered %s: %d slots, attrs %s, counters %s", self.host, self.slots, self.attrs, self.counters)

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.heartbeat_interval):
            try:
                self.client.post(f"/v1/hosts/{self.host}/heartbeat", {})
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
                    "finished": [r for k, r in batch if k == "finished"]}
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
                shutil.rmtree(self._run_dir(r["job_id"], r["run"]), ignore_errors=True)
            for k in reply.get("kill", []):
                self._kill(k["job_id"], k["run"])

    def _try(self, fn) -> bool:
        try:
            fn()
            return True
        except ClientError as e:
            log.warning("%s failed: %s", getattr(fn, "__name__", "call"), e.message)
            return False

    # ------------------------------------------------------------ runs

    def _dispatched(self, jobs: list[dict[str, Any]]) -> None:
        """Runs the controller says may start (a node agent's report opened their readiness gate)."""
        for job in jobs:
            if not self._stop.is_set():
                self._start(job)

    def _start(self, job: dict[str, Any]) -> None:
        key = (job["job_id"], job["run"])
        run_dir = self._run_dir(*key)
        with self._lock:
            if key in self.running or key in self.ended or os.path.exists(run_dir):
                return  # already started (its report may still be on its way), or over
            os.mkdir(run_dir, 0o711)  # the job passes through to its claims' mount points
        workspace = os.path.join(self.jobs_dir, f"{key[0]}.{key[1]}")
        intent = {"job_id": key[0], "run": key[1], "workspace": workspace, "user": job["user"]}
        self._write_journal(run_dir, intent)  # intent before action
        try:
            run_as = sandbox.run_as_for(job["user"], self.host, self.allow_system_users) if self.run_as_users else None
            started = sandbox.start(job, self.host, run_dir, workspace, self.output_dir, self.storage, run_as)
        except (sandbox.StartFailed, OSError) as e:
            reason = str(e) if isinstance(e, sandbox.StartFailed) else f"failed to start: {e}"
            sandbox.clean_workspace(workspace)
            self._write_journal(run_dir, dict(intent, failed=reason))
            self._ended(key)
            self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": 127,
                                            "reason": reason}))
            return
        with self._lock:
            self.running.add(key)
        self._reports.put(("started", {"job_id": key[0], "run": key[1], "pid": started.pid,
                                       "workspace": workspace, "stdout": started.stdout,
                                       "stderr": started.stderr, "publish": started.publish}))
        threading.Thread(target=self._watch_child, args=(key, started.pid, run_dir, workspace), daemon=True,
                         name=f"job-{key[0]}.{key[1]}").start()

    def _watch_child(self, key: tuple[int, int], pid: int, run_dir: str, workspace: str) -> None:
        os.waitpid(pid, 0)  # the shepherd: it has written the job's status by now
        self._finish(key, run_dir, workspace)

    def _watch_adopted(self, key: tuple[int, int], pid: int, run_dir: str, workspace: str) -> None:
        while sandbox.shepherd_alive(pid, run_dir):  # not our child: we cannot wait for it
            time.sleep(ADOPT_POLL)
        self._finish(key, run_dir, workspace)

    def _finish(self, key: tuple[int, int], run_dir: str, workspace: str) -> None:
        """The shepherd is gone: sweep the job's process group, clean up, report how it ended."""
        pgid = sandbox.read_int(os.path.join(run_dir, "pgid"))
        if pgid is not None:
            try:  # whatever the job left behind in its process group goes with it
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        sandbox.clean_workspace(workspace)
        status = sandbox.read_int(os.path.join(run_dir, "status"))
        if status is None:
            report = {"job_id": key[0], "run": key[1], "lost": True,
                      "reason": f"lost: the job's shepherd on {self.host} died"}
        elif status == sandbox.PUBLISH_FAILED and (err := sandbox.publish_error(run_dir)):
            report = {"job_id": key[0], "run": key[1], "exit_code": status,
                      "reason": f"failed to start: could not publish its claims: {err}"}
        elif status == sandbox.LAUNCH_FAILED and (err := sandbox.launch_error(run_dir)):
            report = {"job_id": key[0], "run": key[1], "exit_code": status, "reason": f"failed to start: {err}"}
        else:
            exit_code, sig = sandbox.exit_status(status)
            report = {"job_id": key[0], "run": key[1], "exit_code": exit_code, "signal": sig}
        self._ended(key)
        self._reports.put(("finished", report))

    def _ended(self, key: tuple[int, int]) -> None:
        with self._lock:
            self.running.discard(key)
            self.ended[key] = None
            while len(self.ended) > ENDED_KEPT:
                del self.ended[next(iter(self.ended))]

    def _kill(self, job_id: int, run: int) -> None:
        """SIGTERM to the job's process group, SIGKILL after a grace period (the shepherd reports)."""
        key = (job_id, run)
        with self._lock:
            if key not in self.running:
                return
        pgid_path = os.path.join(self._run_dir(*key), "pgid")

        def escalate() -> None:
            deadline = time.monotonic() + KILL_GRACE
            termed = False
            while True:
                with self._lock:
                    if key not in self.running:
                        return
                pgid = sandbox.read_int(pgid_path)
                late = time.monotonic() >= deadline
                if pgid is not None and (late or not termed):
                    try:
                        os.killpg(pgid, signal.SIGKILL if late else signal.SIGTERM)
                        termed = True
                    except (ProcessLookupError, PermissionError):
                        pass  # not in its own group yet, or already gone: look again
                    if late:
                        return
                time.sleep(0.1)

        threading.Thread(target=escalate, daemon=True).start()

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
                   threading.Thread(target=self.node_agent.run, daemon=True, name="node-agent")]
        for t in threads:
            t.start()
        # a timed wait: a signal the kernel delivers to another thread wakes the main thread only
        # at its next check (an untimed wait would never see it)
        while not self._stop.wait(0.5):
            pass
        threads[1].join(10)  # the poll may sit in a long-poll: it is a daemon thread and dies with us
        return 0

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                work = self.client.get(f"/v1/hosts/{self.host}/work", {"wait": POLL_WAIT},
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
            for k in work["kill"]:
                self._kill(k["job_id"], k["run"])
            for job in work["dispatch"]:
                self._start(job)

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
