"""Run a storage provider: one process per batch, JSON in, one reply per request out.

``run_provider`` is called from threaded daemons (the provisioner, workers),
so the provider is started with ``os.posix_spawn``, never ``fork``:

    caller --posix_spawn--> provider (own session: its process group is its pid)
        stdin   <- the request document, then EOF
        stdout  -> the reply document (at most OUTPUT_CAP bytes)
        stderr  -> kept: its last STDERR_TAIL bytes go on error replies

One thread multiplexes the three pipes and the provider's exit (a pidfd
where the kernel has them) with ``selectors`` until the deadline.  Whatever
the provider does, the caller gets exactly one reply per request, in request
order; what the provider answered validly is kept, and every request it left
unanswered gets a retryable error naming what went wrong (``ErrorCode``
``PROVIDER_*`` and ``NO_REPLY``).

Process group: when the provider exits, or the deadline passes, or its
output passes the cap, its whole process group is killed with SIGKILL while
the provider is still unreaped (so its pid, the group's id, cannot have been
reused), then it is reaped.  A helper that must outlive the invocation has
to start its own session.
"""

from __future__ import annotations

import fcntl
import json
import os
import selectors
import shutil
import signal
import threading
import time
from dataclasses import dataclass

from xce.providers.contract import (
    ContractError,
    ErrorCode,
    ProviderReply,
    ProviderRequest,
    check_reply,
    decode_reply_document,
    encode_request_document,
    request_document,
    reply_error,
)

OUTPUT_CAP = 16 * 1024 * 1024  # bytes of stdout; more is garbage
STDERR_TAIL = 2048  # bytes of stderr kept
REAP_GRACE = 5.0  # seconds to wait for a SIGKILLed provider to be reapable (one stuck in the kernel may not be)
DRAIN_AFTER_EXIT = 1.0  # seconds to wait for EOF once the provider exited and its group was killed
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_CHUNK = 65536

# Providers that were SIGKILLed but could not be reaped within REAP_GRACE
# (e.g. stuck in uninterruptible I/O): reaped by a later call, never waited for.
_unreaped: set[int] = set()
_unreaped_lock = threading.Lock()


@dataclass
class _Outcome:
    """What one provider process did."""

    stdout: bytes = b""
    stderr_tail: str = ""
    exit_code: int | None = None  # waitstatus_to_exitcode: negative = killed by that signal; None = unknown
    timed_out: bool = False
    oversized: bool = False
    spawn_error: str = ""


def run_provider(command: list[str], config: dict, cluster_id: str, requests: list[ProviderRequest],
                 timeout: float, env: dict[str, str] | None = None, *,
                 name: str | None = None) -> list[ProviderReply]:
    """Run ``command`` once for the batch ``requests``; exactly one reply per request, in order.

    ``config`` is the provider's private configuration (credentials...): it
    goes to the provider's stdin and nowhere else.  ``env`` is added to a
    minimal environment (PATH, LANG); the caller's environment is not passed.
    ``name`` is how messages call the provider (default: from ``command``).

    Never raises for anything the provider does.  Raises ContractError for a
    batch the caller built wrongly (duplicate op_ids, a bad cluster_id or
    config) and ValueError for an empty command or a timeout <= 0.
    """
    if not requests:
        return []
    if not command:
        raise ValueError("empty provider command")
    if not timeout > 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    document = encode_request_document(cluster_id, config, requests)
    _reap_leftovers()
    outcome = _run(list(command), document, timeout, _environment(env))
    return _replies(name or provider_name(command), requests, outcome, timeout)


def run_simfs_in_process(config: dict, cluster_id: str, requests: list[ProviderRequest],
                         timeout: float) -> list[ProviderReply]:
    """simfs without a process: the same documents and the same checks on the replies as
    ``run_provider``, for a node agent whose own node-local directories are simfs's (no ~50 ms
    interpreter start per batch).  An injected crash or garbage becomes a failed reply, as a
    provider process that died would."""
    if not requests:
        return []
    from xce.providers import simfs

    document = request_document(cluster_id, config, requests)
    try:
        out = _Outcome(stdout=json.dumps(simfs.handle_document(document, in_process=True)).encode(), exit_code=0)
    except simfs.InProcessExit as e:
        out = _Outcome(exit_code=e.status)
    return _replies("simfs", requests, out, timeout)


