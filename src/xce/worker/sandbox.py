"""Start one job run in its sandbox, under a shepherd that outlives the worker.

The worker spawns ``xce-launch`` (native/xce-launch.c, built by ``make dev`` beside the ``xce``
command) for each run: one exec that is the run's shepherd and, in its one child, the job's sandbox
up to the exec of its command::

    worker --posix_spawn--> xce-launch xce-shepherd RUN ...     (own session: RUN/shepherd.pid)
        └── fork: setsid                                         the job's session and process group (RUN/pgid)
                  [private mount namespace, claims bound]        root: RUN/mounts, read-only where required
                  [groups, gid, uid of the submitting user]      --run-as-users
                  cd CWD, stdout/stderr opened as that user, signals to their defaults, exec CMD

It replaces a chain of seven glibc programs (``sh``, ``setsid``, ``unshare``, ``sh``, ``mount -a``,
``setpriv``, ``sh``) whose execs were most of a short job's CPU on a virtual machine (glibc probes the
CPU's caches with ``cpuid`` at every start, and each probe traps to the hypervisor).  Not bubblewrap
(``bwrap``): it sets ``no_new_privs`` on every sandbox, unconditionally, and a job could then no
longer use setuid programs (``sudo``, ``fusermount3``) or file capabilities.

The shepherd waits for the job and writes its exit status to ``RUN/status``.
It never gets a signal from the worker (kills go to the job's process
group), so when the worker restarts, a run that is still going is adopted,
and one that ended while no worker was there is reported with its real
status.  ``RUN`` is the run's directory under the worker's ``runs/``.
``RUN/pgid`` is written after ``setsid``: once it exists, the group does.
A claim that cannot be mounted ends the run with ``PUBLISH_FAILED`` and
its reason in ``RUN/publish.err``; a working directory or output file the
user cannot use ends it with ``LAUNCH_FAILED`` and its reason in
``RUN/launch.err`` (written by the shepherd, from what the job said on a
pipe: the user cannot write the run directory, and a run that starts
makes no message file).

Signals: the job starts with every signal at its default action (the
worker, a Python process, ignores SIGPIPE).  A status above 128 is reported
the shell's way: killed by signal (status - 128).
"""

from __future__ import annotations

import os
import pwd
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from xce.worker.cgroups import RunCgroup
from xce.worker.storage import OutsideStorage, StorageRoots
from xce.wire import Dispatch

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

LAUNCHER = "xce-launch"
# the run's end when a claim could not be mounted (RUN/publish.err says why) or the job could not be
# launched as its user: working directory, output files (RUN/launch.err says why); as xce-launch.c
PUBLISH_FAILED = 125
LAUNCH_FAILED = 126
MOUNTS = "mounts"
LAUNCH_ERR = "launch.err"


class StartFailed(Exception):
    """The run could not be started (its command does not exist, its cwd is missing...)."""


def launcher() -> str:
    """The ``xce-launch`` program: beside this interpreter (``make dev`` builds it into the venv), or on
    $PATH.  Missing, every run fails to start, saying so."""
    here = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
    found = here if os.access(here, os.X_OK) else shutil.which(LAUNCHER)
    if found is None:
        raise StartFailed(f"failed to start: {LAUNCHER} is not installed beside {sys.executable} "
                          "nor on PATH (`make dev` builds it)")
    return found


@dataclass
class Started:
    pid: int  # the shepherd's
    workspace: str
    stdout: str
    stderr: str
    publish: str = ""  # how claims were published: "bind" (root) or "symlink" (not root); "" none


def claims_dir(run_dir: str) -> str:
    """Where a run's claims appear: chosen by XCE, never by the user."""
    return os.path.join(run_dir, "claims")


def publish_env(claims: list[dict[str, Any]], run_dir: str) -> dict[str, str]:
    env = {c["env"]: os.path.join(claims_dir(run_dir), c["name"]) for c in claims}
    if claims:
        env["XCE_CLAIMS"] = " ".join(c["name"] for c in claims)
        env["XCE_CLAIMS_DIR"] = claims_dir(run_dir)
    return env


