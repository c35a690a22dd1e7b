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

import errno
import fcntl
import os
import pwd
import shutil
import signal
import stat
import sys
from dataclasses import dataclass
from typing import Any

from xce.worker import gpus
from xce.worker.cgroups import RunCgroup
from xce.worker.storage import OutsideStorage, StorageRoots
from xce.wire import Dispatch, TaskDispatch

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

LAUNCHER = "xce-launch"
# the run's end when a claim could not be mounted (RUN/publish.err says why) or the job could not be
# launched as its user: working directory, output files (RUN/launch.err says why); as xce-launch.c
PUBLISH_FAILED = 125
LAUNCH_FAILED = 126
NOT_FOUND = 127  # the command was not found (RUN/launch.err says which), as a shell says it
MOUNTS = "mounts"
LAUNCH_ERR = "launch.err"
ENV = "env"  # RUN/env: the job's environment (write_env)
SCRIPT = "script"  # RUN/script: a submitted script (command_argv)
SHELL = "/bin/sh"


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
    report: int | None = None  # the read end of the shepherd's --report pipe (``notes`` reads and closes it)

    def notes(self) -> str:
        """What the job noted before its command's exec ("the submission directory ... cannot be entered
        on this host ..."), one note a line; waits for the exec (or the job's failure to get there)."""
        if self.report is None:
            return ""
        chunks = []
        try:
            while chunk := os.read(self.report, 65536):
                chunks.append(chunk)
        finally:
            os.close(self.report)
            self.report = None
        lines = b"".join(chunks).decode(errors="replace").splitlines()
        return "\n".join(line[len(NOTE):] for line in lines if line.startswith(NOTE))


NOTE = "note: "  # how the launcher's notes begin (its failures do not)


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
    _write_new(os.path.join(run_dir, MOUNTS), b"".join(lines), 0o600)
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


# what the submitter's environment never sets in a job: who the job runs as is the execution host's
# account, and a shell finds its directory itself (the job may start elsewhere: its workspace)
# and which GPUs it sees is the run's (a job submitted from inside a GPU job must not inherit its GPUs)
HOST_OWNED = frozenset({"HOME", "USER", "LOGNAME", "PWD", "OLDPWD", *gpus.GPU_VARIABLES})
# XCE's variables that may go with a job (where its cluster is); the others are the job's own, set
# here, and one submitted from inside another job must not inherit its parent's (XCE_ARRAY_INDEX...)
XCE_PASSED = frozenset({"XCE_CONFIG", "XCE_URL", "XCE_LOG_LEVEL"})
HOSTFILE = "hostfile"  # RUN/hostfile: LSB_DJOB_HOSTFILE, one line per slot


_JOBS_OWN = ("XCE_", "LSB_")  # (LSF's job variables and XCE's: this job's, set in job_env)


def _submitted(given: dict[str, str]) -> dict[str, str]:
    """The submitter's variables that may go into the job's environment: none the host owns, and of
    XCE's and LSF's job variables only ``XCE_PASSED`` (one comprehension, not a call a variable: a run's
    start pays it for every variable of the submitter's)."""
    return {k: v for k, v in given.items() if (k not in HOST_OWNED and not k.startswith(_JOBS_OWN)) or k in XCE_PASSED}


def lsf_env(job: Dispatch, hostfile: str | None) -> dict[str, str]:
    """LSF's job variables, as the tools written for LSF read them: ``LSB_JOBID`` is an array's id in
    its elements (``LSB_JOBINDEX`` says which, 0 outside arrays); ``LSB_HOSTS`` names a host once per
    slot, ``LSB_MCPU_HOSTS`` each host and its slots."""
    slots = job.get("alloc_slots") or {h: job["total_slots"] if i == 0 else 0 for i, h in enumerate(job["hosts"])}
    per_host = [(h, int(slots.get(h, 0))) for h in job["hosts"]]
    index = job["array_index"]
    env = {"LSB_JOBID": str(job["array_parent"] if index is not None else job["job_id"]),
           "LSB_JOBINDEX": str(index or 0),
           "LSB_JOBNAME": f"{job['name']}[{index}]" if index is not None else job["name"],
           "LSB_QUEUE": job["queue"],
           "LSB_HOSTS": " ".join(h for h, n in per_host for _ in range(n)),
           "LSB_MCPU_HOSTS": " ".join(f"{h} {n}" for h, n in per_host),
           "LSB_DJOB_NUMPROC": str(job["total_slots"])}
    if hostfile is not None:
        env["LSB_DJOB_HOSTFILE"] = hostfile
    return env


