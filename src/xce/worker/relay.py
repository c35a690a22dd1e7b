"""A task's output, relayed to the ``blaunch`` that launched it (as LSF's blaunch gets its tasks' output
from their hosts and writes it to its own stdout and stderr, which are the job's output).

A task writes its stdout and stderr to two spool files on its host (``spool/<job>.<run>.<task>.out`` and
``.err``, made the job user's and 0600 before its shepherd starts, in a directory only the worker
writes): it never opens the job's output path, which its host may not reach.  blaunch asks the
controller for the output from the offsets it has written (a long poll), the controller asks the worker
(``controller/peeks.py``), and the worker answers from the spool here: at most ``limit`` bytes, once
there is output past the offsets, the task has ended, or the ask's wait is over.  An answer carries
``eof`` once the task has ended and nothing is left past it; the spool goes then, or with its run.

Bounded: the controller holds an answer only on its way to its blaunch, and this worker one answer at a
time; what blaunch has not taken yet waits on this host's disk, in the spool, as the job's output file
would have held it; the part blaunch has taken is given back to the file system as it goes (a hole
punched before the offset asked, where the file system can).  Ordered and whole: blaunch asks from the
offsets it has written, so an answer lost on its way (a controller that failed over) is read again.
Survives a restart of the worker: the spool is a file, the offsets are blaunch's.

The other way, blaunch's standard input goes to its task (unless ``blaunch -n``): the task reads a FIFO
(``spool/<job>.<run>.<task>.in``, the job user's) whose write end its shepherd holds, so it never reads an
early end while this worker restarts.  blaunch sends its input in chunks from the offset the worker says it
has taken (kept in ``.in.taken``, so a restarted worker says the same); the worker writes what the FIFO has
room for (its buffer is the bound, the task's reads the backpressure: an ask is held while it is full), and
at the input's end tells the shepherd to close its write end (``end_input``), after which the task reads the
end once it has read the rest.
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Relay", "TaskKey"]

log = logging.getLogger("xce.worker.relay")

TaskKey = tuple[int, int, int]  # job, run, task
TICK = 0.05  # seconds between looks at the spools of held asks
PIPE_BYTES = 1 << 20  # a task's input pipe's room: the bound of what waits for the task to read it
HELD_SAID = 256  # (the controller's peeks.MAX_WAITING)
PUNCH_EVERY = 1 << 20  # bytes taken by blaunch before they are given back to the file system
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


@dataclass
class _Held:
    ask: dict[str, Any]
    until: float  # (time.monotonic) answered by then, output or not


class Relay:
    """The spools of this host's tasks and the asks for them held until there is output.  ``running``
    says whether a task's process may still write (its shepherd is there), ``ended`` whether it ended in
    this life of the worker; ``answer`` sends an answer."""

    def __init__(self, directory: str, running: Callable[[TaskKey], bool], ended: Callable[[TaskKey], bool],
                 answer: Callable[[dict[str, Any]], None],
                 end_input: Callable[[TaskKey], None] = lambda key: None) -> None:
        self.dir = directory
        self._running = running
        self._ended = ended  # it ended in this life of the worker (its spool, if any, is final)
        self._end_input = end_input  # tell the task's shepherd its input is over (it closes its write end)
        self._answer = answer
        self._held: dict[int, _Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()

    def paths(self, key: TaskKey) -> tuple[str, str]:
        base = os.path.join(self.dir, "%d.%d.%d" % key)
        return base + ".out", base + ".err"

    def input_path(self, key: TaskKey) -> str:
        return os.path.join(self.dir, "%d.%d.%d.in" % key)

    def make(self, key: TaskKey, uid: int | None, gid: int | None, stdin: bool = False) -> tuple[str, str]:
        """The task's spool files, empty, the job user's and 0600 (its launcher opens them as that user); with
        ``stdin``, its input FIFO too."""
        made = self.paths(key)
        if stdin:
            fifo = self.input_path(key)
            _unlink(fifo)
            os.mkfifo(fifo, 0o600)
            if uid is not None and gid is not None:
                os.chown(fifo, uid, gid, follow_symlinks=False)
        for path in made:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                os.fchmod(fd, 0o600)
                if uid is not None and gid is not None:
                    os.fchown(fd, uid, gid)
            finally:
                os.close(fd)
        return made

    def runs(self) -> set[tuple[int, int]]:
        """The runs with a spool here (the work poll asks which are over: their spools go)."""
        out = set()
        for name in os.listdir(self.dir):
            job, run, _ = name.split(".", 2)
            out.add((int(job), int(run)))
        return out

    def drop_run(self, run: tuple[int, int]) -> None:
        """The run is over: its tasks' spools go (its blaunch is gone with it)."""
        prefix = "%d.%d." % run
        for name in os.listdir(self.dir):
            if name.startswith(prefix):
                _unlink(os.path.join(self.dir, name))

    def held(self) -> list[int]:
        """The asks held here, the newest ``HELD_SAID`` (what the peek poll tells the controller not to hand
        over again: it holds no more than that for a host)."""
        with self._lock:
            return list(self._held)[-HELD_SAID:]

    def ask(self, ask: dict[str, Any]) -> None:
        """A read of a task's output: answered now if there is something to say, else held."""
        with self._lock:
            if ask["id"] in self._held:
                return  # OBSERVATION: asked again while held (the poll raced our list of held ones)
            self._held[ask["id"]] = _Held(ask, time.monotonic() + float(ask.get("wait") or 0))
        self._wake.set()

    def run(self, stop: threading.Event) -> None:
        """Answer the held asks as their tasks write, end, or their waits run out."""
        while not stop.is_set():
            with self._lock:
                held = list(self._held.values())
            if not held:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            for h in held:
                final = time.monotonic() >= h.until
                reply = self.write(h.ask, final) if h.ask.get("kind") == "task_input" else self.read(h.ask, final)
                if reply is not None:
                    with self._lock:
                        self._held.pop(h.ask["id"], None)
                    try:
                        self._answer(reply)
                    except Exception as e:  # (the asker asks again: nothing is lost)
                        log.warning("could not answer a read of task %s: %s", h.ask.get("task"), e)
            self._wake.wait(TICK)
            self._wake.clear()

    def read(self, ask: dict[str, Any], final: bool = False) -> dict[str, Any] | None:
        """The answer to ``ask`` now; None when it is to be held (no output past its offsets yet, the task
        still going, its wait not over: ``final``)."""
        try:
            return self._read(ask, final)
        except OSError as e:
            return {"id": ask["id"], "error": f"cannot read its output: {e.strerror or e}"}

    def _read(self, ask: dict[str, Any], final: bool) -> dict[str, Any] | None:
        key = (ask["job_id"], ask["run"], ask["task"])
        out_path, err_path = self.paths(key)
        ended = not self._running(key)  # (before the sizes: once ended, they are final)
        try:
            out_fd = _open(out_path)
        except FileNotFoundError:
            # its spool went (read to its end, or its run over), or the task has not started here yet: held
            return {"id": ask["id"], "missing": True} if self._ended(key) or final else None
        try:
            err_fd = _open(err_path)
        except FileNotFoundError:
            os.close(out_fd)
            return {"id": ask["id"], "missing": True}
        try:
            out_size, err_size = os.fstat(out_fd).st_size, os.fstat(err_fd).st_size
            more = out_size > ask["out"] or err_size > ask["err"]
            if not more and not ended and not final:
                return None
            half = max(1, ask["limit"] // 2)
            out = os.pread(out_fd, half, ask["out"]) if out_size > ask["out"] else b""
            err = os.pread(err_fd, ask["limit"] - len(out), ask["err"]) if err_size > ask["err"] else b""
        finally:
            os.close(out_fd)
            os.close(err_fd)
        _give_back(out_path, ask["out"])
        _give_back(err_path, ask["err"])
        # the end is said on an ask from the end (so the spool goes once blaunch has all of it: asked
        # again, it is missing, and the task's end in the model says the rest)
        eof = ended and not out and not err and ask["out"] >= out_size and ask["err"] >= err_size
        if eof:
            _unlink(out_path)
            _unlink(err_path)
        return {"id": ask["id"], "offset": ask["out"], "data": base64.b64encode(out).decode(),
                "err_offset": ask["err"], "err_data": base64.b64encode(err).decode(), "eof": eof}


    def write(self, ask: dict[str, Any], final: bool = False) -> dict[str, Any] | None:
        """blaunch's input for a task from ``offset``: the answer says how much of it the task's FIFO has taken
        (``offset``) and, with ``eof``, that the task takes no more; None when it is to be held (the FIFO is
        full, or the task has not started here yet, and the ask's wait is not over)."""
        key = (ask["job_id"], ask["run"], ask["task"])
        fifo = self.input_path(key)
        taken = _read_taken(fifo)
        closed = {"id": ask["id"], "offset": taken, "eof": True}
        if ask["offset"] != taken:  # (an answer lost on its way: blaunch sends again from what was taken)
            return {"id": ask["id"], "offset": taken}
        data = base64.b64decode(ask.get("data") or "")
        if not data:
            if not ask.get("eof"):
                return {"id": ask["id"], "offset": taken}
            if not self._running(key):
                return closed if self._ended(key) or final else None
            self._end_input(key)
            return closed
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            if e.errno not in (errno.ENXIO, errno.ENOENT):  # (ENXIO: no reader, ENOENT: no FIFO, yet or any more)
                return {"id": ask["id"], "error": f"cannot write its input: {e.strerror or e}"}
            return closed if self._ended(key) else ({"id": ask["id"], "offset": taken} if final else None)
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return {"id": ask["id"], "error": "its input is not a FIFO"}
            _widen(fd)
            written = os.write(fd, data)
        except BlockingIOError:  # full: the task has not read what it has
            written = 0
        except BrokenPipeError:
            return closed
        finally:
            os.close(fd)
        if not written:
            return {"id": ask["id"], "offset": taken} if final else None
        _write_taken(fifo, taken + written)
        return {"id": ask["id"], "offset": taken + written}


def _widen(fd: int) -> None:
    """The task's input pipe holds up to ``PIPE_BYTES`` (the kernel's 64 KiB by default: a round trip of
    blaunch's for each), where the system's pipe-max-size allows."""
    try:
        if fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) < PIPE_BYTES:
            fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass


def _read_taken(fifo: str) -> int:
    try:
        with open(fifo + ".taken") as fh:
            return int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _write_taken(fifo: str, taken: int) -> None:
    with open(fifo + ".taken.w", "w") as fh:
        fh.write(f"{taken}\n")
    os.replace(fifo + ".taken.w", fifo + ".taken")


def _open(path: str) -> int:
    """A spool file, for reading as root: no link followed, nothing but a regular file (no FIFO read)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, f"{path} is not a regular file")
    return fd


def _give_back(path: str, taken: int) -> None:
    """The first ``taken`` bytes of a spool file (blaunch has them) back to the file system, in whole
    steps of ``PUNCH_EVERY``; where the file system cannot punch holes the spool just keeps them."""
    end = taken - taken % PUNCH_EVERY
    if end <= 0:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        _libc.fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(end))
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
