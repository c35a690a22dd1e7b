"""What a worker keeps of the tasks it runs for multi-host jobs (``blaunch``): each in a directory
``tasks/<job>.<run>.<task>/`` made before its shepherd is spawned (so no task starts twice), the runs
it holds a workspace for on a host that is not their first, and the runs the controller said are over
(their tasks end at once, their workspaces go once the last has ended).

A task runs under a shepherd as a run does (``sandbox.start`` with its ``task``): on the run's first
host it joins the run's cgroup (the run's shepherd freezes it with the run and kills it with the run);
elsewhere it has a cgroup of its own, shaped as the run's part of that host, which its shepherd kills
whatever the task left in it.
"""

from __future__ import annotations

import os
import threading

__all__ = ["TaskKey", "TaskRuns"]

TaskKey = tuple[int, int, int]  # job, run, task
ENDED_KEPT = 10_000


class TaskRuns:
    def __init__(self, directory: str) -> None:
        self.dir = directory
        self._lock = threading.Lock()
        self.running: dict[TaskKey, str] = {}  # task -> its directory
        self.ended: dict[TaskKey, None] = {}  # ended in this life, newest last (bounded): never started again
        self.workspaces: dict[tuple[int, int], str] = {}  # runs whose workspace here is the tasks' (not their first host)
        self.over: dict[tuple[int, int], None] = {}  # runs the controller said are over, newest last (bounded)

    def task_dir(self, key: TaskKey) -> str:
        return os.path.join(self.dir, "%d.%d.%d" % key)

    def claim(self, key: TaskKey) -> str | None:
        """The new task's directory, made now; None when it was started already (or its run is over)."""
        path = self.task_dir(key)
        with self._lock:
            if key in self.running or key in self.ended or key[:2] in self.over or os.path.exists(path):
                return None
            os.mkdir(path, 0o711)  # the job passes through to its claims' mount points
            self.running[key] = path
        return path

    def is_running(self, key: TaskKey) -> bool:
        """Its shepherd is there (or about to be: its directory is made)."""
        with self._lock:
            return key in self.running

    def has_ended(self, key: TaskKey) -> bool:
        """It ended in this life of the worker, or its run is over."""
        with self._lock:
            return key in self.ended or key[:2] in self.over

    def adopt(self, key: TaskKey, path: str) -> None:
        """A task of an earlier life of this worker (its directory is there)."""
        with self._lock:
            self.running[key] = path

    def finished(self, key: TaskKey) -> str | None:
        """The task ended; the workspace of its run to remove now (its run is over and this was its last task)."""
        with self._lock:
            self.running.pop(key, None)
            self.ended[key] = None
            while len(self.ended) > ENDED_KEPT:
                del self.ended[next(iter(self.ended))]
            return self._spent(key[:2])

    def of_run(self, run: tuple[int, int]) -> dict[int, str]:
        """``run``'s tasks still running here: their numbers and directories."""
        with self._lock:
            return {k[2]: d for k, d in self.running.items() if k[:2] == run}

    def runs(self) -> set[tuple[int, int]]:
        """The runs this host has tasks or a tasks' workspace of (the work poll asks which are over)."""
        with self._lock:
            return {k[:2] for k in self.running} | set(self.workspaces).difference(self.over)

    def ended_runs(self, runs: list[tuple[int, int]]) -> list[str]:
        """The controller says ``runs`` are over: the workspaces to remove now (their tasks are gone)."""
        with self._lock:
            self.over.update(dict.fromkeys(runs))
            while len(self.over) > ENDED_KEPT:
                del self.over[next(iter(self.over))]
            return [w for run in runs if (w := self._spent(run)) is not None]

    def _spent(self, run: tuple[int, int]) -> str | None:
        if run not in self.over or any(k[:2] == run for k in self.running):
            return None
        return self.workspaces.pop(run, None)
