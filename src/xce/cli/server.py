"""The warm CLI server: the ``xce`` command's one definition, kept imported, for the native front.

Python's start-up and the CLI's imports cost 250-450 ms a call on this VM, which was all of a loop
of one-shot ``xce submit``'s time.  ``native/xce.c`` used to answer the commonest calls itself,
with an argparse, TOML, HTTP and JSON of its own: a second CLI.  Now it owns no semantics, as
Mercurial's ``chg`` owns none of ``hg``'s: it sends this server the argument vector, the working
directory, the environment, the umask and its standard input, output and error (the descriptors
themselves), and exits as the command did.  Everything a word on the command line means is still
``xce.cli.main``'s; the choice and its figures are ``docs/decisions/native-front.md``.

One server per user and interpreter: its socket lives in a directory only its user may enter, named
by a hash of the interpreter's path and of the variables that shape an interpreter at start-up
(``PYTHON*``, ``LC_*``, ``LANG``), so a call is served only by a process that would have started
the same.  The front starts it when there is none (``python -m xce.cli.server``, in a session of
its own); it ends after ``XCE_CLI_IDLE`` seconds without a call (default 600; it looks once a
second), and at once when a module it loaded has changed on disk (it answers ``stale``, and the
front starts a new one).

The parent is single-threaded and keeps a pool of forked workers, one idle at least; a worker takes
calls one at a time, each in the caller's descriptors, directory, umask and environment, with the
parsers the parent built once.  (Forking is safe here because this process has no thread: DESIGN's
rule is never to fork a threaded one; nor does a worker start one.)  The worker tells the front its
pid (the front forwards its signals there) and then how the command ended.  A loop of one-shot calls
pays for whatever a call does besides its command, so that is kept small (``Worker``, ``Board``; the
figures in the decision record).  Commands that run for long or start daemons (``controller``,
``worker``, ``provisioner``, ``up``) are answered ``cold``: the front runs the Python CLI itself, as
a process of the caller's own.

The protocol, on a Unix stream socket, peer checked to be the same user:

    front -> server   "XCE2 ARGC ENVC UMASK NBYTES\\n" then NBYTES of NUL-ended strings (the name
                      the front was run by, the arguments after it, then KEY=VALUE entries; ARGC
                      counts the name and the arguments), with four descriptors in
                      the first message (SCM_RIGHTS): stdin, stdout, stderr, the working directory
    server -> front   "pid N\\n" then "exit N\\n" or "signal N\\n"; or "cold\\n"; or "stale\\n"
"""

from __future__ import annotations

import argparse
import fcntl
import gc
import importlib
import io
import mmap
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
from typing import Any, Callable

MAGIC = b"XCE2"
MAX_REQUEST = 32 << 20  # more than Linux lets a process's arguments and environment take
COLD = frozenset({"controller", "worker", "provisioner", "up"})  # long-lived: the caller's own process
DEFAULT_IDLE = 600.0
MAX_WORKERS = 32  # calls at once; more wait in the listen queue (each worker forks on demand)
LOOK = 1.0  # seconds: how often the server looks at its workers' board (``Server``)


class BadRequest(Exception):
    """A call the server cannot read: it is closed unanswered (the front then runs the CLI cold)."""