def write_hostfile(run_dir: str, job: Dispatch) -> str:
    """RUN/hostfile: the job's hosts, a line per slot (``LSB_DJOB_HOSTFILE``); readable by the job."""
    path = os.path.join(run_dir, HOSTFILE)
    _write_new(path, "".join(f"{h}\n" for h in lsf_env(job, None)["LSB_HOSTS"].split()).encode(), 0o644)
    return path


def _write_new(path: str, data: bytes, mode: int) -> None:
    """``data`` in the file ``path`` (made ``mode``, or emptied), in one write, following no link there."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def job_env(job: Dispatch, host: str, workspace: str, home: str, hostfile: str | None = None,
            submitted: dict[str, str] | None = None) -> dict[str, str]:
    """The job's environment: a clean base, the submitter's variables over it (as the controller kept
    them: private ones and tokens are gone; a task's: its blaunch caller's), then the account's, LSF's and
    XCE's own, which none overrides."""
    env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
    given = job.get("env") if submitted is None else submitted
    if given:
        env.update(_submitted(given))
    env.update(lsf_env(job, hostfile))
    env.update({"HOME": home, "USER": job["user"], "LOGNAME": job["user"],
                # an element's: its array's id, as %J and LSB_JOBID say (the element: $XCE_JOBID[$XCE_ARRAY_INDEX])
                "XCE_JOBID": str(job["array_parent"] if job["array_index"] is not None else job["job_id"]),
                "XCE_JOB_NAME": job["name"], "XCE_QUEUE": job["queue"],
                "XCE_PROJECT": job["project"], "XCE_HOST": host, "XCE_HOSTS": " ".join(job["hosts"]),
                "XCE_SLOTS": str(job["total_slots"]), "XCE_RUN": str(job["run"]),
                "XCE_WORKSPACE": workspace})
    env.update(gpus.job_env(job.get("gpus") or []))  # its GPUs only (CUDA_VISIBLE_DEVICES)
    if job["array_index"] is not None:
        env["XCE_ARRAY_INDEX"] = str(job["array_index"])
        env["XCE_ARRAY_JOBID"] = str(job["array_parent"])
    return env


def write_env(run_dir: str, env: dict[str, str]) -> None:
    """RUN/env, the job's environment as the launcher reads it: NUL-ended NAME=VALUE records, 0600 in
    the run directory (no user can write it, nor read another's)."""
    text = "".join(f"{k}={v}\0" for k, v in env.items() if k and "=" not in k and "\0" not in k and "\0" not in v)
    _write_new(os.path.join(run_dir, ENV), os.fsencode(text), 0o600)  # (os.fsencode: as os.environ encodes)


# -E and -Ep (LSF's pre- and post-execution commands): the job's command run between them by a shell, as
# the job, in its sandbox and cgroup (a kill ends all three; a killed run runs no post-exec).  What became
# of them is left in the workspace (STEPS_FILE: "pre CODE", a failed pre-exec, or "post CODE"), read by the
# worker as root before the workspace goes (``exec_steps``): a job that writes it itself fools only itself.
STEPS_FILE = ".xce-exec-steps"
STEPS = f"""pre=$XCE_PRE_EXEC post=$XCE_POST_EXEC
unset XCE_PRE_EXEC XCE_POST_EXEC
if [ -n "$pre" ]; then
  /bin/sh -c "$pre"; s=$?
  if [ "$s" -ne 0 ]; then echo "pre $s" > "$XCE_WORKSPACE/{STEPS_FILE}"; exit "$s"; fi
fi
[ -z "$post" ] && exec "$@"
"$@"; s=$?
LSB_JOBEXIT_STAT=$s /bin/sh -c "$post"
echo "post $?" > "$XCE_WORKSPACE/{STEPS_FILE}"
exit "$s"
"""


