"""The order in which a cycle visits pending jobs: ``pending_order(view)``.

One place for it, so that every rule about who goes first lives here: queue priority first (higher
first); within a queue priority, the jobs the previous cycle reserved for (``Policy.reserved``: a
reservation, once made, is kept until its job starts), then the oldest first, or, with fair share on
(``Policy.fairshare``), the job of the project, then the user within it, that is furthest below its
share (``fairshare.py``).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Iterable, Iterator, Protocol

from xce.scheduler.fairshare import FairOrder
from xce.scheduler.view import ClusterView, JobView


class Order(Protocol):
    def __iter__(self) -> Iterator[JobView]: ...

    def placed(self, job: JobView) -> None: ...


def queue_key(job: JobView) -> tuple[int, int, int]:
    """Within a queue priority, the highest user priority (``-sp``) first, then first come first served:
    the key of the order without fair share."""
    return (-job.priority, -job.user_priority, job.id)


_ID, _USER_PRIORITY, _PRIORITY = attrgetter("id"), attrgetter("user_priority"), attrgetter("priority")


def in_queue_order(jobs: Iterable[JobView]) -> list[JobView]:
    """``sorted(jobs, key=queue_key)``, as three stable sorts by one attribute each (``reverse`` keeps
    equal keys in their order): no key tuple is made per job (100,000 of them a cycle), and jobs in id
    order already (as a view's are) sort in linear time."""
    out = sorted(jobs, key=_ID)
    out.sort(key=_USER_PRIORITY, reverse=True)
    out.sort(key=_PRIORITY, reverse=True)
    return out


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
    jobs = in_queue_order(view.pending)
    if view.policy.fairshare is not None:
        return FairOrder(jobs, view.policy.fairshare, reserved)
    return _Fcfs(_reserved_first(jobs, reserved))
