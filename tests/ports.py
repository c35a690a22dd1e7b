"""Free loopback ports for test servers, never the same one for two test processes at once.

``bind(0)`` then close hands out a port that is free *now*; under ``pytest -n`` another test process may
be handed the same one before our server binds it, and a test would then talk to someone else's
controller.  Each xdist worker therefore takes its ports from a range of its own, below the kernel's
ephemeral range (32768+, where client sockets get theirs), trying each for being free."""

from __future__ import annotations

import itertools
import os
import socket

_SPAN = 2000
_FIRST = 12000  # gw0: 12000-13999, gw1: 14000-15999, ... gw9 ends at 31999


def _own_range() -> range | None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or not worker[2:].isdigit() or int(worker[2:]) > 9:
        return None
    start = _FIRST + int(worker[2:]) * _SPAN
    return range(start, start + _SPAN)


_RANGE = _own_range()
_next = itertools.cycle(_RANGE) if _RANGE is not None else None


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nothing listens on (in this test process's own range under xdist)."""
    if _next is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for _ in range(_SPAN):
        port = next(_next)
        if _bindable(port):
            return port
    raise RuntimeError(f"no free port in {_RANGE}")
