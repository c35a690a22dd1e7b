"""Giving memory the controller freed back to the system, and pacing the cyclic collector.

Retiring records (``controller/history.py``) and writing a snapshot (``Controller._snapshot_now``)
free many megabytes at once.  glibc's allocator keeps freed heap pages for reuse, so without this
the controller's RSS would stay at its high-water mark (a full backlog plus a snapshot's encoding)
long after the live state shrank: measured after 30,000 jobs had all retired, 150 MiB before
``malloc_trim(0)`` and 110 MiB after.  Elsewhere than glibc there is nothing to call, and nothing
is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return None


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Return the allocator's free pages to the system; whether it gave any back."""
    if _TRIM is None:
        return False
    return bool(_TRIM(0))


# The cyclic garbage collector's thresholds in the controller (``gc.set_threshold``; CPython's are
# 700, 10, 10).  A full collection walks every live object and answers nothing meanwhile: with a
# 10,000-job backlog and the jobs finished in the last minute, 150-350 ms, and CPython's defaults
# ran one every ~15 s under load (bench/history.py), so one request in a hundred waited for one.
# The model holds almost no reference cycles (those full collections found 0-300 objects to free),
# so collecting young objects every 10,000 allocations instead of 700, and looking at the old ones
# ten times less often, costs little memory.
COLLECTOR_THRESHOLDS = (10_000, 10, 100)


def pace_collector() -> None:
    """Set the controller's collector thresholds (once, at start)."""
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
