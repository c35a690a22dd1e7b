"""Real daemons for tests: start ``xce controller`` as a child process on a free loopback port."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

from tests.ports import free_port

XCE = [sys.executable, "-m", "xce.cli.main"]
#: how long a daemon may take to come up: the suite runs several test processes on two cores (make test)
START_TIMEOUT = 60.0


def terminate(proc: subprocess.Popen | None, timeout: float = 20) -> None:
    """SIGTERM (a clean shutdown), SIGKILL if it takes longer than ``timeout``."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_now(proc)


def kill_now(proc: subprocess.Popen | None) -> None:
    """SIGKILL: no shutdown path runs."""
    if proc is not None and proc.poll() is None:
        proc.kill()
        proc.wait(10)


def wait_for(cond, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def audit_trail(client: httpx.Client, **params) -> list[dict]:
    """Every audit record matching ``params``, oldest first: ``GET /v1/audit`` page by page, following
    ``X-Next-Cursor`` (pages run newest first, each in log order)."""
    out: list[dict] = []
    cursor = None
    while True:
        r = client.get("/v1/audit", params={**params, "limit": 10_000, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        out[:0] = r.json()
        cursor = r.headers.get("X-Next-Cursor")
        if cursor is None:
            return out


@dataclass
class ControllerProcess:
    state_dir: str
    store: str | None = None
    config: str | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        with open(os.path.join(self.state_dir, "admin.token")) as fh:
            return fh.read().strip()

    def start(self, wait_leader: bool = True) -> ControllerProcess:
        cmd = XCE + ["controller", "--state-dir", self.state_dir, "--listen", f"127.0.0.1:{self.port}"]
        if self.store:
            cmd += ["--store", self.store]
        if self.config:
            cmd += ["--config", self.config]
        self.log = open(os.path.join(self.state_dir, f"controller-{self.port}.log"), "ab") \
            if os.path.isdir(self.state_dir) else None
        if self.log is None:
            os.makedirs(self.state_dir, exist_ok=True)
            self.log = open(os.path.join(self.state_dir, f"controller-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        # a controller imports FastAPI and its model before it listens: seconds on a busy 2-core machine
        try:
            wait_for(self._healthy if not wait_leader else self.is_leader, timeout=START_TIMEOUT,
                     what=f"controller on {self.url}")
        except BaseException:
            kill_now(self.proc)  # not left running behind a failed test
            raise
        return self

    def _health(self) -> dict | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"controller exited with {self.proc.returncode}; see {self.log.name}")
        try:
            return httpx.get(self.url + "/healthz", timeout=2).json()
        except httpx.HTTPError:
            return None

    def _healthy(self) -> bool:
        return self._health() is not None

    def is_leader(self) -> bool:
        h = self._health()
        return bool(h and h["leader"])

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {token or self.token}"})

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown path runs."""
        kill_now(self.proc)

    def stop(self) -> int:
        """SIGTERM: clean shutdown (snapshot, release the lease)."""
        terminate(self.proc)
        return self.proc.returncode if self.proc else 0


def kill_jobs_of(work_dir: str) -> None:
    """SIGKILL every job (and its shepherd) a worker in ``work_dir`` still has running."""
    for run_dir in glob.glob(os.path.join(work_dir, "runs", "*")):
        for name, kill in (("pgid", os.killpg), ("shepherd.pid", os.kill)):
            try:
                with open(os.path.join(run_dir, name)) as fh:
                    kill(int(fh.read()), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def process_alive(pid: int) -> bool:
    """``pid`` runs (a zombie has ended: only its parent has yet to wait for it)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def stop_cli_servers(runtime_dir: str) -> None:
    """Stop (by pid) the warm CLI servers (``xce.cli.server``) started in ``runtime_dir``, and wait for them.
    A pid file a server left when it was killed may name another process by now: only a server whose
    command line names this directory is signalled."""
    for pid_file in glob.glob(os.path.join(runtime_dir, "*.pid")):
        with open(pid_file) as fh:
            pid = int(fh.read())
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read()
        except OSError:
            continue  # (ended by itself: idle, or its code changed)
        if b"xce.cli.server" not in argv or os.fsencode(runtime_dir) not in argv:
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        wait_for(lambda: not process_alive(pid), what=f"CLI server {pid} gone")


def children_of(pid: int) -> list[int]:
    out = []
    for child in os.listdir("/proc"):
        if child.isdigit():
            try:
                with open(f"/proc/{child}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(child))
            except (OSError, ValueError, IndexError):
                pass
    return out


def cli(env: dict[str, str], *args: str, timeout: float = 60, cwd: str | None = None,
        input: str | None = None) -> subprocess.CompletedProcess:
    """Run the real ``xce`` command; ``env`` carries XCE_URL/XCE_TOKEN or XCE_CONFIG."""
    return run_command(XCE + list(args), env, timeout, cwd=cwd, input=input)


def run_command(argv: list[str], env: dict[str, str], timeout: float = 60, cwd: str | None = None,
                input: str | None = None) -> subprocess.CompletedProcess:
    """Run ``argv`` (the Python CLI, or a native front binary) with ``env`` over the test's environment, in
    ``cwd`` (default: the test's), ``input`` its standard input (default: none)."""
    return subprocess.run(argv, env={**os.environ, **env}, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          input=input, stdin=None if input is not None else subprocess.DEVNULL)


def write_token_file(path: str, token: str) -> str:
    """``token`` into ``path`` with mode 0600, as ``xce worker/provisioner --token-file`` requires."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    os.chmod(path, 0o600)  # (an existing file keeps its mode through O_CREAT)
    return path


def daemon_env() -> dict[str, str]:
    """The test's environment for a daemon, without any XCE_TOKEN the test runner may have."""
    return {k: v for k, v in os.environ.items() if k != "XCE_TOKEN"}


def daemon_token(ctl: ControllerProcess, host: str) -> str:
    """A daemon identity bound to ``host`` (created once) and a fresh token for it."""
    with ctl.client() as c:
        r = c.post("/v1/users", json={"name": f"worker-{host}", "role": "daemon", "host": host, "projects": []})
        assert r.status_code in (201, 409), r.text
        r = c.post("/v1/tokens", json={"user": f"worker-{host}"})
        assert r.status_code == 201, r.text
        return r.json()["token"]


@dataclass
class WorkerProcess:
    """A real ``xce worker`` joined to ``ctl``, with its own daemon token and work dir.

    The token reaches the worker as the README says: ``--token-file WORK_DIR/token`` (mode 0600), never
    on its command line."""

    ctl: ControllerProcess
    host: str
    work_dir: str
    slots: int = 4
    attrs: dict[str, str] = field(default_factory=dict)
    counters: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    storage_roots: list[str] = field(default_factory=list)  # where shared claims live (the provisioner's roots)
    token: str | None = None
    proc: subprocess.Popen | None = None
    controllers: str | None = None  # --controller as given (URL1,URL2); default ctl.url
    _started_at: float = 0.0

    def start(self, wait_registered: bool = True) -> WorkerProcess:
        os.makedirs(self.work_dir, exist_ok=True)
        if self.token is None:
            self.token = daemon_token(self.ctl, self.host)
        token_file = write_token_file(os.path.join(self.work_dir, "token"), self.token)
        cmd = XCE + ["worker", "--host", self.host, "--controller", self.controllers or self.ctl.url,
                     "--slots", str(self.slots), "--address", "127.0.0.1",
                     "--work-dir", self.work_dir, "--heartbeat", "0.5", "--token-file", token_file]
        cmd += [a for k, v in self.attrs.items() for a in ("--attr", f"{k}={v}")]
        cmd += [a for k, v in self.counters.items() for a in ("--counter", f"{k}={v}")]
        cmd += [a for root in self.storage_roots for a in ("--storage-root", root)]
        cmd += self.extra_args
        log = open(os.path.join(self.work_dir, "worker.log"), "ab")
        self._started_at = time.time()
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=daemon_env())
        log.close()
        if wait_registered:
            wait_for(self._registered, timeout=START_TIMEOUT, what=f"worker {self.host} registered")
        return self

    def _registered(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker {self.host} exited with {self.proc.returncode}; see {self.work_dir}/worker.log")
        with self.ctl.client() as c:
            return any(h["name"] == self.host and h["state"] == "OK" and h["registered"] >= self._started_at
                       for h in c.get("/v1/hosts").json())

    def kill(self) -> None:
        """SIGKILL: the worker dies; its jobs' shepherds live on."""
        kill_now(self.proc)

    def stop(self) -> None:
        terminate(self.proc)


class Cluster:
    """A controller and named workers for integration tests; ``xce(...)`` runs the CLI as admin."""

    def __init__(self, root: str, config: str | None = None) -> None:
        self.root = root
        self.ctl = ControllerProcess(state_dir=os.path.join(root, "ctl"), config=config)
        self.workers: dict[str, WorkerProcess] = {}
        self.provisioner: ProvisionerProcess | None = None
        self.storage_roots: list[str] = []  # the provisioner's provider roots: workers publish shared claims from them

    def start(self) -> Cluster:
        self.ctl.start()
        return self

    def add_worker(self, host: str, **kw) -> WorkerProcess:
        kw.setdefault("storage_roots", list(self.storage_roots))
        w = WorkerProcess(self.ctl, host, os.path.join(self.root, host), **kw).start()
        self.workers[host] = w
        return w

    @property
    def env(self) -> dict[str, str]:
        return {"XCE_URL": self.ctl.url, "XCE_TOKEN": self.ctl.token, "XCE_CONFIG": ""}

    def xce(self, *args: str, ok: bool = True, cwd: str | None = None, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        r = cli({**self.env, **(env or {})}, *args, cwd=cwd, input=input)
        if ok:
            assert r.returncode == 0, f"xce {' '.join(args)} -> {r.returncode}\n{r.stdout}\n{r.stderr}"
        return r

    def api(self) -> httpx.Client:
        return self.ctl.client()

    def job(self, job_id: int) -> dict:
        with self.api() as c:
            return c.get(f"/v1/jobs/{job_id}").json()

    def submit(self, *args: str, cwd: str | None = None, input: str | None = None,
               env: dict[str, str] | None = None) -> int:
        """``xce --json submit ARGS`` (in ``cwd``, ``input`` its standard input, ``env`` added to its
        environment); the new job's id."""
        import json

        return json.loads(self.xce("--json", "submit", *args, cwd=cwd, input=input, env=env).stdout)["id"]

    def wait_state(self, job_id: int, *states: str, timeout: float = 30.0) -> dict:
        return wait_for(lambda: (j := self.job(job_id))["state"] in states and j,
                        timeout=timeout, what=f"job {job_id} in {states}")

    def add_provisioner(self, extra_providers: str = "", extra_roots: tuple[str, ...] = (),
                        extra_args: tuple[str, ...] = (), simfs_settings: str = "") -> ProvisionerProcess:
        """The provisioner, with simfs under ROOT/simfs (and ``extra_providers``, whose roots are
        ``extra_roots``): workers added after it publish shared claims from those roots.
        ``simfs_settings``: more lines for simfs's config (``set_owner = true``)."""
        self.provisioner = ProvisionerProcess(self.ctl, os.path.join(self.root, "provisioner"),
                                              os.path.join(self.root, "simfs"), extra_providers,
                                              extra_args=list(extra_args), simfs_settings=simfs_settings).start()
        self.storage_roots += [self.provisioner.simfs_root, *extra_roots]
        return self.provisioner

    def claim(self, name: str) -> dict:
        with self.api() as c:
            r = c.get(f"/v1/claims/{name}")
            assert r.status_code == 200, r.text
            return r.json()

    def wait_claim(self, name: str, *states: str, timeout: float = 30.0) -> dict:
        return wait_for(lambda: (c := self.claim(name))["state"] in states and c,
                        timeout=timeout, what=f"claim {name} in {states}")

    def stop(self) -> None:
        if self.provisioner is not None:
            self.provisioner.stop()
        for w in self.workers.values():
            w.stop()
            kill_jobs_of(w.work_dir)  # jobs outlive their worker by design; not a test's
        self.ctl.stop()


@dataclass
class ProvisionerProcess:
    """A real ``xce provisioner`` with simfs under ``root`` (plus any extra provider entries)."""

    ctl: ControllerProcess
    work_dir: str
    simfs_root: str
    extra_providers: str = ""
    token: str | None = None
    proc: subprocess.Popen | None = None
    controllers: str | None = None  # --controller as given (URL1,URL2); default ctl.url
    extra_args: list[str] = field(default_factory=list)  # e.g. --transfer-config FILE
    settings: str = ""  # more [provisioner] lines, e.g. "concurrency = 1\n"
    simfs_settings: str = ""  # more [providers.simfs.config] lines, e.g. "set_owner = true\n"

    @property
    def config_path(self) -> str:
        return os.path.join(self.work_dir, "provisioner.toml")

    def start(self) -> ProvisionerProcess:
        os.makedirs(self.work_dir, exist_ok=True)
        os.makedirs(self.simfs_root, exist_ok=True)
        if self.token is None:
            with self.ctl.client() as c:
                r = c.post("/v1/users", json={"name": "provisioner", "role": "daemon", "projects": []})
                assert r.status_code in (201, 409), r.text
                self.token = c.post("/v1/tokens", json={"user": "provisioner"}).json()["token"]
        with open(self.config_path, "w") as fh:
            fh.write(f'[provisioner]\npoll_wait = 5.0\n{self.settings}\n[providers.simfs]\ntimeout = 20.0\n'
                     f'[providers.simfs.config]\nroot = "{self.simfs_root}"\n{self.simfs_settings}\n'
                     f'{self.extra_providers}')
        token_file = write_token_file(os.path.join(self.work_dir, "token"), self.token)
        log = open(os.path.join(self.work_dir, "provisioner.log"), "ab")
        self.proc = subprocess.Popen(XCE + ["provisioner", "--controller", self.controllers or self.ctl.url,
                                            "--config", self.config_path,
                                            "--token-file", token_file, *self.extra_args],
                                     stdout=log, stderr=subprocess.STDOUT, env=daemon_env())
        log.close()
        return self

    def children(self) -> list[int]:
        """Provider processes it has running now."""
        return children_of(self.proc.pid)

    def kill(self, with_providers: bool = True) -> None:
        """SIGKILL (and, as a machine's death would, its provider processes)."""
        kids = self.children() if with_providers else []
        kill_now(self.proc)
        for pid in kids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    def stop(self) -> None:
        terminate(self.proc)
