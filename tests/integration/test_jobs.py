"""Jobs on a real cluster: a controller and three worker processes on loopback.

host1: 4 slots, zone=a, gpu=2     host2: 4 slots, zone=b     host3: 2 slots, zone=b
"""

from __future__ import annotations

import json
import os
import time

import pytest

from tests.helpers import wait_for
from tests.integration.conftest import make_cluster


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    c = make_cluster(tmp_path_factory.mktemp("jobs"))
    c.add_worker("host1", slots=4, attrs={"zone": "a"}, counters={"gpu": "2"})
    c.add_worker("host2", slots=4, attrs={"zone": "b"})
    c.add_worker("host3", slots=2, attrs={"zone": "b"})
    yield c
    c.stop()


@pytest.fixture
def out(tmp_path):
    return tmp_path


def read(path) -> str:
    with open(path) as fh:
        return fh.read()


def test_job_starts_where_it_was_submitted_and_sees_its_environment(cl, out):
    # (before issue 31 it started in its workspace; as LSF's, it starts in the submission directory)
    job_id = cl.submit("-o", "o.txt", "--",
                       "sh", "-c", 'echo "$XCE_JOBID|$XCE_HOSTS|$XCE_SLOTS|$(pwd)|$XCE_WORKSPACE"; echo err >&2',
                       cwd=str(out))
    job = cl.wait_state(job_id, "DONE")
    jid, hosts, slots, cwd, ws = read(out / "o.txt").splitlines()[0].split("|")
    assert (jid, hosts, slots) == (str(job_id), job["hosts"][0], "1")
    assert cwd == str(out) == job["submit_dir"] and ws.endswith(f"/jobs/{job_id}.1") and job["note"] is None
    assert "err" in read(out / "o.txt")  # stderr goes with stdout unless -e
    assert not os.path.exists(ws), "the workspace is cleaned up after the job"
    assert job["exit_code"] == 0 and job["start_time"] <= job["end_time"]


def test_cwd_and_separate_error_file(cl, out):
    job_id = cl.submit("--cwd", str(out), "-o", "o.%J", "-e", "e.%J", "--", "sh", "-c", "pwd; echo oops >&2")
    cl.wait_state(job_id, "DONE")
    assert read(out / f"o.{job_id}").strip() == str(out)
    assert read(out / f"e.{job_id}").strip() == "oops"


def test_multi_slot_jobs_span_hosts_as_asked(cl, out):
    spread = cl.submit("-n", "7", "--", "true")  # more than any host has: several hosts
    one = cl.submit("-n", "4", "-R", "span[hosts=1]", "--", "true")
    ptile = cl.submit("-n", "4", "-R", "span[ptile=2]", "--", "true")
    jobs = {k: cl.wait_state(j, "DONE") for k, j in (("spread", spread), ("one", one), ("ptile", ptile))}
    assert len(jobs["spread"]["hosts"]) >= 2
    assert len(jobs["one"]["hosts"]) == 1 and jobs["one"]["hosts"][0] in ("host1", "host2")
    assert len(jobs["ptile"]["hosts"]) == 2


def test_the_job_sees_all_its_hosts(cl, out):
    job_id = cl.submit("-n", "4", "-R", "span[ptile=2]", "-o", str(out / "h"), "--",
                       "sh", "-c", 'echo "$XCE_HOSTS|$XCE_SLOTS"')
    job = cl.wait_state(job_id, "DONE")
    hosts, slots = read(out / "h").strip().split("|")
    assert hosts.split() == job["hosts"] and slots == "4"


def test_select_places_jobs_on_matching_hosts(cl):
    ids = [cl.submit("-R", "select[zone==b]", "--", "true") for _ in range(3)]
    for j in ids:
        assert cl.wait_state(j, "DONE")["hosts"][0] in ("host2", "host3")
    none = cl.submit("-R", "select[zone==c]", "--", "true")
    why = wait_for(lambda: "no host matches" in (r := cl.xce("job", "why", str(none)).stdout) and r,
                   what="pending reason")
    assert why.strip() == f"Job <{none}> PEND: no host matches select[zone==c]"
    cl.xce("kill", str(none))


