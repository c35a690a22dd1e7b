"""Failures with real processes: lost hosts, partitioned hosts, worker restarts, controller SIGKILL."""

from __future__ import annotations

import glob
import json
import os
import signal
import threading

import httpx

from tests.helpers import kill_jobs_of, wait_for
from tests.integration.conftest import make_cluster


def host_state(cl, name: str) -> str:
    with cl.api() as c:
        return next(h["state"] for h in c.get("/v1/hosts").json() if h["name"] == name)


def test_lost_host_requeues_rerunnable_jobs_and_ends_the_others(cluster):
    h1 = cluster.add_worker("h1", slots=4)
    rerun = cluster.submit("-r", "--", "sleep", "300")
    plain = cluster.submit("--", "sleep", "300")
    for j in (rerun, plain):
        assert cluster.wait_state(j, "RUN")["hosts"] == ["h1"]
    cluster.add_worker("h2", slots=4)
    h1.kill()
    kill_jobs_of(h1.work_dir)
    wait_for(lambda: host_state(cluster, "h1") == "UNAVAIL", what="h1 declared lost")
    ended = cluster.wait_state(plain, "EXIT")
    assert ended["exit_reason"] == "host lost (h1)"
    again = wait_for(lambda: (j := cluster.job(rerun))["state"] == "RUN" and j["run"] == 2 and j,
                     what="rerunnable job running again")
    assert again["hosts"] == ["h2"]
    r = cluster.xce("hosts")
    assert any(line.split()[:2] == ["h1", "UNAVAIL"] for line in r.stdout.splitlines())

    h1.start()  # the machine comes back: its old runs are reported lost and change nothing
    assert host_state(cluster, "h1") == "OK"
    assert cluster.job(plain)["exit_reason"] == "host lost (h1)"
    assert (cluster.job(rerun)["state"], cluster.job(rerun)["run"], cluster.job(rerun)["hosts"]) == ("RUN", 2, ["h2"])
    cluster.xce("kill", str(rerun))


def test_a_partitioned_hosts_run_is_fenced_before_the_job_runs_elsewhere(cluster, tmp_path):
    """The worker is cut off (SIGSTOP): its shepherd ends the run once its lease runs out, and the
    controller gives the run up only after that, so the rerun on h2 never overlaps the first run."""
    h1 = cluster.add_worker("h1", slots=2)
    pidfile = tmp_path / "pid"
    job = cluster.submit("-r", "--", "sh", "-c", f"echo $$ > {pidfile}; exec sleep 300")
    cluster.wait_state(job, "RUN")
    wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), what="job pid")
    stale_pid = int(pidfile.read_text())
    cluster.add_worker("h2", slots=2)
    h1.proc.send_signal(signal.SIGSTOP)  # no heartbeats, no lease renewals
    try:
        wait_for(lambda: host_state(cluster, "h1") == "UNAVAIL", what="h1 declared lost")
        wait_for(lambda: (j := cluster.job(job))["run"] == 2 and j["state"] == "RUN", what="job rerun on h2")
        assert not os.path.exists(f"/proc/{stale_pid}"), "the partitioned run was fenced before the rerun"
    finally:
        h1.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: host_state(cluster, "h1") == "OK", what="h1 back")
    assert cluster.job(job)["hosts"] == ["h2"] and cluster.job(job)["state"] == "RUN"
    cluster.xce("kill", str(job))


def test_restarted_worker_adopts_running_jobs_and_reports_ones_that_ended(tmp_path):
    cl = make_cluster(tmp_path, host_timeout=30.0)
    try:
        w = cl.add_worker("h1", slots=4)
        gate = tmp_path / "gate"
        long = cl.submit("-o", str(tmp_path / "long.out"), "--",
                         "sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done; echo finished")
        short_gate = tmp_path / "short-gate"  # opened only once its worker is down: it ends while it is
        short = cl.submit("--", "sh", "-c", f"while [ ! -e {short_gate} ]; do sleep 0.05; done; exit 7")
        cl.wait_state(long, "RUN")
        cl.wait_state(short, "RUN")
        w.kill()
        short_gate.write_text("")
        wait_for(lambda: glob.glob(os.path.join(w.work_dir, "runs", f"{short}.1", "status")),
                 what="short job ended while its worker is down")
        w.start()
        ended = cl.wait_state(short, "EXIT")
        assert (ended["exit_code"], ended["exit_reason"]) == (7, "nonzero exit code 7"), "the real status"
        assert cl.job(long)["state"] == "RUN", "adopted, not lost"
        gate.write_text("")
        done = cl.wait_state(long, "DONE")
        assert done["run"] == 1 and (tmp_path / "long.out").read_text().strip() == "finished"
        # a run's directory goes once the controller has its final report (just after DONE is committed)
        wait_for(lambda: glob.glob(os.path.join(w.work_dir, "runs", "*")) == [], what="run directories removed")
        assert glob.glob(os.path.join(w.work_dir, "jobs", "*")) == []
    finally:
        cl.stop()


