import os
import shutil
import tempfile

import pytest

from tests.helpers import ControllerProcess, stop_cli_servers, wait_for

# The hierarchies a worker makes its runs' cgroups in (xce.worker.cgroups), and where each is mounted.
_HIERARCHIES = ("freezer", "cpuacct", "cpu", "cpuset", "memory", "pids", "devices", "")


def _cgroup_dirs() -> dict[str, str]:
    """This process's cgroup directory in each hierarchy a worker uses ("" is cgroup2)."""
    mounts: dict[str, str] = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, super_opts = right.split()[:3]
            point, root = left.split()[4], left.split()[3]
            if fstype == "cgroup2":
                mounts.setdefault("", (point, root))
            elif fstype == "cgroup":
                for c in super_opts.split(","):
                    if c in _HIERARCHIES:
                        mounts.setdefault(c, (point, root))
    dirs = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                if c in mounts:
                    point, root = mounts[c]
                    rel = path[len(root):] if root != "/" and path.startswith(root) else path
                    dirs[c] = os.path.join(point, rel.lstrip("/"))
    return dirs


def pytest_configure(config):
    """Warm CLI servers in a directory of this process's own (``XCE_RUNTIME_DIR``, for every ``xce`` a test
    runs without a directory of its own), stopped at the end: none is left serving in the user's
    ``/tmp/xce-UID`` after the run.  Then each xdist worker process (and so every daemon it starts) moves
    into a cgroup of its own.

    A worker daemon keeps its runs' cgroups under ``<its own cgroup>/xce-<host>-<its work dir's hash>``
    and removes idle ones it finds there when it starts (xce.worker.cgroups): the name keeps two
    clusters' ``host1`` apart, and a cgroup per test process keeps each process's leftovers to itself,
    as two hosts are in production: separate places."""
    if "XCE_RUNTIME_DIR" not in os.environ:
        _runtime.append(tempfile.mkdtemp(prefix="xce-cli-"))  # (0700, as the front wants it)
        os.environ["XCE_RUNTIME_DIR"] = _runtime[0]
    name = os.environ.get("PYTEST_XDIST_WORKER")
    if not name or os.geteuid() != 0:
        return
    for c, here in _cgroup_dirs().items():
        _remove_stale(here)
        child = os.path.join(here, f"pytest-{name}-{os.getpid()}")
        try:
            _moved.append((here, child))
            os.makedirs(child, exist_ok=True)
            if c == "cpuset":  # a new v1 cpuset has no CPUs or memory nodes until given its parent's
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    with open(os.path.join(here, knob)) as src, open(os.path.join(child, knob), "w") as dst:
                        dst.write(src.read())
            with open(os.path.join(child, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        except OSError:
            continue  # that hierarchy stays shared; the tests that need it isolated are in the same boat as before


def pytest_unconfigure(config):
    """The CLI servers this process's tests started, stopped (by pid); back to the cgroup the process came
    from, and its cgroups removed where nothing is left in them."""
    for runtime in _runtime:
        stop_cli_servers(runtime)
        shutil.rmtree(runtime, ignore_errors=True)
    left = []
    for here, child in _moved:
        try:
            with open(os.path.join(here, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
            left.append(child)
        except OSError:
            continue
    try:  # what this process started may still be leaving them (well within the 10 s pytest-xdist gives a
        # test process to end before it kills it)
        wait_for(lambda: not any(map(_processes_in, left)), timeout=3, what="this process's cgroups to empty")
    except TimeoutError:
        pass  # a process still in one (a killed worker's run outlives it): the next run removes it (_remove_stale)
    for child in left:
        for top, _, _ in os.walk(child, topdown=False):  # deepest first; a cgroup goes only when empty
            try:
                os.rmdir(top)
            except OSError:
                pass


def _remove_stale(here: str) -> None:
    """The cgroups an earlier run's test processes left in ``here`` (a run of a killed worker outlived the end
    of its process, which could not remove them then), removed where they are empty now."""
    for entry in os.listdir(here):
        pid = entry.rpartition("-")[2]
        if entry.startswith("pytest-gw") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            for top, _, _ in os.walk(os.path.join(here, entry), topdown=False):
                try:
                    os.rmdir(top)
                except OSError:
                    pass  # not empty yet: the next run looks again


def _processes_in(cgroup: str) -> bool:
    """Whether a process is in ``cgroup`` or below it."""
    for top, _, _ in os.walk(cgroup):
        try:
            with open(os.path.join(top, "cgroup.procs")) as f:
                if f.read().strip():
                    return True
        except FileNotFoundError:
            pass
    return False


_moved: list[tuple[str, str]] = []
_runtime: list[str] = []  # the XCE_RUNTIME_DIR this process made


def pytest_collection_modifyitems(config, items):
    """The modules marked ``long`` first: under ``-n N --dist loadfile`` each module goes to whichever
    test process is free, and a long one handed out last would run on alone at the end."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)  # stable: the rest keep their order


@pytest.fixture
def controller(tmp_path):
    ctl = ControllerProcess(state_dir=str(tmp_path / "ctl")).start()
    yield ctl
    ctl.stop()