def prepare_publish(claims: list[dict[str, Any]], run_dir: str, roots: StorageRoots, as_root: bool) -> bool:
    """Mount points and RUN/mounts (root) or symlinks (not root) for each claim; True when the launcher
    has mounts to make.  RUN/mounts holds one record per claim, "ro" or "rw", the data path and the
    mount point, each field ended by a NUL byte (no path can hold one, so none is misread).

    Each claim's data path must lie inside this worker's storage roots (a forged path such as
    ``/etc`` is refused).  Nothing is chowned here: a claim's data belongs to whoever its provider
    made it for (see ``set_owner`` in simfs); the worker changes ownership of nothing it did not
    create for the run."""
    if not claims:
        return False
    base = claims_dir(run_dir)
    os.makedirs(base, mode=0o711, exist_ok=True)
    lines: list[bytes] = []
    for c in claims:
        try:
            src = roots.check(c.get("path"), f"claim {c['claim']}")
        except OutsideStorage as e:
            raise StartFailed(f"failed to start: {e}") from None
        if not os.path.isdir(src):
            raise StartFailed(f"failed to start: claim {c['claim']} has no data directory on this host ({src})")
        dst = os.path.join(base, c["name"])
        if as_root:
            os.makedirs(dst, exist_ok=True)
            lines.append(b"%s\0%s\0%s\0" % (b"ro" if c["readonly"] else b"rw", os.fsencode(src), os.fsencode(dst)))
        else:
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(src, dst)  # no mount namespace without root: a link, and the record says so
    if not as_root:
        return False
    fd = os.open(os.path.join(run_dir, MOUNTS), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(b"".join(lines))
    return True


@dataclass(frozen=True)
class RunAs:
    """The unix account a job runs as (None: the worker's own)."""

    uid: int
    gid: int
    name: str
    home: str
    groups: tuple[int, ...] = ()  # supplementary groups, as initgroups(3) gives them (the system's name services)


def expand(pattern: str, job: Dispatch) -> str:
    return (pattern.replace("%J", str(job["array_parent"] or job["job_id"]))
            .replace("%I", str(job["array_index"] or 0)))


def job_env(job: Dispatch, host: str, workspace: str, home: str) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "HOME": home, "LANG": "C.UTF-8",
           "USER": job["user"], "LOGNAME": job["user"],
           "XCE_JOBID": str(job["job_id"]), "XCE_JOB_NAME": job["name"], "XCE_QUEUE": job["queue"],
           "XCE_PROJECT": job["project"], "XCE_HOST": host, "XCE_HOSTS": " ".join(job["hosts"]),
           "XCE_SLOTS": str(job["total_slots"]), "XCE_RUN": str(job["run"]),
           "XCE_WORKSPACE": workspace}
    if job["array_index"] is not None:
        env["XCE_ARRAY_INDEX"] = str(job["array_index"])
        env["XCE_ARRAY_JOBID"] = str(job["array_parent"])
    return env


LOGIN_DEFS = "/etc/login.defs"
DEFAULT_UID_MIN = 1000


def uid_min(path: str = LOGIN_DEFS) -> int:
    """The system's first uid for people (``UID_MIN`` in login.defs; 1000 when it says nothing)."""
    try:
        with open(path, errors="replace") as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 2 and parts[0] == "UID_MIN" and parts[1].isdigit():
                    return int(parts[1])
    except OSError:
        pass
    return DEFAULT_UID_MIN


def run_as_for(user: str, host: str, allow_system: bool = False) -> RunAs:
    """The account named like the XCE user.  An XCE user called ``root`` (or ``daemon``, ``www-data``)
    must not become that account: uid 0, group 0 and uids below UID_MIN are refused unless the worker
    was started with ``--allow-system-users``."""
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise StartFailed(f"failed to start: user {user!r} has no account on {host}") from None
    if not allow_system:
        first = uid_min()
        if pw.pw_uid == 0 or pw.pw_gid == 0 or pw.pw_uid < first:
            raise StartFailed(f"failed to start: user {user!r} is a system account on {host} (uid {pw.pw_uid}, "
                              f"gid {pw.pw_gid}; people start at uid {first}): jobs do not run as root or "
                              "system accounts unless the worker runs with --allow-system-users")
    try:
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
    except OSError as e:
        raise StartFailed(f"failed to start: the groups of user {user!r} on {host}: {e.strerror}") from None
    return RunAs(uid=pw.pw_uid, gid=pw.pw_gid, name=pw.pw_name, home=pw.pw_dir, groups=groups)


def _resolve(command: str, cwd: str, path: str) -> str | None:
    if "/" in command:
        full = command if os.path.isabs(command) else os.path.join(cwd, command)
        return full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    return shutil.which(command, path=path)


@dataclass(frozen=True)
class Confinement:
    """What holds a run besides its sandbox: its cgroup, the lease its shepherd keeps it on, and what the
    worker's operator allowed (``--allow-system-users``, ``--allow-no-openat2``)."""

    cgroup: RunCgroup | None = None
    lease: str | None = None  # the worker's lease file (``control.renew_lease``); None: never fenced
    allow_system_users: bool = False
    allow_no_openat2: bool = False

    def launcher_args(self) -> list[str]:
        args = self.cgroup.launcher_args() if self.cgroup is not None else []
        if self.lease is not None:
            args += ["--lease", self.lease]
        if self.allow_system_users:
            args.append("--allow-system-user")
        if self.allow_no_openat2:
            args.append("--allow-no-openat2")
        return args