def provider_name(command: list[str]) -> str:
    """A short name for messages: the module of ``python -m pkg.mod``, else the program's or script's name."""
    prog = os.path.basename(command[0])
    if len(command) >= 3 and command[1] == "-m" and prog.startswith("python"):
        return command[2].rsplit(".", 1)[-1]
    if len(command) >= 2 and prog.startswith(("python", "sh", "bash", "dash")) \
            and not command[1].startswith("-"):
        return os.path.basename(command[1])
    return prog


# ---------------------------------------------------------------------------
# The process


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "LANG": "C.UTF-8"}
    env.update(extra or {})
    return env


def _pipe() -> tuple[int, int]:
    """A close-on-exec pipe whose ends are both >= 3 (so the dup2s onto 0-2 cannot collide)."""
    r, w = os.pipe()
    out = []
    for fd in (r, w):
        if fd < 3:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = high
        out.append(fd)
    return out[0], out[1]


def _spawn(command: list[str], env: dict[str, str]) -> tuple[int, int, int, int]:
    """Start the provider in its own session; returns (pid, stdin_w, stdout_r, stderr_r)."""
    path = command[0] if "/" in command[0] else shutil.which(command[0], path=env["PATH"])
    if path is None:
        raise FileNotFoundError(2, f"{command[0]}: not found on PATH")
    ends: list[int] = []
    try:
        for _ in range(3):
            ends.extend(_pipe())
        in_r, in_w, out_r, out_w, err_r, err_w = ends
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2)]
        # every pipe end is close-on-exec: a provider started by another thread at the
        # same moment cannot inherit ours (which would hold our EOF hostage)
        pid = os.posix_spawn(path, command, env, file_actions=actions, setsid=True,
                             setsigdef=(signal.SIGPIPE, signal.SIGXFSZ), setsigmask=())
    except BaseException:
        for fd in ends:
            os.close(fd)
        raise
    for fd in (in_r, out_w, err_w):
        os.close(fd)
    return pid, in_w, out_r, err_r


