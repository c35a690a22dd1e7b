"""Multi-host jobs on a local cluster of two worker hosts (issue 33): LSF's variables and the rendezvous,
``blaunch`` starting tasks through the hosts' workers in the run's sandbox (claims on every host), the
job's secret as its only proof, a failed task ending the job, a killed job leaving no task on any host,
and real launchers: OpenMPI's ``mpirun --mca plm_rsh_agent blaunch`` with mpi4py, and a torchrun-style
launcher (``rdzv_launcher.py``) whose agents meet at the rendezvous."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys

import httpx
import pytest

from tests.helpers import process_alive, wait_for
from tests.integration.test_job_claims import make_job_cluster

BIN = os.path.dirname(sys.executable)  # blaunch, beside the interpreter
LAUNCHER = os.path.join(os.path.dirname(__file__), "rdzv_launcher.py")
SPREAD = ("-n", "4", "-R", "span[ptile=2]")  # two hosts, two slots each
# jobs find blaunch on their PATH, as a site's do (the submitter's environment goes with the job)
ENV = {"PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
LEASE = 5.0  # the cluster's launcher_lease


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    # a fence long enough to restart a worker with its runs and tasks kept (no test here loses a host)
    # and a short launcher lease: a blaunch killed by SIGKILL has its tasks killed within seconds
    c = make_job_cluster(tmp_path_factory.mktemp("multihost"), hosts=("host1", "host2"), host_timeout=15.0,
                         launcher_lease=LEASE)
    yield c
    c.stop()


def run_job(cl, script: str, *args: str, cwd=None, timeout: float = 60.0) -> tuple[dict, str]:
    job = cl.submit(*SPREAD, *args, "--", "sh", "-c", script, cwd=cwd, env=ENV)
    done = cl.wait_state(job, "DONE", "EXIT", timeout=timeout)
    with open(done["stdout"]) as fh:
        return done, fh.read()


def test_a_multi_host_job_has_lsfs_variables_and_a_rendezvous_on_its_first_host(cl):
    done, out = run_job(cl, 'echo "$LSB_HOSTS|$LSB_MCPU_HOSTS|$LSB_DJOB_NUMPROC|$(tr "\\n" " " < $LSB_DJOB_HOSTFILE)|'
                            '$XCE_RDZV_HOST|$XCE_RDZV_PORT"')
    assert done["state"] == "DONE" and done["hosts"] == ["host1", "host2"]
    hosts, mcpu, numproc, hostfile, rdzv_host, rdzv_port = out.strip().split("|")
    assert (hosts, mcpu, numproc, hostfile) == ("host1 host1 host2 host2", "host1 2 host2 2", "4",
                                                "host1 host1 host2 host2 ")
    assert rdzv_host == "127.0.0.1" and 1024 <= int(rdzv_port) < 65536


def test_blaunch_runs_a_task_on_each_host_and_returns_its_exit_status(cl, tmp_path):
    done, out = run_job(cl, "blaunch --keep-going host2 'echo task $XCE_TASK on $XCE_HOST in $PWD; exit 3'; "
                            "echo blaunch=$?; xce launch host1 echo on the first host $XCE_HOST; echo launch=$?; "
                            "blaunch -z 'host1 host2' 'echo $XCE_HOST $XCE_RDZV_PORT'; echo z=$?", cwd=tmp_path)
    lines = out.splitlines()
    assert lines[:4] == [f"task 1 on host2 in {tmp_path}", "blaunch=3", "on the first host host1", "launch=0"]
    port = lines[4].split()[1]
    assert sorted(lines[4:6]) == [f"host1 {port}", f"host2 {port}"] and lines[6] == "z=0"
    assert done["state"] == "DONE" and done["rendezvous"] == f"127.0.0.1:{port}"
    assert [(t["task"], t["host"], t["ended"], t["exit_code"]) for t in done["tasks"]] == [
        (1, "host2", True, 3), (2, "host1", True, 0), (3, "host1", True, 0), (4, "host2", True, 0)]
    shown = cl.xce("job", "show", str(done["id"])).stdout
    assert f"Rendezvous: 127.0.0.1:{port}" in shown or f"127.0.0.1:{port}" in shown
    assert "1 on host2: exit code 3; 2 on host1: exit code 0" in shown


def test_a_task_goes_only_to_the_jobs_own_hosts_and_only_the_job_may_ask(cl):
    other = cl.submit("--", "sleep", "300")
    cl.wait_state(other, "RUN")
    try:
        _, out = run_job(cl, f"blaunch host3 true; echo host3=$?; XCE_JOBID={other} blaunch host1 true; echo other=$?; "
                             "env -u XCE_JOB_TOKEN blaunch host1 true; echo outside=$?")
    finally:
        cl.xce("kill", str(other))
    assert "blaunch: host host3 is not one of job" in out and "host3=255" in out
    assert f"blaunch: not the job {other}: blaunch runs inside a running job" in out and "other=255" in out
    assert "blaunch: not inside an XCE job" in out and "outside=255" in out
    assert "XCE_JOB_TOKEN=" not in json.dumps(cl.job(other))
    with cl.api() as c:  # a user's token reaches no job's tasks, its own jobs' neither: refused at once
        r = c.post(f"/v1/jobs/{other}/tasks", json={"host": "host1", "command": "true"})
        assert r.status_code == 401 and "not a job's secret" in r.text, r.text
    assert httpx.post(f"{cl.ctl.url}/v1/jobs/{other}/tasks", json={"host": "host1", "command": "true"}).status_code == 401


def test_a_failed_task_ends_the_job(cl):
    done, out = run_job(cl, "blaunch host2 'exit 4'; sleep 300")  # (ended in its sleep)
    assert done["state"] == "EXIT" and done["exit_reason"] == "killed by task 1 on host2 (exit code 4)"


def test_killing_the_job_leaves_no_task_on_any_host(cl, tmp_path):
    # a task on each host, each with a process that left its process group (setsid), as daemons do
    (tmp_path / "task.sh").write_text(f"setsid sh -c 'echo $$ > {tmp_path}/escaped-$XCE_HOST; exec sleep 300' &\n"
                                      f"echo $$ > {tmp_path}/task-$XCE_HOST\nexec sleep 300\n")
    job = cl.submit(*SPREAD, "--", "sh", "-c", f"blaunch host1 sh {tmp_path}/task.sh & "
                                               f"blaunch host2 sh {tmp_path}/task.sh & wait", env=ENV)
    names = [f"{kind}-{host}" for kind in ("task", "escaped") for host in ("host1", "host2")]
    wait_for(lambda: all((tmp_path / n).exists() and (tmp_path / n).read_text().strip() for n in names),
             what="every task's processes up")
    pids = [int((tmp_path / n).read_text()) for n in names]
    assert all(process_alive(p) for p in pids)
    cl.xce("kill", str(job))
    assert cl.wait_state(job, "EXIT")["state"] == "EXIT"
    wait_for(lambda: not any(process_alive(p) for p in pids), what="no task left on any host")
    for host in ("host1", "host2"):  # and the workers are done with them: task directories, workspaces
        w = cl.workers[host]
        wait_for(lambda: not os.listdir(os.path.join(w.work_dir, "tasks")), what=f"{host}'s tasks gone")
        wait_for(lambda: not os.listdir(os.path.join(w.work_dir, "jobs")), what=f"{host}'s workspaces gone")


def test_rwx_and_rox_claims_are_mounted_on_every_host_and_rwo_is_refused_across_hosts(cl):
    cl.xce("claim", "create", "everywhere", "--class", "simfs", "--size", "1Gi", "--access", "RWX", "--wait")
    cl.xce("claim", "create", "onehost", "--class", "simfs", "--size", "1Gi", "--access", "RWO", "--wait")
    done, out = run_job(cl, "blaunch -z 'host1 host2' 'echo $XCE_HOST > $XCE_CLAIM_EVERYWHERE/$XCE_HOST' "
                            "&& cat $XCE_CLAIM_EVERYWHERE/host1 $XCE_CLAIM_EVERYWHERE/host2", "--claim", "everywhere")
    assert done["state"] == "DONE" and out.split() == ["host1", "host2"]
    r = cl.xce("submit", *SPREAD, "--claim", "onehost", "--", "true", ok=False)
    assert r.returncode == 1
    assert ("claim 'onehost' is RWO (read-write on one host at a time): a job on 2 hosts (-n 4 with span[ptile=2]) "
            "cannot use it") in r.stderr


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="OpenMPI is not installed (make deps: openmpi-bin)")
def test_mpirun_with_blaunch_runs_an_mpi4py_allreduce_over_two_hosts(cl, tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed (the test extra)")
    # each rank's line gathered to rank 0, which prints them (mpirun interleaves the ranks' output streams)
    (tmp_path / "allreduce.py").write_text(
        "import os\nfrom mpi4py import MPI\nc = MPI.COMM_WORLD\ntotal = c.allreduce(c.Get_rank() + 1)\n"
        "rows = c.gather(f'rank {c.Get_rank()} of {c.Get_size()} on {os.environ[\"XCE_HOST\"]} sum {total}', root=0)\n"
        "if rows:\n    print('\\n'.join(rows), flush=True)\n")
    # every host is this machine: OpenMPI's daemons and ranks talk over loopback (which it skips by default)
    mpirun = ("mpirun --allow-run-as-root --hostfile $LSB_DJOB_HOSTFILE -np $LSB_DJOB_NUMPROC "
              "--mca plm_rsh_agent blaunch --mca oob_tcp_if_include lo --mca btl self,tcp --mca btl_tcp_if_include lo "
              f"{sys.executable} allreduce.py")
    done, out = run_job(cl, mpirun, cwd=tmp_path, timeout=120)
    assert done["state"] == "DONE", (done.get("exit_code"), done.get("exit_reason"), done.get("tasks"), out)
    # (mpirun may warn that its setpgid of an agent that had exec'd already failed: OpenMPI's race, harmless)
    assert [line for line in out.splitlines() if not line.startswith("[")] == [
        f"rank {r} of 4 on host{r // 2 + 1} sum 10" for r in range(4)]


def test_a_torchrun_style_launcher_meets_at_the_rendezvous_with_one_agent_per_host(cl):
    done, out = run_job(cl, f"{sys.executable} {LAUNCHER}")
    assert done["state"] == "DONE", out
    lines = sorted(out.splitlines())
    world = json.dumps({"0": "host1", "1": "host2"}, sort_keys=True)
    assert len(lines) == 2
    for rank, line in enumerate(lines):
        assert line.startswith(f"agent {rank} of 2 on host{rank + 1} met at 127.0.0.1:") and line.endswith(world)


def test_the_run_secret_is_in_no_command_line_and_no_log(cl, tmp_path):
    job = cl.submit(*SPREAD, "--", "sh", "-c", f"echo $XCE_JOB_TOKEN > {tmp_path}/secret; "
                                               "blaunch host2 sleep 300", env=ENV)
    wait_for(lambda: (tmp_path / "secret").exists() and (tmp_path / "secret").read_text().strip(), what="secret")
    secret = (tmp_path / "secret").read_text().strip()
    try:
        wait_for(lambda: "sleep 300" in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout,
                 what="the task on host2")
        cmdlines = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert secret not in cmdlines
        logs = "".join(open(p, errors="replace").read() for p in glob.glob(os.path.join(cl.root, "**", "*.log"),
                                                                         recursive=True))
        assert logs and secret not in logs and secret not in json.dumps(cl.job(job))
    finally:
        cl.xce("kill", str(job))


def test_a_restarted_worker_adopts_its_tasks_and_reports_their_end(cl, tmp_path):
    go = tmp_path / "go"
    job = cl.submit(*SPREAD, "--", "sh", "-c", f"blaunch --keep-going host2 'echo up > {tmp_path}/up; "
                                               f"while [ ! -e {go} ]; do sleep 0.05; done; exit 5'; echo blaunch=$?",
                    env=ENV)
    wait_for(lambda: (tmp_path / "up").exists(), what="the task on host2 up")
    worker = cl.workers["host2"]
    worker.kill()  # its task's shepherd lives on
    worker.start()
    go.touch()
    done = cl.wait_state(job, "DONE", "EXIT")
    with open(done["stdout"]) as fh:
        assert fh.read() == "blaunch=5\n"  # the task's end, reported by the worker's next life
    assert done["state"] == "DONE"
    wait_for(lambda: not os.listdir(os.path.join(worker.work_dir, "tasks")), what="host2's tasks gone")


def test_the_jobs_end_ends_its_tasks_on_every_host(cl, tmp_path):
    done, _ = run_job(cl, f"blaunch host2 'echo $$ > {tmp_path}/pid; exec sleep 300' & "
                          f"while [ ! -s {tmp_path}/pid ]; do sleep 0.05; done")
    assert done["state"] == "DONE"  # its own process ended well: the task it left on host2 goes with it
    pid = int((tmp_path / "pid").read_text())
    wait_for(lambda: not process_alive(pid), what="the task on host2 gone with its job")


def spool(cl, host: str) -> list[str]:
    return os.listdir(os.path.join(cl.workers[host].work_dir, "spool"))


def test_a_tasks_output_comes_back_to_blaunch_when_its_host_cannot_reach_the_jobs_output(cl, tmp_path):
    # the job's output directory is moved away once the job has its files open: no task's host reaches the
    # path any more (a cluster without a shared file system), and blaunch writes what its task wrote
    there, moved = tmp_path / "out", tmp_path / "moved"
    there.mkdir()
    job = cl.submit(*SPREAD, "-o", f"{there}/%J.out", "-e", f"{there}/%J.err", "--", "sh", "-c",
                    f"mv {there} {moved}; blaunch --keep-going host2 'echo out from $XCE_HOST; echo err from $XCE_HOST >&2; "
                    "exit 3'; echo blaunch=$?", env=ENV)
    done = cl.wait_state(job, "DONE", "EXIT")
    assert (moved / f"{job}.err").read_text() == "err from host2\n"
    assert (moved / f"{job}.out").read_text() == "out from host2\nblaunch=3\n"
    assert done["state"] == "DONE" and done["tasks"][0]["exit_code"] == 3
    wait_for(lambda: not spool(cl, "host2"), what="host2's spool gone once blaunch had all of it")


def test_large_task_output_arrives_whole_and_in_order(cl, tmp_path):
    # ~5.9 MB on stdout and ~1.2 MB on stderr: many answers of the relay, each from the offsets written
    done, out = run_job(cl, "blaunch host2 'seq 1 800000; seq 1 200000 >&2'; echo blaunch=$?", "-e",
                        f"{tmp_path}/err", cwd=tmp_path)
    assert done["state"] == "DONE"
    assert out == "".join(f"{i}\n" for i in range(1, 800001)) + "blaunch=0\n"
    assert (tmp_path / "err").read_text() == "".join(f"{i}\n" for i in range(1, 200001))


def _blaunch_in_background(cl, tmp_path, task: str, *args: str) -> int:
    """A job whose blaunch runs in the background with a task on host2; (the job, once the task is up)."""
    job = cl.submit(*SPREAD, "--", "sh", "-c", f"blaunch {' '.join(args)} host2 '{task}' & echo $! > {tmp_path}/blaunch; "
                                               "wait $!; echo blaunch=$?; sleep 300", env=ENV)
    wait_for(lambda: all((tmp_path / n).exists() and (tmp_path / n).read_text().strip()
                         for n in ("blaunch", "task", "escaped")), what="blaunch and its task up")
    return job


# a task on host2 that answers SIGTERM and SIGUSR1 by exiting, with a daemon that left its process group
TRAPPING = ("setsid sh -c \"echo \\$\\$ > {d}/escaped; exec sleep 300\" & "
            "trap \"echo got TERM; exit 7\" TERM; trap \"echo got USR1; exit 8\" USR1; echo $$ > {d}/task; "
            "while :; do sleep 0.1; done")


@pytest.mark.parametrize("sig, said, code", [(signal.SIGTERM, "got TERM", 7), (signal.SIGUSR1, "got USR1", 8)])
def test_a_signal_to_blaunch_is_passed_on_to_its_task(cl, tmp_path, sig, said, code):
    job = _blaunch_in_background(cl, tmp_path, TRAPPING.format(d=tmp_path), "--keep-going")
    pids = [int((tmp_path / n).read_text()) for n in ("task", "escaped")]
    os.kill(int((tmp_path / "blaunch").read_text()), sig)
    try:
        wait_for(lambda: not any(process_alive(p) for p in pids), what="the task on host2 ended by the signal")
        wait_for(lambda: f"blaunch={code}" in open(cl.job(job)["stdout"]).read(), what="blaunch's exit")
        lines = open(cl.job(job)["stdout"]).read().splitlines()  # (and the shell's word of its sleep killed)
        assert lines.index(said) < lines.index(f"blaunch={code}")
    finally:
        cl.xce("kill", str(job))


def test_a_blaunch_killed_with_sigkill_has_its_task_killed(cl, tmp_path):
    task = f"setsid sh -c \"echo \\$\\$ > {tmp_path}/escaped; exec sleep 300\" & echo $$ > {tmp_path}/task; exec sleep 300"
    job = _blaunch_in_background(cl, tmp_path, task)
    pids = [int((tmp_path / n).read_text()) for n in ("task", "escaped")]
    os.kill(int((tmp_path / "blaunch").read_text()), signal.SIGKILL)
    # its lease lapses: the task is killed, which ends the job (a failed task, without --keep-going)
    done = cl.wait_state(job, "EXIT", timeout=LEASE + 60)
    assert done["exit_reason"] == "killed by task 1 on host2 (signal 9)"
    wait_for(lambda: not any(process_alive(p) for p in pids), what="no task process left on host2")


def test_blaunchs_standard_input_goes_to_its_task_and_n_gives_it_none(cl, tmp_path):
    # ~1.3 MB through the task's input pipe (64 KiB at a time: the task's reads are the backpressure)
    numbers = "".join(f"{i}\n" for i in range(1, 200001))
    done, out = run_job(cl, "printf 'one\\ntwo\\n' | blaunch host2 'cat; echo read all'; "
                            "seq 1 200000 | blaunch host2 md5sum; echo ignored | blaunch -n host2 'cat; echo none'")
    assert done["state"] == "DONE"
    assert out.splitlines() == ["one", "two", "read all", f"{hashlib.md5(numbers.encode()).hexdigest()}  -", "none"]


PROBE = """
import json, os, sys, urllib.error, urllib.request
url, secret, target = os.environ["XCE_JOB_URL"], os.environ["XCE_JOB_TOKEN"], sys.argv[1]
def call(method, path, body=None):
    req = urllib.request.Request(url + path, method=method, headers={"Authorization": "Bearer " + secret},
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
print("output", call("GET", f"/v1/jobs/{target}/tasks/1/output?wait=0"))
print("input", call("POST", f"/v1/jobs/{target}/tasks/1/input", {"offset": 0, "data": "", "eof": True}))
print("signal", call("POST", f"/v1/jobs/{target}/tasks/1/signal", {"signal": 9}))
"""


def test_another_jobs_secret_or_a_users_token_reads_no_tasks_output_and_feeds_or_signals_none(cl, tmp_path):
    """The relay's routes answer only the run whose secret is presented: another running job's secret (a job
    that guesses the id of a neighbour) and a user's token are refused, and the task runs on untouched."""
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "task.sh").write_text(f"echo $$ > {tmp_path}/task\nexec sleep 300\n")
    job = cl.submit(*SPREAD, "--", "sh", "-c", f"blaunch host2 sh {tmp_path}/task.sh", env=ENV)
    wait_for(lambda: (tmp_path / "task").exists() and (tmp_path / "task").read_text().strip(), what="the task up")
    pid = int((tmp_path / "task").read_text())
    try:
        done, out = run_job(cl, f"{sys.executable} {tmp_path}/probe.py {job}")
        assert done["state"] == "DONE", out
        assert out.split() == ["output", "401", "input", "401", "signal", "401"], out
        with cl.api() as c:  # the admin's token is no job's secret either
            assert c.get(f"/v1/jobs/{job}/tasks/1/output").status_code == 401
            assert c.post(f"/v1/jobs/{job}/tasks/1/signal", json={"signal": 9}).status_code == 401
            assert c.post(f"/v1/jobs/{job}/tasks/1/input", json={"offset": 0, "data": "", "eof": True}).status_code == 401
        assert process_alive(pid) and cl.job(job)["state"] == "RUN"
    finally:
        cl.xce("kill", str(job))
        cl.wait_state(job, "EXIT")
