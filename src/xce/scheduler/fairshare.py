"""Fair share within a queue: the project, then the user within it, furthest below its share goes first.

A share tree of two levels (Slurm's fair-tree; LSF's hierarchical ``USER_SHARES``): projects
(``[[projects]] shares``) and, within each, users (``user_shares``).  At each level a member's
*dynamic priority* is LSF's::

    priority = share / (usage + run_job_factor * (1 + slots held now))

``usage`` is its decayed, weighted usage (``xce.model.fairshare``; a project's is its users' sum),
the run of what it holds now included.  Among the jobs of one queue priority, the next one visited
is the oldest job of the user with the highest priority within the project with the highest
priority.  A job placed in the cycle adds its slots to what its user and project hold, so one cycle
shares out the slots it has (a project with twice the share of another gets about twice the
slots), and the decayed usage evens out what cycles before it did.

Cost: a heap of projects and one of users per project, re-keyed only when a job is placed (a job
that is not placed changes no priority): O(log) per placed job, O(1) per other.
"""

from __future__ import annotations

import heapq
from collections import defaultdict, deque
from operator import attrgetter
from typing import Iterator

from xce.scheduler.view import FairShare, JobView


def priority(fs: FairShare, usage: float, held: int, share: float) -> float:
    """LSF's dynamic priority of a member with ``share``, ``usage`` and ``held`` slots held now."""
    return share / (usage + fs.run_job_factor * (1 + held))


class Tree:
    """The members' usage and slots held, as a cycle places jobs."""

    def __init__(self, fs: FairShare) -> None:
        self.fs = fs
        self.user_usage = dict(fs.usage)
        self.user_held = dict(fs.running)
        self.project_usage: dict[str, float] = {}
        self.project_held: dict[str, int] = {}
        for (p, _), u in fs.usage.items():
            self.project_usage[p] = self.project_usage.get(p, 0.0) + u
        for (p, _), n in fs.running.items():
            self.project_held[p] = self.project_held.get(p, 0) + n

    def project_priority(self, project: str) -> float:
        return priority(self.fs, self.project_usage.get(project, 0.0), self.project_held.get(project, 0),
                        self.fs.project_shares.get(project, 1.0))

    def user_priority(self, project: str, user: str) -> float:
        key = (project, user)
        return priority(self.fs, self.user_usage.get(key, 0.0), self.user_held.get(key, 0),
                        self.fs.user_shares.get(project, {}).get(user, 1.0))

    def placed(self, job: JobView) -> None:
        key = (job.project, job.user)
        self.user_held[key] = self.user_held.get(key, 0) + job.slots
        self.project_held[job.project] = self.project_held.get(job.project, 0) + job.slots


_OWNER = attrgetter("priority", "project", "user")


class FairOrder:
    """Pending jobs in fair share order within each queue priority (``order.pending_order``).

    ``jobs`` come in queue order (``order.in_queue_order``): a user's own jobs in one queue priority
    are then in theirs, the highest -sp first, then the oldest."""

    def __init__(self, jobs: list[JobView], fs: FairShare, reserved: frozenset[int] = frozenset()) -> None:
        self.tree = Tree(fs)
        self.levels: dict[int, dict[str, dict[str, deque[JobView]]]] = {}
        self.first: dict[int, list[JobView]] = {}  # per queue priority: jobs reserved for, ahead of the rest
        groups: defaultdict[tuple[int, str, str], list[JobView]] = defaultdict(list)  # one lookup a job
        for job in jobs:
            if job.id in reserved:
                self.first.setdefault(job.priority, []).append(job)
                self.levels.setdefault(job.priority, {})
                continue
            groups[_OWNER(job)].append(job)
        for (level, project, user), queued in groups.items():
            self.levels.setdefault(level, {}).setdefault(project, {})[user] = deque(queued)
        self._placed = False

    def placed(self, job: JobView) -> None:
        """The job visited last was placed: its user and project hold its slots from now on."""
        self.tree.placed(job)
        self._placed = True

    def __iter__(self) -> Iterator[JobView]:
        tree = self.tree
        for level in sorted(self.levels, reverse=True):
            for job in self.first.get(level, ()):
                yield job
            projects = self.levels[level]
            users = {p: [(-tree.user_priority(p, u), q[0].id, u) for u, q in us.items()] for p, us in projects.items()}
            for heap in users.values():
                heapq.heapify(heap)
            top = [(-tree.project_priority(p), heap[0][1], p) for p, heap in users.items()]
            heapq.heapify(top)
            while top:
                p = top[0][2]
                uheap = users[p]
                u = uheap[0][2]
                q = projects[p][u]
                while True:  # until one is placed, nothing changes: the same user's next job is next
                    self._placed = False
                    yield q.popleft()
                    if self._placed or not q:
                        break
                if q:
                    heapq.heapreplace(uheap, (-tree.user_priority(p, u), q[0].id, u))
                else:
                    heapq.heappop(uheap)
                if uheap:
                    heapq.heapreplace(top, (-tree.project_priority(p), uheap[0][1], p))
                else:
                    heapq.heappop(top)


def standings(fs: FairShare, members: dict[str, set[str]]) -> list[tuple[str, str | None, float, float, int, float]]:
    """What ``xce fairshare`` shows: per project, then per user of it (``members``, beside those with
    usage, slots held or a share of their own), ``(project, user or None, share, usage, slots held,
    priority)``; shares as fractions of their level (the projects', a project's users')."""
    tree = Tree(fs)
    people: dict[str, set[str]] = {p: set(us) for p, us in members.items()}
    for p, u in list(fs.usage) + list(fs.running):
        people.setdefault(p, set()).add(u)
    for p, us in fs.user_shares.items():
        people.setdefault(p, set()).update(us)
    total = sum(fs.project_shares.get(p, 1.0) for p in people) or 1.0
    out: list[tuple[str, str | None, float, float, int, float]] = []
    for p in sorted(people):
        share = fs.project_shares.get(p, 1.0)
        out.append((p, None, share / total, tree.project_usage.get(p, 0.0), tree.project_held.get(p, 0),
                    tree.project_priority(p)))
        ushares = {u: fs.user_shares.get(p, {}).get(u, 1.0) for u in people[p]}
        utotal = sum(ushares.values()) or 1.0
        for u in sorted(people[p]):
            out.append((p, u, ushares[u] / utotal, tree.user_usage.get((p, u), 0.0), tree.user_held.get((p, u), 0),
                        tree.user_priority(p, u)))
    return out
