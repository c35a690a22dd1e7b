"""Stage-in and stage-out: the node agent copies files into a job's staging claim and out of it.

Every copy runs as the submitting user when the worker runs jobs as their
users (``--run-as-users``, root): sources are read only if that user may
read them, destinations written only where that user may write.  Otherwise
the copy runs as the worker's own user, and says so in its message.  A copy
is a child process (``posix_spawn``: the worker has threads), bounded by a
timeout.  Permission problems and missing sources are permanent errors (a
retry cannot fix them); anything else is retryable.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

from xce.providers.contract import ProviderReply
from xce.worker.sandbox import RunAs, StartFailed, run_as_for
from xce.worker.storage import OutsideStorage, StorageRoots

COPY_TIMEOUT = 3600.0
# $1 source, $2 destination: the destination's directory is made, then the copy (recursive)
COPY = 'mkdir -p -- "$(dirname -- "$2")" && cp -R -- "$1" "$2"'
# every argument's apparent size in bytes, one line each
MEASURE = 'exec du -s -b -- "$@"'


def _spawn(script: str, args: list[str], run_as: RunAs | None, timeout: float) -> tuple[int, str, str]:
    """``sh -c SCRIPT`` with ``args``, as ``run_as`` when given: (exit code, stdout, stderr)."""
    argv = ["/bin/sh", "-c", script, "xce-stage", *args]
    if run_as is not None:
        argv = [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={run_as.uid}", f"--regid={run_as.gid}",
                "--init-groups", "--", *argv]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin", "LANG": "C"},
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out_w, 1),
                                           (os.POSIX_SPAWN_DUP2, err_w, 2)], setsid=True)
    finally:
        os.close(out_w)
        os.close(err_w)
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    for fd in chunks:
        os.set_blocking(fd, False)

    def drain() -> None:
        for fd, got in chunks.items():
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                got.append(chunk)

    try:
        while True:
            drain()
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.killpg(pid, 9)
                os.waitpid(pid, 0)
                return 124, "", f"timed out after {timeout:g}s"
            time.sleep(0.02)
        drain()
    finally:
        os.close(out_r)
        os.close(err_r)
    text = [b"".join(chunks[fd]).decode(errors="replace").strip() for fd in (out_r, err_r)]
    return os.waitstatus_to_exitcode(status), text[0], text[1]


def _spawn_copy(src: str, dest: str, run_as: RunAs | None, timeout: float) -> tuple[int, str]:
    code, _, err = _spawn(COPY, [src, dest], run_as, timeout)
    return code, ("copy " + err if code == 124 and err.startswith("timed out") else err)


def _staged_bytes(sources: list[str], run_as: RunAs | None) -> int | None:
    """How much the stage-in sources hold, measured as the user who may read them (None: some of
    them cannot be measured; the copy will say why)."""
    code, out, _ = _spawn(MEASURE, sources, run_as, 600.0)
    if code != 0:
        return None
    try:
        return sum(int(line.split()[0]) for line in out.splitlines() if line.strip())
    except (ValueError, IndexError):
        return None


def _who(run_as: RunAs | None) -> str:
    return f"as {run_as.name}" if run_as is not None else f"as the worker's user (uid {os.geteuid()})"


def _unreadable_source(err: str, src: str, dest: str) -> bool:
    """Did the copy fail because the user cannot reach ``src`` (missing, or a directory on the way or
    the file itself closed to them)?  cp names the path it failed on: the source, not the destination."""
    first = err.splitlines()[0] if err else ""
    return (src in first and dest not in first
            and ("No such file" in first or "Permission denied" in first))


def run_stage_op(item: dict[str, Any], host: str, run_as_users: bool, roots: StorageRoots,
                 timeout: float = COPY_TIMEOUT, allow_system_users: bool = False) -> ProviderReply:
    """One stage_in or stage_out op of the node agent: every item copied, or an error reply.

    The staging area must be inside this worker's storage roots (a forged path is refused for
    good); it already belongs to the job's user (its provider made it so), so nothing is chowned."""
    op_id, op = item["op_id"], item["op"]
    try:
        base = roots.check(item.get("path"), f"the staging claim {item.get('claim_name', '')}".rstrip())
    except OutsideStorage as e:
        return ProviderReply(op_id=op_id, ok=False, error_code="PERMISSION_DENIED", retryable=False, message=str(e))
    if not os.path.isdir(base):
        return ProviderReply(op_id=op_id, ok=False, error_code="NOT_FOUND", retryable=True,
                             message=f"the staging claim has no directory on {host} ({base})")
    try:
        run_as = run_as_for(item["user"], host, allow_system_users) if run_as_users else None
    except StartFailed as e:
        return ProviderReply(op_id=op_id, ok=False, error_code="NO_ACCOUNT", retryable=False,
                             message=str(e).removeprefix("failed to start: "))
    what = op.replace("_", "-")
    if op == "stage_in" and item.get("size_bytes"):  # (0: a staging claim made before sizes were reserved)
        # the staging area's room was reserved on this host's scratch: copy nothing that does not fit
        size = _staged_bytes([src for src, _ in item.get("items") or []], run_as)
        if size is not None and size > item["size_bytes"]:
            return ProviderReply(op_id=op_id, ok=False, error_code="RESOURCE_EXHAUSTED", retryable=False,
                                 message=f"stage-in of {size} bytes does not fit the staging area's "
                                         f"{item['size_bytes']} bytes (submit with a larger --stage-size)")
    for src, dest in item.get("items") or []:
        if op == "stage_in":
            src_path, dest_path = src, os.path.join(base, dest)
        else:
            src_path, dest_path = os.path.join(base, src), dest
        # as the worker's own user, existence tells nothing; as the job's user, the worker (root) must
        # not answer "does not exist" where the user would meet "Permission denied": the copy, run as
        # the user, is what finds out, and both answers are one (below)
        if run_as is None and not os.path.lexists(src_path):  # a retry cannot make it appear
            return ProviderReply(op_id=op_id, ok=False, error_code="NOT_FOUND", retryable=False,
                                 message=f"{what}: {src_path} does not exist")
        code, err = _spawn_copy(src_path, dest_path, run_as, timeout)
        if code != 0 and run_as is not None and _unreadable_source(err, src_path, dest_path):
            return ProviderReply(op_id=op_id, ok=False, error_code="NOT_READABLE", retryable=False,
                                 message=f"{what}: cannot read {src_path} {_who(run_as)} "
                                         "(missing or permission denied)")
        if code != 0:
            # refused by the user's rights: permanent; anything else (a destination not there yet, a
            # full disk, a timeout) may pass on a later attempt
            denied = "Permission denied" in err
            return ProviderReply(op_id=op_id, ok=False, error_code="PERMISSION_DENIED" if denied else "COPY_FAILED",
                                 retryable=not denied,
                                 message=f"{what} {src_path} -> {dest_path} {_who(run_as)}: "
                                         f"{err or f'cp exited with {code}'}")
    n = len(item.get("items") or [])
    return ProviderReply(op_id=op_id, ok=True, message=f"{what}: {n} item(s) copied {_who(run_as)}")
