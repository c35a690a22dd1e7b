"""Run limits at submission (``xce.model.jobs``): -W in LSF's [HH:]MM, the queue's default and maximum,
-wa/-wt together and only under a limit."""

from __future__ import annotations

import pytest

from tests.model.test_job_claims import ALICE, World
from xce.config import parse_config
from xce.errors import InvalidRequest
from xce.model import jobs
from xce.model.facts import QueueDefined
from xce.model.jobs import JobSpec
from xce.units import format_run_limit, parse_run_limit

SITE = parse_config("""
[controller]
terminate_grace = 7.0
[[users]]
name = "admin"
role = "admin"
[[queues]]
name = "default"
[[queues]]
name = "short"
run_limit = "30"
max_run_limit = "1:00"
[[projects]]
name = "default"
""")


@pytest.fixture
def w() -> World:
    w = World()
    w.commit([QueueDefined(time=0, name="short", priority=30)])
    return w


def submit(w: World, **spec):
    facts, job_id = jobs.submit(w.model, ALICE, JobSpec(command=["x"], **spec), w.tick(), SITE)
    w.commit(facts)
    return w.model.jobs[job_id]


def test_lsf_run_limits_read_as_minutes_or_hours_and_minutes():
    assert parse_run_limit("90") == parse_run_limit("1:30") == 5400.0
    assert format_run_limit(5400) == "1:30" and format_run_limit(60) == "0:01"
    for bad in ("0", "1:xx", "-5", "1.5", "", "9999999:00"):
        with pytest.raises(ValueError):
            parse_run_limit(bad)


def test_a_job_takes_its_queues_default_and_may_not_ask_beyond_its_maximum(w):
    assert submit(w, queue="short").run_limit == 1800.0
    assert submit(w, queue="short", run_limit="45").run_limit == 2700.0
    assert submit(w).run_limit is None  # the default queue has none
    with pytest.raises(InvalidRequest, match="over queue 'short''s maximum 1:00"):
        submit(w, queue="short", run_limit="1:01")


def test_a_warning_needs_its_signal_its_time_and_a_limit(w):
    job = submit(w, run_limit="10", warning_action="USR1", warning_time="2", run_estimate="5")
    assert (job.warn_signal, job.warn_time, job.run_estimate, job.limit_grace) == (10, 120.0, 300.0, 7.0)
    with pytest.raises(InvalidRequest, match="go together"):
        submit(w, run_limit="10", warning_action="USR1")
    with pytest.raises(InvalidRequest, match="give -W too"):
        submit(w, warning_action="USR1", warning_time="1")
    with pytest.raises(InvalidRequest, match="unknown signal"):
        submit(w, run_limit="10", warning_action="NOPE", warning_time="1")
