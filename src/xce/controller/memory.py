"""Giving memory the controller freed back to the system, and pacing the cyclic collector.

Retiring records (``controller/history.py``) and writing a model snapshot (``model_snapshot.write_snapshot``)
free many megabytes at once.  glibc's allocator keeps freed heap pages for reuse, so without this
the controller's RSS would stay at its high-water mark (a full backlog plus a snapshot's encoding)
long after the live state shrank: measured after 30,000 jobs had all retired, 150 MiB before
``malloc_trim(0)`` and 110 MiB after.  ``tune_allocator`` keeps the big blocks off the heap in the
first place.  Elsewhere than glibc there is nothing to call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc


def _glibc(function: str):
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), function) if name else None
    except (OSError, AttributeError):  # not glibc (musl has neither malloc_trim nor M_MMAP_THRESHOLD)
        return None


_TRIM = _glibc("malloc_trim")
_MALLOPT = _glibc("mallopt")

_M_MMAP_THRESHOLD = -3  # glibc's ``mallopt`` parameter (malloc.h)

#: blocks this large or larger get a mapping of their own, unmapped as soon as they are freed
MMAP_THRESHOLD = 256 * 1024


def tune_allocator() -> bool:
    """Keep big blocks off glibc's heap (once, at start); whether the allocator took the setting.

    glibc maps a large block on its own, but raises that threshold to the size of any mapped block
    that is freed (up to 32 MiB).  The first snapshot (10-15 MiB of JSON) is such a block: from then
    on every block below that size (snapshots, archive batches, big answers) came from the heap,
    where blocks still in use around it kept the heap large.  In bench/history.py the heap grew to as
    much as 115 MiB, up to 77 of it free, and RSS at 100,000 jobs was 142 MiB; with the threshold
    fixed the heap stayed at 22-24 MiB and RSS was 115-124 MiB at the same jobs/s (114-116 MiB from
    100,000 to 1,000,000 jobs).  (Also limiting glibc to
    one heap for all threads, ``M_ARENA_MAX``, changed nothing measurable.)
    """
    return _MALLOPT is not None and bool(_MALLOPT(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


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
