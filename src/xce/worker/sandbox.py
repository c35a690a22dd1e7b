"""Start one job run in its sandbox with ``os.posix_spawn`` (never fork: the worker has threads).

The sandbox is a per-run workspace directory (the job's cwd unless it asked
for ``--cwd``), its own session and process group (so a kill reaches every
process it started) and, when the worker runs as root, its own mount
namespace (``unshare --mount``), where claims will be published.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# cd into the job's directory, then become the command (the shell is gone after exec)
_LAUNCH = 'cd -- "$1" || exit 126; shift; exec "$@"'


class StartFailed(Exception):
    """The run could not be started (its command does not exist, its cwd is missing...)."""


@dataclass
class Started:
    pid: int
    workspace: str
    stdout: str
    stderr: str


def expand(pattern: str, job: dict[str, Any]) -> str:
    return (pattern.replace("%J", str(job["array_parent"] or job["job_id"]))
            .replace("%I", str(job["array_index"] or 0)))


def job_env(job: dict[str, Any], host: str, workspace: str) -> dict[str, str]:
    env = {"PATH": DEFAULT_PATH, "HOME": os.environ.get("HOME", "/"), "LANG": "C.UTF-8",
           "USER": job["user"], "LOGNAME": job["user"],
           "XCE_JOBID": str(job["job_id"]), "XCE_JOB_NAME": job["name"], "XCE_QUEUE": job["queue"],
           "XCE_PROJECT": job["project"], "XCE_HOST": host, "XCE_HOSTS": " ".join(job["hosts"]),
           "XCE_SLOTS": str(job["total_slots"]), "XCE_RUN": str(job["run"]),
           "XCE_WORKSPACE": workspace}
    if job["array_index"] is not None:
        env["XCE_ARRAY_INDEX"] = str(job["array_index"])
        env["XCE_ARRAY_JOBID"] = str(job["array_parent"])
    return env


def _resolve(command: str, cwd: str, path: str) -> str | None:
    if "/" in command:
        full = command if os.path.isabs(command) else os.path.join(cwd, command)
        return full if os.path.isfile(full) and os.access(full, os.X_OK) else None
    return shutil.which(command, path=path)


def start(job: dict[str, Any], host: str, workspace: str, output_dir: str) -> Started:
    os.makedirs(workspace, mode=0o700, exist_ok=True)
    cwd = job["cwd"] or workspace
    if not os.path.isdir(cwd):
        raise StartFailed(f"failed to start: working directory {cwd} does not exist on {host}")
    env = job_env(job, host, workspace)
    if _resolve(job["command"][0], cwd, env["PATH"]) is None:
        raise StartFailed(f"failed to start: command not found: {job['command'][0]}")
    default_out = os.path.join(output_dir, f"{job['display_id']}.out")
    stdout = expand(job["stdout"], job) if job["stdout"] else default_out
    stderr = expand(job["stderr"], job) if job["stderr"] else stdout
    stdout, stderr = (p if os.path.isabs(p) else os.path.join(cwd, p) for p in (stdout, stderr))
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    actions = [(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
               (os.POSIX_SPAWN_OPEN, 1, stdout, flags, 0o644)]
    actions.append((os.POSIX_SPAWN_DUP2, 1, 2) if stderr == stdout else
                   (os.POSIX_SPAWN_OPEN, 2, stderr, flags, 0o644))
    argv = ["/bin/sh", "-c", _LAUNCH, "xce-job", cwd, *job["command"]]
    if os.geteuid() == 0 and (unshare := shutil.which("unshare")):
        argv = [unshare, "--mount", "--propagation", "private", "--", *argv]
    for p in {os.path.dirname(stdout), os.path.dirname(stderr)}:
        if not os.path.isdir(p):
            raise StartFailed(f"failed to start: output directory {p} does not exist on {host}")
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)
    except OSError as e:
        raise StartFailed(f"failed to start: {e.strerror}") from None
    return Started(pid=pid, workspace=workspace, stdout=stdout, stderr=stderr)


def clean_workspace(workspace: str) -> None:
    """Mandatory cleanup: the workspace goes whatever happened to the run."""
    shutil.rmtree(workspace, ignore_errors=True)