def test_a_select_naming_what_no_host_has_warns_and_is_submitted_all_the_same(cl):
    r = cl.xce("submit", "-R", "select[zoen==a && gpu>0 && zone==a]", "--", "true")
    assert r.stdout.startswith("Job <") and r.stderr == (
        "xce: warning: select[] names 'zoen', which no host has (as an attribute or a counter): the job waits "
        "until a host has it (xce hosts lists what hosts have)\n"), r.stderr
    job = int(r.stdout.split("<")[1].split(">")[0])
    assert cl.wait_state(job, "PEND")["state"] == "PEND"
    cl.xce("kill", str(job))
    r = cl.xce("--json", "submit", "-R", "select[zone==a && gpu]", "--", "true")  # names hosts have: no warning
    assert r.stderr == "" and "warnings" not in json.loads(r.stdout)
    cl.wait_state(json.loads(r.stdout)["id"], "DONE")


def test_counters_are_reserved_exhausted_and_released(cl):
    a = cl.submit("-R", "rusage[gpu=1]", "--", "sleep", "60")
    b = cl.submit("-R", "rusage[gpu=1]", "--", "sleep", "60")
    for j in (a, b):
        assert cl.wait_state(j, "RUN")["hosts"] == ["host1"]
    c = cl.submit("-R", "rusage[gpu=1]", "--", "true")
    reason = wait_for(lambda: (r := cl.job(c)["pending_reason"]) and "gpu" in r and r, what="gpu reason")
    assert "enough gpu free" in reason and cl.job(c)["state"] == "PEND"
    hosts = {h["name"]: h for h in cl.api().get("/v1/hosts").json()}
    assert hosts["host1"]["counters_used"] == {"gpu": 2.0}
    cl.xce("kill", str(a))
    assert cl.wait_state(c, "DONE")["hosts"] == ["host1"]
    cl.xce("kill", str(b))
    cl.wait_state(b, "EXIT")
    wait_for(lambda: {h["name"]: h for h in cl.api().get("/v1/hosts").json()}["host1"]["counters_used"] == {},
             what="gpu released")


def test_job_arrays_run_every_element_with_its_index(cl, out):
    """%J, $XCE_JOBID and $LSB_JOBID are the array's id in every element, as LSF's %J and LSB_JOBID are."""
    parent = cl.submit("-J", "arr[1-6]", "-o", str(out / "a.%J.%I"), "--", "sh", "-c",
                       "echo $XCE_ARRAY_INDEX $XCE_JOBID $LSB_JOBID $LSB_JOBINDEX")
    wait_for(lambda: all(j["state"] == "DONE" for j in cl.api().get("/v1/jobs", params={"array": parent}).json()),
             what="array done")
    for i in range(1, 7):
        assert read(out / f"a.{parent}.{i}").split() == [str(i), str(parent), str(parent), str(i)]


def test_kill_stops_the_whole_process_group(cl, out):
    pidfile = out / "pids"
    job_id = cl.submit("--", "sh", "-c", f'sleep 300 & echo $! > {pidfile}; echo $$ >> {pidfile}; wait')
    cl.wait_state(job_id, "RUN")
    wait_for(lambda: os.path.exists(pidfile) and len(read(pidfile).split()) == 2, what="pids written")
    pids = [int(p) for p in read(pidfile).split()]
    r = cl.xce("kill", str(job_id))
    assert r.stdout.strip() == f"Job <{job_id}> is being terminated"
    job = cl.wait_state(job_id, "EXIT")
    assert job["exit_reason"] == "killed by admin"
    wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), what="job processes gone")


def test_requeue_runs_the_job_again(cl, out):
    marker = out / "runs"
    job_id = cl.submit("--", "sh", "-c", f'echo $XCE_RUN >> {marker}; sleep 300')
    cl.wait_state(job_id, "RUN")
    cl.xce("requeue", str(job_id))
    wait_for(lambda: cl.job(job_id)["run"] == 2 and cl.job(job_id)["state"] == "RUN", what="second run")
    wait_for(lambda: os.path.exists(marker) and read(marker).split() == ["1", "2"], what="both runs started")
    cl.xce("kill", str(job_id))
    cl.wait_state(job_id, "EXIT")


def test_hold_and_release(cl):
    job_id = cl.submit("-H", "--", "true")
    time.sleep(0.5)  # let a scheduling cycle pass: a held job must not be dispatched
    assert cl.job(job_id)["state"] == "PSUSP"
    cl.xce("release", str(job_id))
    cl.wait_state(job_id, "DONE")
    r = cl.xce("hold", str(job_id), ok=False)
    assert r.returncode == 1 and "only pending jobs can be held" in r.stderr


