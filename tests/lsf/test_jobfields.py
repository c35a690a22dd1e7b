"""bjobs' formats (``xce.lsf.jobfields``) on plain job documents: the fields LSF's pollers read."""

from __future__ import annotations

import pytest

from xce.lsf import jobfields
from xce.lsf._base import LsfError


def job(**over) -> dict:
    base = {"id": 7, "display_id": "7", "name": "n", "user": "u", "project": "p", "queue": "q", "state": "RUN",
            "command": ["/bin/sh", "-c", "true"], "submit_time": 1.0e9, "start_time": 1.0e9 + 5, "end_time": None,
            "pending_reason": None, "exit_code": None, "signal": None, "exit_reason": None, "hosts": ["h1", "h2"],
            "slots": 2, "resreq": "", "cwd": None, "stdout": None, "stderr": None, "history": [], "usage": None}
    return {**base, **over}


def test_stage_out_reads_as_run_and_the_states_lsf_has_are_its_own():
    assert jobfields.stat(job(state="STAGE_OUT")) == "RUN"
    assert [jobfields.stat(job(state=s)) for s in ("PEND", "PSUSP", "RUN", "USUSP", "DONE", "EXIT")] == [
        "PEND", "PSUSP", "RUN", "USUSP", "DONE", "EXIT"]


def test_exit_fields_as_lsf_gives_them():
    ended = job(state="EXIT", exit_code=3, exit_reason="exit code 3", end_time=1.0e9 + 9)
    assert (jobfields.exit_code(ended), jobfields.exit_reason(ended), jobfields.kill_reason(ended)) == ("3", "", "")
    killed = job(state="EXIT", exit_code=None, signal=15, exit_reason="killed by admin", end_time=1.0e9 + 9)
    assert (jobfields.exit_code(killed), jobfields.kill_reason(killed)) == ("143", "killed by admin")
    assert jobfields.exit_code(job()) == ""  # running: nothing yet
    assert jobfields.exit_code(job(state="DONE", exit_code=0, end_time=1.0e9 + 9)) == "0"


def test_format_words_widths_aliases_and_a_delimiter():
    assert jobfields.parse_format("JOBID stat:5 job_name:-20 delimiter=','") == (["jobid", "stat", "job_name"], ",")
    assert jobfields.parse_format("id name cmd") == (["jobid", "job_name", "command"], None)
    with pytest.raises(LsfError, match="unknown field"):
        jobfields.parse_format("jobid nosuchfield")
    rows = jobfields.table([job()], ["jobid", "stat", "exec_host", "pend_reason"], None, True).splitlines()
    assert rows[0].split() == ["JOBID", "STAT", "EXEC_HOST", "PEND_REASON"]
    assert rows[1].split() == ["7", "RUN", "h1:h2", "-"]
    assert jobfields.table([job()], ["jobid", "pend_reason"], "|", False) == "7|"


def test_json_records_hold_strings_and_empty_strings():
    rec = jobfields.record(job(state="PEND", pending_reason="no host has 4 free slots", start_time=None),
                           ["jobid", "stat", "pend_reason", "start_time", "exit_code"])
    assert rec == {"JOBID": "7", "STAT": "PEND", "PEND_REASON": "no host has 4 free slots", "START_TIME": "",
                   "EXIT_CODE": ""}
