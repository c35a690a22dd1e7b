"""Every run in a cgroup of its own, under a subtree this worker owns: cgroup v2 where the host has it,
the v1 hierarchies where it does not.

What a run's cgroup gives (DESIGN §12):

- **the whole tree**: every process the job starts is in it, ``setsid()`` or not, so the shepherd
  signals, freezes and kills all of them (``native/xce-launch.c``: freeze, SIGKILL each, thaw; not
  v2's ``cgroup.kill``, after which Linux 6.18 kills whatever is later cloned into the cgroup);
- **memory**: ``-M`` (or the ``mem`` the run reserved on its host) as a hard limit; a run the kernel
  killed for it ends EXIT "memory limit 100 MiB exceeded" (the cgroup's ``oom_kill`` count says so);
- **CPU**: the run's slots on this host as whole cores (cpuset) where the worker's slots are its cores,
  else as a CPU quota (slots × the period);
- **usage**: user and system CPU seconds of every process of the run, orphans included;
- **devices**: a run on a host with GPUs may not open the device nodes of the GPUs it does not hold
  (``xce.worker.gpus.device_rules``): the v1 ``devices`` controller's rules (v1 and hybrid layouts),
  or under cgroup v2 a BPF device program attached to the run's cgroup (``xce.worker.bpfdev``).

Three layouts, by what the host mounts (``open_hierarchy``):

- ``v2``: ``/sys/fs/cgroup`` is the unified hierarchy: one directory per run does everything.
- ``hybrid`` (systemd's hybrid hosts, and this one): the v1 controllers, and a cgroup2 mount without
  them (``/sys/fs/cgroup/unified``).  The run's tree, its freezing and its CPU time are a directory in
  the unified hierarchy (``cgroup.freeze`` and ``cpu.stat`` need no controller); its
  memory limit and CPU share are v1 ``memory`` and ``cpu``/``cpuset`` directories, made only when the
  run has a limit there.
- ``v1``: the freezer holds the tree, cpuacct counts its CPU, memory and cpu/cpuset limit it.

A run joins only the directories it needs (a run without a memory limit has no memory cgroup), and
directories are kept and used again: making and removing cgroups is kernel work that cost a short job
more than the job itself (``bench/throughput.py``'s array mode ran at 0.78 of its speed without cgroups
when each run made and removed its own).  A cgroup whose processes are all gone is idle; the next run
of the same shape (the hierarchies it joins) takes it, its limits written anew, and its CPU and OOM
counters as they are then are that run's baseline.  A cgroup with a memory limit is made for its run
and removed after it (its OOM count and its charged memory start at nothing).

Layout: ``<the worker's own cgroup>/xce-<host>-<owner>/r<N>`` in each hierarchy used, ``<owner>`` a short
hash of the worker's work directory (``subtree_name``): workers that share a parent cgroup (two ``xce up``
clusters on one machine, a test run's many clusters) each own a subtree, and one's ``recover`` never
removes the other's cgroups.  The work directory, where the run journal lives, is what a restarted worker
is recognised by, so its new life finds the same subtree.  The worker takes (or
makes) the run's cgroup and writes its limits *before* the shepherd is spawned, and keeps which in the
run's journal (``RunCgroup.as_json``), so a restarted worker adopts the run with it.  The job, in the
launcher's child, is created in its v2 tree (``clone3(CLONE_INTO_CGROUP)``) and writes itself into each
other ``cgroup.procs`` before anything else, so nothing of it runs outside.  When the worker has read
the run's usage the cgroup is idle again (``give_back``).

The worker's own cgroup is the place a supervisor (systemd's ``Delegate=yes``, a container runtime)
gives a daemon to manage; on v2 a cgroup with processes cannot hand controllers to children, so the
worker moves itself into ``<own>/worker`` first when it is the only process there (and otherwise runs
jobs with kill and freeze but no limits, and says so).

Without cgroups (not root, no writable hierarchy, ``--cgroups none``) runs are what they were before:
the job's process group is signalled and killed, there are no limits, and usage comes from the
shepherd's ``wait4`` (the job and the descendants it waited for).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any

from xce.worker import bpfdev

log = logging.getLogger("xce.worker.cgroups")

MODES = ("auto", "v2", "hybrid", "v1", "none")
CPU_PERIOD_US = 100_000  # the kernel's default CFS period: a quota is written against it
IDLE_KEPT = 256  # idle cgroups kept per shape (more are removed): more than a host runs at once
V2_CONTROLLERS = ("memory", "cpu", "cpuset")
V1_CONTROLLERS = ("freezer", "cpuacct", "memory", "cpu", "cpuset", "devices")


class CgroupError(Exception):
    """A run's cgroup could not be made (the run is not started), or the hierarchy is not usable."""