def test_queue_priority_decides_who_gets_scarce_slots(cl):
    blockers = [cl.submit("-R", "select[zone==a]", "--", "sleep", "60") for _ in range(4)]
    for j in blockers:
        cl.wait_state(j, "RUN")
    low = cl.submit("-R", "select[zone==a]", "--", "true")
    high = cl.submit("-q", "urgent", "-R", "select[zone==a]", "--", "true")
    time.sleep(0.3)
    cl.xce("kill", str(blockers[0]))
    first = cl.wait_state(high, "DONE")
    second = cl.wait_state(low, "DONE")
    assert first["start_time"] <= second["start_time"]
    cl.xce("kill", *map(str, blockers[1:]))


def test_queues_count_waiting_and_running_jobs_and_not_finished_ones(cl):
    done = cl.submit("-q", "urgent", "--", "true")
    cl.wait_state(done, "DONE")
    running = [cl.submit("-q", "urgent", "--", "sleep", "60") for _ in range(2)]
    for j in running:
        cl.wait_state(j, "RUN")
    held = cl.submit("-q", "urgent", "-H", "--", "true")  # PSUSP: waiting, as bqueues counts it
    try:
        with cl.api() as c:
            urgent = next(q for q in c.get("/v1/queues").json() if q["name"] == "urgent")
        assert (urgent["pending"], urgent["running"]) == (1, 2)
    finally:
        cl.xce("kill", str(held), *map(str, running))


def test_failures_end_exit_with_a_reason(cl):
    missing = cl.submit("--", "/no/such/command")
    nonzero = cl.submit("--", "sh", "-c", "exit 3")
    signalled = cl.submit("--", "sh", "-c", "kill -9 $$")
    badcwd = cl.submit("--cwd", "/no/such/dir", "--", "true")
    assert cl.wait_state(missing, "EXIT")["exit_reason"] == "failed to start: command not found: /no/such/command"
    j = cl.wait_state(nonzero, "EXIT")
    assert (j["exit_code"], j["exit_reason"]) == (3, "nonzero exit code 3")
    j = cl.wait_state(signalled, "EXIT")
    assert (j["signal"], j["exit_reason"]) == (9, "killed by signal 9")
    # --cwd must exist (only the submission directory falls back); the launcher, as the job's user, says so
    assert cl.wait_state(badcwd, "EXIT")["exit_reason"] == \
        "failed to start: cannot enter working directory /no/such/dir: No such file or directory"


def test_bad_resource_requirements_are_refused_at_submission(cl):
    r = cl.xce("submit", "-R", "select[zone==a] rusage[gpu=]", "--", "true", ok=False)
    assert r.returncode == 2 and "expected an amount for 'gpu'" in r.stderr
    with cl.api() as c:
        r = c.post("/v1/jobs", json={"command": ["true"], "resreq": "span[hosts=2]"})
    assert r.status_code == 400 and "only span[hosts=1] is supported" in r.json()["error"]["message"]


def test_cluster_counters_and_unknown_resources(cl):
    a = cl.submit("-R", "rusage[license=1]", "--", "sleep", "60")
    b = cl.submit("-R", "rusage[license=1]", "--", "true")
    cl.wait_state(a, "RUN")
    reason = wait_for(lambda: (r := cl.job(b)["pending_reason"]) and "license" in r and r, what="license reason")
    assert reason == "cluster resource license: 0 free, 1 needed"
    table = cl.xce("resources").stdout
    assert any(line.split()[:4] == ["license", "L2", "cluster", "1"] for line in table.splitlines()), table
    cl.xce("kill", str(a))
    cl.wait_state(b, "DONE")
    r = cl.xce("submit", "-R", "rusage[unobtainium=1]", "--", "true", ok=False)
    assert r.returncode == 1 and "unknown resource unobtainium in rusage[]" in r.stderr


def test_kill_with_json_reports_every_outcome_on_stdout_refusals_included(cl, out):
    job_id = cl.submit("--", "sleep", "300")
    r = cl.xce("--json", "kill", str(job_id), "999999", ok=False)
    assert r.returncode == 1, r.stderr  # one was refused: the rest still happened
    assert r.stderr == ""
    killed, missing = json.loads(r.stdout)
    assert killed["id"] == job_id
    assert missing["job"] == "999999" and missing["error"]["code"] == "not_found", missing
    assert "999999" in missing["error"]["message"]
    cl.wait_state(job_id, "EXIT")
