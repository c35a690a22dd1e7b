"""``xce up`` / ``xce down``: a whole cluster on one machine, on loopback, from one state directory.

``xce up`` starts one controller (embedded SQLite store in ``DIR``), the
provisioner (the claim agent for shared storage, with ``simfs`` under
``DIR/simfs``), and N worker hosts (``host1``..``hostN``), each a real
``xce worker`` process with its own daemon identity bound to its host.  It writes the client settings to
``DIR/client.toml`` and its own pid to ``DIR/up.pid``, then supervises until
Ctrl-C, SIGTERM or ``xce down``: workers stop first, then the controller
(which snapshots and releases its lease).  Running ``xce up`` again on the
same directory resumes the same cluster: the store, the worker identities
and tokens, and the workers' journals are all in ``DIR``.

Layout of ``DIR``::

    xce.db, admin.token, controller.url   the controller's (see xce.api.server)
    client.toml                           url + admin token for ``xce --config`` (mode 0600)
    up.pid                                the supervising ``xce up`` process
    provisioner.toml, provisioner.token   the provisioner's providers (edit freely) and daemon token
    simfs/                                simfs volumes (the embedded default's claim class)
    hosts/<host>/                         each worker's work dir; ``token`` is its daemon token
    logs/<process>.log                    every daemon's output
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from xce.agents.provisioner import ProvisionerConfigError, load_provisioner_config
from xce.client import ApiError, Client, ClientError
from xce.worker.storage import StorageRoots

DAEMON = [sys.executable, "-m", "xce.cli.main"]
STOP_TIMEOUT = 30.0
SCRATCH_PER_HOST = "64Gi"  # each host's scratch counter: what --scratch claims draw on


class ClusterError(Exception):
    """``xce up``/``down`` cannot proceed (already running, a daemon failed to start, ...)."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: str


def _write_private(path: str, text: str) -> None:
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(path + ".tmp", path)


