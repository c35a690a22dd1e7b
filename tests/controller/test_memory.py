"""Freed memory goes back to the system: the controller's RSS follows its live state down."""

from __future__ import annotations

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