def start(job: Dispatch, host: str, run_dir: str, workspace: str, output_dir: str,
          roots: StorageRoots, run_as: RunAs | None = None, confinement: Confinement = Confinement()) -> Started:
    """Create the workspace, check what can be checked here, spawn the shepherd."""
    os.makedirs(workspace, mode=0o700, exist_ok=True)
    if run_as is not None:
        os.chown(workspace, run_as.uid, run_as.gid)
    cwd = job["cwd"] or workspace
    if not os.path.isdir(cwd):
        raise StartFailed(f"failed to start: working directory {cwd} does not exist on {host}")
    home = run_as.home if run_as else os.environ.get("HOME", "/")
    env = job_env(job, host, workspace, home)
    claims = job.get("claims") or []
    program = launcher()
    as_root = os.geteuid() == 0
    prepare_publish(claims, run_dir, roots, as_root)
    env.update(publish_env(claims, run_dir))
    if _resolve(job["command"][0], cwd, env["PATH"]) is None:
        raise StartFailed(f"failed to start: command not found: {job['command'][0]}")
    default_out = os.path.join(output_dir, f"{job['display_id']}.out")
    stdout = expand(job["stdout"], job) if job["stdout"] else default_out
    stderr = expand(job["stderr"], job) if job["stderr"] else stdout
    stdout, stderr = (p if os.path.isabs(p) else os.path.join(cwd, p) for p in (stdout, stderr))
    for p in {os.path.dirname(stdout), os.path.dirname(stderr)}:
        if not os.path.isdir(p):
            raise StartFailed(f"failed to start: output directory {p} does not exist on {host}")
    if not job["stdout"]:
        _precreate(default_out, run_as)
    pid = spawn_shepherd(launch_argv(program, run_dir, cwd, stdout, stderr, job["command"], as_root, run_as,
                                     confinement), env)
    how = ("bind" if as_root else "symlink") if claims else ""
    return Started(pid=pid, workspace=workspace, stdout=stdout, stderr=stderr, publish=how)


def spawn_shepherd(argv: list[str], env: dict[str, str]) -> int:
    """Spawn the launcher's ``argv`` in its own session; the shepherd's pid."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    try:
        return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as e:
        raise StartFailed(f"failed to start: {e.strerror}") from None


def launch_argv(program: str, run_dir: str, cwd: str, stdout: str, stderr: str, command: list[str],
                as_root: bool, run_as: RunAs | None, confinement: Confinement = Confinement()) -> list[str]:
    """The launcher's arguments for one run (see native/xce-launch.c): ``xce-shepherd RUN`` first, which
    ``shepherd_alive`` knows it by; as root a private mount namespace, with RUN/mounts bound in it."""
    argv = [program, "xce-shepherd", run_dir]
    if as_root:
        argv.append("--mount-ns")
    if run_as is not None:
        argv += ["--user", str(run_as.uid), str(run_as.gid), ",".join(map(str, run_as.groups))]
    return argv + confinement.launcher_args() + [cwd, stdout, stderr, "--", *command]


def _precreate(path: str, run_as: RunAs | None) -> None:
    """The default output file lives in the worker's directory under a guessable name: make it 0600
    (and the user's) before the job opens it, so no other user's job can read it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        if run_as is not None:
            os.fchown(fd, run_as.uid, run_as.gid)
    finally:
        os.close(fd)


def read_int(path: str) -> int | None:
    try:
        with open(path) as fh:
            text = fh.read().strip()
    except OSError:
        return None
    return int(text) if text.lstrip("-").isdigit() else None


def exit_status(status: int) -> tuple[int, int | None]:
    """The shell's status as (exit_code, signal): above 128 means killed by signal (status - 128)."""
    return status, (status - 128 if 128 < status < 128 + 65 else None)


def shepherd_alive(pid: int, run_dir: str) -> bool:
    """Is ``pid`` still this run's shepherd?  (Its command line names the run dir: no pid-reuse mistakes.)"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    return os.fsencode(run_dir) in argv and b"xce-shepherd" in argv


def _last_line(run_dir: str, name: str) -> str | None:
    try:
        with open(os.path.join(run_dir, name), errors="replace") as fh:
            lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
    except OSError:
        return None
    return lines[-1] if lines else None


def publish_error(run_dir: str) -> str | None:
    """Why the launcher could not mount a claim, from RUN/publish.err ("cannot bind SRC at DST: ...")."""
    return _last_line(run_dir, "publish.err")


def launch_error(run_dir: str) -> str | None:
    """Why the launcher could not start the job as its user, from RUN/launch.err ("cannot open output
    file /x/out: Permission denied")."""
    return _last_line(run_dir, LAUNCH_ERR)


def clean_workspace(workspace: str) -> None:
    """Mandatory cleanup: the workspace goes whatever happened to the run."""
    shutil.rmtree(workspace, ignore_errors=True)
