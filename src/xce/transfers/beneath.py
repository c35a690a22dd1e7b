"""Paths inside a claim, opened by a daemon that may be root, without following a link a job planted.

A claim's data directory belongs to the job's user, who may put symbolic links in it and swap
them in at any moment, also after the job ended and before its stage-out starts (a process of
theirs on another host, on shared storage).  Checking a name and then handing the name to a copy
(``normpath``, ``realpath``, then rclone or ``cp``) is a race the user wins.  So every copy a daemon
makes on a job's behalf goes through a descriptor instead:

- ``open_beneath``: the source, resolved beneath the claim's directory by ``openat2`` with
  ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: no component of the path may be
  a link, none may leave the directory (``..`` past it, an absolute path), and what is found is
  held by its descriptor (``O_PATH``, which reads nothing by itself), so a link swapped in afterwards
  changes nothing;
- ``dest_beneath``: the directory a destination is written into, resolved the same way, its
  missing directories made on the way (``mkdirat``, each given to the claim's owner before it is
  opened, again without following anything);
- the copy (rclone, ``cp``) is a child process that inherits the descriptor as fd 3 and is given
  ``/proc/self/fd/3`` (``FD_PATH``): the kernel resolves that to the object opened, not to a name.
  It runs as the claim's owner, so whatever it meets inside a directory tree (where rclone and
  ``cp`` walk by name) it reads and writes with that user's rights only.

simfs copies snapshots and clones in its own process, as root, by descriptors too
(``providers.kit.copy_tree``).

``native/xce-launch.c`` publishes claims into a job the same way (``openat2``, then a bind through
``/proc/self/fd``).  ``openat2`` is Linux 5.6 or later; without it these copies are refused rather
than made by name.  Stdlib only (``ctypes`` for the system call Python does not wrap).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import stat

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS
SYS_OPENAT2 = 437  # the same number on every architecture (system calls added since 5.1 share one table)
FD_PATH = "/proc/self/fd/3"  # where a copy's child finds the descriptor it inherits as fd 3


class Refused(Exception):
    """The path cannot be used as it is: ``code`` NOT_FOUND, SYMLINK (a link on the way), OUTSIDE
    (it leaves the directory), NOT_A_FILE (a fifo, a socket, a device), or NO_OPENAT2; ``message``
    names the path as the caller wrote it."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc: ctypes.CDLL | None = None