def read_output(pid: int, offset: int, limit: int) -> tuple[int, int, bytes]:
    """What a run's process has written to its standard output, from ``offset`` (-1: the last ``limit``
    bytes): (where the data starts, the output's size, at most ``limit`` bytes).  Read through the
    process (``/proc/PID/fd/1``: the file the job opened itself, as its user), never by a path: the job's
    output path is the user's to change, and root follows none.  Only a regular file (a FIFO or a
    terminal would block, or be consumed)."""
    fd = os.open(f"/proc/{pid}/fd/1", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "its output is not a regular file")
        start = max(0, st.st_size - limit) if offset < 0 else min(offset, st.st_size)
        return start, st.st_size, os.pread(fd, limit, start)
    finally:
        os.close(fd)


def exec_steps(workspace: str) -> tuple[int | None, int | None]:
    """(a failed pre-exec's exit code, the post-exec's exit code), each None if there was none, as the
    run left them in its workspace: opened without following a link, only a small regular file (a
    FIFO the job made there would block a read)."""
    try:
        fd = os.open(os.path.join(workspace, STEPS_FILE), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None, None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, None
        words = os.read(fd, 64).decode(errors="replace").split()
    finally:
        os.close(fd)
    if len(words) != 2 or words[0] not in ("pre", "post") or not words[1].isdigit() or int(words[1]) > 255:
        return None, None
    code = int(words[1])
    return (code, None) if words[0] == "pre" else (None, code)


def command_argv(job: Dispatch, run_dir: str, run_as: RunAs | None) -> list[str]:
    """What the launcher execs: the argument vector as submitted, a command line through
    ``/bin/sh -c``, or the submitted script, written to RUN/script (the user's, 0700) and run with its
    ``#!`` interpreter (the kernel reads it) or ``/bin/sh``, whether the file it came from was
    executable or not."""
    command = list(job["command"])
    if job.get("shell"):
        return [SHELL, "-c", command[0]]
    script = job.get("script")
    if script is None:
        return command
    path = os.path.join(run_dir, SCRIPT)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o700)
    try:
        if run_as is not None:
            os.fchown(fd, run_as.uid, run_as.gid)
        os.write(fd, script.encode())
    finally:
        os.close(fd)
    return [path, *command] if script.startswith("#!") else [SHELL, path, *command]


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


@dataclass(frozen=True)
class Confinement:
    """What holds a run besides its sandbox: its cgroup, the lease its shepherd keeps it on, and what the
    worker's operator allowed (``--allow-system-users``, ``--allow-no-openat2``)."""

    cgroup: RunCgroup | None = None
    # a task's (blaunch) on its run's first host: it joins the run's cgroup, which the run's shepherd
    # controls (freezes, and kills with the run); its own shepherd signals its process group
    joins: RunCgroup | None = None
    lease: str | None = None  # the worker's lease file (``control.renew_lease``); None: never fenced
    allow_system_users: bool = False
    allow_no_openat2: bool = False

    def launcher_args(self) -> list[str]:
        args = self.cgroup.launcher_args() if self.cgroup is not None else []
        if self.joins is not None:
            args += [a for d in self.joins.dirs for a in ("--cgroup-join", d)]
        if self.lease is not None:
            args += ["--lease", self.lease]
        if self.allow_system_users:
            args.append("--allow-system-user")
        if self.allow_no_openat2:
            args.append("--allow-no-openat2")
        return args


