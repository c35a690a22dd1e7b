"""The rendezvous of a multi-host job: an address of its first host that its other hosts can reach (the
worker's advertised ``--address``) and a port reserved there for the run (``XCE_RDZV_HOST``,
``XCE_RDZV_PORT``), where a launcher such as torchrun's agents or a job's own rank 0 meets the others.

Reserved means no two running jobs on the machine are given the same port, whichever worker started them
(several ``xce up`` workers share one machine): a reservation is a lock (``flock``) on a file named after
the port in a directory every worker of the machine's user shares (``runtime_dir``: it must be that user's
alone, ``_own_dir``), and the port one the kernel found free when chosen. The worker takes the lock and
hands its open file to the run's shepherd (``xce-launch --hold``), which keeps it for as long as it lives:
the reservation ends with the run, even when its worker is killed or restarted meanwhile, and a worker that
restarts keeps its runs' ports (their journals). The lock files stay (empty, a port's name each): a file
nobody locks is a free port. Nothing holds the port open for the job: a process of the job binds it.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import secrets
import socket
import stat
import tempfile
import threading

from xce.wire import JOB_SECRET_PREFIX

__all__ = ["Ports", "RendezvousDirError", "new_secret"]

SECRET_BYTES = 32


def new_secret() -> tuple[str, str]:
    """A run's secret (``XCE_JOB_TOKEN``), which its ``blaunch`` presents to the controller, and its
    sha256, which is all the worker reports of it (the controller keeps tokens so: ``identity.hash_token``)."""
    secret = JOB_SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
    return secret, hashlib.sha256(secret.encode()).hexdigest()


def runtime_dir() -> str:
    """Where the workers of this machine keep their machine-wide reservations: ``/run/xce`` for root (the
    workers of a site), else a directory of the user's own under the temporary directory."""
    if os.geteuid() == 0:
        return "/run/xce"
    return os.path.join(tempfile.gettempdir(), f"xce-{os.geteuid()}")


class RendezvousDirError(OSError):
    """The reservations' directory is not this worker's user's alone: ``xce worker`` refuses to start."""


def _own_dir(path: str) -> str:
    """``path``, made (0700) if missing, once it is a directory (not a link) of this user's that nobody else
    may write in: the non-root default is under the shared temporary directory, where another local user
    could make it first and would then hold, or plant, every reservation."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        what = ("a link" if stat.S_ISLNK(st.st_mode) else "not a directory" if not stat.S_ISDIR(st.st_mode)
                else f"owned by uid {st.st_uid}" if st.st_uid != os.geteuid() else f"mode {st.st_mode & 0o777:o}")
        raise RendezvousDirError(f"{path} is {what}: rendezvous ports are reserved only in a directory of this "
                                 f"user's (uid {os.geteuid()}) that no other user may write in")
    return path


HOLD_MIN_FD = 10  # a lock's descriptor is moved above the shepherd's fixed ones (sandbox.REPORT_FD, HOLD_FD)


class Ports:
    """The rendezvous ports this worker's runs hold, reserved machine-wide in ``directory``."""

    def __init__(self, directory: str | None = None, tries: int = 64) -> None:
        base = directory or runtime_dir()
        os.makedirs(os.path.dirname(base) or ".", exist_ok=True)
        self.dir = _own_dir(os.path.join(_own_dir(base), "rendezvous-ports"))
        self._held: dict[tuple[int, int], int] = {}
        self._locks: dict[tuple[int, int], int] = {}  # run -> its lock's descriptor, until its shepherd has it
        self._lock = threading.Lock()
        self._tries = tries

    def reserve(self, run: tuple[int, int]) -> int:
        """A port for ``run`` no other run on this machine holds (the same one again for the same run); its
        lock is ``lock_fd(run)`` until ``handed_over``."""
        with self._lock:
            if run in self._held:
                return self._held[run]
            for _ in range(self._tries):
                port = _free_port()
                fd = self._take(port)
                if fd is not None:
                    self._held[run], self._locks[run] = port, fd
                    return port
        raise OSError(f"no free rendezvous port after {self._tries} tries")

    def _take(self, port: int) -> int | None:
        """The lock of ``port`` (its open file, locked), or None when another run holds it."""
        fd = os.open(os.path.join(self.dir, str(port)), os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HOLD_MIN_FD)
        os.close(fd)
        return moved

    def lock_fd(self, run: tuple[int, int]) -> int | None:
        """The descriptor of ``run``'s reservation, for its shepherd to keep (``xce-launch --hold``)."""
        with self._lock:
            return self._locks.get(run)

    def handed_over(self, run: tuple[int, int]) -> None:
        """The run's shepherd has its lock now (or never will): this worker's copy closes."""
        with self._lock:
            fd = self._locks.pop(run, None)
        if fd is not None:
            os.close(fd)

    def adopt(self, run: tuple[int, int], port: int) -> None:
        """A run of an earlier life of this worker keeps its port (its shepherd holds the lock)."""
        with self._lock:
            self._held[run] = port

    def release(self, run: tuple[int, int]) -> None:
        self.handed_over(run)
        with self._lock:
            self._held.pop(run, None)

    def held(self) -> dict[tuple[int, int], int]:
        with self._lock:
            return dict(self._held)


def _free_port() -> int:
    """A TCP port nothing listens on now, on every address of the host (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