def openat2(dir_fd: int, path: str, flags: int, resolve: int = RESOLVE, mode: int = 0) -> int:
    """The ``openat2`` system call (``OSError`` as ``os.open`` raises it); ``O_CLOEXEC`` always."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    how = _OpenHow(flags | os.O_CLOEXEC, mode, resolve)
    for _ in range(16):  # EAGAIN: a rename elsewhere on the file system raced the BENEATH check
        fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(dir_fd), os.fsencode(path),
                           ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            break
    raise OSError(err, os.strerror(err), path)


def _refusal(e: OSError, shown: str) -> Refused:
    if e.errno == errno.ENOENT:
        return Refused("NOT_FOUND", f"{shown} does not exist")
    if e.errno == errno.ELOOP:
        return Refused("SYMLINK", f"{shown} is a symbolic link or passes through one: not followed")
    if e.errno == errno.EXDEV:
        return Refused("OUTSIDE", f"{shown} is outside the claim")
    if e.errno == errno.ENOTDIR:
        return Refused("NOT_FOUND", f"{shown}: a name on the way is not a directory")
    if e.errno == errno.ENOSYS:
        return Refused("NO_OPENAT2", "this kernel has no openat2 (Linux 5.6 or later): copies of a job's data "
                                     "are refused rather than made by name")
    return Refused("NOT_FOUND", f"{shown}: {e.strerror}")


def open_dir(path: str) -> int:
    """``O_PATH`` descriptor of the directory ``path`` (absolute, checked by the caller), its last
    component not a link."""
    return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def open_inside(roots: list[str], path: str) -> int:
    """``O_PATH`` descriptor of the directory ``path`` (resolved, checked by the caller to lie inside
    one of ``roots``, resolved too), opened from that root with no link on the way: one swapped in
    since the check is refused, not followed."""
    for root in roots:
        if path.startswith(root.rstrip("/") + "/"):
            root_fd = open_dir(root)
            try:
                fd = open_beneath(root_fd, path[len(root.rstrip("/")) + 1:], path)
            finally:
                os.close(root_fd)
            if kind(fd) != "dir":
                os.close(fd)
                raise Refused("NOT_FOUND", f"{path} is not a directory")
            return fd
    raise Refused("OUTSIDE", f"{path} is outside {', '.join(roots)}")


def open_beneath(dir_fd: int, rel: str, shown: str | None = None) -> int:
    """``O_PATH`` descriptor of ``rel`` beneath ``dir_fd``, no link anywhere on the way (``Refused``
    otherwise; ``shown``: how messages name the path)."""
    try:  # (without O_NOFOLLOW: with it a link as the last name would be opened itself, not refused)
        return openat2(dir_fd, rel or ".", os.O_PATH)
    except OSError as e:
        raise _refusal(e, shown or rel) from None


def open_sources(dir_fd: int, base: str, rels: list[str]) -> list[int]:
    """Every source of a copy out of a claim (``rels``, beneath ``dir_fd``, the claim's directory
    ``base``), opened before the first is copied and each a regular file or a directory; ``Refused``
    (and nothing left open) if any is not."""
    fds: list[int] = []
    try:
        for rel in rels:
            shown = os.path.join(base, rel)
            fds.append(open_beneath(dir_fd, rel, shown))
            kind(fds[-1], shown)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def kind(fd: int, shown: str = "it") -> str:
    """``dir`` or ``file`` (regular) of an open descriptor; ``Refused`` for anything else."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    raise Refused("NOT_A_FILE", f"{shown} is not a regular file or a directory")


def dest_beneath(dir_fd: int, rel: str, owner: tuple[int, int] | None, shown: str | None = None) -> tuple[int, str]:
    """Where a copy writes ``rel`` beneath ``dir_fd``: (descriptor of the directory that holds it, its
    last name), or (the descriptor of ``rel`` itself, "") when ``rel`` is the directory.  Directories
    missing on the way are made (mode 0777 less the umask, as rclone and ``mkdir -p`` make them) and
    given to ``owner`` before they are opened, so the copy, run as that owner, can write in them."""
    parts = [p for p in os.path.normpath(rel or ".").split("/") if p not in ("", ".")]
    if os.path.isabs(rel) or ".." in parts:
        raise Refused("OUTSIDE", f"{shown or rel} is outside the claim")
    fd = os.dup(dir_fd)
    try:
        for name in parts[:-1]:
            try:
                os.mkdir(name, 0o777, dir_fd=fd)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=fd, follow_symlinks=False)  # (a swapped-in link: its own)
            except FileExistsError:
                pass
            except OSError as e:
                raise _refusal(e, shown or rel) from None
            try:
                step = openat2(fd, name, os.O_PATH | os.O_DIRECTORY)
            except OSError as e:
                raise _refusal(e, shown or rel) from None
            os.close(fd)
            fd = step
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1] if parts else ""


def exists_at(dir_fd: int, name: str) -> bool:
    """Is there anything (a link included) named ``name`` in ``dir_fd`` (or, ``name`` "", the directory)?"""
    try:
        os.stat(name or ".", dir_fd=dir_fd, follow_symlinks=False)
        return True
    except OSError:
        return False


def inherit(fd: int) -> tuple[list[tuple], int]:
    """``posix_spawn`` file actions that give the child ``fd`` as fd 3 (``FD_PATH``), and a copy of
    ``fd`` to close once the child is spawned.  The copy is numbered 10 or more, so that the ``dup2``
    never meets fd 3 itself (a ``dup2`` onto itself would leave it close-on-exec)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    return [(os.POSIX_SPAWN_DUP2, high, 3)], high
