"""Every run in a cgroup of its own, under a subtree this worker owns: cgroup v2 where the host has it,
the v1 hierarchies where it does not.

What a run's cgroup gives (DESIGN §12):

- **the whole tree**: every process the job starts is in it, ``setsid()`` or not, so the shepherd
  signals, freezes and kills all of them (``native/xce-launch.c``: ``cgroup.kill`` on v2, freeze +
  SIGKILL each + thaw on v1);
- **memory**: ``-M`` (or the ``mem`` the run reserved on its host) as a hard limit; a run the kernel
  killed for it ends EXIT "memory limit 100 MiB exceeded" (the cgroup's ``oom_kill`` count says so);
- **CPU**: the run's slots on this host as whole cores (cpuset) where the worker's slots are its cores,
  else as a CPU quota (slots × the period);
- **usage**: user and system CPU seconds of every process of the run, orphans included.

Layout: ``<the worker's own cgroup>/xce-<host>/<job>.<run>`` in each hierarchy used (v1: freezer,
memory and cpuacct always, cpu for a quota, cpuset for cores; v2: the one tree).  The worker creates
the run's directories and writes its limits *before* the shepherd is spawned; the job, in the
launcher's child, writes itself into each ``cgroup.procs`` before anything else, so nothing of it
runs outside.  The directories go when the worker has read the run's usage.

The worker's own cgroup is the place a supervisor (systemd's ``Delegate=yes``, a container runtime)
gives a daemon to manage; on v2 a cgroup with processes cannot hand controllers to children, so the
worker moves itself into ``<own>/worker`` first when it is the only process there (and otherwise
runs jobs with kill and freeze but no limits, and says so).

Without cgroups (not root, no writable hierarchy, ``--cgroups none``) runs are what they were before:
the job's process group is signalled and killed, there are no limits, and usage comes from the
shepherd's ``wait4`` (the job and the descendants it waited for).
"""

from __future__ import annotations

import errno
import logging
import os
from dataclasses import dataclass

log = logging.getLogger("xce.worker.cgroups")

MODES = ("auto", "v1", "v2", "none")
CPU_PERIOD_US = 100_000
# the v1 hierarchies a run may use; freezer, memory and cpuacct always, the others when they limit
V1_ALWAYS = ("freezer", "memory", "cpuacct")
V1_USED = (*V1_ALWAYS, "cpu", "cpuset")
V2_CONTROLLERS = ("memory", "cpu", "cpuset", "pids")


class CgroupError(Exception):
    """A run's cgroup could not be made (the run is not started), or the hierarchy is not usable."""


@dataclass(frozen=True)
class Limits:
    """What one run may use on this host."""

    memory_bytes: int | None = None
    cores: tuple[int, ...] = ()  # cpuset: these CPUs only (empty: not bound)
    cpu_quota: float | None = None  # CPUs' worth of time per period (None: no quota)


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroup, as the launcher and the worker use it."""

    version: str  # "v1" or "v2"
    join: tuple[str, ...]  # the directories whose cgroup.procs the job writes itself into
    control: str  # where the shepherd signals, freezes and kills: v2 the run's directory, v1 its freezer one
    memory: str | None  # the directory memory limits and counters are in (None: no memory controller)
    cpu: str | None  # the directory CPU time is read from
    cores: tuple[int, ...] = ()

    def launcher_args(self) -> list[str]:
        """``xce-launch``'s options for this cgroup (native/xce-launch.c)."""
        args = ["--cgroup", self.version, self.control]
        for d in self.join:
            args += ["--cgroup-join", d]
        return args


@dataclass(frozen=True)
class Usage:
    cpu_user_s: float | None = None
    cpu_sys_s: float | None = None
    oom_kills: int = 0  # processes the kernel killed for the memory limit
    memory_limit: int | None = None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def _keyed(text: str | None) -> dict[str, int]:
    """``key value`` lines (memory.events, cpu.stat, memory.oom_control) as a dict."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """``0-3,6`` (cpuset.cpus) as CPU numbers."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        out.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    return tuple(out)


def format_cpu_list(cores: tuple[int, ...]) -> str:
    return ",".join(str(c) for c in cores)


@dataclass(frozen=True)
class _Mount:
    point: str
    root: str  # the hierarchy's path the mount shows (a container's mounts may start below the top)
    fstype: str
    options: frozenset[str]


