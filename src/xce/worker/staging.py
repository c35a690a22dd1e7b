"""Stage-in and stage-out: the node agent copies files into a job's staging claim and out of it.

Every copy runs as the submitting user when the worker runs jobs as their
users (``--run-as-users``, root): sources are read only if that user may
read them, destinations written only where that user may write.  Otherwise
the copy runs as the worker's own user, and says so in its message.  A copy
is a child process (``posix_spawn``: the worker has threads), bounded by a
timeout.  Permission problems and missing sources are permanent errors (a
retry cannot fix them); anything else is retryable.

The claim's side of every copy (a stage-out's source, the directory a
stage-in writes into) is never given by name: it is opened beneath the
staging area with no link on its path (``transfers.beneath``), held by its
descriptor, and the copy reads or writes it through ``/proc/self/fd/3``, so
a link the job planted, or swaps in once the op has started, is refused or
simply not there for the copy (``docs/security.md``).

A small regular file (up to ``INLINE_MAX``) copied as the worker's own user
(no ``--run-as-users``) is copied in this process instead (``copy_here``):
a ``cp`` per 4 KiB file was four processes (``sh``, ``dirname``, ``mkdir``,
``cp``) and most of a staged job's CPU.  It keeps what ``cp`` gives and adds
atomicity: the file is written under a temporary name beside its
destination and linked into place only whole (never over a file that is
there: that case, a directory, a symlink, a larger file, or any error goes
to ``cp``, which says what the user knows from the shell), and a stage-out
is fsynced, file and directory, before the op reports success (the staging
claim and its data go right after).  As the job's user a copy stays a child
process: a thread cannot take another user's rights without taking them
for the whole worker.

Other local paths are copied with ``cp`` as before; URLs and remotes (``https://``,
``REMOTE:path``: the controller resolved ``s3://`` to its remote at
submission) through rclone (``xce.transfers``), as the same user, with the
remote's credentials from this worker's ``--transfer-config`` given to that
one rclone child only.  ``cp`` stays for paths: it keeps symlinks, modes and
the errors the user knows from the shell; rclone would follow or skip
symlinks and add a binary to every plain copy.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
import uuid
from typing import Any

import logging

from xce.agents.transfers import ProgressReport
from xce.providers.contract import ProviderReply
from xce.providers.kit import copy_bytes
from xce.transfers import Location, TransferRefused, TransferSetupError, TransferSite, parse_canonical, \
    populate_destination
from xce.transfers import beneath
from xce.transfers import plan as plan_transfer
from xce.transfers import run as run_transfer
from xce.transfers.rclone import describe, plan_size
from xce.worker.sandbox import RunAs, StartFailed, run_as_for
from xce.worker.storage import OutsideStorage, StorageRoots
from xce.wire import AgentOp

log = logging.getLogger("xce.worker")

COPY_TIMEOUT = 3600.0
# $1 source, $2 destination: the destination's directory is made, then the copy (recursive)
COPY = 'mkdir -p -- "$(dirname -- "$2")" && cp -R -- "$1" "$2"'
# the same from a descriptor beneath a claim, $1 /proc/self/fd/3 (-H: that one link is followed, no other),
# $3 the name it had: into an existing directory DEST it goes as DEST/NAME, as ``cp -R PATH DEST`` would
COPY_FROM_FD = ('mkdir -p -- "$(dirname -- "$2")" && if [ -d "$2" ]; then set -- "$1" "$2/$3"; fi && '
                'cp -R -H -T -- "$1" "$2"')
# every argument's apparent size in bytes, one line each
MEASURE = 'exec du -s -b -- "$@"'
# the largest regular file ``copy_here`` copies in the worker's process (larger ones: cp, bounded by its timeout)
INLINE_MAX = 16 << 20


def copy_here(src: str | int, dest: str, durable: bool, dest_dir: int | None = None) -> bool:
    """Copy the regular file ``src`` to ``dest`` (which must not exist) in this process, as ``cp``
    would (``dest``'s directories made, its mode the source's less the umask), but whole or not at
    all: written under a temporary name, then linked into place.  ``durable``: fsynced, file and
    directory, before returning.  ``src``: a path (its last name not followed) or a descriptor opened
    beneath a claim (``beneath.open_beneath``); ``dest_dir``: ``dest`` is a name in that directory
    (``beneath.dest_beneath``).  False, with nothing left behind but directories ``cp`` would have
    made too: not a case for it (not a regular file, larger than ``INLINE_MAX``, ``dest`` there) or
    an error; the caller runs ``cp``, which copies or says why not."""
    try:
        if isinstance(src, int):  # (the descriptor's own object: /proc/self/fd resolves to it, not to a name)
            fd_in = os.open(f"/proc/self/fd/{src}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        else:
            fd_in = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    tmp = None
    try:
        st = os.fstat(fd_in)  # the file opened, not the name: a swapped-in fifo or symlink is not read
        there = beneath.exists_at(dest_dir, dest) if dest_dir is not None else os.path.lexists(dest)
        if not stat.S_ISREG(st.st_mode) or st.st_size > INLINE_MAX or there:
            return False
        if dest_dir is None:
            parent = os.path.dirname(dest) or "."
            os.makedirs(parent, exist_ok=True)
        else:
            parent = "."
        tmp = os.path.join(parent, f".{os.path.basename(dest)}.xce-{uuid.uuid4().hex[:12]}.part")
        fd_out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         stat.S_IMODE(st.st_mode) & 0o777, dir_fd=dest_dir)
        try:
            copy_bytes(fd_in, fd_out)
            if durable:
                os.fsync(fd_out)
        finally:
            os.close(fd_out)
        # whole, and never over a file that appeared meanwhile (EEXIST: cp decides)
        os.link(tmp, dest, src_dir_fd=dest_dir, dst_dir_fd=dest_dir)
        if durable:
            dir_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dest_dir)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return True
    except OSError:
        return False
    finally:
        os.close(fd_in)
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dest_dir)
            except FileNotFoundError:
                pass


def _spawn(script: str, args: list[str], run_as: RunAs | None, timeout: float,
           fd: int | None = None) -> tuple[int, str, str]:
    """``sh -c SCRIPT`` with ``args``, as ``run_as`` when given: (exit code, stdout, stderr).  ``fd``:
    the child has it as fd 3 (``beneath.FD_PATH``)."""
    argv = ["/bin/sh", "-c", script, "xce-stage", *args]
    if run_as is not None:
        argv = [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={run_as.uid}", f"--regid={run_as.gid}",
                "--init-groups", "--", *argv]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    passed, high = beneath.inherit(fd) if fd is not None else ([], None)
    try:
        pid = os.posix_spawn(argv[0], argv, {"PATH": "/usr/bin:/bin", "LANG": "C"},
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out_w, 1),
                                           (os.POSIX_SPAWN_DUP2, err_w, 2), *passed], setsid=True)
    finally:
        os.close(out_w)
        os.close(err_w)
        if high is not None:
            os.close(high)
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


def _spawn_copy(src: str, dest: str, run_as: RunAs | None, timeout: float, fd: int | None = None,
                shown: str = "") -> tuple[int, str]:
    """``cp`` from ``src`` to ``dest``; with ``fd`` one of them is ``beneath.FD_PATH`` (the claim's side),
    which ``shown`` names in messages."""
    if fd is not None and src == beneath.FD_PATH:
        code, _, err = _spawn(COPY_FROM_FD, [src, dest, os.path.basename(shown)], run_as, timeout, fd)
    else:
        code, _, err = _spawn(COPY, [src, dest], run_as, timeout, fd)
    if fd is not None:  # (the descriptor, or a name in the directory it is)
        err = err.replace(src if src == beneath.FD_PATH else dest, shown)
        err = err.replace(beneath.FD_PATH, os.path.dirname(shown))
    return code, ("copy " + err if code == 124 and err.startswith("timed out") else err)


def _staged_bytes(sources: list[str], run_as: RunAs | None) -> int | None:
    """How much the stage-in sources hold, measured as the user who may read them (None: some of
    them cannot be measured; the copy will say why).  As the worker's own user, regular files are
    measured here (``du -s -b`` gives their size too); anything else by ``du``."""
    if run_as is None:
        try:
            sizes = [os.lstat(src) for src in sources]
        except OSError:
            sizes = []
        if sizes and all(stat.S_ISREG(st.st_mode) for st in sizes):
            return sum(st.st_size for st in sizes)
    code, out, _ = _spawn(MEASURE, sources, run_as, 600.0)
    if code != 0:
        return None
    try:
        return sum(int(line.split()[0]) for line in out.splitlines() if line.strip())
    except (ValueError, IndexError):
        return None


def _room(item: AgentOp) -> str:
    """What the bytes of an op's claim are, for a message saying they are too few."""
    if item["op"] == "populate":
        return "the replica (create the claim with a larger --size)"
    return "the staging area (submit with a larger --stage-size)"


def _who(run_as: RunAs | None) -> str:
    return f"as {run_as.name}" if run_as is not None else f"as the worker's user (uid {os.geteuid()})"


def _unreadable_source(err: str, src: str, dest: str) -> bool:
    """Did the copy fail because the user cannot reach ``src`` (missing, or a directory on the way or
    the file itself closed to them)?  cp names the path it failed on: the source, not the destination."""
    first = err.splitlines()[0] if err else ""
    return (src in first and dest not in first
            and ("No such file" in first or "Permission denied" in first))


def _transfer(item: AgentOp, src: Location, dest: Location, site: TransferSite, host: str,
              run_as: RunAs | None, room: int | None, moved: dict[str, int] | None = None,
              report: ProgressReport | None = None, fd: int | None = None, shown: str = "") -> ProviderReply | None:
    """One item through rclone (None: copied, and what rclone moved added to ``moved``; its progress to
    ``report`` as it runs: bytes of the op so far, of the items copied and this one's measured size).
    ``fd``, ``shown``: the claim's side is that descriptor (``rclone.plan``).
    The remote must be configured on this host and, if its entry here lists projects, allow the job's
    project (the controller checked that at submission)."""
    op_id, what = item["op_id"], item["op"].replace("_", "-")
    remote_loc = src if not src.local else dest
    project = (item.get("tags") or {}).get("xce.project", "")
    remote = site.remote(remote_loc.remote) if remote_loc.kind == "remote" else None
    if remote_loc.kind == "remote" and remote is None:
        return ProviderReply(op_id=op_id, ok=False, error_code="NO_REMOTE", retryable=False,
                             message=f"{what}: remote {remote_loc.remote} is not configured on {host} "
                                     "(its --transfer-config)")
    if remote is not None and not remote.allows(project):
        return ProviderReply(op_id=op_id, ok=False, error_code="PERMISSION_DENIED", retryable=False,
                             message=f"{what}: project {project} may not use remote {remote.name} on {host}")
    ids = (run_as.uid, run_as.gid) if run_as is not None else None
    via = f"remote {remote.name}" if remote is not None else remote_loc.text
    try:
        transfer = plan_transfer(src, dest, site, fd=fd, shown=shown)
        if room:  # measured before anything is copied: a source larger than the room is refused whole
            sized = run_transfer(plan_size(src, site), run_as=ids, timeout=min(site.timeout, 600.0))
            if not sized.ok:
                return ProviderReply(op_id=op_id, ok=False, error_code=sized.error_code, retryable=sized.retryable,
                                     message=f"{what} {transfer.what} {_who(run_as)} via {via}: {sized.message}")
            if int(sized.stats.get("bytes") or 0) > room:
                return ProviderReply(op_id=op_id, ok=False, error_code="RESOURCE_EXHAUSTED", retryable=False,
                                     message=f"{what} of {sized.stats['bytes']} bytes from {src.text} does not fit "
                                             f"{_room(item)} of {room} bytes")
    except TransferSetupError as e:
        return ProviderReply(op_id=op_id, ok=False, error_code="NO_REMOTE", retryable=False,
                             message=f"{what}: {e}")

    before = (moved or {}).get("bytes", 0)  # what the op's earlier items copied
    measured = int(sized.stats.get("bytes") or 0) if room else None

    def progress(stats: dict[str, Any]) -> None:
        """rclone's stats line (every second): to the controller (``report``), which shows it in ``xce job
        why`` and ``xce claim show`` while the op is open."""
        log.debug("%s %s: %s of %s bytes, %s/%s file(s)", op_id, transfer.what, stats.get("bytes"),
                  stats.get("totalBytes"), stats.get("transfers"), stats.get("totalTransfers"))
        if report is not None:
            total = measured if measured is not None else stats.get("totalBytes")
            speed = stats.get("speed")
            report(item, before + int(stats.get("bytes") or 0),
                   before + int(total) if isinstance(total, (int, float)) and total > 0 else None,
                   float(speed) if isinstance(speed, (int, float)) else None)

    out = run_transfer(transfer, run_as=ids, timeout=site.timeout, progress=progress)
    if not out.ok:
        if out.error_code == "RESOURCE_EXHAUSTED":
            message = f"{what} {transfer.what}: more than {_room(item)} of {room} bytes"
        else:
            message = f"{what} {transfer.what} {_who(run_as)} via {via}: {out.message}"
        return ProviderReply(op_id=op_id, ok=False, error_code=out.error_code, retryable=out.retryable,
                             message=message)
    there = beneath.exists_at(fd, os.path.basename(dest.text.removeprefix(beneath.FD_PATH))) \
        if fd is not None and dest.local else dest.local and os.path.lexists(dest.text)
    if dest.local and not there:  # rclone copies nothing from a missing object
        return ProviderReply(op_id=op_id, ok=False, error_code="NOT_FOUND", retryable=False,
                             message=f"{what}: nothing at {src.text} (via {via})")
    log.info("%s %s: %s", op_id, transfer.what, describe(out.stats))
    if moved is not None:
        for key in ("bytes", "transfers"):
            moved[key] = moved.get(key, 0) + int(out.stats.get(key) or 0)
    return None


def run_populate_op(item: AgentOp, host: str, run_as_users: bool, roots: StorageRoots,
                    site: TransferSite | None = None, report: ProgressReport | None = None) -> ProviderReply:
    """A replica's ``populate``: its source copied into the replica on this host as a stage-in of one
    item is (the same copy, the same descriptor beneath the replica, as its owner).  A URL or remote
    (canonical) lands where ``populate_destination`` puts a populated claim's data; a path is a shared
    claim's data (``--source claim:NAME``, resolved by the controller), copied whole into the replica's
    root, and must lie inside this worker's storage roots."""
    def refused(message: str, code: str = "INVALID") -> ProviderReply:
        return ProviderReply(op_id=item["op_id"], ok=False, error_code=code, retryable=False,
                             message=f"populate: {message}")

    text = item.get("source") or ""
    if text.startswith("claim:"):
        return refused(f"its source {text} is gone", "NOT_FOUND")
    try:
        src = parse_canonical(text)
    except TransferRefused as e:
        return refused(e.message)
    if src.local:
        try:
            path = roots.check(src.text, f"the source claim of {item.get('claim_name', '')}".rstrip())
        except OutsideStorage as e:
            return refused(str(e), "PERMISSION_DENIED")
        one: AgentOp = {**item, "items": [[path.rstrip("/") + "/.", "."]]}
    else:
        one = {**item, "items": [[src.text, populate_destination(src)]]}
    return run_stage_op(one, host, run_as_users, roots, site=site, report=report)


def run_stage_op(item: AgentOp, host: str, run_as_users: bool, roots: StorageRoots,
                 timeout: float = COPY_TIMEOUT, allow_system_users: bool = False,
                 site: TransferSite | None = None, report: ProgressReport | None = None) -> ProviderReply:
    """One stage_in or stage_out op of the node agent: every item copied, or an error reply (``report``:
    where rclone's progress goes while it copies: the node agent's progress sender).

    The staging area must be inside this worker's storage roots (a forged path is refused for
    good); it already belongs to the job's user (its provider made it so), so nothing is chowned."""
    op_id, op = item["op_id"], item["op"]
    try:
        base = roots.check(item.get("path"), f"the staging claim {item.get('claim_name', '')}".rstrip())
    except OutsideStorage as e:
        return ProviderReply(op_id=op_id, ok=False, error_code="PERMISSION_DENIED", retryable=False, message=str(e))
    try:
        run_as = run_as_for(item["user"], host, allow_system_users) if run_as_users else None
    except StartFailed as e:
        return ProviderReply(op_id=op_id, ok=False, error_code="NO_ACCOUNT", retryable=False,
                             message=str(e).removeprefix("failed to start: "))
    what = op.replace("_", "-")
    if op == "stage_in" and item.get("size_bytes"):  # (0: a staging claim made before sizes were reserved)
        # the staging area's room was reserved on this host's scratch: copy nothing that does not fit
        local = [src for src, _ in item.get("items") or [] if src.startswith("/")]  # (remotes: measured apart)
        size = _staged_bytes(local, run_as) if local else 0
        if size is not None and size > item["size_bytes"]:
            return ProviderReply(op_id=op_id, ok=False, error_code="RESOURCE_EXHAUSTED", retryable=False,
                                 message=f"stage-in of {size} bytes does not fit the staging area's "
                                         f"{item['size_bytes']} bytes (submit with a larger --stage-size)")
    try:  # the staging area itself, no link on the way from its root (one swapped in is refused)
        base_fd = beneath.open_inside(roots.roots, base)
    except (OSError, beneath.Refused):
        return ProviderReply(op_id=op_id, ok=False, error_code="NOT_FOUND", retryable=True,
                             message=f"the staging claim has no directory on {host} ({base})")
    try:
        return _copy_items(item, host, base, base_fd, run_as, timeout, site, report)
    except beneath.Refused as e:
        return ProviderReply(op_id=op_id, ok=False, error_code=e.code, retryable=False, message=f"{what}: {e.message}")
    finally:
        os.close(base_fd)


def _copy_items(item: AgentOp, host: str, base: str, base_fd: int, run_as: RunAs | None, timeout: float,
                site: TransferSite | None, report: ProgressReport | None) -> ProviderReply:
    """Every item of the op, the claim's side of each through a descriptor beneath the staging area
    ``base_fd`` (``beneath``): a stage-out's sources all opened before the first is copied, a
    stage-in's destinations each made and opened just before it is copied into."""
    op_id, op = item["op_id"], item["op"]
    what = op.replace("_", "-")
    owner = (run_as.uid, run_as.gid) if run_as is not None else None
    items = item.get("items") or []
    inbound = op != "stage_out"  # a stage-in, or a replica's populate
    held = beneath.open_sources(base_fd, base, [src for src, _ in items]) if op == "stage_out" else []
    try:
        transferred = 0
        moved: dict[str, int] = {}
        for i, (src, dest) in enumerate(items):
            shown = os.path.normpath(os.path.join(base, dest if inbound else src))
            if inbound:
                fd, name = beneath.dest_beneath(base_fd, dest, owner, shown)
                held.append(fd)
                far, local = src, beneath.FD_PATH + (f"/{name}" if name else "")
            else:
                fd, name = held[i], ""
                far, local = dest, beneath.FD_PATH
            if not far.startswith("/"):  # a URL or a remote (canonical: resolved at submission)
                try:
                    loc = parse_canonical(far)
                except TransferRefused as e:
                    return ProviderReply(op_id=op_id, ok=False, error_code="INVALID", retryable=False,
                                         message=f"{what}: {e.message}")
                pair = (loc, Location("path", local)) if inbound else (Location("path", local), loc)
                room = item.get("size_bytes") or None if inbound else None
                # (without a --transfer-config a worker still reads public URLs; remotes it cannot reach)
                failed = _transfer(item, *pair, site or TransferSite(), host, run_as, room, moved, report,
                                   fd=fd, shown=shown)
                if failed is not None:
                    return failed
                transferred += 1
                continue
            src_shown, dest_shown = (far, shown) if inbound else (shown, far)
            # as the worker's own user, existence tells nothing; as the job's user, the worker (root) must
            # not answer "does not exist" where the user would meet "Permission denied": the copy, run as
            # the user, is what finds out, and both answers are one (below)
            if run_as is None and inbound and not os.path.lexists(far):  # a retry cannot make it appear
                return ProviderReply(op_id=op_id, ok=False, error_code="NOT_FOUND", retryable=False,
                                     message=f"{what}: {far} does not exist")
            if run_as is None and (copy_here(far, name, durable=False, dest_dir=fd) if inbound
                                   else copy_here(fd, far, durable=True)):
                continue
            code, err = _spawn_copy(*((far, local) if inbound else (local, far)), run_as, timeout, fd, shown)
            if code != 0 and run_as is not None and _unreadable_source(err, src_shown, dest_shown):
                return ProviderReply(op_id=op_id, ok=False, error_code="NOT_READABLE", retryable=False,
                                     message=f"{what}: cannot read {src_shown} {_who(run_as)} "
                                             "(missing or permission denied)")
            if code != 0:
                # refused by the user's rights: permanent; anything else (a destination not there yet, a
                # full disk, a timeout) may pass on a later attempt
                denied = "Permission denied" in err
                return ProviderReply(op_id=op_id, ok=False,
                                     error_code="PERMISSION_DENIED" if denied else "COPY_FAILED",
                                     retryable=not denied,
                                     message=f"{what} {src_shown} -> {dest_shown} {_who(run_as)}: "
                                             f"{err or f'cp exited with {code}'}")
    finally:
        for fd in held:
            os.close(fd)
    via = f" ({transferred} through rclone: {describe(moved)})" if transferred else ""
    return ProviderReply(op_id=op_id, ok=True, message=f"{what}: {len(items)} item(s) copied {_who(run_as)}{via}")
