"""The order in which a cycle visits pending jobs: ``pending_order(view)``.

One place for it, so that every rule about who goes first lives here: queue priority first (higher
first); within a queue priority, the jobs the previous cycle reserved for (``Policy.reserved``: a
reservation, once made, is kept until its job starts), then the oldest first, or, with fair share on
(``Policy.fairshare``), the job of the project, then the user within it, that is furthest below its
share (``fairshare.py``).
"""

from __future__ import annotations

from typing import Iterator, Protocol

from xce.scheduler.fairshare import FairOrder
from xce.scheduler.view import ClusterView, JobView


class Order(Protocol):
    def __iter__(self) -> Iterator[JobView]: ...

    def placed(self, job: JobView) -> None: ...


def queue_key(job: JobView) -> tuple[int, int, int]:
    """Within a queue priority, the highest user priority (``-sp``) first, then first come first served:
    the key of the order without fair share."""
    return (-job.priority, -job.user_priority, job.id)


def _reserved_first(jobs: list[JobView], reserved: frozenset[int]) -> list[JobView]:
    """``jobs`` (in queue order) with the reserved ones moved to the head of their queue priority."""
    return sorted(jobs, key=lambda j: (-j.priority, j.id not in reserved)) if reserved else jobs


class _Fcfs:
    def __init__(self, jobs: list[JobView]) -> None:
        self.jobs = jobs

    def __iter__(self) -> Iterator[JobView]:
        return iter(self.jobs)

    def placed(self, job: JobView) -> None:
        """The job visited last was placed (fair share counts it against its owners)."""


def pending_order(view: ClusterView) -> Order:
    """The pending jobs in the order a cycle visits them; ``placed(job)`` tells it a job was placed."""
    reserved = view.policy.reserved
    if view.policy.fairshare is not None:
        return FairOrder(view.pending, view.policy.fairshare, reserved)
    return _Fcfs(_reserved_first(sorted(view.pending, key=queue_key), reserved))
