"""Freed memory goes back to the system: the controller's RSS follows its live state down."""

from __future__ import annotations

import subprocess
import sys

from xce.controller.memory import release_free_memory

CHUNK = 8 << 10  # below glibc's mmap threshold: from the heap, which frees only from its top by itself
CHUNKS = 8192  # 64 MiB


def rss_bytes() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) << 10
    raise AssertionError("no VmRSS in /proc/self/status")


def test_release_gives_back_freed_pages_that_the_heap_kept():
    chunks = [b"x" * CHUNK for _ in range(CHUNKS)]
    kept = chunks[::8]  # every eighth stays: the heap cannot shrink from its top
    del chunks
    before = rss_bytes()
    assert release_free_memory(), "glibc's malloc_trim gave nothing back"
    after = rss_bytes()
    assert before - after >= (CHUNKS * CHUNK) // 2, f"RSS {before >> 20} MiB -> {after >> 20} MiB"
    assert all(len(c) == CHUNK for c in kept)  # what is live is untouched


# a snapshot's worth of JSON is mapped and freed, then blocks of a MiB (an archive batch, a large
# answer) come and go: what they leave resident, in MiB
AFTER_A_SNAPSHOT = r"""
import sys
from xce.controller.memory import tune_allocator

def rss_bytes():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) << 10

if sys.argv[1] == "tuned":
    assert tune_allocator(), "glibc refused the mallopt settings"
snapshot = b"s" * (16 << 20)
del snapshot
before = rss_bytes()
blocks = [b"b" * (1 << 20) for _ in range(24)]
del blocks
print((rss_bytes() - before) >> 20)
"""


def resident_after_a_snapshot(mode: str) -> int:
    return int(subprocess.run([sys.executable, "-c", AFTER_A_SNAPSHOT, mode], capture_output=True, text=True,
                              check=True).stdout)


def test_blocks_freed_after_a_snapshot_leave_nothing_resident_once_the_allocator_is_tuned():
    # glibc by itself raised its mmap threshold to the freed snapshot's size: the blocks came from the
    # heap and stayed there (the control run shows this test would see it)
    assert resident_after_a_snapshot("plain") >= 16
    assert resident_after_a_snapshot("tuned") < 4
