"""Everyday batch controls through the CLI, on a real cluster (a controller and two workers on
loopback): dependencies (``-w``, ``-ti``): a pipeline runs in order, an exit code releases what waits
on it, a condition that can never hold leaves its job pending or ends it with ``-ti``; array limits
(``NAME[1-20]%2``) are never exceeded."""

from __future__ import annotations

import pytest

import time

from tests.helpers import wait_for
from tests.integration.conftest import make_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("deps"))
    c.add_worker("host1", slots=4)
    c.add_worker("host2", slots=4)
    yield c
    c.stop()


def read(path) -> str:
    with open(path) as fh:
        return fh.read()


def test_a_three_stage_pipeline_runs_in_order(cl, tmp_path):
    log, go = tmp_path / "log", tmp_path / "go"
    train = cl.submit("-J", "train", "--", "sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; echo train >> {log}")
    evaluate = cl.submit("-J", "evaluate", "-w", f"done({train})", "--", "sh", "-c", f"echo evaluate >> {log}")
    serve = cl.submit("-w", 'done("evaluate")', "--", "sh", "-c", f"echo serve >> {log}")
    why = cl.xce("job", "why", str(serve)).stdout
    assert "dependency condition not satisfied: done(\"evaluate\") (\"evaluate\" is PEND)" in why
    go.touch()
    for job_id in (train, evaluate, serve):
        cl.wait_state(job_id, "DONE")
    assert read(log).split() == ["train", "evaluate", "serve"]
    t, e, s = (cl.job(j) for j in (train, evaluate, serve))
    assert t["end_time"] <= e["start_time"] and e["end_time"] <= s["start_time"]
    assert f"done({train})" in cl.xce("job", "show", str(evaluate)).stdout


def test_exit_with_a_code_releases_its_handler_and_the_other_branch_never_runs(cl):
    failing = cl.submit("--", "sh", "-c", "exit 3")
    on_three = cl.submit("-w", f"exit({failing}, ==3)", "--", "true")
    on_done = cl.submit("-w", f"done({failing})", "--", "true")
    cl.wait_state(failing, "EXIT")
    cl.wait_state(on_three, "DONE")
    why = wait_for(lambda: "never satisfied" in (r := cl.xce("job", "why", str(on_done)).stdout) and r,
                   what="the never-satisfied reason")
    assert f"done({failing}) ({failing} is EXIT)" in why
    assert cl.job(on_done)["state"] == "PEND"
    cl.xce("kill", str(on_done))


def test_ti_ends_a_job_whose_dependency_can_never_hold(cl):
    failing = cl.submit("--", "false")
    orphan = cl.submit("-w", f"done({failing})", "-ti", "--", "true")
    job = cl.wait_state(orphan, "EXIT")
    assert job["start_time"] is None
    assert "dependency condition never satisfied (-ti)" in job["exit_reason"]


def test_bad_dependencies_are_refused_before_anything_runs(cl):
    r = cl.xce("submit", "-w", "done(12", "--", "true", ok=False)
    assert r.returncode == 2 and "bad dependency expression (-w)" in r.stderr and "^" in r.stderr
    r = cl.xce("submit", "-w", "done(99999)", "--", "true", ok=False)
    assert r.returncode != 0 and "not in the system" in r.stderr


def test_an_array_limit_is_never_exceeded_and_is_reached(cl):
    first = cl.submit("-J", "capped[1-20]%2", "--", "sleep", "0.3")
    ids = range(first, first + 20)
    most, deadline = 0, time.monotonic() + 120
    with cl.api() as api:
        while time.monotonic() < deadline:
            states = [j["state"] for j in api.get("/v1/jobs", params={"all": "true"}).json() if j["id"] in ids]
            most = max(most, sum(s in ("RUN", "STAGE_OUT") for s in states))
            if len(states) == 20 and all(s == "DONE" for s in states):
                break
            time.sleep(0.05)
    assert most == 2
    assert all(cl.job(i)["state"] == "DONE" for i in ids)