def _run(command: list[str], document: bytes, timeout: float, env: dict[str, str]) -> _Outcome:
    out = _Outcome()
    start = time.monotonic()
    deadline = start + timeout
    try:
        pid, stdin_w, stdout_r, stderr_r = _spawn(command, env)
    except OSError as e:
        out.spawn_error = e.strerror or str(e)
        return out
    pidfd = _pidfd(pid)
    sel = selectors.DefaultSelector()
    stdout = bytearray()
    stderr = bytearray()
    pending = memoryview(document)
    open_fds = {stdin_w, stdout_r, stderr_r}
    try:
        for fd in open_fds:
            os.set_blocking(fd, False)
        sel.register(stdin_w, selectors.EVENT_WRITE)
        sel.register(stdout_r, selectors.EVENT_READ)
        sel.register(stderr_r, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        exited_at: float | None = None

        def close(fd: int) -> None:
            sel.unregister(fd)
            os.close(fd)
            open_fds.discard(fd)

        while True:
            if exited_at is None and (pidfd is None or not _has(sel, pidfd)) and _exited(pid):
                # OBSERVATION: the provider has exited but is not reaped: sweep what it left
                # in its group (which may be holding our pipes open), then drain.
                exited_at = time.monotonic()
                _killpg(pid)
            if not (open_fds - {stdin_w}) and exited_at is not None:
                break
            now = time.monotonic()
            if now >= deadline:
                out.timed_out = exited_at is None
                break
            if exited_at is not None and now >= exited_at + DRAIN_AFTER_EXIT:
                break  # something outside its group holds our pipes; what we have is what we get
            wait = deadline - now
            if pidfd is None:
                wait = min(wait, 0.01 if now - start < 0.1 else 0.05)
            for key, _ in sel.select(wait):
                fd = key.fd
                if fd == pidfd:
                    sel.unregister(pidfd)  # readable = exited; the next pass sweeps its group
                    continue
                if fd == stdin_w:
                    try:
                        n = os.write(stdin_w, pending[:_CHUNK])
                    except BlockingIOError:
                        continue
                    except OSError:  # EPIPE: it stopped reading; what it read is its business
                        close(stdin_w)
                        continue
                    pending = pending[n:]
                    if not pending:
                        close(stdin_w)
                    continue
                try:
                    data = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    close(fd)
                elif fd == stdout_r:
                    stdout += data
                    if len(stdout) > OUTPUT_CAP:
                        out.oversized = True
                        break
                else:
                    stderr += data
                    if len(stderr) > 4 * STDERR_TAIL:
                        del stderr[:-STDERR_TAIL]
            if out.oversized:
                break
        _killpg(pid)  # deadline, oversized output, or a sweep again: harmless while unreaped
        out.exit_code = _reap(pid)
    finally:
        sel.close()
        for fd in open_fds:
            os.close(fd)
        if pidfd is not None:
            os.close(pidfd)
    out.stdout = bytes(stdout)
    out.stderr_tail = bytes(stderr[-STDERR_TAIL:]).decode("utf-8", "replace")
    return out


def _has(sel: selectors.BaseSelector, fd: int) -> bool:
    try:
        sel.get_key(fd)
    except KeyError:
        return False
    return True


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None  # no pidfds here: poll instead


def _exited(pid: int) -> bool:
    """Has ``pid`` exited?  Does not reap it (WNOWAIT), so its pid cannot be reused yet."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # someone else reaped it


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _reap(pid: int) -> int | None:
    deadline = time.monotonic() + REAP_GRACE
    while True:
        try:
            got, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None  # reaped by someone else: the exit status is lost
        if got:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() >= deadline:
            with _unreaped_lock:
                _unreaped.add(pid)
            return None
        time.sleep(0.005)


def _reap_leftovers() -> None:
    with _unreaped_lock:
        for pid in list(_unreaped):
            try:
                got, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                got = pid
            if got:
                _unreaped.discard(pid)


# ---------------------------------------------------------------------------
# Replies


def _replies(name: str, requests: list[ProviderRequest], out: _Outcome,
             timeout: float) -> list[ProviderReply]:
    tail = out.stderr_tail
    if out.spawn_error:
        msg = _line(f"cannot start provider {name}: {out.spawn_error}")
        return [reply_error(r.op_id, ErrorCode.PROVIDER_SPAWN_FAILED, msg, True, tail) for r in requests]

    by_id = {r.op_id: r for r in requests}
    got: dict[str, ProviderReply | str] = {}  # a valid reply, or why this op's reply was refused
    unknown: list[str] = []
    problem = ""  # what is wrong with the document as a whole
    if not out.oversized:
        try:
            entries = decode_reply_document(out.stdout)
        except ContractError as e:
            problem = str(e)
            entries = []
        for entry in entries:
            op_id = entry["op_id"]
            if op_id not in by_id:
                unknown.append(op_id)
            elif op_id in got:
                got[op_id] = "it replied twice"
            else:
                try:
                    reply = ProviderReply.from_json(entry)
                    check_reply(by_id[op_id], reply)
                except ContractError as e:
                    got[op_id] = str(e)
                else:
                    got[op_id] = reply

    code = out.exit_code
    if out.timed_out:
        failure = (ErrorCode.PROVIDER_TIMEOUT, f"provider {name} timed out after {timeout:g} s and was killed")
    elif out.oversized:
        failure = (ErrorCode.PROVIDER_GARBAGE,
                   f"provider {name} wrote more than {OUTPUT_CAP // (1024 * 1024)} MiB and was killed")
    elif code is None:
        failure = (ErrorCode.PROVIDER_FAILED, f"provider {name} ended without a reply (exit status unknown)")
    elif code < 0:
        failure = (ErrorCode.PROVIDER_FAILED,
                   f"provider {name} was killed by signal {-code} ({_signame(-code)}) without a reply")
    elif code > 0:
        failure = (ErrorCode.PROVIDER_FAILED, f"provider {name} exited with {code} without a reply")
    elif not out.stdout.strip():
        failure = (ErrorCode.NO_REPLY, f"provider {name} exited with 0 without a reply")
    elif problem:
        failure = (ErrorCode.PROVIDER_GARBAGE, f"provider {name} wrote an invalid reply document: {problem}")
    else:
        failure = None

    replies = []
    for r in requests:
        reply = got.get(r.op_id)
        if isinstance(reply, ProviderReply):
            if not reply.ok and tail:
                reply = reply_error(r.op_id, reply.error_code, reply.message, reply.retryable, tail)
            replies.append(reply)
            continue
        if isinstance(reply, str):
            fcode, msg = ErrorCode.PROVIDER_GARBAGE, f"provider {name} sent a malformed reply for {r.op_id}: {reply}"
        elif failure is not None:
            fcode, msg = failure
        else:
            fcode, msg = ErrorCode.NO_REPLY, f"provider {name} gave no reply for {r.op_id}"
            if unknown:
                msg += f" (it replied for unknown op_ids {', '.join(repr(u) for u in unknown[:3])})"
        replies.append(reply_error(r.op_id, fcode, _line(msg), True, tail))
    return replies


def _line(text: str, limit: int = 400) -> str:
    """One line a person can read: no newlines, bounded."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return "unknown signal"
