"""Runs in cgroups of their own, with real shepherds (``xce-launch``) and real cgroups: the v1
hierarchies this machine mounts, and the v2 (unified) hierarchy mounted beside them.

The v2 hierarchy here has no controllers of its own (memory and CPU are bound to v1), so on v2 what is
tested is what the core of cgroup v2 gives every host: the whole tree killed (``cgroup.kill``), frozen
and thawed, its CPU time; memory limits are tested on v1, where this machine has them.
"""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest

from tests.helpers import process_alive, wait_for
from xce.worker import cgroups, control, sandbox
from xce.worker.cgroups import Limits
from xce.worker.storage import StorageRoots

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT, reason="cgroups need root (CI runs as root)")


def _hierarchy(mode: str) -> cgroups.Hierarchy:
    try:
        h = cgroups.open_hierarchy(f"t{uuid.uuid4().hex[:8]}", mode)
    except cgroups.CgroupError as e:
        pytest.skip(f"no cgroup {mode} here: {e}")
    assert h is not None
    return h


def _remove_bases(h: cgroups.Hierarchy) -> None:
    for base in (h.bases.values() if isinstance(h, cgroups.V1) else [h.base]):
        try:
            os.rmdir(base)
        except OSError:
            pass


@pytest.fixture(params=["v1", "v2"])
def hierarchy(request):
    h = _hierarchy(request.param)
    yield h
    _remove_bases(h)


@pytest.fixture
def v1():
    h = _hierarchy("v1")
    yield h
    _remove_bases(h)


class Run:
    """One run under a real shepherd, in a cgroup of ``hierarchy``'s (made with ``limits``)."""

    def __init__(self, tmp_path, hierarchy: cgroups.Hierarchy | None, limits: Limits = Limits(),
                 lease: str | None = None) -> None:
        self.tmp = tmp_path
        self.run_dir = tmp_path / "run"
        self.run_dir.mkdir(mode=0o711)
        self.hierarchy = hierarchy
        self.cgroup = hierarchy.make(f"{uuid.uuid4().hex[:6]}.1", limits) if hierarchy is not None else None
        self.confinement = sandbox.Confinement(cgroup=self.cgroup, lease=lease)

    def start(self, script: str) -> sandbox.Started:
        job = {"job_id": 1, "run": 1, "display_id": "1", "user": "alice", "name": "t",
               "command": ["sh", "-c", script], "cwd": str(self.tmp), "stdout": str(self.tmp / "out"), "stderr": "",
               "hosts": ["h1"], "slots": 1, "total_slots": 1, "array_index": None, "array_parent": None,
               "queue": "default", "project": "default", "claims": []}
        self.started = sandbox.start(job, "h1", str(self.run_dir), str(self.run_dir / "ws"), str(self.run_dir),
                                     StorageRoots([]), None, self.confinement)
        return self.started

    def status(self) -> int:
        os.waitpid(self.started.pid, 0)
        status = sandbox.read_int(str(self.run_dir / "status"))
        assert status is not None
        return status

    def usage(self) -> cgroups.Usage:
        assert self.hierarchy is not None and self.cgroup is not None
        return self.hierarchy.usage(self.cgroup)

    def close(self) -> None:
        if self.hierarchy is not None and self.cgroup is not None:
            self.hierarchy.remove(self.cgroup)


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_grandchild_that_left_the_session_is_killed_with_the_job(tmp_path, hierarchy):
    """``setsid`` takes a process out of the job's process group, not out of its cgroup: when the job's
    own process ends, the shepherd kills what is left in the cgroup, and the run's cgroup is empty."""
    r = Run(tmp_path, hierarchy)
    pid_file = tmp_path / "escaped"
    try:
        r.start(f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 600' & "
                f"while [ ! -s {pid_file} ]; do sleep 0.01; done; exit 3")
        assert r.status() == 3
        escaped = int(pid_file.read_text())
        wait_for(lambda: not process_alive(escaped), what="the setsid grandchild killed")
        procs = open(os.path.join(r.cgroup.control, "cgroup.procs")).read().split()
        assert procs == [], procs
    finally:
        r.close()


