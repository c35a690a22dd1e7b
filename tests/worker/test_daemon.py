"""The worker's own bookkeeping of runs, with real shepherds and jobs (no controller: nothing here
reaches the network)."""

from __future__ import annotations

import os
import queue
import shutil

from xce.worker.daemon import Worker


def _job(tmp_path, job_id: int) -> dict:
    return {"job_id": job_id, "run": 1, "display_id": str(job_id), "user": "alice", "name": "t",
            "command": ["sh", "-c", f"echo ran >> {tmp_path / 'ran'}"], "cwd": str(tmp_path), "stdout": "/dev/null",
            "stderr": "", "hosts": ["h1"], "slots": 1, "total_slots": 1, "array_index": None, "array_parent": None,
            "queue": "default", "project": "default", "claims": []}


def _next_report(w: Worker, kind: str) -> dict:
    while True:
        got, report = w._reports.get(timeout=30)
        if got == kind:
            return report


def test_a_dispatch_that_arrives_after_its_run_ended_and_was_cleaned_up_does_not_start_it_again(tmp_path):
    """Two paths dispatch (the work poll and the node agent's reports): an answer given before the run's
    start was committed can reach the worker after the run ended and its directory went."""
    w = Worker("h1", "http://127.0.0.1:9", "unused", slots=1, attrs={}, counters={}, work_dir=str(tmp_path / "w"))
    job = _job(tmp_path, 7)
    w._start(job)
    assert _next_report(w, "started")["job_id"] == 7
    assert _next_report(w, "finished")["exit_code"] == 0
    shutil.rmtree(w._run_dir(7, 1))  # the reporter's cleanup once the controller has the final report
    w._start(job)  # the late dispatch
    w._start(_job(tmp_path, 8))  # (another run still starts)
    assert _next_report(w, "started")["job_id"] == 8
    _next_report(w, "finished")
    assert (tmp_path / "ran").read_text().splitlines() == ["ran", "ran"], "job 7 ran once, job 8 once"
    try:
        kind, report = w._reports.get_nowait()
        raise AssertionError(f"an unexpected report: {kind} {report}")
    except queue.Empty:
        pass
    assert not os.path.exists(w._run_dir(7, 1))