class Request:
    """A call: the program the front was run as (``xce``, ``bsub``...: ``xce.cli.programs``), the
    command's words, the caller's environment (as the kernel holds it: bytes, applied through
    ``os.environb`` without decoding it) and umask, and its descriptors (stdin, stdout, stderr,
    working directory), owned by the request until the worker takes them."""

    def __init__(self, program: str, words: list[str], environ: dict[bytes, bytes], umask: int,
                 fds: list[int]) -> None:
        self.program = os.path.basename(program)
        self.words = words
        self.environ = environ
        self.umask = umask
        self.fds = fds

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def read_request(conn: socket.socket) -> Request:
    """One call from ``conn``, bounded by ``MAX_REQUEST``; raises ``BadRequest``."""
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 4)
    try:
        head, sep, rest = data.partition(b"\n")
        fields = head.split(b" ")
        if not sep or len(fields) != 5 or fields[0] != MAGIC or len(fds) != 4:
            raise BadRequest("not a call of this protocol")
        try:
            argc, envc, umask, size = int(fields[1]), int(fields[2]), int(fields[3], 8), int(fields[4])
        except ValueError:
            raise BadRequest("a malformed header") from None
        if not (0 <= size <= MAX_REQUEST and 1 <= argc and 0 <= envc and 0 <= umask <= 0o777):
            raise BadRequest("a header out of range")
        body = bytearray(rest)
        while len(body) < size:
            chunk = conn.recv(min(1 << 20, size - len(body)))
            if not chunk:
                raise BadRequest("the call ended early")
            body += chunk
        strings = bytes(body).split(b"\0")
        if len(body) != size or strings[-1] != b"" or len(strings) != argc + envc + 1:
            raise BadRequest("a body that does not match its header")
        # one decode for every word (a NUL never ends a character of the file system's encoding)
        program, *words = os.fsdecode(b"\0".join(strings[:argc])).split("\0")
        environ = {}
        for entry in strings[argc:argc + envc]:
            key, eq, value = entry.partition(b"=")
            if eq and key:
                environ[key] = value
        return Request(program, words, environ, umask, fds)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def peer_uid(conn: socket.socket) -> int:
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return int(uid)


class Warm:
    """What the parent prepares once for every call: the CLI imported and its parsers built, and the
    other programs the front stands for (LSF's commands) imported."""

    def __init__(self) -> None:
        from xce.cli import main as cli_main, programs

        self.cli = cli_main
        self.programs = programs
        modules = set(cli_main.COMMANDS.values())
        self.parsers = {None: cli_main.build_parser(None), **{m: cli_main.build_parser(m) for m in modules}}
        for name in programs.LSF:
            programs.entry(name)
        for name in ("xce.cli.config", "xce.resreq", "tomllib"):  # what one-shot calls go on to import
            importlib.import_module(name)

        self.files = _loaded_files()

    def command(self, program: str, words: list[str]) -> str | None:
        """The ``xce`` command a call runs (None: none, or another program)."""
        return None if program in self.programs.LSF else self.cli._command(words)

    def run(self, program: str, words: list[str]) -> int:
        other = self.programs.entry(program)
        if other is not None:
            return other(words)
        parser = self.parsers[self.cli.COMMANDS.get(self.command(program, words) or "")]
        return self.cli.main(words, parser=parser)


def _loaded_files(paths: list[str] | None = None) -> dict[str, int]:
    """mtime of each file of XCE this process has loaded (or of ``paths``)."""
    if paths is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        paths = sorted({f for m in list(sys.modules.values())
                        if (f := getattr(m, "__file__", None)) and f.startswith(root)})
    out = {}
    for path in paths:
        try:
            out[path] = os.stat(path).st_mtime_ns
        except OSError:
            out[path] = -1
    return out


