"""Free loopback ports for test servers, never the same one for two test processes at once.

``bind(0)`` then close hands out a port that is free *now*; under ``pytest -n`` another test process
may be handed the same one before our server binds it, and a test would then talk to someone else's
controller.  Test processes under xdist therefore take their ports below the kernel's ephemeral range
(32768+, where ``bind(0)`` and client sockets get theirs), and claim each with an ``flock`` on a file
named after it, held for the life of the process: two processes, of one run or of two runs at once,
never hold the same port.  A single-process run keeps ``bind(0)``."""

from __future__ import annotations

import fcntl
import os
import random
import socket

_FIRST, _LAST = 12000, 32000
_LOCKS = "/tmp/xce-test-ports"
_held: list[int] = []  # the lock files' descriptors: a port is ours while its descriptor is open
_order: list[int] = []


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def _claim(port: int) -> bool:
    fd = os.open(os.path.join(_LOCKS, str(port)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    if not _bindable(port):
        os.close(fd)
        return False
    _held.append(fd)
    return True


def free_port() -> int:
    """A loopback port nothing listens on and no other test process holds."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    if not _order:
        os.makedirs(_LOCKS, mode=0o1777, exist_ok=True)
        start = random.randrange(_FIRST, _LAST)
        _order.extend([*range(start, _LAST), *range(_FIRST, start)])
    while _order:
        port = _order.pop(0)
        if _claim(port):
            return port
    raise RuntimeError(f"no free port left in {_FIRST}-{_LAST} for this test process")
