"""Start one job run in its sandbox, under a shepherd that outlives the worker.

Process chain (every step an ``exec`` except the shepherd's one fork for the job)::

    worker --posix_spawn--> shepherd (sh, own session)
        └── setsid                                       the job's own session and process group
              [unshare --mount --propagation private]    as root: a private mount namespace
              sh JOB: echo $$ > RUN/pgid                 (as root: the worker reads it to signal the group)
                      [mount -a -T RUN/fstab]            claims: one bind mount each, read-only where required
                      then as the worker's user: LAUNCH in this same shell;
                      as the submitting user: exec setpriv --reuid U --regid G --init-groups -- sh LAUNCH
              LAUNCH: cd CWD, open stdout/stderr as that user, exec CMD

Every exec costs a job about a millisecond of CPU on the worker host, and
``mount`` (libmount) more, so the chain is as short as the guarantees let it
be: one root shell records the process group, mounts and (without
``--run-as-users``) launches; all claims are mounted by one ``mount -a`` over
an fstab the worker wrote into the run directory, from paths it checked
(``mount -a`` does a read-only bind as bind + read-only remount itself).
Not bubblewrap (``bwrap``), although its one exec is cheaper still: it sets
``no_new_privs`` on every sandbox, unconditionally, and a job could then no
longer use setuid programs (``sudo``, ``fusermount3``) or file capabilities.

The shepherd waits for the job and writes its exit status to ``RUN/status``.
It never gets a signal from the worker (kills go to the job's process
group), so when the worker restarts, a run that is still going is adopted,
and one that ended while no worker was there is reported with its real
status.  ``RUN`` is the run's directory under the worker's ``runs/``.
``RUN/pgid`` is written after ``setsid``: once it exists, the group does.

Signals: the job is not started from an asynchronous list, so it does not
inherit ignored SIGINT/SIGQUIT.  A status above 128 is reported the shell's
way: killed by signal (status - 128).
"""

from __future__ import annotations

import os
import pwd
import shutil
from dataclasses import dataclass
from typing import Any

from xce.worker.storage import OutsideStorage, StorageRoots

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# $1 = run dir; the rest is the job's chain.  Waits for the job, records how it ended.
SHEPHERD = 'run=$1; shift; echo $$ > "$run/shepherd.pid"; "$@"; echo $? > "$run/status"'
# $1 = run dir (as root, after setsid): record the job's pid, which is its process group
MARK = 'echo $$ > "$1/pgid"; '
# as root, in the job's private mount namespace: bind-mount every claim (read-only where required) at
# the path XCE chose for it, as RUN/fstab lists them.  A failure is written to RUN/publish.err and
# ends the run with PUBLISH_FAILED.
PUBLISH_FAILED = 125
FSTAB = "fstab"
PUBLISH = f'mount -a -T "$1/{FSTAB}" 2>>"$1/publish.err" || exit {PUBLISH_FAILED}; '
# runs as the job's user: cwd, output files opened with the user's rights, then the command.  Fd 3 is
# RUN/launch.err, opened by the worker (the user cannot write the run dir): the shell's own message and
# ours go there, and the job never sees it.  ``command exec`` so that a failed redirection does not
# end the shell (status 2, no word) before it can say which file it was.
LAUNCH_FAILED = 126
LAUNCH = ('exec 2>&3; cd -- "$1" || { echo "cannot enter working directory $1" >&3; exit 126; }; '
          'command exec >>"$2" || { echo "cannot open output file $2" >&3; exit 126; }; '
          'if [ "$3" = "$2" ]; then exec 2>&1; '
          'else command exec 2>>"$3" || { echo "cannot open output file $3" >&3; exit 126; }; fi; '
          'exec 3>&-; shift 3; exec "$@"')
LAUNCH_ERR = "launch.err"


def job_script(publish: bool, then_exec: bool) -> str:
    """The root shell after setsid (and unshare): MARK, PUBLISH when there are claims, then either
    LAUNCH itself (``then_exec`` false: the job runs as the worker's user) or ``exec "$@"`` (setpriv
    and the user's LAUNCH).  Args: RUN, then LAUNCH's (CWD STDOUT STDERR CMD...) or the chain."""
    return MARK + (PUBLISH if publish else "") + "shift; " + ('exec "$@"' if then_exec else LAUNCH)


class StartFailed(Exception):
    """The run could not be started (its command does not exist, its cwd is missing...)."""


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


def fstab_field(path: str) -> bytes:
    """``path`` as one fstab field: whitespace, control bytes and backslashes as ``\\ooo`` octal,
    which libmount reads back (a path with a space must not become two fields, nor a newline two
    lines); every other byte as it is."""
    return b"".join(b"\\%03o" % c if c <= 0x20 or c in (0x5C, 0x7F) else bytes((c,)) for c in os.fsencode(path))