def test_controller_sigkill_during_a_burst_loses_nothing_and_starts_nothing_twice(tmp_path):
    cl = make_cluster(tmp_path, host_timeout=30.0)
    try:
        for h in ("h1", "h2"):
            cl.add_worker(h, slots=4)
        ledger = tmp_path / "started"
        acked: list[int] = []
        stop = threading.Event()

        def submit_until_stopped() -> None:
            body = {"command": ["sh", "-c", f"echo $XCE_JOBID >> {ledger}"]}
            with cl.api() as c:
                while not stop.is_set() and len(acked) < 200:
                    try:
                        r = c.post("/v1/jobs", json=body)
                    except httpx.HTTPError:
                        continue  # the controller is down: try again (an unacked try may exist or not)
                    if r.status_code == 201:
                        acked.append(r.json()["id"])

        t = threading.Thread(target=submit_until_stopped)
        t.start()
        wait_for(lambda: len(acked) >= 60, what="60 acknowledged")
        cl.ctl.kill()
        cl.ctl.start()
        wait_for(lambda: len(acked) >= 120, what="120 acknowledged after the restart")
        stop.set()
        t.join(30)
        with cl.api() as c:
            jobs = {j["id"]: j for j in c.get("/v1/jobs", params={"all": "true"}).json()}
        assert set(acked) <= set(jobs), "every acknowledged job survived"
        # every job ends: a worker whose reports met the restarting controller retries with backoff (up
        # to 5 s), so jobs on one host may finish after later ones on another
        def all_ended() -> dict | None:
            with cl.api() as c:
                now = {j["id"]: j for j in c.get("/v1/jobs", params={"all": "true"}).json()}
            return now if all(j["state"] in ("DONE", "EXIT") for j in now.values()) else None

        jobs = wait_for(all_ended, timeout=90, interval=0.5, what="every job ended")
        assert all(j["state"] == "DONE" for j in jobs.values()), [
            {k: j[k] for k in ("id", "state", "run", "hosts", "pending_reason", "exit_reason")}
            for j in jobs.values() if j["state"] != "DONE"][:3]
        started = [int(x) for x in ledger.read_text().split()]
        assert sorted(started) == sorted(jobs), "every job started exactly once"
        assert all(j["run"] == 1 for j in jobs.values())
        snapshot = json.loads(cl.xce("--json", "ping").stdout)
        assert snapshot["leader_epoch"] == 2
    finally:
        cl.stop()


def test_a_host_that_is_gone_is_removed_by_an_admin_and_not_while_anything_is_on_it(cluster):
    h1 = cluster.add_worker("h1", slots=2, attrs={"box": "one"})
    cluster.add_worker("h2", slots=2)
    job = cluster.submit("-R", "select[box==one]", "--", "sleep", "300")
    cluster.wait_state(job, "RUN")
    r = cluster.xce("host", "remove", "h1", ok=False)
    assert r.returncode == 1 and "host h1: host h1 is up (its worker heartbeats): stop its worker first" in r.stderr
    h1.kill()
    kill_jobs_of(h1.work_dir)
    wait_for(lambda: host_state(cluster, "h1") == "UNAVAIL", what="h1 declared lost")
    if cluster.job(job)["state"] == "RUN":  # (its fence may have run out already on a slow machine)
        r = cluster.xce("host", "remove", "h1", ok=False)
        assert r.returncode == 1 and f"host h1 still holds jobs {job}" in r.stderr, r.stderr
    assert cluster.wait_state(job, "EXIT")["exit_reason"] == "host lost (h1)"
    cluster.xce("user", "create", "dora")
    dora = json.loads(cluster.xce("--json", "token", "create", "--user", "dora").stdout)["token"]
    r = cluster.xce("host", "remove", "h1", ok=False, env={"XCE_TOKEN": dora})
    assert r.returncode == 1 and "user 'dora' is not an admin" in r.stderr, r.stderr
    assert cluster.xce("host", "remove", "h1").stdout == "Host <h1> is removed\n"
    assert [h["name"] for h in json.loads(cluster.xce("--json", "hosts").stdout)] == ["h2"]
    r = cluster.xce("--json", "host", "remove", "h1", ok=False)
    assert r.returncode == 1 and json.loads(r.stdout)["error"]["message"] == "host 'h1' does not exist"
    trail = json.loads(cluster.xce("--json", "audit", "--target", "host/h1").stdout)  # who removed it, and who could not
    assert {(a["user"], a["result"]) for a in trail if a["action"].startswith("DELETE")} >= {("admin", "ok")}, trail