def _mounts(mountinfo: str = "/proc/self/mountinfo") -> list[_Mount]:
    out = []
    for line in (_read(mountinfo) or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or len(rest) < 3 or not rest[0].startswith("cgroup"):
            continue
        out.append(_Mount(point=fields[4].replace("\\040", " "), root=fields[3], fstype=rest[0],
                          options=frozenset(rest[2].split(","))))
    return out


def _own_paths(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """The hierarchy-relative path of this process's cgroup, per v1 controller, and "" for v2."""
    out: dict[str, str] = {}
    for line in (_read(proc_cgroup) or "").splitlines():
        _, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _inside(mount: _Mount, path: str) -> str:
    """``path`` of the hierarchy as a directory under ``mount``."""
    rel = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root.rstrip("/") + "/")):
        rel = path[len(mount.root):]
    return os.path.join(mount.point, rel.lstrip("/"))


class Hierarchy:
    """Where this worker's runs get their cgroups; ``make`` one per run, ``usage`` and ``remove`` after."""

    version = ""

    def __init__(self, host: str) -> None:
        self.host = host
        self.cpus: tuple[int, ...] = ()  # the CPUs this worker's runs may be bound to

    @property
    def binds_cores(self) -> bool:
        """Whether runs can be given whole CPUs (a cpuset controller here)."""
        raise NotImplementedError

    def make(self, name: str, limits: Limits) -> RunCgroup:
        raise NotImplementedError

    def usage(self, rc: RunCgroup) -> Usage:
        raise NotImplementedError

    def existing(self, name: str) -> RunCgroup | None:
        """A run's cgroup made by an earlier life of this worker (adopted runs)."""
        raise NotImplementedError

    def remove(self, rc: RunCgroup) -> None:
        """The run's directories, once nothing is left in them (a v1 memory cgroup goes away lazily)."""
        for d in rc.join:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not remove cgroup %s: %s", d, e.strerror)

    def describe(self) -> str:
        raise NotImplementedError


class V2(Hierarchy):
    """The unified hierarchy: one directory per run, ``cgroup.kill`` and ``cgroup.freeze`` of its own."""

    version = "v2"

    def __init__(self, host: str, mount: _Mount, own: str) -> None:
        super().__init__(host)
        own_dir = _inside(mount, own)
        self.base = os.path.join(own_dir, f"xce-{host}")
        available = set((_read(os.path.join(own_dir, "cgroup.controllers")) or "").split())
        wanted = [c for c in V2_CONTROLLERS if c in available]
        if wanted and own not in ("", "/"):
            self._leave(own_dir)
        self.controllers: set[str] = set()
        if wanted:
            self.controllers = self._enable(own_dir, wanted)
        os.makedirs(self.base, exist_ok=True)
        if self.controllers:
            self._enable(self.base, sorted(self.controllers))
        if "cpuset" in self.controllers:
            self.cpus = parse_cpu_list(_read(os.path.join(self.base, "cpuset.cpus.effective")) or "")
        else:
            self.cpus = tuple(sorted(os.sched_getaffinity(0)))

    @property
    def binds_cores(self) -> bool:
        return "cpuset" in self.controllers

    @staticmethod
    def _leave(own_dir: str) -> None:
        """A cgroup with processes hands no controller to its children: move this worker into a leaf of
        its own cgroup, if it is the only process there (never someone else's)."""
        procs = (_read(os.path.join(own_dir, "cgroup.procs")) or "").split()
        if procs and procs != [str(os.getpid())]:
            return
        leaf = os.path.join(own_dir, "worker")
        os.makedirs(leaf, exist_ok=True)
        _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))

    @staticmethod
    def _enable(directory: str, controllers: list[str]) -> set[str]:
        enabled = set()
        for c in controllers:
            try:
                _write(os.path.join(directory, "cgroup.subtree_control"), f"+{c}")
                enabled.add(c)
            except OSError as e:
                log.warning("cgroup v2: cannot enable %s under %s: %s", c, directory, e.strerror)
        return enabled

    def make(self, name: str, limits: Limits) -> RunCgroup:
        d = os.path.join(self.base, name)
        try:
            os.mkdir(d)
        except FileExistsError:
            pass
        except OSError as e:
            raise CgroupError(f"cannot make cgroup {d}: {e.strerror}") from None
        try:
            if limits.memory_bytes is not None and "memory" in self.controllers:
                _write(os.path.join(d, "memory.max"), str(int(limits.memory_bytes)))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    _write(os.path.join(d, "memory.swap.max"), "0")  # the limit is the job's memory, not its RAM
            if limits.cores and "cpuset" in self.controllers:
                _write(os.path.join(d, "cpuset.cpus"), format_cpu_list(limits.cores))
            elif limits.cpu_quota is not None and "cpu" in self.controllers:
                _write(os.path.join(d, "cpu.max"), f"{max(1000, int(limits.cpu_quota * CPU_PERIOD_US))} {CPU_PERIOD_US}")
        except OSError as e:
            self.remove(RunCgroup("v2", (d,), d, None, None))
            raise CgroupError(f"cannot set the limits of cgroup {d}: {e.strerror}") from None
        return RunCgroup("v2", (d,), d, d if "memory" in self.controllers else None, d,
                         limits.cores if "cpuset" in self.controllers else ())

    def existing(self, name: str) -> RunCgroup | None:
        d = os.path.join(self.base, name)
        if not os.path.isdir(d):
            return None
        cores = parse_cpu_list(_read(os.path.join(d, "cpuset.cpus")) or "") if "cpuset" in self.controllers else ()
        return RunCgroup("v2", (d,), d, d if "memory" in self.controllers else None, d, cores)

    def usage(self, rc: RunCgroup) -> Usage:
        stat = _keyed(_read(os.path.join(rc.control, "cpu.stat")))
        oom = 0
        limit = None
        if rc.memory is not None:
            oom = _keyed(_read(os.path.join(rc.memory, "memory.events"))).get("oom_kill", 0)
            text = (_read(os.path.join(rc.memory, "memory.max")) or "").strip()
            limit = int(text) if text.isdigit() else None
        return Usage(cpu_user_s=stat["user_usec"] / 1e6 if "user_usec" in stat else None,
                     cpu_sys_s=stat["system_usec"] / 1e6 if "system_usec" in stat else None,
                     oom_kills=oom, memory_limit=limit)

    def describe(self) -> str:
        return f"cgroup v2 at {self.base} (controllers: {', '.join(sorted(self.controllers)) or 'none'})"


