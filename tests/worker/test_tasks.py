"""What a worker keeps of its tasks (``xce.worker.tasks.TaskRuns``)."""

from __future__ import annotations

import os

from xce.worker.tasks import TaskRuns


def test_a_task_starts_once_and_its_runs_workspace_goes_with_the_last_task_of_a_run_over(tmp_path):
    runs = TaskRuns(str(tmp_path))
    first = runs.claim((7, 1, 1))
    assert first == os.path.join(tmp_path, "7.1.1") and os.path.isdir(first)
    assert runs.claim((7, 1, 1)) is None  # started already
    runs.claim((7, 1, 2))
    runs.workspaces[(7, 1)] = "/ws/7.1"
    assert runs.runs() == {(7, 1)} and runs.of_run((7, 1)) == {1: first, 2: os.path.join(tmp_path, "7.1.2")}
    assert runs.ended_runs([(7, 1)]) == []  # over, but a task still runs: the workspace stays
    assert runs.finished((7, 1, 1)) is None
    assert runs.finished((7, 1, 2)) == "/ws/7.1"  # the last one: the workspace goes
    assert runs.runs() == set() and runs.claim((7, 1, 3)) is None  # a run over starts no more tasks
    assert runs.claim((7, 1, 1)) is None  # nor one that ended


def test_a_runs_workspace_with_no_task_left_goes_when_the_run_is_over(tmp_path):
    runs = TaskRuns(str(tmp_path))
    runs.claim((8, 2, 1))
    runs.workspaces[(8, 2)] = "/ws/8.2"
    assert runs.finished((8, 2, 1)) is None  # its run goes on: more tasks may come
    assert runs.runs() == {(8, 2)}  # (the work poll asks whether it is over)
    assert runs.ended_runs([(8, 2), (9, 1)]) == ["/ws/8.2"]
    assert runs.runs() == set()