def start(job: Dispatch, host: str, run_dir: str, workspace: str, output_dir: str,
          roots: StorageRoots, run_as: RunAs | None = None, confinement: Confinement = Confinement(),
          own_env: dict[str, str] | None = None, task: TaskDispatch | None = None,
          output: tuple[str, str] | None = None, hold: int | None = None, stdin: str | None = None) -> Started:
    """Create the workspace, write what the launcher reads, spawn the shepherd.  The working directory
    and the command are the launcher's to find, as the job's user: the worker (root) follows no path a
    user chose, and says only what it checked itself.  The job starts in ``cwd`` (``--cwd``: it must
    exist), else in the submission directory (``submit_dir``) or, where its user cannot enter that, in its
    workspace (the launcher notes it: ``Started.notes``).  ``own_env``: what this start adds to the job's
    environment (its rendezvous, its secret).  A ``task`` of the run (``blaunch``) runs its command line
    in the run's sandbox on this host: the same user, environment, claims and workspace, starting where
    blaunch was called (else as the run).  ``output``: the files its stdout and stderr go to instead of the
    job's (a task's spool, relayed to its blaunch: ``relay``).  ``hold``: an open file the shepherd keeps as
    long as it lives (the lock of the run's rendezvous port: ``rendezvous.Ports``); ``stdin``: the FIFO a
    task reads (its blaunch's input: ``relay``), else the job reads nothing (/dev/null)."""
    try:
        os.mkdir(workspace, 0o700)
    except FileExistsError:
        pass  # (a task's: its run made it)
    except FileNotFoundError:
        os.makedirs(workspace, mode=0o700, exist_ok=True)
    if run_as is not None:
        os.chown(workspace, run_as.uid, run_as.gid)
    cwd = (task["cwd"] if task else "") or job["cwd"] or job.get("submit_dir") or workspace
    fallback = workspace if cwd != workspace and (task or not job["cwd"]) else None
    home = run_as.home if run_as else os.environ.get("HOME", "/")
    env = job_env(job, host, workspace, home, write_hostfile(run_dir, job), task["env"] or {} if task else None)
    env.update(own_env or {})
    claims = job.get("claims") or []
    program = launcher()
    as_root = os.geteuid() == 0
    prepare_publish(claims, run_dir, roots, as_root)
    env.update(publish_env(claims, run_dir))
    command = [SHELL, "-c", task["command"]] if task else command_argv(job, run_dir, run_as)
    if not task and (job.get("pre_exec") or job.get("post_exec")):
        env.update({"XCE_PRE_EXEC": job.get("pre_exec") or "", "XCE_POST_EXEC": job.get("post_exec") or ""})
        command = [SHELL, "-c", STEPS, "xce-job", *command]
    write_env(run_dir, env)
    if output is not None:
        stdout, stderr = output
    else:
        stdout, stderr = _output_files(job, host, cwd, output_dir, run_as)
    argv = launch_argv(program, run_dir, cwd, stdout, stderr, command, as_root, run_as, confinement,
                       cwd_fallback=fallback, report=True, hold=hold is not None, stdin=stdin)
    read_end, write_end = _report_pipe()
    try:
        # the launcher (root) runs with no user's environment
        pid = spawn_shepherd(argv, {}, report=write_end, hold=hold)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    how = ("bind" if as_root else "symlink") if claims else ""
    return Started(pid=pid, workspace=workspace, stdout=stdout, stderr=stderr, publish=how, report=read_end)


def _output_files(job: Dispatch, host: str, cwd: str, output_dir: str, run_as: RunAs | None) -> tuple[str, str]:
    """The job's stdout and stderr files (``-o``, ``-e``: ``%J`` and ``%I`` expanded, relative to its
    working directory), its default output made safe first."""
    default_out = os.path.join(output_dir, f"{job['display_id']}.out")
    stdout = expand(job["stdout"], job) if job["stdout"] else default_out
    stderr = expand(job["stderr"], job) if job["stderr"] else stdout
    stdout, stderr = (p if os.path.isabs(p) else os.path.join(cwd, p) for p in (stdout, stderr))
    for p in {os.path.dirname(stdout), os.path.dirname(stderr)}:
        if not os.path.isdir(p):
            raise StartFailed(f"failed to start: output directory {p} does not exist on {host}")
    if not job["stdout"]:
        _precreate(default_out, run_as)
    return stdout, stderr


REPORT_FD = 3  # the shepherd's --report descriptor
HOLD_FD = 4  # the shepherd's --hold descriptor (the file it keeps open: rendezvous.Ports' lock)


