"""The job's sandbox with real shepherds (``xce-launch``), real mount namespaces and real bind mounts
(root), no worker: what the launcher must keep of the shell chain it replaced, and what it adds."""

from __future__ import annotations

import os
import pathlib
import signal
import shutil
import subprocess
import tempfile
import uuid

import pytest

from tests.helpers import wait_for
from xce.worker import sandbox
from xce.worker.storage import StorageRoots

ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not ROOT, reason="mount namespaces and bind mounts need root (CI runs as root)")


def _job(tmp_path, script: str, claims: list[dict]) -> dict:
    return {"job_id": 1, "run": 1, "display_id": "1", "user": "alice", "name": "t", "command": ["sh", "-c", script],
            "cwd": str(tmp_path), "stdout": str(tmp_path / "out"), "stderr": "", "hosts": ["h1"], "slots": 1,
            "total_slots": 1, "array_index": None, "array_parent": None, "queue": "default", "project": "default",
            "claims": claims}


def _claim(name: str, path, readonly: bool = False) -> dict:
    return {"claim": f"c-{name}", "name": name, "env": f"XCE_C_{name.upper()}", "path": str(path),
            "readonly": readonly}


class Run:
    """One run's directories under ``tmp_path``: storage root, run dir, workspace."""

    def __init__(self, tmp_path) -> None:
        self.root = tmp_path / "storage"
        self.run_dir = tmp_path / "run"
        for d in (self.root, self.run_dir):
            d.mkdir(mode=0o711)
        self.roots = StorageRoots([str(self.root)])

    def data(self, name: str):
        d = self.root / name
        d.mkdir()
        return d

    def start(self, job: dict, run_as: sandbox.RunAs | None = None) -> sandbox.Started:
        return sandbox.start(job, "h1", str(self.run_dir), str(self.run_dir / "ws"), str(self.run_dir),
                             self.roots, run_as)

    def status(self, started: sandbox.Started) -> int:
        os.waitpid(started.pid, 0)
        status = sandbox.read_int(str(self.run_dir / "status"))
        assert status is not None
        return status


@root_only
def test_claims_are_bound_in_a_private_namespace_and_a_read_only_one_refuses_even_root(tmp_path):
    r = Run(tmp_path)
    rw, ro = r.data("rw"), r.data("ro")
    (ro / "weights").write_text("w\n")
    report = tmp_path / "report"
    script = (f'echo data > "$XCE_C_RW/written"; cat "$XCE_C_RO/weights" >{report}; '
              f'if touch "$XCE_C_RO/x" 2>>{report}; then echo WROTE >>{report}; fi; '
              f'grep NoNewPrivs /proc/self/status >>{report}; '
              f'readlink /proc/self/ns/mnt >>{report}')
    started = r.start(_job(tmp_path, script, [_claim("rw", rw), _claim("ro", ro, readonly=True)]))
    assert started.publish == "bind"
    assert r.status(started) == 0
    lines = report.read_text().splitlines()
    assert (rw / "written").read_text() == "data\n"
    assert lines[0] == "w"
    assert "Read-only file system" in lines[1] and "WROTE" not in lines
    assert not (ro / "x").exists()
    # setuid programs and file capabilities still work in jobs: the reason the chain is not bubblewrap
    assert lines[2].split() == ["NoNewPrivs:", "0"]
    assert lines[3] != os.readlink("/proc/self/ns/mnt"), "the job had a mount namespace of its own"
    for name in ("rw", "ro"):  # the binds stayed in the job's namespace
        assert not os.path.ismount(sandbox.claims_dir(str(r.run_dir)) + "/" + name)


@root_only
def test_a_claim_path_with_spaces_tabs_backslashes_and_a_newline_is_mounted_whole(tmp_path):
    r = Run(tmp_path)
    odd = r.data("a b\tc\\d\ne")
    started = r.start(_job(tmp_path, 'echo here > "$XCE_C_ODD/f"', [_claim("odd", odd)]))
    assert r.status(started) == 0
    assert (odd / "f").read_text() == "here\n"


def test_a_claim_outside_the_storage_roots_is_refused_before_anything_runs(tmp_path):
    r = Run(tmp_path)
    link = r.root / "out"
    link.symlink_to("/etc")
    for path in ("/etc", str(link), "relative/path"):
        with pytest.raises(sandbox.StartFailed, match="outside this worker's storage roots|no data path"):
            r.start(_job(tmp_path, "true", [_claim("x", path)]))
    assert not (r.run_dir / sandbox.MOUNTS).exists() and not (r.run_dir / "shepherd.pid").exists()