class V1(Hierarchy):
    """The v1 hierarchies: a directory per run in each one used; the freezer's is the control."""

    version = "v1"

    def __init__(self, host: str, mounts: dict[str, _Mount], own: dict[str, str]) -> None:
        super().__init__(host)
        self.bases: dict[str, str] = {}
        for c, m in mounts.items():
            base = os.path.join(_inside(m, own.get(c, "/")), f"xce-{host}")
            os.makedirs(base, exist_ok=True)
            self.bases[c] = base
        if "cpuset" in self.bases:  # a new cpuset has no CPUs and no memory nodes until it is given some
            parent = os.path.dirname(self.bases["cpuset"])
            for f in ("cpuset.cpus", "cpuset.mems"):
                mine = os.path.join(self.bases["cpuset"], f)
                if not (_read(mine) or "").strip():
                    _write(mine, (_read(os.path.join(parent, f)) or "").strip())
            self.cpus = parse_cpu_list(_read(os.path.join(self.bases["cpuset"], "cpuset.cpus")) or "")
            self.mems = (_read(os.path.join(self.bases["cpuset"], "cpuset.mems")) or "").strip()
        else:
            self.cpus = tuple(sorted(os.sched_getaffinity(0)))

    @property
    def binds_cores(self) -> bool:
        return "cpuset" in self.bases

    def _dirs(self, name: str, limits: Limits) -> dict[str, str]:
        used = list(V1_ALWAYS)
        if limits.cores and "cpuset" in self.bases:
            used.append("cpuset")
        elif limits.cpu_quota is not None and "cpu" in self.bases:
            used.append("cpu")
        return {c: os.path.join(self.bases[c], name) for c in used if c in self.bases}

    def make(self, name: str, limits: Limits) -> RunCgroup:
        dirs = self._dirs(name, limits)
        made: list[str] = []
        try:
            for d in dirs.values():
                try:
                    os.mkdir(d)
                except FileExistsError:
                    pass
                made.append(d)
            if limits.memory_bytes is not None and "memory" in dirs:
                m = dirs["memory"]
                _write(os.path.join(m, "memory.limit_in_bytes"), str(int(limits.memory_bytes)))
                if os.path.exists(os.path.join(m, "memory.memsw.limit_in_bytes")):  # swap accounting on
                    _write(os.path.join(m, "memory.memsw.limit_in_bytes"), str(int(limits.memory_bytes)))
            if "cpuset" in dirs:
                _write(os.path.join(dirs["cpuset"], "cpuset.cpus"), format_cpu_list(limits.cores))
                _write(os.path.join(dirs["cpuset"], "cpuset.mems"), self.mems)
            if "cpu" in dirs and limits.cpu_quota is not None:
                _write(os.path.join(dirs["cpu"], "cpu.cfs_period_us"), str(CPU_PERIOD_US))
                _write(os.path.join(dirs["cpu"], "cpu.cfs_quota_us"),
                       str(max(1000, int(limits.cpu_quota * CPU_PERIOD_US))))
        except OSError as e:
            self.remove(RunCgroup("v1", tuple(made), "", None, None))
            raise CgroupError(f"cannot make the cgroups of run {name}: {e.strerror}") from None
        return self._run(dirs, limits.cores if "cpuset" in dirs else ())

    @staticmethod
    def _run(dirs: dict[str, str], cores: tuple[int, ...]) -> RunCgroup:
        # cpu and cpuacct are often one hierarchy ("cpu,cpuacct"): the run joins each directory once
        return RunCgroup("v1", tuple(dict.fromkeys(dirs.values())), dirs["freezer"], dirs.get("memory"),
                         dirs.get("cpuacct"), cores)

    def existing(self, name: str) -> RunCgroup | None:
        dirs = {c: os.path.join(b, name) for c, b in self.bases.items()}
        dirs = {c: d for c, d in dirs.items() if os.path.isdir(d)}
        if "freezer" not in dirs:
            return None
        cores = parse_cpu_list(_read(os.path.join(dirs["cpuset"], "cpuset.cpus")) or "") if "cpuset" in dirs else ()
        return self._run(dirs, cores)

    def usage(self, rc: RunCgroup) -> Usage:
        user = sys_ = None
        if rc.cpu is not None:
            u, s = _read(os.path.join(rc.cpu, "cpuacct.usage_user")), _read(os.path.join(rc.cpu, "cpuacct.usage_sys"))
            if u and s and u.strip().isdigit() and s.strip().isdigit():
                user, sys_ = int(u) / 1e9, int(s) / 1e9
        oom, limit = 0, None
        if rc.memory is not None:
            oom = _keyed(_read(os.path.join(rc.memory, "memory.oom_control"))).get("oom_kill", 0)
            text = (_read(os.path.join(rc.memory, "memory.limit_in_bytes")) or "").strip()
            limit = int(text) if text.isdigit() and int(text) < 2**62 else None
        return Usage(cpu_user_s=user, cpu_sys_s=sys_, oom_kills=oom, memory_limit=limit)

    def describe(self) -> str:
        return "cgroup v1 (" + ", ".join(f"{c} at {b}" for c, b in sorted(self.bases.items())) + ")"