@dataclass(frozen=True)
class Limits:
    """What one run may use on this host."""

    memory_bytes: int | None = None
    cores: tuple[int, ...] = ()  # cpuset: these CPUs only (empty: not bound)
    cpu_quota: float | None = None  # CPUs' worth of time per period (None: no quota)
    deny_devices: tuple[str, ...] = ()  # devices cgroup rules (``c 195:3 rwm``): nodes the run may not open


@dataclass(frozen=True)
class RunCgroup:
    """One run's cgroup, as the launcher and the worker use it."""

    version: str  # how the shepherd freezes ``control``: "v2" (cgroup.freeze) or "v1" (freezer.state)
    join: tuple[str, ...]  # the directories the job is in from its start (its tree, its memory limit)
    control: str  # where the shepherd signals, freezes and kills
    cpu_stat: str  # the file CPU time is read from: v2 cpu.stat, v1 cpuacct.stat's directory's usage files
    memory: str | None = None  # the directory of its memory limit (None: no limit)
    memory_limit: int | None = None
    cores: tuple[int, ...] = ()
    name: str = ""  # its directories' name in every hierarchy (r<N>)
    shape: tuple[str, ...] = ()  # the bases it joins: the runs it can serve again
    later: tuple[str, ...] = ()  # its CPU share's directories (v1): joined once the job has run a moment
    devices: str | None = None  # the directory of its device rules (None: none), made for this run only
    cpu_base: tuple[float, float] = (0.0, 0.0)  # user, system CPU seconds of its earlier runs
    oom_base: int = 0  # OOM kills of its earlier runs

    def as_json(self) -> dict[str, Any]:
        """What a run's journal keeps of it, so a restarted worker adopts the run with its cgroup."""
        return {f: getattr(self, f) for f in _RUN_CGROUP_FIELDS}  # (dataclasses.asdict deep-copies: slow)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunCgroup:
        return cls(**{**data, "join": tuple(data["join"]), "cores": tuple(data["cores"]),
                      "shape": tuple(data["shape"]), "cpu_base": tuple(data["cpu_base"]),
                      "later": tuple(data.get("later", ()))})

    @property
    def dirs(self) -> tuple[str, ...]:
        """Every directory of the run's cgroup."""
        return self.join + self.later

    def launcher_args(self) -> list[str]:
        """``xce-launch``'s options for this cgroup (native/xce-launch.c)."""
        args = ["--cgroup", self.version, self.control]
        for d in self.join:
            args += ["--cgroup-join", d]
        for d in self.later:
            args += ["--cgroup-later", d]
        return args


_RUN_CGROUP_FIELDS = tuple(f.name for f in dataclasses.fields(RunCgroup))


@dataclass(frozen=True)
class Usage:
    cpu_user_s: float | None = None
    cpu_sys_s: float | None = None
    oom_kills: int = 0  # processes the kernel killed for the memory limit
    memory_limit: int | None = None


def _read(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 65536).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


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