def _launch(r: Run, command: list[str], cwd, as_root: bool = True) -> int:
    """The launcher on its own (as root: with a mount namespace); its status once it has ended."""
    argv = sandbox.launch_argv(sandbox.launcher(), str(r.run_dir), str(cwd), "/dev/null", "/dev/null", command,
                               as_root=as_root, run_as=None)
    pid = sandbox.spawn_shepherd(argv, {"PATH": sandbox.DEFAULT_PATH})
    os.waitpid(pid, 0)
    status = sandbox.read_int(str(r.run_dir / "status"))
    assert status is not None
    return status


@root_only
def test_a_claim_that_vanishes_before_its_mount_ends_the_run_with_publish_failed_and_the_reason(tmp_path):
    """The worker checked the directory; it went before the launcher's mount: the run ends with
    PUBLISH_FAILED, the reason is kept, and the command never ran."""
    r = Run(tmp_path)
    gone = r.data("gone")
    assert sandbox.prepare_publish([_claim("gone", gone)], str(r.run_dir), r.roots, as_root=True)
    gone.rmdir()
    ran = tmp_path / "ran"
    assert _launch(r, ["touch", str(ran)], tmp_path) == sandbox.PUBLISH_FAILED
    err = sandbox.publish_error(str(r.run_dir))
    assert err is not None and str(gone) in err and "No such file or directory" in err, err
    assert not ran.exists()


def test_a_run_that_cannot_launch_ends_with_launch_failed_and_says_why_and_one_that_starts_leaves_no_message(
        tmp_path):
    r = Run(tmp_path)
    assert _launch(r, ["true"], tmp_path / "gone", as_root=False) == sandbox.LAUNCH_FAILED
    assert sandbox.launch_error(str(r.run_dir)) == \
        f"cannot enter working directory {tmp_path / 'gone'}: No such file or directory"
    (r.run_dir / sandbox.LAUNCH_ERR).unlink()
    started = r.start(_job(tmp_path, "true", []))
    assert r.status(started) == 0
    # (RUN/env and RUN/hostfile are the worker's, for the launcher and the job)
    assert sorted(p.name for p in r.run_dir.iterdir() if p.is_file()) == ["env", "hostfile", "pgid", "shepherd.pid",
                                                                          "status", "usage"]


@root_only
def test_a_symlink_swapped_in_after_the_workers_check_is_refused_not_followed(tmp_path):
    """The attack: the worker checked that the claim's data path lies inside its storage roots; before
    the mount, the directory is replaced by a link to /etc.  The launcher opens the path without
    following any link, so the run ends with PUBLISH_FAILED and /etc is never bound into the job."""
    r = Run(tmp_path)
    data = r.data("data")
    assert sandbox.prepare_publish([_claim("data", data)], str(r.run_dir), r.roots, as_root=True)
    data.rmdir()
    data.symlink_to("/etc")
    seen = tmp_path / "seen"
    assert _launch(r, ["sh", "-c", f'ls "{sandbox.claims_dir(str(r.run_dir))}/data" > {seen}'], tmp_path) \
        == sandbox.PUBLISH_FAILED
    err = sandbox.publish_error(str(r.run_dir))
    assert err is not None and "symbolic link" in err, err
    assert not seen.exists()


@root_only
def test_the_job_starts_with_every_signal_at_its_default_and_none_blocked(tmp_path):
    """The worker is a Python process: it ignores SIGPIPE, and a child inherits ignored signals.  A job
    must not: ``yes | head`` would then end with "Broken pipe" errors instead of quietly."""
    r = Run(tmp_path)
    report = tmp_path / "report"
    started = r.start(_job(tmp_path, f"grep -E '^Sig(Ign|Blk)' /proc/self/status > {report}; yes | head -1", []))
    assert r.status(started) == 0
    masks = dict(line.split(":") for line in report.read_text().splitlines())
    assert {k: int(v, 16) for k, v in masks.items()} == {"SigIgn": 0, "SigBlk": 0}
    assert (tmp_path / "out").read_text() == "y\n"