def open_hierarchy(host: str, mode: str = "auto") -> Hierarchy | None:
    """This worker's place for runs' cgroups, or None (``mode`` none, not root, nothing writable).
    ``auto``: v2 when /sys/fs/cgroup is the unified hierarchy, else v1 when its hierarchies are mounted;
    ``v1``/``v2`` insist (CgroupError when they cannot be used)."""
    if mode not in MODES:
        raise CgroupError(f"--cgroups {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "none":
        return None
    mounts = _mounts()
    own = _own_paths()
    unified = [m for m in mounts if m.fstype == "cgroup2"]
    v1 = {c: m for m in mounts if m.fstype == "cgroup" for c in m.options if c in V1_USED}
    if mode == "auto":
        whole = [m for m in unified if m.point == "/sys/fs/cgroup"]
        mode = "v2" if whole else ("v1" if "freezer" in v1 else ("v2" if unified else "none"))
        insist = False
    else:
        insist = True
    try:
        if mode == "v2":
            if not unified:
                raise CgroupError("no cgroup2 hierarchy is mounted")
            return V2(host, unified[0], own.get("", "/"))
        if mode == "v1":
            missing = [c for c in V1_ALWAYS if c not in v1]
            if missing:
                raise CgroupError(f"the cgroup v1 hierarchies {', '.join(missing)} are not mounted")
            return V1(host, v1, own)
    except OSError as e:
        err = CgroupError(f"cgroups ({mode}) cannot be used: {e.strerror}"
                          + (" (the worker is not root)" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""))
        if insist:
            raise err from None
        log.warning("%s: runs are not confined (no memory or CPU limits; the process group is killed)", err)
        return None
    return None