class Changes:
    """Whether any of ``files`` (path -> mtime, as ``_loaded_files`` read them) has changed on disk since:
    a server that loaded them would run old code.

    Looking at every file's mtime before each call cost a plain submit's call ~40 ``stat``s (7% of a
    worker's samples under py-spy).  Where the kernel has inotify, their directories are watched instead (a change to one of
    these files, or one moved or deleted there: ``pip install`` replaces them by renaming), and a call
    asks with one non-blocking read.  inotify sees no change made on another NFS client, so the mtimes
    are still compared, at most ``every`` seconds apart (and at the first call, for what changed
    before the watches were set); without inotify (none here, or no instance left) at every call."""

    # IN_MODIFY, IN_ATTRIB, IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_MOVE_SELF
    MASK = 0x2 | 0x4 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800
    OWN = 0x400 | 0x800 | 0x4000 | 0x8000  # the directory itself went, the queue overflowed, a watch ended
    EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)

    def __init__(self, files: dict[str, int], every: float = LOOK) -> None:
        self.files = files
        self.every = every
        self._changed = False
        self._looked = -float("inf")  # when the mtimes were compared last (time.monotonic)
        self._names: dict[int, set[bytes]] = {}  # watch -> the names of our files in its directory
        self.fd = self._watch()

    def _watch(self) -> int | None:
        """An inotify instance watching the files' directories (None: no inotify)."""
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        dirs: dict[str, set[bytes]] = {}
        for path in self.files:
            dirs.setdefault(os.path.dirname(path), set()).add(os.fsencode(os.path.basename(path)))
        for directory, names in dirs.items():
            wd = libc.inotify_add_watch(fd, os.fsencode(directory), self.MASK)
            if wd < 0:  # (no watch left: max_user_watches)
                os.close(fd)
                return None
            self._names.setdefault(wd, set()).update(names)
        return fd

    def changed(self) -> bool:
        if self._changed:
            return True
        if self.fd is not None:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                data = b""
            self._changed = self._ours(data)
        now = time.monotonic()
        if not self._changed and (self.fd is None or now - self._looked >= self.every):
            self._looked = now
            self._changed = _loaded_files(list(self.files)) != self.files
        return self._changed

    def _ours(self, data: bytes) -> bool:
        """Do these events touch one of the files (a swap file an editor made beside them does not)?"""
        at = 0
        while at + self.EVENT.size <= len(data):
            wd, mask, _, length = self.EVENT.unpack_from(data, at)
            name = data[at + self.EVENT.size:at + self.EVENT.size + length].rstrip(b"\0")
            at += self.EVENT.size + length
            if mask & self.OWN or name in self._names.get(wd, ()):
                return True
        return False


# ---------------------------------------------------------------- what workers say of themselves

IDLE, BUSY, FREE = 0, 1, 2  # a slot of the board: its worker waits for a call, runs one; no worker