def _claim_mount_options(tmp_path, fs_options: str, readonly: bool) -> set[str]:
    """The options a claim on a tmpfs mounted with ``fs_options`` is bound with in a job's namespace."""
    r = Run(tmp_path)
    fs = r.root / "fs"
    fs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"{fs_options},size=1m", "xce-test", str(fs)], check=True)
    try:
        (fs / "data").mkdir()
        report = tmp_path / "report"
        dst = sandbox.claims_dir(str(r.run_dir)) + "/d"
        started = r.start(_job(tmp_path, f"grep ' {dst} ' /proc/self/mountinfo > {report}",
                               [_claim("d", fs / "data", readonly=readonly)]))
        assert r.status(started) == 0
        return set(report.read_text().split()[5].split(","))
    finally:
        subprocess.run(["umount", str(fs)], check=True)


@root_only
def test_a_read_only_claim_keeps_the_nosuid_and_nodev_of_the_filesystem_it_comes_from(tmp_path):
    """A read-only bind is a bind and then a remount; a remount that named only "read-only" would drop
    the source's nosuid and nodev, and a job could then run a setuid program from its claim."""
    options = _claim_mount_options(tmp_path, "nosuid,nodev", readonly=True)
    assert {"ro", "nosuid", "nodev"} <= options, options


def test_without_the_launcher_a_run_fails_to_start_and_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "LAUNCHER", "xce-launch-missing")
    with pytest.raises(sandbox.StartFailed, match="xce-launch-missing is not installed.*make dev"):
        sandbox.launcher()


@root_only
def test_signals_go_to_the_jobs_own_group_and_the_shepherd_reports_them(tmp_path):
    r = Run(tmp_path)
    child = tmp_path / "child"
    started = r.start(_job(tmp_path, f"sleep 600 & echo $! > {child}; wait", [_claim("d", r.data("d"))]))
    pgid_path = str(r.run_dir / "pgid")
    wait_for(lambda: sandbox.read_int(pgid_path) is not None and child.exists() and child.read_text().strip(),
             what="the job's pgid and its child")
    pgid = sandbox.read_int(pgid_path)
    assert pgid is not None and pgid != started.pid
    assert os.getpgid(pgid) == pgid and os.getsid(pgid) == pgid, "pgid is written once the group exists"
    sleeper = int(child.read_text())
    assert os.getpgid(sleeper) == pgid
    os.killpg(pgid, signal.SIGTERM)
    assert r.status(started) == 128 + signal.SIGTERM
    assert sandbox.exit_status(128 + signal.SIGTERM) == (143, signal.SIGTERM)
    wait_for(lambda: not os.path.exists(f"/proc/{sleeper}") or _zombie(sleeper), what="the job's child gone")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture
def open_tmp():
    """A temp directory other users may pass through (pytest's own are 0700 under a 0700 parent)."""
    path = tempfile.mkdtemp(prefix="xce-sandbox-")
    os.chmod(path, 0o711)
    yield pathlib.Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def account():
    name = f"xsb{uuid.uuid4().hex[:6]}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    yield name
    subprocess.run(["userdel", name], check=False)


@root_only
def test_a_job_run_as_its_user_gets_its_claims_and_a_read_only_one_stays_read_only(open_tmp, account):
    tmp_path = open_tmp
    r = Run(tmp_path)
    run_as = sandbox.run_as_for(account, "h1")
    rw, ro = r.data("rw"), r.data("ro")
    os.chown(rw, run_as.uid, run_as.gid)
    os.chown(ro, run_as.uid, run_as.gid)  # the user's own: only the mount keeps the job from writing
    out = tmp_path / "o"
    out.mkdir()
    os.chown(out, run_as.uid, run_as.gid)
    report = out / "report"
    script = (f'id -u >{report}; echo x > "$XCE_C_RW/f"; '
              f'if touch "$XCE_C_RO/g" 2>>{report}; then echo WROTE >>{report}; fi')
    job = _job(tmp_path, script, [_claim("rw", rw), _claim("ro", ro, readonly=True)])
    job["cwd"], job["stdout"] = str(out), str(out / "stdout")
    started = r.start(job, run_as)
    assert r.status(started) == 0, (r.run_dir / sandbox.LAUNCH_ERR).read_text()
    lines = report.read_text().splitlines()
    assert lines[0] == str(run_as.uid)
    assert os.stat(rw / "f").st_uid == run_as.uid
    assert "Read-only file system" in lines[1] and "WROTE" not in lines


@root_only
def test_a_read_write_claim_is_bound_nosuid_and_nodev_even_from_a_filesystem_that_allows_them(tmp_path):
    """A user's job could leave a setuid-root copy of a shell or a device node in a claim it writes;
    the next job that mounts the claim must not be able to use either."""
    options = _claim_mount_options(tmp_path, "suid,dev", readonly=False)
    assert {"rw", "nosuid", "nodev"} <= options, options