def test_a_kill_sends_sigint_and_sigterm_once_then_sigkill_after_the_grace(tmp_path, hierarchy):
    """The job counts its signals and keeps going: it sees SIGINT and SIGTERM exactly once however often
    the worker wakes the shepherd, and SIGKILL no sooner than the grace."""
    r = Run(tmp_path, hierarchy)
    log = tmp_path / "log"
    script = (f"trap 'echo INT >> {log}' INT; trap 'echo TERM >> {log}' TERM; "
              f"echo ready >> {log}; while true; do sleep 0.05; done")
    try:
        r.start(script)
        wait_for(lambda: "ready" in _lines(log), what="the job's traps set")
        orders = {"job_id": 1, "run": 1, "seq": 1, "kill": {"grace": 1.5}, "signals": [], "suspend": False}
        t0 = time.monotonic()
        assert control.pass_on(str(r.run_dir), orders)
        for _ in range(20):  # a flood of wake-ups and repeated orders re-delivers nothing
            control.pass_on(str(r.run_dir), dict(orders, seq=2))
            control.wake(str(r.run_dir))
        assert r.status() == 128 + signal.SIGKILL
        waited = time.monotonic() - t0
        assert _lines(log).count("TERM") == 1 and _lines(log).count("INT") == 1, _lines(log)
        assert waited >= 1.5, f"SIGKILL came after {waited:.2f}s, before the 1.5s grace"
    finally:
        r.close()


def test_signal_orders_are_each_delivered_once_and_nothing_follows_them(tmp_path, hierarchy):
    r = Run(tmp_path, hierarchy)
    log = tmp_path / "log"
    try:
        r.start(f"trap 'echo USR1 >> {log}' USR1; trap 'echo USR2 >> {log}' USR2; "
                f"echo ready >> {log}; while [ ! -e {tmp_path / 'stop'} ]; do sleep 0.02; done")
        wait_for(lambda: "ready" in _lines(log), what="the job's traps set")
        base = {"job_id": 1, "run": 1, "kill": None, "suspend": False}
        control.pass_on(str(r.run_dir), dict(base, seq=1, signals=[[1, signal.SIGUSR1]]))
        wait_for(lambda: _lines(log).count("USR1") == 1, what="USR1")
        control.pass_on(str(r.run_dir), dict(base, seq=2, signals=[[1, signal.SIGUSR1], [2, signal.SIGUSR2]]))
        wait_for(lambda: "USR2" in _lines(log), what="USR2")
        control.wake(str(r.run_dir))
        (tmp_path / "stop").write_text("")
        assert r.status() == 0, "a signal order is not a kill: the job decided how to end"
        assert _lines(log) == ["ready", "USR1", "USR2"]
    finally:
        r.close()


def test_a_frozen_job_makes_no_progress_until_thawed(tmp_path, hierarchy):
    r = Run(tmp_path, hierarchy)
    ticks = tmp_path / "ticks"
    try:
        r.start(f"while true; do echo t >> {ticks}; sleep 0.02; done")
        wait_for(lambda: len(_lines(ticks)) > 3, what="the job ticking")
        base = {"job_id": 1, "run": 1, "kill": None, "signals": []}
        control.pass_on(str(r.run_dir), dict(base, seq=1, suspend=True))
        state = "freezer.state" if r.cgroup.version == "v1" else "cgroup.events"
        frozen = "FROZEN" if r.cgroup.version == "v1" else "frozen 1"
        wait_for(lambda: frozen in open(os.path.join(r.cgroup.control, state)).read(), what="frozen")
        n = len(_lines(ticks))
        time.sleep(0.5)  # a window in which a running job would tick many times
        assert len(_lines(ticks)) == n, "the job ran while frozen"
        control.pass_on(str(r.run_dir), dict(base, seq=2, suspend=False))
        wait_for(lambda: len(_lines(ticks)) > n + 3, what="ticking again once thawed")
        control.pass_on(str(r.run_dir), dict(base, seq=3, suspend=True, kill={"grace": 5}))
        # a kill thaws the job first: it ends on its SIGINT or SIGTERM, not on the SIGKILL 5s later
        assert r.status() in (128 + signal.SIGINT, 128 + signal.SIGTERM)
    finally:
        r.close()


