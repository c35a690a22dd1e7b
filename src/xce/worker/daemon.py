"""``xce worker``: register, heartbeat, long-poll for dispatches, run jobs, report.

Threads: the main thread long-polls for work; one heartbeat thread; one
reporter thread that sends queued reports in batches and retries until the
controller has them; one waiter thread per running job.  Jobs are started
with ``os.posix_spawn`` (see ``sandbox``), never fork.

Every run this worker starts is journaled on disk *before* it is spawned
(``runs/<job>.<run>.json``) and updated with its exit status when it ends,
so a restarted worker never starts the same run twice and reports what it
knows: the real exit status if the run ended, else that the run was lost.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import threading
import time
import uuid
from typing import Any

from xce.cli.http import ApiError, CliError, Client
from xce.worker import sandbox

log = logging.getLogger("xce.worker")

KILL_GRACE = 5.0


class Worker:
    def __init__(self, host: str, url: str, token: str, slots: int, attrs: dict[str, str],
                 counters: dict[str, float], work_dir: str, heartbeat: float = 2.0) -> None:
        self.host = host
        self.client = Client(url, token, timeout=90)
        self.slots, self.attrs, self.counters = slots, attrs, counters
        self.work_dir = work_dir
        self.heartbeat_interval = heartbeat
        self.boot_id = uuid.uuid4().hex
        self.runs_dir = os.path.join(work_dir, "runs")
        self.jobs_dir = os.path.join(work_dir, "jobs")
        self.output_dir = os.path.join(work_dir, "output")
        for d in (self.runs_dir, self.jobs_dir, self.output_dir):
            os.makedirs(d, exist_ok=True)
        self.running: dict[tuple[int, int], int] = {}  # (job, run) -> pid
        self._lock = threading.Lock()
        self._reports: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._stop = threading.Event()

    # ------------------------------------------------------------ journal

    def _journal_path(self, job_id: int, run: int) -> str:
        return os.path.join(self.runs_dir, f"{job_id}.{run}.json")

    def _journal(self, job_id: int, run: int, **fields: Any) -> None:
        path = self._journal_path(job_id, run)
        data: dict[str, Any] = {}
        if os.path.exists(path):
            with open(path) as fh:
                data = json.load(fh)
        data.update(fields, job_id=job_id, run=run)
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(data, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def _recover(self) -> None:
        """After a restart: nothing from an earlier life still runs under us; report what we know."""
        for name in sorted(os.listdir(self.runs_dir)):
            if not name.endswith(".json"):
                continue
            with open(os.path.join(self.runs_dir, name)) as fh:
                data = json.load(fh)
            pid = data.get("pid")
            if "exit_code" not in data and "reason" not in data and pid:
                try:
                    os.killpg(pid, signal.SIGKILL)  # an orphan of our last life: we cannot wait for it
                except (ProcessLookupError, PermissionError):
                    pass
                report = {"job_id": data["job_id"], "run": data["run"], "lost": True,
                          "reason": f"lost: worker on {self.host} restarted during the run"}
            else:
                report = {"job_id": data["job_id"], "run": data["run"], "exit_code": data.get("exit_code"),
                          "signal": data.get("signal"), "reason": data.get("reason", "")}
            sandbox.clean_workspace(data.get("workspace") or os.path.join(self.jobs_dir, name[:-5]))
            self._reports.put(("finished", report))
        for name in os.listdir(self.jobs_dir):  # workspaces with no journal: never started
            sandbox.clean_workspace(os.path.join(self.jobs_dir, name))

    # ------------------------------------------------------------ controller calls

    def register(self) -> None:
        with self._lock:
            running = [{"job_id": j, "run": r} for (j, r) in self.running]
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
            except CliError as e:
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
                except CliError as e:
                    log.warning("report failed, retrying in %.1fs: %s", delay, e.message)
                    if self._stop.wait(delay) and isinstance(e, ApiError):
                        return
                    delay = min(delay * 2, 5.0)
            for r in body["finished"]:  # the controller has it: the journal entry is done
                try:
                    os.unlink(self._journal_path(r["job_id"], r["run"]))
                except FileNotFoundError:
                    pass
            for k in reply.get("kill", []):
                self._kill(k["job_id"], k["run"])

    def _try(self, fn) -> bool:
        try:
            fn()
            return True
        except CliError as e:
            log.warning("%s failed: %s", getattr(fn, "__name__", "call"), e.message)
            return False

    # ------------------------------------------------------------ runs

    def _start(self, job: dict[str, Any]) -> None:
        key = (job["job_id"], job["run"])
        with self._lock:
            if key in self.running or os.path.exists(self._journal_path(*key)):
                return  # already started (its report may still be on its way)
        workspace = os.path.join(self.jobs_dir, f"{job['job_id']}.{job['run']}")
        self._journal(*key, workspace=workspace)  # intent before action
        try:
            started = sandbox.start(job, self.host, workspace, self.output_dir)
        except sandbox.StartFailed as e:
            sandbox.clean_workspace(workspace)
            self._journal(*key, exit_code=127, reason=str(e))
            self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": 127,
                                            "reason": str(e)}))
            return
        with self._lock:
            self.running[key] = started.pid
        self._journal(*key, pid=started.pid)
        self._reports.put(("started", {"job_id": key[0], "run": key[1], "pid": started.pid,
                                       "workspace": workspace, "stdout": started.stdout,
                                       "stderr": started.stderr}))
        threading.Thread(target=self._wait, args=(key, started), daemon=True,
                         name=f"job-{key[0]}.{key[1]}").start()

    def _wait(self, key: tuple[int, int], started: sandbox.Started) -> None:
        _, status = os.waitpid(started.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        exit_code, sig = (code, None) if code >= 0 else (None, -code)
        try:  # the job's other processes go with it
            os.killpg(started.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        sandbox.clean_workspace(started.workspace)
        self._journal(*key, exit_code=exit_code, signal=sig)
        with self._lock:
            self.running.pop(key, None)
        self._reports.put(("finished", {"job_id": key[0], "run": key[1], "exit_code": exit_code, "signal": sig}))

    def _kill(self, job_id: int, run: int) -> None:
        with self._lock:
            pid = self.running.get((job_id, run))
        if pid is None:
            return

        def escalate() -> None:
            try:
                os.killpg(pid, signal.SIGTERM)
                for _ in range(int(KILL_GRACE / 0.1)):
                    time.sleep(0.1)
                    with self._lock:
                        if (job_id, run) not in self.running:
                            return
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

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
                   threading.Thread(target=self._poll_loop, daemon=True, name="poll")]
        for t in threads:
            t.start()
        self._stop.wait()
        threads[1].join(10)  # the poll may sit in a long-poll: it is a daemon thread and dies with us
        return 0

    def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                work = self.client.get(f"/v1/hosts/{self.host}/work", {"wait": 20})
            except ApiError as e:
                if e.code == "reregister":
                    self._try(self.register)
                else:
                    log.warning("work poll refused: %s", e.message)
                    self._stop.wait(1.0)
                continue
            except CliError as e:
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