def _is_our_up(pid: int) -> bool:
    """Is ``pid`` a live ``xce up`` process?  Guards against signalling a recycled pid."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return b"up" in argv and any(b"xce" in a for a in argv)


def read_up_pid(state_dir: str) -> int | None:
    try:
        with open(os.path.join(state_dir, "up.pid")) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    return pid if _is_our_up(pid) else None


class LocalCluster:
    def __init__(self, state_dir: str, hosts: int, listen: str, config: str | None, slots: int,
                 provisioner_config: str | None = None, out=sys.stdout, transfer_config: str | None = None) -> None:
        self.state_dir = os.path.abspath(state_dir)
        self.nhosts = hosts
        self.listen = listen
        self.config = os.path.abspath(config) if config else None
        self.slots = slots
        self.provisioner_config = os.path.abspath(provisioner_config) if provisioner_config else None
        self.out = out
        # remotes and their credentials: given to the provisioner (staging before allocation, populated claims)
        # and the workers (node-scope staging)
        self.transfers = ["--transfer-config", os.path.abspath(transfer_config)] if transfer_config else []
        self.children: list[Child] = []
        self.url = ""
        self._stopping = False

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    # ------------------------------------------------------------ start

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Child:
        log_path = os.path.join(self.state_dir, "logs", f"{name}.log")
        log = open(log_path, "ab")
        try:
            # a new session: Ctrl-C in the terminal reaches only ``xce up``, which stops us in order
            proc = subprocess.Popen(DAEMON + argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)
        finally:
            log.close()
        child = Child(name, proc, log_path)
        self.children.append(child)
        return child

    def _wait_controller(self, child: Child, timeout: float = 60.0) -> str:
        url_file = os.path.join(self.state_dir, "controller.url")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if child.proc.poll() is not None:
                raise ClusterError(f"the controller exited with {child.proc.returncode}; see {child.log_path}")
            if os.path.exists(url_file) and os.path.exists(os.path.join(self.state_dir, "admin.token")):
                with open(url_file) as fh:
                    return fh.read().strip()
            time.sleep(0.05)
        raise ClusterError(f"the controller did not become leader within {timeout:g}s; see {child.log_path}")

    def _daemon_token(self, admin: Client, user: str, host: str | None, path: str) -> str:
        """A daemon identity (bound to ``host`` if given) whose token is kept at ``path`` (mode 0600).

        Made once; made again if it stopped working (revoked, expired).  Returns ``path``: daemons read
        their token from the file (``--token-file``), never from their command line or environment."""
        if os.path.exists(path):
            with open(path) as fh:
                probe = Client(self.url, fh.read().strip())
            try:
                probe.get("/v1/ping")
                return path
            except ApiError as e:
                if e.status != 401:
                    raise
            finally:
                probe.close()
        try:
            admin.post("/v1/users", {"name": user, "role": "daemon", "host": host, "projects": []})
        except ApiError as e:
            if e.code != "conflict":
                raise
        token = admin.post("/v1/tokens", {"user": user})["token"]
        _write_private(path, token + "\n")
        return path

    def _provisioner_config(self) -> str:
        if self.provisioner_config:
            return self.provisioner_config
        path = os.path.join(self.state_dir, "provisioner.toml")
        if not os.path.exists(path):  # written once: edits survive the next xce up
            root = os.path.join(self.state_dir, "simfs")
            os.makedirs(root, mode=0o755, exist_ok=True)
            _write_private(path, "# written by xce up: the providers of the provisioner, and their private configs\n"
                                 "[providers.simfs]\ntimeout = 60.0\n\n"
                                 f"[providers.simfs.config]\nroot = \"{root}\"\n")
        return path

    def start(self) -> None:
        if read_up_pid(self.state_dir) is not None:
            raise ClusterError(f"a cluster is already up on {self.state_dir} (xce down --state-dir {self.state_dir})")
        for d in ("", "logs", "hosts"):
            os.makedirs(os.path.join(self.state_dir, d), mode=0o700, exist_ok=True)
        _write_private(os.path.join(self.state_dir, "up.pid"), f"{os.getpid()}\n")
        try:
            os.unlink(os.path.join(self.state_dir, "controller.url"))  # a stale one would point elsewhere
        except FileNotFoundError:
            pass
        argv = ["controller", "--state-dir", self.state_dir, "--listen", self.listen]
        if self.config:
            argv += ["--config", self.config]
        ctl = self._spawn("controller", argv)
        self.url = self._wait_controller(ctl)
        with open(os.path.join(self.state_dir, "admin.token")) as fh:
            admin_token = fh.read().strip()
        _write_private(os.path.join(self.state_dir, "client.toml"),
                       f'# written by xce up; use: xce --config {self.state_dir}/client.toml ...\n'
                       f'url = "{self.url}"\ntoken = "{admin_token}"\n')
        admin = Client(self.url, admin_token)
        # tokens reach the daemons in files (0600), never on a command line; and not the caller's XCE_TOKEN
        env = {k: v for k, v in os.environ.items() if k != "XCE_TOKEN"}
        token_file = self._daemon_token(admin, "provisioner", None, os.path.join(self.state_dir, "provisioner.token"))
        provisioner_config = self._provisioner_config()
        self._spawn("provisioner", ["provisioner", "--controller", self.url, "--config", provisioner_config,
                                    "--token-file", token_file, *self.transfers], env=env)
        # the workers publish shared claims from where the provisioner's providers keep them
        storage = [a for root in StorageRoots.of(load_provisioner_config(provisioner_config).providers).roots
                   for a in ("--storage-root", root)]
        for i in range(1, self.nhosts + 1):
            host = f"host{i}"
            work_dir = os.path.join(self.state_dir, "hosts", host)
            os.makedirs(work_dir, mode=0o755, exist_ok=True)
            token_file = self._daemon_token(admin, f"worker-{host}", host, os.path.join(work_dir, "token"))
            self._spawn(f"worker-{host}", ["worker", "--host", host, "--controller", self.url,
                                           "--slots", str(self.slots), "--work-dir", work_dir,
                                           "--counter", f"scratch={SCRATCH_PER_HOST}", "--token-file", token_file,
                                           *storage, *self.transfers], env=env)
        self._wait_hosts(admin)

    def _wait_hosts(self, admin: Client, timeout: float = 60.0) -> None:
        want = {f"host{i}" for i in range(1, self.nhosts + 1)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in self.children:
                if c.proc.poll() is not None:
                    raise ClusterError(f"{c.name} exited with {c.proc.returncode}; see {c.log_path}")
            ok = {h["name"] for h in admin.get("/v1/hosts") if h["state"] == "OK"}
            if want <= ok:
                return
            time.sleep(0.1)
        raise ClusterError(f"hosts {', '.join(sorted(want))} did not all register within {timeout:g}s")

    # ------------------------------------------------------------ supervise and stop

    def supervise(self) -> int:
        """Until told to stop: a worker that exits is reported; a controller that exits ends the cluster."""
        reported: set[str] = set()
        while not self._stopping:
            for c in self.children:
                rc = c.proc.poll()
                if rc is None or c.name in reported:
                    continue
                reported.add(c.name)
                self._say(f"xce up: {c.name} exited with {rc} (see {c.log_path})")
                if c.name == "controller" and not self._stopping:
                    self.stop()
                    return 1
            time.sleep(0.2)
        return 0

    def request_stop(self, signum=None, frame=None) -> None:
        self._stopping = True

    def stop(self) -> None:
        """Agents first (so they do not report into a stopping controller), then the controller."""
        self._stopping = True
        workers = [c for c in self.children if c.name != "controller"]
        controller = [c for c in self.children if c.name == "controller"]
        for group in (workers, controller):
            for c in group:
                if c.proc.poll() is None:
                    c.proc.send_signal(signal.SIGTERM)
            for c in group:
                try:
                    c.proc.wait(STOP_TIMEOUT)
                except subprocess.TimeoutExpired:
                    self._say(f"xce up: {c.name} did not stop within {STOP_TIMEOUT:g}s: killing it")
                    c.proc.kill()
                    c.proc.wait()
        try:
            if read_up_pid(self.state_dir) in (os.getpid(), None):
                os.unlink(os.path.join(self.state_dir, "up.pid"))
        except FileNotFoundError:
            pass


def up(state_dir: str, hosts: int, listen: str, config: str | None, slots: int,
       provisioner_config: str | None = None, transfer_config: str | None = None) -> int:
    cluster = LocalCluster(state_dir, hosts, listen, config, slots, provisioner_config,
                           transfer_config=transfer_config)
    signal.signal(signal.SIGTERM, cluster.request_stop)
    signal.signal(signal.SIGINT, cluster.request_stop)
    try:
        cluster.start()
    except (ClusterError, ClientError, ProvisionerConfigError) as e:
        cluster.stop()
        msg = e.message if isinstance(e, ClientError) else str(e)
        print(f"xce up: {msg}", file=sys.stderr)
        return 1
    cluster._say(f"xce cluster up: controller {cluster.url}, hosts host1..host{hosts} ({slots} slots each)\n"
                 f"  state:  {cluster.state_dir}\n"
                 f"  client: export XCE_CONFIG={cluster.state_dir}/client.toml   (or xce --config ...)\n"
                 f"  stop:   Ctrl-C, or xce down --state-dir {cluster.state_dir}")
    rc = cluster.supervise()
    if rc == 0:
        cluster._say("xce up: stopping")
        cluster.stop()
        cluster._say("xce up: stopped")
    return rc


def down(state_dir: str, timeout: float = 60.0) -> int:
    state_dir = os.path.abspath(state_dir)
    pid = read_up_pid(state_dir)
    if pid is None:
        print(f"xce down: no cluster is up on {state_dir}", file=sys.stderr)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_our_up(pid):
            print(f"xce down: cluster on {state_dir} stopped")
            return 0
        time.sleep(0.1)
    print(f"xce down: xce up (pid {pid}) did not stop within {timeout:g}s", file=sys.stderr)
    return 1