def _leave(own_dir: str) -> None:
    """A v2 cgroup with processes hands no controller to its children: move this worker into a leaf of
    its own cgroup, if it is the only process there (never someone else's)."""
    procs = (_read(os.path.join(own_dir, "cgroup.procs")) or "").split()
    if procs and procs != [str(os.getpid())]:
        return
    leaf = os.path.join(own_dir, "worker")
    os.makedirs(leaf, exist_ok=True)
    _write(os.path.join(leaf, "cgroup.procs"), str(os.getpid()))


def _enable(directory: str, controllers: list[str]) -> set[str]:
    enabled = set()
    for c in controllers:
        try:
            _write(os.path.join(directory, "cgroup.subtree_control"), f"+{c}")
            enabled.add(c)
        except OSError as e:
            log.warning("cgroup v2: cannot enable %s under %s: %s", c, directory, e.strerror)
    return enabled


@dataclass(frozen=True)
class _Place:
    """Where one concern of a run's cgroup lives: a hierarchy's version and this worker's subtree in it."""

    version: str  # "v1" or "v2"
    base: str


class Hierarchy:
    """Where this worker's runs get their cgroups: ``make`` one for a run, ``usage`` and ``give_back``
    after it; ``adopt`` and ``recover`` after a restart.

    ``tree`` holds the run's processes (kill, freeze; on v2 its CPU time); ``cpuacct`` counts CPU on v1;
    ``memory``, ``cpu`` and ``cpuset`` limit (None: this host cannot).  Thread-safe: runs start on the
    work poll's thread and end on their watchers'."""

    def __init__(self, host: str, layout: str, tree: _Place, cpuacct: _Place | None, memory: _Place | None,
                 cpu: _Place | None, cpuset: _Place | None, devices: _Place | None = None) -> None:
        self.host, self.layout = host, layout
        self.tree, self.cpuacct, self.memory, self.cpu, self.cpuset = tree, cpuacct, memory, cpu, cpuset
        self.devices = devices  # the v1 devices controller (None: runs' device rules cannot be enforced)
        self._lock = threading.Lock()
        # shape (the bases joined) -> idle cgroups: as their last run had them, and the CPU (user, system)
        # and OOM kills they hold so far
        self._idle: dict[tuple[str, ...], list[tuple[RunCgroup, tuple[float, float], int]]] = {}
        self._held: set[str] = set()  # adopted runs' cgroups: ``recover`` leaves them alone
        self._made = 0  # the highest r<N> this worker, or an earlier life of it, made
        self._shares: dict[str, tuple[tuple[int, ...], float | None]] = {}  # name -> CPU share written last
        for place in self._places():
            os.makedirs(place.base, exist_ok=True)
        self.mems = ""
        if cpuset is not None and cpuset.version == "v1":  # a new v1 cpuset has no CPUs nor memory nodes
            parent = os.path.dirname(cpuset.base)
            for f in ("cpuset.cpus", "cpuset.mems"):
                mine = os.path.join(cpuset.base, f)
                if not (_read(mine) or "").strip():
                    _write(mine, (_read(os.path.join(parent, f)) or "").strip())
            self.mems = (_read(os.path.join(cpuset.base, "cpuset.mems")) or "").strip()
        cpus_file = ("cpuset.cpus" if cpuset.version == "v1" else "cpuset.cpus.effective") if cpuset else ""
        self.cpus = (parse_cpu_list(_read(os.path.join(cpuset.base, cpus_file)) or "") if cpuset is not None
                     else tuple(sorted(os.sched_getaffinity(0))))  # the CPUs this worker's runs may be bound to

    def _places(self) -> list[_Place]:
        return list(dict.fromkeys(p for p in (self.tree, self.cpuacct, self.memory, self.cpu, self.cpuset,
                                              self.devices) if p))

    @property
    def binds_cores(self) -> bool:
        """Whether runs can be given whole CPUs (a cpuset controller here)."""
        return self.cpuset is not None

    def _shape(self, limits: Limits) -> tuple[str, ...]:
        """The bases a run with ``limits`` joins: its tree, and each limit it has (once each: on v2 one)."""
        places = [self.tree, self.cpuacct]
        if limits.memory_bytes is not None:
            places.append(self.memory)
        places.append(self.cpuset if limits.cores else (self.cpu if limits.cpu_quota is not None else None))
        if limits.deny_devices:
            places.append(self.devices)
        return tuple(dict.fromkeys(p.base for p in places if p is not None))

    def make(self, limits: Limits) -> RunCgroup:
        """A cgroup for one run, its limits written: an idle one of its shape, or a new one (always new
        with a memory limit: its OOM count and its charged memory start at nothing)."""
        shape = self._shape(limits)
        with self._lock:
            # (a memory limit or device rules: always a new one, as the run's own)
            idle = self._idle.get(shape) if limits.memory_bytes is None and not limits.deny_devices else None
            last, cpu_base, oom_base = idle.pop() if idle else (None, (0.0, 0.0), 0)
            if last is None:
                self._made += 1
                name = f"r{self._made}"
        if last is not None:  # its paths are known; only its CPU share may need writing
            try:
                if self._mkdirs(last.dirs):  # OBSERVATION: removed while idle (a namesake's recover)
                    self._shares.pop(last.name, None)  # made anew: no share written, no CPU counted yet
                    cpu_base, oom_base = (0.0, 0.0), 0
                self._limit(last.name, limits)
            except OSError as e:
                self._rmdirs(last.dirs)
                raise CgroupError(f"cannot use cgroup {last.name}: {e.strerror}") from None
            # what its earlier runs used (read as the last one ended): this run's is what it adds
            return RunCgroup(**{**vars(last), "cores": limits.cores if self.cpuset is not None else (),
                                "cpu_base": cpu_base, "oom_base": oom_base})  # (dataclasses.replace: slow)
        made: list[str] = []
        try:
            made = self._mkdirs(tuple(os.path.join(b, name) for b in shape))
            self._limit(name, limits)
        except OSError as e:
            self._rmdirs(made)
            raise CgroupError(f"cannot make cgroup {name}: {e.strerror}") from None
        rc = self._run(name, shape, limits.memory_bytes if self.memory is not None else None,
                       limits.cores if self.cpuset is not None else ())
        if limits.deny_devices and (rules := self._device_rules_place()) is not None:
            return RunCgroup(**{**vars(rc), "devices": os.path.join(rules.base, name)})
        return rc

    def _device_rules_place(self) -> _Place | None:
        """Where runs' device rules go: the v1 devices controller, else the v2 tree (a BPF program,
        ``xce.worker.bpfdev``); None: nowhere (a v1 host without the devices controller)."""
        return self.devices if self.devices is not None else self.tree if self.tree.version == "v2" else None

    @staticmethod
    def _mkdirs(dirs: tuple[str, ...]) -> list[str]:
        """Each of ``dirs`` that is not there, made (which were)."""
        made = []
        for d in dirs:
            try:
                os.mkdir(d)
                made.append(d)
            except FileExistsError:
                pass
        return made

    def _limit(self, name: str, limits: Limits) -> None:
        m, c, s = self.memory, self.cpu, self.cpuset
        if limits.deny_devices and self.devices is not None:
            d = os.path.join(self.devices.base, name)
            for rule in limits.deny_devices:  # (a new cgroup: it starts with its parent's rules)
                _write(f"{d}/devices.deny", rule)
        elif limits.deny_devices and self.tree.version == "v2":
            bpfdev.deny(os.path.join(self.tree.base, name), list(limits.deny_devices))
        if limits.memory_bytes is not None and m is not None:
            d, n = os.path.join(m.base, name), str(int(limits.memory_bytes))
            if m.version == "v2":
                _write(f"{d}/memory.max", n)
                if os.path.exists(f"{d}/memory.swap.max"):
                    _write(f"{d}/memory.swap.max", "0")  # the limit is the job's memory, not its RAM
            else:
                _write(f"{d}/memory.limit_in_bytes", n)
                if os.path.exists(f"{d}/memory.memsw.limit_in_bytes"):  # swap accounting on
                    _write(f"{d}/memory.memsw.limit_in_bytes", n)
        share = (limits.cores, limits.cpu_quota)
        if self._shares.get(name) == share:
            return  # an idle cgroup that had the same share: setting a CPU quota is costly kernel work
        if limits.cores and s is not None:
            d = os.path.join(s.base, name)
            _write(f"{d}/cpuset.cpus", format_cpu_list(limits.cores))
            if s.version == "v1":
                _write(f"{d}/cpuset.mems", self.mems)
        elif limits.cpu_quota is not None and c is not None:
            d, quota = os.path.join(c.base, name), max(1000, int(limits.cpu_quota * CPU_PERIOD_US))
            if c.version == "v2":
                _write(f"{d}/cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:  # (cpu.cfs_period_us is the kernel's default, CPU_PERIOD_US)
                _write(f"{d}/cpu.cfs_quota_us", str(quota))
        self._shares[name] = share

    def _run(self, name: str, shape: tuple[str, ...], memory_limit: int | None,
             cores: tuple[int, ...]) -> RunCgroup:
        tree = os.path.join(self.tree.base, name)
        memory = (os.path.join(self.memory.base, name) if self.memory is not None and memory_limit is not None
                  else None)
        cpu_stat = (os.path.join(tree, "cpu.stat") if self.tree.version == "v2"
                    else os.path.join(self.cpuacct.base, name) if self.cpuacct is not None else "")
        # a CPU share of its own hierarchy (v1) is joined a moment after the job starts (xce-launch.c
        # join_later: a move into a cgroup holds up every fork on the host, and a short job needs no share)
        share = {p.base for p in (self.cpu, self.cpuset) if p is not None and p.base != self.tree.base}
        dirs = [(b in share, os.path.join(b, name)) for b in shape]
        return RunCgroup(version=self.tree.version, join=tuple(d for later, d in dirs if not later), control=tree,
                         cpu_stat=cpu_stat, memory=memory, memory_limit=memory_limit, cores=cores, name=name,
                         shape=shape, later=tuple(d for later, d in dirs if later))

    def _counters(self, rc: RunCgroup) -> tuple[float | None, float | None, int]:
        """The cgroup's user and system CPU seconds and OOM kills so far."""
        user = sys_ = None
        if rc.cpu_stat.endswith("cpu.stat"):
            stat = _keyed(_read(rc.cpu_stat))
            if "user_usec" in stat and "system_usec" in stat:
                user, sys_ = stat["user_usec"] / 1e6, stat["system_usec"] / 1e6
        elif rc.cpu_stat:
            u, s = _read(f"{rc.cpu_stat}/cpuacct.usage_user"), _read(f"{rc.cpu_stat}/cpuacct.usage_sys")
            if u and s and u.strip().isdigit() and s.strip().isdigit():
                user, sys_ = int(u) / 1e9, int(s) / 1e9
        oom = 0
        if rc.memory is not None:
            v2 = self.memory is not None and self.memory.version == "v2"
            oom = _keyed(_read(f"{rc.memory}/{'memory.events' if v2 else 'memory.oom_control'}")).get("oom_kill", 0)
        return user, sys_, oom

    def usage(self, rc: RunCgroup) -> Usage:
        """What the run in ``rc`` used: the cgroup's counters less what its earlier runs used."""
        user, sys_, oom = self._counters(rc)
        return Usage(cpu_user_s=None if user is None else max(0.0, user - rc.cpu_base[0]),
                     cpu_sys_s=None if sys_ is None else max(0.0, sys_ - rc.cpu_base[1]),
                     oom_kills=max(0, oom - rc.oom_base), memory_limit=rc.memory_limit)

    def give_back(self, rc: RunCgroup, used: Usage | None = None) -> None:
        """The run is over (``used``: its usage, as read): its cgroup is idle for the next run of its
        shape, or is removed (a memory-limited one, one idle too many, one a process is still in)."""
        if used is None:
            used = self.usage(rc)
        held = (rc.cpu_base[0] + (used.cpu_user_s or 0.0), rc.cpu_base[1] + (used.cpu_sys_s or 0.0))
        with self._lock:
            self._held.discard(rc.name)
            idle = self._idle.setdefault(rc.shape, [])
            keep = rc.memory is None and rc.devices is None and len(idle) < IDLE_KEPT and _empty(rc.control)
            if keep:
                idle.append((rc, held, rc.oom_base + used.oom_kills))
        if not keep:
            self._rmdirs(rc.dirs)

    def adopt(self, rc: RunCgroup) -> None:
        """A run of an earlier life of this worker, still going, holds ``rc``: it is not idle."""
        with self._lock:
            self._held.add(rc.name)
            self._made = max(self._made, _number(rc.name))

    def recover(self) -> int:
        """After a restart, once adopted runs are adopted: the cgroups of earlier lives that no adopted run
        holds and no process is in are removed (how many).  Not used again: this life cannot know what
        was done to them (a cgroup once written ``cgroup.kill`` kills, on Linux 6.18, every process
        later cloned into it)."""
        gone: list[str] = []
        with self._lock:
            for name in _listdir(self.tree.base):
                if not _number(name):
                    continue
                self._made = max(self._made, _number(name))
                if name in self._held or not _empty(os.path.join(self.tree.base, name)):
                    continue  # OBSERVATION: an adopted run's, or a process is left in it: not ours to remove
                gone.append(name)
        self._rmdirs([os.path.join(p.base, n) for n in gone for p in self._places()
                      if os.path.isdir(os.path.join(p.base, n))])
        return len(gone)

    @staticmethod
    def _rmdirs(dirs) -> None:
        for d in dirs:
            try:
                os.rmdir(d)
            except FileNotFoundError:
                pass
            except OSError as e:
                log.warning("could not remove cgroup %s: %s", d, e.strerror)

    def remove_all(self) -> None:
        """Every idle cgroup, and this worker's subtree where nothing else is left (tests, a host retired)."""
        with self._lock:
            idle = [d for entries in self._idle.values() for rc, _, _ in entries for d in rc.dirs]
            self._idle.clear()
        self._rmdirs(idle)
        for base in self.bases():
            try:
                os.rmdir(base)
            except OSError:
                pass

    def bases(self) -> list[str]:
        """This worker's subtree in each hierarchy it uses."""
        return [p.base for p in self._places()]

    def describe(self) -> str:
        parts = [f"tree {self.tree.version} at {self.tree.base}"]
        for what in ("memory", "cpu", "cpuset", "devices"):
            place = getattr(self, what)
            parts.append(f"{what} {place.version} at {place.base}" if place else f"no {what} limits")
        return f"cgroup {self.layout} (" + "; ".join(parts) + ")"


def _number(name: str) -> int:
    """N of a run cgroup's name r<N> (0: not one)."""
    return int(name[1:]) if name[:1] == "r" and name[1:].isdigit() else 0


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _empty(cgroup: str) -> bool:
    """No process in the cgroup directory (a v2 tree, or the v1 freezer's)."""
    text = _read(os.path.join(cgroup, "cgroup.procs"))
    return text is not None and not text.strip()


def subtree_name(host: str, owner: str | None) -> str:
    """The directory of this worker's subtree in each hierarchy: ``xce-<host>-<8 hex of its work dir>``
    (``xce-<host>`` with no owner: a host's one worker, as before)."""
    if owner is None:
        return f"xce-{host}"
    return f"xce-{host}-{hashlib.sha256(os.fsencode(os.path.realpath(owner))).hexdigest()[:8]}"


def _v2(host: str, subtree: str, mount: _Mount, own: str) -> Hierarchy:
    own_dir = _inside(mount, own)
    base = os.path.join(own_dir, subtree)
    available = set((_read(os.path.join(own_dir, "cgroup.controllers")) or "").split())
    wanted = [c for c in V2_CONTROLLERS if c in available]
    enabled: set[str] = set()
    if wanted:
        if own not in ("", "/"):
            _leave(own_dir)
        enabled = _enable(own_dir, wanted)
    os.makedirs(base, exist_ok=True)
    if enabled:
        enabled = _enable(base, sorted(enabled))
    place = _Place("v2", base)
    return Hierarchy(host, "v2", tree=place, cpuacct=None, memory=place if "memory" in enabled else None,
                     cpu=place if "cpu" in enabled else None, cpuset=place if "cpuset" in enabled else None)


def _v1_places(subtree: str, v1: dict[str, _Mount], own: dict[str, str]) -> dict[str, _Place]:
    return {c: _Place("v1", os.path.join(_inside(m, own.get(c, "/")), subtree)) for c, m in v1.items()}


def open_hierarchy(host: str, mode: str = "auto", owner: str | None = None) -> Hierarchy | None:
    """This worker's place for runs' cgroups, or None (``mode`` none, not root, nothing writable).
    ``owner``: the worker's work directory, which names its subtree (``subtree_name``).
    ``auto``: v2 when /sys/fs/cgroup is the unified hierarchy; hybrid when the v1 controllers are mounted
    beside a cgroup2 mount; else v1.  ``v2``/``hybrid``/``v1`` insist (CgroupError when they cannot)."""
    if mode not in MODES:
        raise CgroupError(f"--cgroups {mode!r}: expected one of {', '.join(MODES)}")
    if mode == "none":
        return None
    mounts = _mounts()
    own = _own_paths()
    subtree = subtree_name(host, owner)
    unified = [m for m in mounts if m.fstype == "cgroup2"]
    v1 = {c: m for m in mounts if m.fstype == "cgroup" for c in m.options if c in V1_CONTROLLERS}
    insist = mode != "auto"
    if mode == "auto":
        whole = [m for m in unified if m.point == "/sys/fs/cgroup"]
        mode = ("v2" if whole else "hybrid" if unified and "memory" in v1 else
                "v1" if "freezer" in v1 else "v2" if unified else "none")
        if mode == "none":
            log.warning("no cgroup hierarchy is mounted: runs are not confined")
            return None
    try:
        if mode == "v2":
            if not unified:
                raise CgroupError("no cgroup2 hierarchy is mounted")
            return _v2(host, subtree, unified[0], own.get("", "/"))
        if mode == "hybrid":
            if not unified:
                raise CgroupError("no cgroup2 hierarchy is mounted beside the v1 controllers")
            p = _v1_places(subtree, {c: m for c, m in v1.items() if c in ("memory", "cpu", "cpuset", "devices")}, own)
            tree = _Place("v2", os.path.join(_inside(unified[0], own.get("", "/")), subtree))
            return Hierarchy(host, "hybrid", tree=tree, cpuacct=None, memory=p.get("memory"), cpu=p.get("cpu"),
                             cpuset=p.get("cpuset"), devices=p.get("devices"))
        missing = [c for c in ("freezer", "cpuacct") if c not in v1]
        if missing:
            raise CgroupError(f"the cgroup v1 hierarchies {', '.join(missing)} are not mounted")
        p = _v1_places(subtree, v1, own)
        return Hierarchy(host, "v1", tree=p["freezer"], cpuacct=p["cpuacct"], memory=p.get("memory"), cpu=p.get("cpu"),
                         cpuset=p.get("cpuset"), devices=p.get("devices"))
    except OSError as e:
        err = CgroupError(f"cgroups ({mode}) cannot be used: {e.strerror}"
                          + (" (the worker is not root)" if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS) else ""))
        if insist:
            raise err from None
        log.warning("%s: runs are not confined (no memory or CPU limits; the process group is killed)", err)
        return None