def test_a_run_whose_lease_runs_out_is_fenced_and_one_renewed_goes_on(tmp_path, hierarchy):
    """The worker renews the lease each time the controller answers; without renewals the shepherd
    kills the run by itself when the lease's deadline passes, and says so (RUN/fenced)."""
    work = tmp_path / "work"
    work.mkdir()
    control.renew_lease(str(work), control.clock() + 1.0)
    r = Run(tmp_path, hierarchy, lease=control.lease_path(str(work)))
    ticks = tmp_path / "ticks"
    try:
        r.start(f"while true; do echo t >> {ticks}; sleep 0.05; done")
        deadline = control.clock() + 2.0
        while control.clock() < deadline:  # renewed: it goes on past its first lease
            control.renew_lease(str(work), control.clock() + 1.0)
            time.sleep(0.1)
        assert not (r.run_dir / "fenced").exists() and r.started.pid and process_alive(r.started.pid)
        t_last = control.clock()  # no more renewals: fenced about a second from now
        assert r.status() == 128 + signal.SIGKILL
        assert control.clock() - t_last >= 0.8
        assert control.ended(str(r.run_dir)).fenced
        n = len(_lines(ticks))
        time.sleep(0.2)
        assert len(_lines(ticks)) == n, "nothing of the fenced run is left"
    finally:
        r.close()


def test_a_run_over_its_memory_limit_is_killed_and_the_cgroup_says_why(tmp_path, v1):
    r = Run(tmp_path, v1, Limits(memory_bytes=64 << 20))
    try:
        r.start("exec python3 -c 'b = bytearray(200 << 20); b[::4096] = b\"x\" * (len(b) // 4096)'")
        assert r.status() == 128 + signal.SIGKILL
        u = r.usage()
        assert u.oom_kills >= 1 and u.memory_limit == 64 << 20
    finally:
        r.close()


def test_usage_counts_memory_and_the_cpu_time_of_every_process(tmp_path, hierarchy):
    """max RSS from the shepherd's wait4 (the job's largest process); CPU time from the cgroup, which
    counts a busy child the job never waited for."""
    r = Run(tmp_path, hierarchy)
    busy, done = tmp_path / "busy.py", tmp_path / "done"
    busy.write_text("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass\n"
                    f"open({str(done)!r}, 'w').close()\n")
    try:  # the busy one is orphaned at once (its subshell exits): only the cgroup knows its CPU time
        r.start(f"(setsid python3 {busy} &); "
                "python3 -c 'b = bytearray(150 << 20); b[::4096] = b\"x\" * (len(b) // 4096)'; "
                f"while [ ! -e {done} ]; do sleep 0.02; done")
        assert r.status() == 0
        ended = control.ended(str(r.run_dir))
        assert ended.max_rss_bytes is not None and ended.max_rss_bytes >= 150 << 20
        u = r.usage()
        assert u.cpu_user_s is not None and u.cpu_sys_s is not None
        assert u.cpu_user_s + u.cpu_sys_s >= 0.6
    finally:
        r.close()


def test_cores_bind_a_run_to_its_cpus_and_a_quota_limits_its_time(tmp_path, v1):
    if not v1.binds_cores:
        pytest.skip("no cpuset hierarchy")
    core = v1.cpus[-1]
    r = Run(tmp_path, v1, Limits(cores=(core,)))
    report = tmp_path / "report"
    try:
        r.start(f"grep Cpus_allowed_list /proc/self/status > {report}")
        assert r.status() == 0
        assert report.read_text().split()[1] == str(core)
    finally:
        r.close()
    (tmp_path / "q").mkdir()
    q = Run(tmp_path / "q", v1, Limits(cpu_quota=0.5))
    try:
        assert q.cgroup is not None
        cpu_dir = next(d for d in q.cgroup.join if "/cpu/" in d or d.endswith(",cpuacct") or "/cpu," in d)
        assert open(os.path.join(cpu_dir, "cpu.cfs_quota_us")).read().strip() == str(cgroups.CPU_PERIOD_US // 2)
    finally:
        q.close()


def test_cpu_lists_and_mountinfo_are_read_as_the_kernel_writes_them(tmp_path):
    assert cgroups.parse_cpu_list("0-3,6,8-9\n") == (0, 1, 2, 3, 6, 8, 9)
    assert cgroups.format_cpu_list((2, 5)) == "2,5"
    info = tmp_path / "mountinfo"
    info.write_text("31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                    "35 31 0:32 /inner /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                    "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    mounts = cgroups._mounts(str(info))
    assert [(m.point, m.root, m.fstype, "memory" in m.options) for m in mounts] == [
        ("/sys/fs/cgroup/memory", "/inner", "cgroup", True), ("/sys/fs/cgroup/unified", "/", "cgroup2", False)]
    # a container whose memory mount starts at /inner sees its own cgroup /inner/job as /sys/fs/cgroup/memory/job
    assert cgroups._inside(mounts[0], "/inner/job") == "/sys/fs/cgroup/memory/job"
