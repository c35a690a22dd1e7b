"""Backfill with reservations on a real cluster (issue 34): an 8-slot job is not starved by small jobs
submitted after it.  It gets a reservation from the run limits of the jobs in its way; small jobs that
end before it start around it; a job that would run past it waits and says whose reservation it
would delay; the 8-slot job starts by its planned start."""

from __future__ import annotations

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import make_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("backfill"), hosts={"host1": 4, "host2": 4})
    yield c
    c.stop()


def submit(cl, **body) -> int:
    with cl.api() as c:
        r = c.post("/v1/jobs", json=body)
        assert r.status_code in (200, 201), r.text
        return r.json()["id"]


def test_the_wide_job_starts_at_its_reservation_while_short_jobs_fill_around_it(cl, tmp_path):
    # six slots of eight held by jobs that may run two minutes (they end in half a minute)
    blockers = [submit(cl, command=["sleep", "30"], run_limit="2") for _ in range(6)]
    for b in blockers:
        cl.wait_state(b, "RUN", timeout=60)
    wide = submit(cl, command=["true"], slots=8, run_limit="1")
    why = wait_for(lambda: (r := cl.job(wide)["pending_reason"] or "").startswith("planned start") and r,
                   timeout=30, what="the 8-slot job's reservation")
    assert "host1 (4 slots), host2 (4 slots)" in why and "reserved" in why
    # a job that may run ten minutes would delay the reservation: it waits, and says so
    long = submit(cl, command=["true"], run_limit="10")
    held = wait_for(lambda: "would delay" in (r := cl.job(long)["pending_reason"] or "") and r,
                    timeout=30, what="the long job held back")
    assert held.startswith(f"would delay job {wide}'s reservation at ") and " on host" in held
    # short jobs (a one-minute limit ends before the reservation) take the two free slots now
    short = [submit(cl, command=["sleep", "1"], run_limit="1") for _ in range(4)]
    done = [cl.wait_state(s, "DONE", timeout=60) for s in short]
    assert cl.job(wide)["state"] == "PEND" and cl.job(long)["state"] == "PEND"
    wide_job = cl.wait_state(wide, "DONE", timeout=90)
    long_job = cl.wait_state(long, "DONE", timeout=60)
    # the short jobs ran before the wide one, though submitted after it
    assert max(j["start_time"] for j in done) <= wide_job["start_time"]
    # the wide job started no later than its reservation (the blockers' two-minute limits)
    assert wide_job["start_time"] <= max(cl.job(b)["start_time"] for b in blockers) + 120
    # the long job waited for the wide one
    assert long_job["start_time"] >= wide_job["start_time"]
