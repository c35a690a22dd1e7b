"""Runs in cgroups of their own, with real shepherds (``xce-launch``) and real cgroups, in each layout:
``v1`` (this machine's v1 hierarchies: the freezer holds the tree), ``hybrid`` (the tree in the cgroup2
hierarchy mounted beside them, limits in v1) and ``v2`` (the cgroup2 hierarchy alone).

The cgroup2 hierarchy here has no controllers of its own (memory and CPU are bound to v1), so on v2 what
is tested is what the core of cgroup v2 gives every host: the whole tree killed (``cgroup.kill``), frozen
and thawed, its CPU time; memory and CPU limits are tested where this machine has them (v1, hybrid).
"""

from __future__ import annotations

import json
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
    h.remove_all()


@pytest.fixture(params=["v1", "hybrid", "v2"])
def hierarchy(request):
    h = _hierarchy(request.param)
    yield h
    _remove_bases(h)


@pytest.fixture(params=["v1", "hybrid"])
def v1(request):
    """A layout whose memory and CPU limits are v1's (this machine's controllers)."""
    h = _hierarchy(request.param)
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
        self.cgroup = hierarchy.make(limits) if hierarchy is not None else None
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
            self.hierarchy.give_back(self.cgroup)


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
        state = "freezer.state" if r.cgroup.version == "v1" else "cgroup.events"  # (hybrid: the tree is v2)
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
        # (a CPU share is joined once the job has run a moment: see xce-launch.c join_later)
        r.start(f"sleep 0.3; grep Cpus_allowed_list /proc/self/status > {report}")
        assert r.status() == 0
        assert report.read_text().split()[1] == str(core)
    finally:
        r.close()
    (tmp_path / "q").mkdir()
    q = Run(tmp_path / "q", v1, Limits(cpu_quota=0.5))
    try:
        assert q.cgroup is not None
        cpu_dir = os.path.join(v1.cpu.base, os.path.basename(q.cgroup.control))
        assert cpu_dir in q.cgroup.dirs
        assert open(os.path.join(cpu_dir, "cpu.cfs_quota_us")).read().strip() == str(cgroups.CPU_PERIOD_US // 2)
        assert open(os.path.join(cpu_dir, "cpu.cfs_period_us")).read().strip() == str(cgroups.CPU_PERIOD_US)
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


def test_a_run_joins_only_the_hierarchies_it_needs(tmp_path, hierarchy):
    """Each directory costs a migration, and a new one a mkdir and an rmdir: a run without a memory limit
    has no memory cgroup, and one without a CPU share no cpu cgroup."""
    bare = hierarchy.make(Limits())
    limited = hierarchy.make(Limits(memory_bytes=64 << 20, cpu_quota=1.0))
    expected_bare = 2 if hierarchy.layout == "v1" else 1  # v1: the freezer, and cpuacct for CPU time
    assert bare.memory is None and bare.memory_limit is None and len(bare.join) == expected_bare, bare.join
    has = [p is not None for p in (hierarchy.memory, hierarchy.cpu)]
    extra = 0 if hierarchy.layout == "v2" else sum(has)  # v2: one directory holds every limit
    assert len(limited.dirs) == expected_bare + extra, limited.dirs
    assert (limited.memory_limit == 64 << 20) == has[0]
    hierarchy.give_back(bare)
    hierarchy.give_back(limited)
    assert all(os.path.isdir(d) for d in bare.join), "idle, kept for the next run of its shape"
    if has[0]:
        assert not any(os.path.exists(d) for d in limited.dirs), "a memory-limited cgroup is not reused"


def test_an_idle_cgroup_serves_the_next_run_of_its_shape_and_counts_only_that_runs_cpu(tmp_path, hierarchy):
    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3:\n    pass\n"
    (tmp_path / "busy.py").write_text(busy)
    (tmp_path / "a").mkdir()
    first = Run(tmp_path / "a", hierarchy, Limits(cpu_quota=1.0))
    first.start(f"python3 {tmp_path / 'busy.py'}")
    assert first.status() == 0
    assert (first.usage().cpu_user_s or 0) + (first.usage().cpu_sys_s or 0) >= 0.3
    first.close()
    (tmp_path / "b").mkdir()
    second = Run(tmp_path / "b", hierarchy, Limits(cpu_quota=1.0))
    assert second.cgroup.name == first.cgroup.name and second.cgroup.cpu_base[0] + second.cgroup.cpu_base[1] >= 0.3
    second.start("true")
    assert second.status() == 0
    used = second.usage()
    assert (used.cpu_user_s or 0) + (used.cpu_sys_s or 0) < 0.2, "the first run's CPU is not the second's"
    second.close()


def test_an_idle_cgroup_removed_while_idle_is_made_again_for_its_next_run(tmp_path, hierarchy):
    first = hierarchy.make(Limits(cpu_quota=1.0))
    hierarchy.give_back(first)
    for d in first.dirs:  # a namesake worker's recover (two lives of one host under one parent)
        os.rmdir(d)
    (tmp_path / "a").mkdir()
    run = Run(tmp_path / "a", hierarchy, Limits(cpu_quota=1.0))
    assert run.cgroup.name == first.name and all(os.path.isdir(d) for d in run.cgroup.dirs)
    run.start("true")
    assert run.status() == 0, "the job joined its cgroup"
    run.close()


def test_a_restarted_worker_removes_idle_cgroups_of_earlier_lives_and_leaves_an_adopted_runs_alone(tmp_path,
                                                                                                   hierarchy):
    held, idle = hierarchy.make(Limits()), hierarchy.make(Limits())
    again = cgroups.Hierarchy(hierarchy.host, hierarchy.layout, hierarchy.tree, hierarchy.cpuacct, hierarchy.memory,
                              hierarchy.cpu, hierarchy.cpuset)  # the next life of the worker, the same places
    again.adopt(cgroups.RunCgroup.from_json(json.loads(json.dumps(held.as_json()))))
    assert again.recover() == 1
    assert all(os.path.isdir(d) for d in held.dirs) and not any(os.path.exists(d) for d in idle.dirs)
    fresh = again.make(Limits())
    assert fresh.name not in (held.name, idle.name), "new names never collide with an earlier life's"
    for rc in (held, fresh):
        again.give_back(rc)
    again.remove_all()


def test_a_job_that_runs_on_is_moved_into_its_cpu_share_children_and_all(tmp_path, v1):
    """The CPU share of a v1 hierarchy is joined a moment after the start (a move holds up every fork on
    the host): the job and the children it started by then are all moved, and a child started after
    is in it from birth."""
    r = Run(tmp_path, v1, Limits(cpu_quota=1.0))
    cpu_dir = os.path.join(v1.cpu.base, r.cgroup.name)
    report = tmp_path / "report"
    try:
        r.start(f"sleep 5 & early=$!; sleep 0.4; sleep 5 & late=$!; "
                f"for p in $$ $early $late; do grep ':cpu:' /proc/$p/cgroup; done > {report}; kill $early $late")
        r.status()
        lines = report.read_text().splitlines()
        assert len(lines) == 3 and all(line.endswith(os.path.relpath(cpu_dir, "/sys/fs/cgroup/cpu")) for line in lines), lines
    finally:
        r.close()


def test_a_cgroup_whose_run_was_killed_serves_the_next_run(tmp_path, hierarchy):
    """The shepherd kills by freezing and SIGKILLing each process, not with v2's cgroup.kill: on Linux 6.18
    a cgroup once killed so kills every process later cloned into it, and cgroups are used again."""
    (tmp_path / "a").mkdir()
    first = Run(tmp_path / "a", hierarchy)
    first.start(f"trap '' INT TERM; echo ready > {tmp_path / 'ready'}; sleep 60")  # it takes SIGKILL to end it
    wait_for(lambda: (tmp_path / "ready").exists(), what="the job ignoring SIGTERM")
    control.pass_on(str(first.run_dir), {"job_id": 1, "run": 1, "seq": 1, "kill": {"grace": 0.2}, "signals": [],
                                         "suspend": False})
    assert first.status() == 128 + signal.SIGKILL
    first.close()
    (tmp_path / "b").mkdir()
    second = Run(tmp_path / "b", hierarchy)
    assert second.cgroup.name == first.cgroup.name
    second.start("echo alive")
    assert second.status() == 0 and (tmp_path / "b" / "out").read_text() == "alive\n"
    second.close()


def test_two_workers_of_one_host_name_under_one_parent_keep_out_of_each_others_cgroups(tmp_path):
    """Two ``xce up`` clusters on one machine (a test run's many clusters) both have a host1 under the
    same parent cgroup: each worker's subtree is named by its work directory, so the second's start-up
    ``recover`` does not remove the first's idle cgroup, nor does the first's clean stop the second's."""
    host = f"t{uuid.uuid4().hex[:8]}"
    try:
        a = cgroups.open_hierarchy(host, "hybrid", owner=str(tmp_path / "a"))
        b = cgroups.open_hierarchy(host, "hybrid", owner=str(tmp_path / "b"))
    except cgroups.CgroupError as e:
        pytest.skip(f"no cgroup hybrid here: {e}")
    assert a is not None and b is not None
    try:
        assert set(a.bases()).isdisjoint(b.bases())
        held = a.make(Limits())
        a.give_back(held)  # idle: a's to take again
        assert b.recover() == 0
        assert all(os.path.isdir(d) for d in held.dirs)
        mine = b.make(Limits())
        a.remove_all()
        assert all(os.path.isdir(d) for d in mine.dirs)
        assert not any(os.path.isdir(d) for d in held.dirs)
    finally:
        a.remove_all()
        b.remove_all()


def test_device_rules_keep_a_run_from_the_device_nodes_of_gpus_it_does_not_hold(tmp_path, hierarchy):
    """The device rules a run on a GPU host gets: ``/dev/nvidia<N>`` of the GPUs it does not hold denied
    (``gpus.device_rules``), by the v1 devices controller (v1, hybrid) or a BPF device program on its v2
    cgroup (``bpfdev``).  This machine has no NVIDIA device node, so the rule denies another character
    device (``/dev/urandom``): the same rule, the same kernel path."""
    v1 = hierarchy
    if v1.devices is None and v1.tree.version != "v2":
        pytest.skip("no v1 devices controller mounted here: device rules cannot be enforced")
    st = os.stat("/dev/urandom")
    rule = f"c {os.major(st.st_rdev)}:{os.minor(st.st_rdev)} rwm"
    run = Run(tmp_path, v1, Limits(deny_devices=(rule,)))
    assert run.cgroup.devices is not None and run.cgroup.devices in run.cgroup.join
    run.start("head -c1 /dev/zero >/dev/null && echo zero ok; head -c1 /dev/urandom >/dev/null 2>&1 && "
              "echo urandom ok || echo urandom denied")
    assert run.status() == 0
    assert _lines(tmp_path / "out") == ["zero ok", "urandom denied"]
    run.close()
    assert not os.path.exists(run.cgroup.devices), "a cgroup with device rules is its run's only"
    (tmp_path / "b").mkdir()
    free = Run(tmp_path / "b", v1, Limits())  # a run with no rules: no devices cgroup, every device open
    assert free.cgroup.devices is None
    free.start("head -c1 /dev/urandom >/dev/null && echo urandom ok")
    assert free.status() == 0 and _lines(tmp_path / "b" / "out") == ["urandom ok"]
    free.close()