class Board:
    """Where each worker shows the server whether it is idle, in memory they share (an anonymous shared
    mapping, made before the workers are forked): a state byte a slot, and a byte a worker sets at each
    call (``touched``), which the server clears when it looks.  Telling the server through its pipe
    woke it twice a call (~5% of a plain submit's time on this VM); it is now woken only when the last
    idle worker takes a call (it forks another) or one finds the code changed."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.memory = mmap.mmap(-1, 2 * slots)
        self.memory[:slots] = bytes([FREE]) * slots

    def take(self) -> int:
        """A free slot, marked idle (a worker about to be forked), or -1 if none is free."""
        slot = self.memory.find(bytes([FREE]), 0, self.slots)
        if slot >= 0:
            self.memory[slot] = IDLE
        return slot

    def set(self, slot: int, state: int) -> None:
        self.memory[slot] = state
        if state == BUSY:
            self.memory[self.slots + slot] = 1

    def state(self, slot: int) -> int:
        return self.memory[slot]

    def any_idle(self) -> bool:
        return self.memory.find(bytes([IDLE]), 0, self.slots) >= 0

    def active(self) -> bool:
        """Has a call run since the last look, or does one run now?  (Clears the touched bytes.)"""
        touched = self.memory.find(b"\1", self.slots) >= 0
        self.memory[self.slots:] = bytes(self.slots)
        return touched or self.memory.find(bytes([BUSY]), 0, self.slots) >= 0


# ---------------------------------------------------------------- a worker: calls, one at a time

FORWARDED = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)  # they end a process


def _stdio() -> None:
    """sys.stdin/stdout/stderr over descriptors 0-2, as Python would have made them for the caller
    (line-buffered on a terminal; the encoding is the server's, which its socket's name pins)."""
    def text(fd: int, old: Any, write: bool, line: bool) -> io.TextIOWrapper:
        raw = io.open(fd, "wb" if write else "rb", closefd=False)
        return io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, line_buffering=line)

    sys.stdin = text(0, sys.__stdin__, False, False)
    sys.stdout = text(1, sys.__stdout__, True, os.isatty(1))
    sys.stderr = text(2, sys.__stderr__, True, True)


class Worker:
    """A process forked from the server that takes calls from the listening socket, one at a time,
    each in the caller's directory, umask, environment and descriptors, and reports its end.  Between
    calls it holds nothing of the last caller's (descriptors 0-2 on /dev/null, directory /): a pipe the
    caller reads to its end must not stay open here.  A forwarded signal that ends a process ends this
    one too, after telling the front so ("signal N"); SIGINT interrupts the call (exit 130, as the CLI
    says); a front that is gone before its call ended (killed: it sends nothing after its call) ends
    the call as a hang-up would.  It shows the server when it is busy and idle (``Board``), and tells
    it when it took a call as the last idle worker, so the server keeps one idle worker ready.

    A loop of one-shot calls (``bench/throughput.py``'s ``cli`` modes) pays for whatever a call does
    besides its command, so what need not change between calls is done once: the signal handlers are
    installed once and ask whether a command runs (``running``); the front's going away is noticed by
    SIGIO on the call's connection (``O_ASYNC``), not by a thread started per call; the environment
    is changed where the caller's differs from the last one's; and the front is answered as soon as
    the caller's descriptors are given back."""

    def __init__(self, warm: Warm, listener: socket.socket, board: Board, slot: int, notify: int,
                 retire: Callable[[], None]) -> None:
        self.warm = warm
        self.listener = listener
        self.board = board
        self.slot = slot
        self.notify = notify
        self.retire = retire
        self.conn: socket.socket | None = None  # the call's connection, once the front knows our pid
        self.running = False  # a command runs: SIGINT interrupts it, a front gone away hangs it up
        self.null = os.open(os.devnull, os.O_RDWR)
        self.changes = Changes(warm.files)  # (its own: a forked copy of another's would share its events)

    def tell(self, what: bytes) -> None:
        os.write(self.notify, what + f" {os.getpid()}\n".encode())

    def loop(self) -> None:
        for sig in FORWARDED:
            signal.signal(sig, self._ended_by)
        signal.signal(signal.SIGINT, self._interrupted)
        signal.signal(signal.SIGIO, self._front_gone)
        while True:
            conn, _ = self.listener.accept()
            self.board.set(self.slot, BUSY)
            if not self.board.any_idle():
                self.tell(b"busy")  # the server forks another, for the next call that comes meanwhile
            try:
                stale = self.call(conn)
            except KeyboardInterrupt:  # a SIGINT passed on as the call ended
                stale = False
            finally:
                self.conn = None
                conn.close()
            if stale:
                self.tell(b"stale")
                return
            self.board.set(self.slot, IDLE)

    def call(self, conn: socket.socket) -> bool:
        """One call on ``conn``; True if it found the server's code changed (the front asks anew)."""
        conn.settimeout(10)  # a front sends its call at once: one that stalls is dropped
        try:
            if peer_uid(conn) != os.getuid():
                return False
            request = read_request(conn)
        except (OSError, BadRequest):
            return False
        conn.settimeout(None)
        if self.changes.changed():
            request.close()
            self.retire()  # first: the front asks a new server, which must not find this one's socket
            conn.sendall(b"stale\n")
            return True
        if self.warm.command(request.program, request.words) in COLD:
            request.close()
            conn.sendall(b"cold\n")
            return False
        conn.sendall(f"pid {os.getpid()}\n".encode())
        self.conn = conn
        code = self.run(request)
        conn.sendall(f"exit {code}\n".encode())
        os.chdir("/")
        return False

    def run(self, request: Request) -> int:
        """The call in this process: the caller's state taken, the command run, and the caller's
        descriptors given back (the rest of its state stays until the next call replaces it)."""
        stdin, stdout, stderr, cwd = request.fds
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        os.fchdir(cwd)
        request.close()
        os.umask(request.umask)
        _take_environ(request.environ)
        time.tzset()  # the caller's TZ
        sys.argv = [request.program, *request.words]
        _stdio()
        self._watch_front()
        try:
            code = self.warm.run(request.program, request.words)
        except SystemExit as e:  # argparse's exits, --help, --version
            code = _exit_code(e)
        except KeyboardInterrupt:
            code = 130
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            self.running = False
            for stream in (sys.stdout, sys.stderr, sys.stdin):
                try:
                    stream.close()  # flushed, and closed even if that failed: nothing left to write later
                except OSError:
                    pass  # `xce submit | head -c0`: a closed pipe is not a failure of the command
            sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__
            for target in (0, 1, 2):
                os.dup2(self.null, target)
        return code

    def _watch_front(self) -> None:
        """From now until the command ends, SIGIO comes when the front's end of the connection closes
        (``_front_gone``); one that closed before is found here."""
        assert self.conn is not None
        fd = self.conn.fileno()
        fcntl.fcntl(fd, fcntl.F_SETOWN, os.getpid())
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_ASYNC)
        self.running = True
        self._front_gone(signal.SIGIO, None)

    def _front_gone(self, signum: int, frame: object) -> None:
        """SIGIO (or a first look): the front sends nothing after its call, so its connection ends
        before the command does only if the front was killed; then the command ends too, as a process
        whose terminal hung up."""
        conn = self.conn
        if conn is None or not self.running:
            return
        try:
            gone = not conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            gone = False
        except OSError:
            gone = True
        if gone:
            self._ended_by(signal.SIGHUP, frame)

    def _interrupted(self, signum: int, frame: object) -> None:
        """SIGINT passed on by the front: interrupts the command (the CLI answers 130); between calls,
        nothing to interrupt."""
        if self.running:
            raise KeyboardInterrupt

    def _ended_by(self, signum: int, frame: object) -> None:
        """A signal that ends a process, passed on by the front (or sent by the server to an idle
        worker): end as the CLI would, saying so to the front if there is one."""
        if self.conn is not None:
            try:
                self.conn.sendall(f"signal {signum}\n".encode())
            except OSError:
                pass
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _take_environ(environ: dict[bytes, bytes]) -> None:
    """Make this process's environment the caller's, changing only what differs from what it is (the
    last caller's, mostly the same): clearing and refilling it cost a plain submit's call ~10% more."""
    current = os.environb
    for key in [key for key in current if key not in environ]:
        del current[key]
    for key, value in environ.items():
        if current.get(key) != value:
            current[key] = value