def _report_pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose write end is not ``REPORT_FD`` itself (a dup onto the same number
    would leave it close-on-exec in the shepherd).  Only the shepherd it is handed to gets it: a run
    started meanwhile by another thread must not hold it open."""
    read_end, write_end = os.pipe()
    if write_end == REPORT_FD:
        moved = fcntl.fcntl(write_end, fcntl.F_DUPFD_CLOEXEC, REPORT_FD + 1)
        os.close(write_end)
        write_end = moved
    return read_end, write_end


def spawn_shepherd(argv: list[str], env: dict[str, str], report: int | None = None, hold: int | None = None) -> int:
    """Spawn the launcher's ``argv`` in its own session, ``report`` (a pipe's write end) as its
    ``REPORT_FD`` and ``hold`` as its ``HOLD_FD`` (neither may be those numbers: they are dup'd onto them);
    the shepherd's pid."""
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
               (os.POSIX_SPAWN_DUP2, 1, 2)]
    if report is not None:
        actions.append((os.POSIX_SPAWN_DUP2, report, REPORT_FD))
    if hold is not None:
        actions.append((os.POSIX_SPAWN_DUP2, hold, HOLD_FD))
    try:
        return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as e:
        raise StartFailed(f"failed to start: {e.strerror}") from None


def launch_argv(program: str, run_dir: str, cwd: str, stdout: str, stderr: str, command: list[str],
                as_root: bool, run_as: RunAs | None, confinement: Confinement = Confinement(), *,
                cwd_fallback: str | None = None, report: bool = False, hold: bool = False,
                stdin: str | None = None) -> list[str]:
    """The launcher's arguments for one run (see native/xce-launch.c): ``xce-shepherd RUN`` first, which
    ``shepherd_alive`` knows it by; as root a private mount namespace, with RUN/mounts bound in it;
    ``cwd_fallback``: where the job starts if its user cannot enter ``cwd``; ``report``: the shepherd says on
    ``REPORT_FD`` when the command was exec'd (``spawn_shepherd``'s ``report``)."""
    argv = [program, "xce-shepherd", run_dir]
    if as_root:
        argv.append("--mount-ns")
    if run_as is not None:
        argv += ["--user", str(run_as.uid), str(run_as.gid), ",".join(map(str, run_as.groups))]
    argv += confinement.launcher_args()
    if cwd_fallback is not None:
        argv += ["--cwd-fallback", cwd_fallback]
    if report:
        argv += ["--report", str(REPORT_FD)]
    if hold:
        argv += ["--hold", str(HOLD_FD)]
    if stdin is not None:
        argv += ["--stdin", stdin]
    return argv + [cwd, stdout, stderr, "--", *command]


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
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        text = os.read(fd, 64).strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    return int(text) if text.lstrip(b"-").isdigit() else None


def kill_group(run_dir: str) -> None:
    """SIGKILL to what a run (or task) whose shepherd is gone left in its process group (RUN/pgid)."""
    pgid = read_int(os.path.join(run_dir, "pgid"))
    if pgid is not None:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


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
    file /x/out: Permission denied", "command not found: ./train.sh"); a note is no failure."""
    line = _last_line(run_dir, LAUNCH_ERR)
    return None if line is None or line.startswith(NOTE) else line


def clean_workspace(workspace: str) -> None:
    """Mandatory cleanup: the workspace goes whatever happened to the run."""
    remove_tree(workspace)


def remove_tree(path: str) -> None:
    """The directory ``path`` and all in it, gone (what cannot be removed is left).  A run's directories
    hold a few files and most workspaces nothing: those are unlinked in one pass through the directory's
    descriptor (a link a user left there is removed, never followed), and ``shutil.rmtree``'s careful
    walk (a descriptor and an fstat per entry) is left to subdirectories."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        return
    rest = False
    try:
        for name in os.listdir(fd):
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:  # a directory (EISDIR), or a file root may not remove (an immutable one)
                rest = True
    finally:
        os.close(fd)
    if not rest:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            pass  # (something appeared in it meanwhile)
    shutil.rmtree(path, ignore_errors=True)
