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
    lsf/conf/lsf.conf, lsf/conf/lsbatch/xce/configdir/lsb.params   the site's LSF_ENVDIR, for LSF's commands
                                          and the tools that drive LSF (xce.lsfsite; lsf/log, lsf/work beside)
    up.pid                                the supervising ``xce up`` process
    provisioner.toml, provisioner.token   the provisioner's providers (edit freely) and daemon token
    simfs/                                simfs volumes (the embedded default's claim class)
    xce-btrfs.toml, provisioner-btrfs.toml  with --btrfs/--btrfs-loop: the two configs plus the btrfs
                                          pool, class and provider (written at every up)
    btrfs/btrfs.img, btrfs/mnt/           with --btrfs-loop: the loop-file filesystem and its mount point
                                          (mounted by up, unmounted by down; the image stays with the state)
    hosts/<host>/                         each worker's work dir; ``token`` is its daemon token
    logs/<process>.log                    every daemon's output

``--btrfs DIR`` (DIR on a mounted btrfs filesystem) or ``--btrfs-loop SIZE`` (a loop-file btrfs
under ``DIR/btrfs``, made once and mounted at each up) back a claim class ``btrfs`` with the btrfs
provider: a ``btrfs`` pool whose capacity is the filesystem's, the class (shared scope), the provider
in the provisioner's config and its root in the workers' ``--storage-root``.  Both need root (qgroup
limits are privileged); quotas are enabled if they are off.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

from xce.agents.provisioner import ProvisionerConfigError, load_provisioner_config, parse_provisioner_config
from xce.client import ApiError, Client, ClientError
from xce.config import DEFAULT_CONFIG, ConfigError, parse_config
from xce.lsfsite import envdir_of, write_envdir
from xce.units import format_size
from xce.worker.storage import StorageRoots

DAEMON = [sys.executable, "-m", "xce.cli.main"]
STOP_TIMEOUT = 30.0
SCRATCH_PER_HOST = "64Gi"  # each host's scratch counter: what --scratch claims draw on
BTRFS_LOOP_MIN = 128 << 20  # mkfs.btrfs refuses much smaller filesystems
TOOL_TIMEOUT = 120.0  # seconds for one mkfs/mount/umount/btrfs command
LOOPBACK = "127.0.0.1"  # where the local cluster's hosts reach each other (a job's rendezvous)


class ClusterError(Exception):
    """``xce up``/``down`` cannot proceed (already running, a daemon failed to start, ...)."""


@dataclass
class Child:
    name: str
    proc: subprocess.Popen
    log_path: str

    def exited(self) -> str:
        """Why it is gone, for the terminal: its exit status and the last line it logged (a daemon that
        cannot start says why there: "xce controller: [Errno 98] Address already in use")."""
        said = ""
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(max(0, os.fstat(fh.fileno()).st_size - 4096))
                lines = [line.strip() for line in fh.read().decode(errors="replace").splitlines() if line.strip()]
            said = f": {lines[-1][:500]}" if lines else ""
        except OSError:
            pass
        return f"{self.name} exited with {self.proc.returncode}{said} (its log: {self.log_path})"


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


# ------------------------------------------------------------ btrfs: a claim class on a real filesystem


def _tool(*argv: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise ClusterError(f"{argv[0]} is not installed: --btrfs needs btrfs-progs (Debian: apt-get install "
                           f"btrfs-progs)") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(argv)} took more than {TOOL_TIMEOUT:g}s") from None


def _must(*argv: str) -> str:
    done = _tool(*argv)
    if done.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed ({done.returncode}): {' '.join(done.stderr.split())}")
    return done.stdout


def fs_type(path: str) -> str:
    """The file system type of ``path`` (``btrfs``, ``ext2/ext3``, ``tmpfs``...), from statfs."""
    return _must("stat", "-f", "-c", "%T", path).strip()


def check_btrfs_root(root: str) -> None:
    """``root`` is usable by the btrfs provider, or a ClusterError that says why; quotas are enabled if off."""
    if os.geteuid() != 0:
        raise ClusterError("--btrfs and --btrfs-loop need root: the btrfs provider sets qgroup limits "
                           "(CAP_SYS_ADMIN), and a loop-file filesystem is mounted")
    if not os.path.isdir(root):
        raise ClusterError(f"--btrfs {root}: not a directory")
    kind = fs_type(root)
    if kind != "btrfs":
        raise ClusterError(f"--btrfs {root}: not on a btrfs filesystem (it is on {kind}); "
                           f"mount one there, or use --btrfs-loop SIZE")
    probe = _tool("btrfs", "qgroup", "show", "-r", "--raw", root)
    if probe.returncode != 0:
        err = " ".join(probe.stderr.split())
        if "quotas not enabled" not in err and "not enabled" not in err:
            raise ClusterError(f"--btrfs {root}: cannot read its quota groups: {err}")
        done = _tool("btrfs", "quota", "enable", root)
        if done.returncode != 0:
            raise ClusterError(f"--btrfs {root}: quotas are off on its filesystem and cannot be enabled "
                               f"(btrfs quota enable {root}): {' '.join(done.stderr.split())}")


def fs_capacity(path: str) -> int:
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


class LoopBtrfs:
    """A btrfs filesystem in a sparse file: ``DIR/btrfs/btrfs.img`` mounted at ``DIR/btrfs/mnt``.

    Made (mkfs, quotas on) the first time, mounted again by later ups; ``unmount`` also frees the
    loop device (``mount -o loop`` sets autoclear)."""

    def __init__(self, state_dir: str, size: int) -> None:
        self.dir = os.path.join(state_dir, "btrfs")
        self.image = os.path.join(self.dir, "btrfs.img")
        self.mnt = os.path.join(self.dir, "mnt")
        self.size = size
        self.mounted_by_us = False

    @property
    def root(self) -> str:
        return os.path.join(self.mnt, "xce")

    def mount(self) -> str:
        if os.geteuid() != 0:
            raise ClusterError("--btrfs-loop needs root: it mounts a loop-file btrfs filesystem, and the btrfs "
                               "provider sets qgroup limits (CAP_SYS_ADMIN)")
        if self.size < BTRFS_LOOP_MIN:
            raise ClusterError(f"--btrfs-loop {self.size}: a btrfs filesystem needs at least "
                               f"{format_size(BTRFS_LOOP_MIN)}")
        os.makedirs(self.mnt, mode=0o755, exist_ok=True)
        # mounted already: by an up of this state dir that was killed; this up unmounts it all the same
        if not os.path.ismount(self.mnt):
            if not os.path.exists(self.image):
                fd = os.open(self.image + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                try:
                    os.ftruncate(fd, self.size)
                finally:
                    os.close(fd)
                # metadata "single", not mkfs's DUP: a second copy on the same file of one host filesystem
                # guards against nothing that filesystem does not, and doubles every commit's writes
                # (a qgroup-accounted snapshot is a commit: ~320/s with DUP, ~450/s single, on this kind of disk)
                _must("mkfs.btrfs", "-q", "--metadata", "single", self.image + ".new")
                os.replace(self.image + ".new", self.image)
            _must("mount", "-o", "loop", self.image, self.mnt)
        self.mounted_by_us = True
        check_btrfs_root(self.mnt)  # enables quotas on a new filesystem
        os.makedirs(self.root, mode=0o755, exist_ok=True)
        return self.root

    def loop_devices(self) -> list[str]:
        """The loop devices backed by the image, from sysfs (``/sys/block/loopN/loop/backing_file``, there
        while a device is bound): reading it opens no loop device, where ``losetup -j`` opens every one, the
        one being run down after the umount included, whose autoclear waits for its last close."""
        image = os.path.realpath(self.image)
        found = []
        for name in sorted(os.listdir("/sys/block")):
            if not name.startswith("loop"):
                continue
            try:
                with open(f"/sys/block/{name}/loop/backing_file") as fh:
                    backing = fh.read().rstrip("\n")
            except OSError:
                continue  # not bound (or gone meanwhile)
            if backing == image:
                found.append(f"/dev/{name}")
        return found

    def unmount(self, timeout: float = 30.0) -> None:
        """Unmount (retrying while the last jobs' mounts go) and check that no loop device is left."""
        deadline = time.monotonic() + timeout
        while os.path.ismount(self.mnt):
            done = _tool("umount", self.mnt)
            if done.returncode == 0:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"cannot unmount {self.mnt}: {' '.join(done.stderr.split())}")
            time.sleep(0.2)
        # autoclear frees the loop device once the umount is done, a moment after umount returns
        settle = time.monotonic() + 10.0
        while True:
            devices = self.loop_devices()
            if not devices:
                # free once two listings 100 ms apart agree (a device being run down may not show in one)
                time.sleep(0.1)
                devices = self.loop_devices()
                if not devices:
                    return
            if time.monotonic() > settle:
                for dev in devices:
                    _tool("losetup", "-d", dev)
                if left := self.loop_devices():
                    raise ClusterError(f"unmounted {self.mnt}, but {', '.join(left)} still holds {self.image}")
                return
            time.sleep(0.05)


class LocalCluster:
    def __init__(self, state_dir: str, hosts: int, listen: str, config: str | None, slots: int,
                 provisioner_config: str | None = None, out=sys.stdout, btrfs: str | None = None,
                 btrfs_loop: int | None = None, transfer_config: str | None = None, gpus: int | None = None,
                 host_args: dict[str, list[str]] | None = None) -> None:
        self.state_dir = os.path.abspath(state_dir)
        # fake GPUs per host (xce worker --gpus 0..N-1); None: each worker asks NVML
        self.gpus = [] if gpus is None else ["--gpus", f"0-{gpus - 1}" if gpus else "none"]
        self.host_args = host_args or {}  # each host's own worker options (xce up --attr/--counter)
        self.nhosts = hosts
        self.listen = listen
        self.config = os.path.abspath(config) if config else None
        self.slots = slots
        self.provisioner_config = os.path.abspath(provisioner_config) if provisioner_config else None
        self.out = out
        self.btrfs = os.path.abspath(btrfs) if btrfs else None
        self.loop = LoopBtrfs(self.state_dir, btrfs_loop) if btrfs_loop is not None else None
        self.btrfs_root: str | None = None
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
                raise ClusterError(child.exited())
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

    def _with_btrfs(self, root: str, controller_config: str | None, provisioner_config: str) -> tuple[str, str]:
        """The controller's and the provisioner's configs plus a ``btrfs`` pool, class and provider on ``root``:
        written (0600) to ``DIR/xce-btrfs.toml`` and ``DIR/provisioner-btrfs.toml`` at every up."""
        if controller_config:
            with open(controller_config, encoding="utf-8") as fh:
                base = fh.read()
        else:
            base = DEFAULT_CONFIG
        text = (base.rstrip("\n") + "\n\n# added by xce up --btrfs: a claim class on a real btrfs filesystem\n"
                f'[[pools]]\nname = "btrfs"\ncapacity = {fs_capacity(root)}\n'
                f'description = "the btrfs filesystem of {root}"\n\n'
                f'[[claim_classes]]\nname = "btrfs"\nprovider = "btrfs"\nscope = "shared"\npools = ["btrfs"]\n'
                f'description = "btrfs subvolumes under {root}: sizes enforced by quota, instant snapshots and clones"\n')
        try:
            parse_config(text, "xce up --btrfs")
        except ConfigError as e:
            raise ClusterError(f"--btrfs adds a pool and a claim class named btrfs to "
                               f"{controller_config or 'the embedded config'}: {e}") from None
        ctl_path = os.path.join(self.state_dir, "xce-btrfs.toml")
        _write_private(ctl_path, text)
        with open(provisioner_config, encoding="utf-8") as fh:
            base = fh.read()
        if "btrfs" in load_provisioner_config(provisioner_config).providers:
            raise ClusterError(f"{provisioner_config} already names a provider btrfs: drop it, or --btrfs")
        text = (base.rstrip("\n") + "\n\n# added by xce up --btrfs\n[providers.btrfs]\ntimeout = 120.0\n\n"
                f'[providers.btrfs.config]\nroot = "{root}"\n')
        parse_provisioner_config(text, "xce up --btrfs")
        prov_path = os.path.join(self.state_dir, "provisioner-btrfs.toml")
        _write_private(prov_path, text)
        return ctl_path, prov_path

    def _btrfs_root(self) -> str | None:
        if self.loop is not None:
            return self.loop.mount()
        if self.btrfs is not None:
            check_btrfs_root(self.btrfs)
            return self.btrfs
        return None

    def start(self) -> None:
        if read_up_pid(self.state_dir) is not None:
            raise ClusterError(f"a cluster is already up on {self.state_dir} (xce down --state-dir {self.state_dir})")
        for d in ("", "logs", "hosts"):
            os.makedirs(os.path.join(self.state_dir, d), mode=0o700, exist_ok=True)
        _write_private(os.path.join(self.state_dir, "up.pid"), f"{os.getpid()}\n")
        controller_config = self.config
        provisioner_config = self._provisioner_config()
        self.btrfs_root = self._btrfs_root()
        if self.btrfs_root is not None:
            controller_config, provisioner_config = self._with_btrfs(self.btrfs_root, self.config, provisioner_config)
        try:
            os.unlink(os.path.join(self.state_dir, "controller.url"))  # a stale one would point elsewhere
        except FileNotFoundError:
            pass
        argv = ["controller", "--state-dir", self.state_dir, "--listen", self.listen]
        if controller_config:
            argv += ["--config", controller_config]
        ctl = self._spawn("controller", argv)
        self.url = self._wait_controller(ctl)
        with open(os.path.join(self.state_dir, "admin.token")) as fh:
            admin_token = fh.read().strip()
        _write_private(os.path.join(self.state_dir, "client.toml"),
                       f'# written by xce up; use: xce --config {self.state_dir}/client.toml ...\n'
                       f'url = "{self.url}"\ntoken = "{admin_token}"\n')
        write_envdir(envdir_of(self.state_dir), self.state_dir)  # what LSF's clients read (bsub, dask-jobqueue...)
        admin = Client(self.url, admin_token)
        # tokens reach the daemons in files (0600), never on a command line; and not the caller's XCE_TOKEN
        env = {k: v for k, v in os.environ.items() if k != "XCE_TOKEN"}
        token_file = self._daemon_token(admin, "provisioner", None, os.path.join(self.state_dir, "provisioner.token"))
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
            # every host is this machine: the others reach a job's first host on loopback
            self._spawn(f"worker-{host}", ["worker", "--host", host, "--controller", self.url, "--address", LOOPBACK,
                                           "--slots", str(self.slots), "--work-dir", work_dir,
                                           "--counter", f"scratch={SCRATCH_PER_HOST}", "--token-file", token_file,
                                           *storage, *self.transfers, *self.gpus, *self.host_args.get(host, [])],
                        env=env)
        self._wait_hosts(admin)

    def _wait_hosts(self, admin: Client, timeout: float = 60.0) -> None:
        want = {f"host{i}" for i in range(1, self.nhosts + 1)}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for c in self.children:
                if c.proc.poll() is not None:
                    raise ClusterError(c.exited())
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
        if self.loop is not None and self.loop.mounted_by_us:
            try:
                self.loop.unmount()
                self.loop.mounted_by_us = False
                self._say(f"xce up: unmounted {self.loop.mnt}")
            except ClusterError as e:
                self._say(f"xce up: {e}")
        try:
            if read_up_pid(self.state_dir) in (os.getpid(), None):
                os.unlink(os.path.join(self.state_dir, "up.pid"))
        except FileNotFoundError:
            pass


def up(state_dir: str, hosts: int, listen: str, config: str | None, slots: int,
       provisioner_config: str | None = None, btrfs: str | None = None, btrfs_loop: int | None = None,
       transfer_config: str | None = None, gpus: int | None = None,
       host_args: dict[str, list[str]] | None = None) -> int:
    cluster = LocalCluster(state_dir, hosts, listen, config, slots, provisioner_config, btrfs=btrfs,
                           btrfs_loop=btrfs_loop, transfer_config=transfer_config, gpus=gpus,
                           host_args=host_args)
    signal.signal(signal.SIGTERM, cluster.request_stop)
    signal.signal(signal.SIGINT, cluster.request_stop)
    try:
        cluster.start()
    except (ClusterError, ClientError, ProvisionerConfigError) as e:
        cluster.stop()
        msg = e.message if isinstance(e, ClientError) else str(e)
        print(f"xce up: {msg}", file=sys.stderr)
        return 1
    cluster._say(f"xce cluster up: controller {cluster.url}, hosts host1..host{hosts} ({slots} slots"
                 f"{f', {gpus} fake GPUs' if gpus else ''} each)\n"
                 f"  state:  {cluster.state_dir}\n"
                 f"  client: export XCE_CONFIG={cluster.state_dir}/client.toml   (or xce --config ...)\n"
                 f"  lsf:    export LSF_ENVDIR={envdir_of(cluster.state_dir)}   (bsub, bjobs... and the tools "
                 f"that drive LSF)\n"
                 f"  stop:   Ctrl-C, or xce down --state-dir {cluster.state_dir}")
    if cluster.btrfs_root is not None:
        where = (f"a loop-file filesystem ({cluster.loop.image}, {format_size(cluster.loop.size)})"
                 if cluster.loop is not None else "its filesystem")
        cluster._say(f"  btrfs:  claim class btrfs on {cluster.btrfs_root}, {where}")
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
        leftover = LoopBtrfs(state_dir, 0)
        if os.path.ismount(leftover.mnt):  # an xce up that was killed left its loop-file btrfs mounted
            try:
                leftover.unmount()
            except ClusterError as e:
                print(f"xce down: {e}", file=sys.stderr)
                return 1
            print(f"xce down: no cluster is up on {state_dir}; unmounted the btrfs it left at {leftover.mnt}")
            return 0
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