def _die_with_parent() -> None:
    """SIGTERM this worker when the server ends, even killed: an orphan would serve on unsupervised."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() == 1:  # (it ended before the call above)
        os._exit(0)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    print(e.code, file=sys.stderr)
    return 1


# ---------------------------------------------------------------- the server: a pool of workers


class Server:
    """The parent: listens, and keeps one idle worker ready (forking another whenever the last idle
    one takes a call, up to ``MAX_WORKERS``: more calls at once wait in the listen queue).  It runs
    no call itself and has no thread, so it may fork.  It looks at the board every ``LOOK`` seconds
    (at most): to end after ``idle`` seconds without a call, and, once retiring, to end the workers
    that have become idle."""

    def __init__(self, path: str, idle: float) -> None:
        self.path = path
        self.idle = idle
        self.warm = Warm()
        self.board = Board(MAX_WORKERS)
        self.workers: dict[int, int] = {}  # pid -> its slot of the board
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.notify_r, self.notify_w = os.pipe()
        self.wake_r, self.wake_w = os.pipe()
        self.running = True

    def listen(self) -> None:
        """Listen on ``path``: bound under a temporary name and renamed into place, so a front never
        finds a socket nobody listens on yet (the front that started us holds the start lock)."""
        tmp = f"{self.path}.{os.getpid()}"
        self.listener.bind(tmp)
        self.listener.listen(128)
        os.rename(tmp, self.path)
        self.inode = os.stat(self.path).st_ino
        with open(self.path + ".pid", "w") as fh:
            fh.write(f"{os.getpid()}\n")

    def serve(self) -> None:
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._stop)
        # what was built once (the CLI's modules and parsers) is never garbage: out of every collection
        # a worker makes during its calls, and its pages left shared with this process
        gc.collect()
        gc.freeze()
        self._fork()
        pending = b""
        quiet_since = time.monotonic()
        try:
            while self.workers:
                ready = select.select([self.notify_r, self.wake_r], [], [], LOOK)[0]
                if self.board.active():
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since >= self.idle:
                    self._retire()  # idle for long enough
                if self.wake_r in ready:
                    os.read(self.wake_r, 4096)
                    self._reap()
                if self.notify_r in ready:
                    pending += os.read(self.notify_r, 4096)
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        self._heard(line.decode())
                if not self.running:
                    self._retire()
        finally:
            self._retire()

    def _heard(self, line: str) -> None:
        what, _, pid = line.partition(" ")
        if not pid.isdigit() or int(pid) not in self.workers:
            return
        if what == "stale":
            self.running = False
        if self.running and not self.board.any_idle():
            self._fork()

    def _fork(self) -> None:
        slot = self.board.take()
        if slot < 0:
            return  # MAX_WORKERS busy: calls wait in the listen queue
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                _die_with_parent()
                signal.set_wakeup_fd(-1)
                for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                    signal.signal(sig, signal.SIG_DFL)
                for fd in (self.notify_r, self.wake_r, self.wake_w):
                    os.close(fd)
                Worker(self.warm, self.listener, self.board, slot, self.notify_w, self._unlink).loop()
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        self.workers[pid] = slot

    def _stop(self, *_: object) -> None:
        self.running = False

    def _reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            slot = self.workers.pop(pid, None)
            if slot is not None:
                self.board.set(slot, FREE)
            if self.running and not self.board.any_idle():
                self._fork()

    def _unlink(self) -> None:
        """Remove the socket (and its pid file) if they are still this server's."""
        try:
            if os.stat(self.path).st_ino == getattr(self, "inode", None):
                os.unlink(self.path)
                os.unlink(self.path + ".pid")
        except OSError:
            pass

    def _retire(self) -> None:
        """Take no more calls: stop listening, remove the socket (and its pid file) if they are still
        this server's, and end the idle workers; busy ones end when their call has (SIGTERM is
        theirs to pass on to the front, so they are sent it only once idle)."""
        self.running = False
        if self.listener.fileno() >= 0:
            self.listener.close()
            self._unlink()
        for pid, slot in self.workers.items():
            if self.board.state(slot) == IDLE:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xce.cli.server", description="the xce command's warm server "
                                "(started by the native front, native/xce.c)")
    p.add_argument("--socket", required=True, help="the Unix socket to listen on")
    p.add_argument("--ready-fd", type=int, help="a descriptor to write 'ready' to once listening, then close")
    args = p.parse_args(argv)
    if os.fork():  # detached: the front that spawned us waits for this first process only, so the server
        os._exit(0)  # is nobody's child (not the daemon's the front may go on to exec into)
    try:
        idle = float(os.environ.get("XCE_CLI_IDLE", DEFAULT_IDLE))
    except ValueError:
        idle = DEFAULT_IDLE
    server = Server(args.socket, idle)
    server.listen()
    if args.ready_fd is not None:
        os.write(args.ready_fd, b"ready\n")
        os.close(args.ready_fd)
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