@root_only
def test_the_launcher_itself_refuses_root_and_system_accounts_unless_allowed(tmp_path):
    """The worker refuses them first (``run_as_for``); the launcher, which does the setuid, refuses them
    again, so a mistake in the worker cannot run a job as root."""
    def run_in(name: str) -> Run:
        (tmp_path / name).mkdir()
        return Run(tmp_path / name)

    for uid, gid in ((0, 0), (1, 1), (1000, 0)):
        r = run_in(f"u{uid}-{gid}")
        ran = tmp_path / f"ran-{uid}-{gid}"
        argv = sandbox.launch_argv(sandbox.launcher(), str(r.run_dir), "/", "/dev/null", "/dev/null",
                                   ["touch", str(ran)], as_root=False,
                                   run_as=sandbox.RunAs(uid=uid, gid=gid, name="x", home="/"))
        pid = sandbox.spawn_shepherd(argv, {"PATH": sandbox.DEFAULT_PATH})
        os.waitpid(pid, 0)
        assert sandbox.read_int(str(r.run_dir / "status")) == sandbox.LAUNCH_FAILED
        assert "refusing to run as uid" in (sandbox.launch_error(str(r.run_dir)) or "")
        assert not ran.exists()
    allowed = run_in("allowed")
    ran = tmp_path / "ran-allowed"
    argv = sandbox.launch_argv(sandbox.launcher(), str(allowed.run_dir), "/", "/dev/null", "/dev/null",
                               ["touch", str(ran)], as_root=False,
                               run_as=sandbox.RunAs(uid=0, gid=0, name="root", home="/"),
                               confinement=sandbox.Confinement(allow_system_users=True))
    pid = sandbox.spawn_shepherd(argv, {"PATH": sandbox.DEFAULT_PATH})
    os.waitpid(pid, 0)
    assert sandbox.read_int(str(allowed.run_dir / "status")) == 0 and ran.exists()


def test_the_outcome_of_pre_and_post_exec_is_read_without_following_a_link_or_blocking_on_a_fifo(tmp_path):
    """The run's workspace is the job's: what it leaves there as the steps file is read by root, so a
    link the job planted is not followed and a FIFO does not hold the worker up."""
    steps = tmp_path / sandbox.STEPS_FILE
    assert sandbox.exec_steps(str(tmp_path)) == (None, None)
    steps.write_text("post 4\n")
    assert sandbox.exec_steps(str(tmp_path)) == (None, 4)
    steps.write_text("pre 3\n")
    assert sandbox.exec_steps(str(tmp_path)) == (3, None)
    steps.write_text("pre 300\n")
    assert sandbox.exec_steps(str(tmp_path)) == (None, None)
    secret = tmp_path / "secret"
    secret.write_text("pre 7\n")
    steps.unlink()
    steps.symlink_to(secret)
    assert sandbox.exec_steps(str(tmp_path)) == (None, None)
    steps.unlink()
    os.mkfifo(steps)
    assert sandbox.exec_steps(str(tmp_path)) == (None, None)


def test_the_attack_a_workspace_full_of_links_is_removed_and_nothing_they_point_at(tmp_path):
    """The worker (root) removes a run's workspace, which its user filled: links to a file and to a
    directory elsewhere, a directory with a link inside, a FIFO.  The workspace goes; what the links
    point at stays (unlinked, never followed), whether the walk went through the directory's descriptor
    or, for the subdirectory, through rmtree."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    ws = tmp_path / "jobs" / "7.1"
    (ws / "sub").mkdir(parents=True)
    (ws / "to-file").symlink_to(outside / "precious")
    (ws / "to-dir").symlink_to(outside)
    (ws / "sub" / "to-dir").symlink_to(outside)
    (ws / "data").write_text("x")
    os.mkfifo(ws / "fifo")
    sandbox.clean_workspace(str(ws))
    assert not ws.exists() and not ws.is_symlink()
    assert (outside / "precious").read_text() == "keep" and sorted(os.listdir(outside)) == ["precious"]
    sandbox.clean_workspace(str(ws))  # gone already: nothing to do, no error


def test_a_workspace_that_is_a_link_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep")
    (tmp_path / "7.1").symlink_to(outside)
    sandbox.clean_workspace(str(tmp_path / "7.1"))
    assert (outside / "precious").read_text() == "keep"