def prepare_publish(claims: list[dict[str, Any]], run_dir: str, roots: StorageRoots, as_root: bool) -> bool:
    """Mount points and RUN/fstab (root) or symlinks (not root) for each claim; True when PUBLISH has
    mounts to make.

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
            lines.append(b"%s %s none bind,%s 0 0\n" % (fstab_field(src), fstab_field(dst),
                                                        b"ro" if c["readonly"] else b"rw"))
        else:
            if os.path.lexists(dst):
                os.unlink(dst)
            os.symlink(src, dst)  # no mount namespace without root: a link, and the record says so
    if not as_root:
        return False
    fd = os.open(os.path.join(run_dir, FSTAB), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
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


def expand(pattern: str, job: dict[str, Any]) -> str:
    return (pattern.replace("%J", str(job["array_parent"] or job["job_id"]))
            .replace("%I", str(job["array_index"] or 0)))


def job_env(job: dict[str, Any], host: str, workspace: str, home: str) -> dict[str, str]:
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
    return RunAs(uid=pw.pw_uid, gid=pw.pw_gid, name=pw.pw_name, home=pw.pw_dir)


def _resolve(command: str, cwd: str, path: str) -> str | None:
    if "/" in command:
        full = command if os.path.isabs(command) else os.path.join(cwd, command)
        return full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    return shutil.which(command, path=path)


def start(job: dict[str, Any], host: str, run_dir: str, workspace: str, output_dir: str,
          roots: StorageRoots, run_as: RunAs | None = None) -> Started:
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
    as_root = os.geteuid() == 0 and shutil.which("unshare") is not None
    publish = prepare_publish(claims, run_dir, roots, as_root)
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
    pid = spawn_shepherd(run_dir, job_chain(run_dir, cwd, stdout, stderr, job["command"], as_root, publish, run_as),
                         env)
    how = ("bind" if as_root else "symlink") if claims else ""
    return Started(pid=pid, workspace=workspace, stdout=stdout, stderr=stderr, publish=how)


def spawn_shepherd(run_dir: str, chain: list[str], env: dict[str, str]) -> int:
    """Spawn the shepherd of ``chain`` in its own session; its pid.  Fd 3 is RUN/launch.err (LAUNCH)."""
    argv = ["/bin/sh", "-c", SHEPHERD, "xce-shepherd", run_dir, *chain]
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
               (os.POSIX_SPAWN_DUP2, 1, 2),
               (os.POSIX_SPAWN_OPEN, 3, os.path.join(run_dir, LAUNCH_ERR),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)]
    try:
        return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as e:
        raise StartFailed(f"failed to start: {e.strerror}") from None


def job_chain(run_dir: str, cwd: str, stdout: str, stderr: str, command: list[str], as_root: bool,
              publish: bool, run_as: RunAs | None) -> list[str]:
    """The job's chain of execs, from ``setsid`` to its command (see the module docstring)."""
    chain = [shutil.which("setsid") or "/usr/bin/setsid"]
    if as_root:
        chain += [shutil.which("unshare") or "/usr/bin/unshare", "--mount", "--propagation", "private", "--"]
    launch = [cwd, stdout, stderr, *command]
    chain += ["/bin/sh", "-c", job_script(publish, run_as is not None), "xce-job", run_dir]
    if run_as is None:
        return chain + launch
    return chain + [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={run_as.uid}",
                    f"--regid={run_as.gid}", "--init-groups", "--", "/bin/sh", "-c", LAUNCH, "xce-job", *launch]


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


def publish_error(run_dir: str) -> str | None:
    """What ``mount`` said last, from RUN/publish.err: its last unindented line (the indented one
    after it is libmount's "dmesg(1) may have more information" hint, which says nothing)."""
    try:
        with open(os.path.join(run_dir, "publish.err"), errors="replace") as fh:
            lines = [ln for ln in fh.read().splitlines() if ln.strip()]
    except OSError:
        return None
    said = [ln for ln in lines if not ln[:1].isspace()]
    return (said or lines)[-1].strip() if lines else None


def launch_error(run_dir: str) -> str | None:
    """Why LAUNCH could not start the job, from RUN/launch.err: our line, with the reason the
    shell gave before it ("cannot open output file /x/out: Permission denied")."""
    try:
        with open(os.path.join(run_dir, LAUNCH_ERR), errors="replace") as fh:
            lines = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
    except OSError:
        return None
    if not lines:
        return None
    ours = lines[-1]
    if len(lines) > 1 and ": " in lines[-2]:
        reason = lines[-2].rsplit(": ", 1)[1]  # dash: "cannot create X: Permission denied"
        if reason.startswith("can't cd to"):  # dash does not say why; the path is in our line
            return ours
        return f"{ours}: {reason}"
    return ours


def clean_workspace(workspace: str) -> None:
    """Mandatory cleanup: the workspace goes whatever happened to the run."""
    shutil.rmtree(workspace, ignore_errors=True)
