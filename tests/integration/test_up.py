"""``xce up`` / ``xce down``: the local cluster as a user runs it, and a second ``up`` resumes it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time

from tests.helpers import XCE, cli, wait_for
from xce.lsfsite import conf_path, params_path, read_conf


def processes_mentioning(text: str) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if text.encode() in fh.read():
                        pids.append(int(pid))
            except OSError:
                pass
    return pids


def start_up(state_dir: str, hosts: int = 2, *more: str) -> subprocess.Popen:
    proc = subprocess.Popen(XCE + ["up", "--hosts", str(hosts), "--state-dir", state_dir,
                                   "--listen", "127.0.0.1:0", "--slots", "2", *more],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_for(lambda: proc.poll() is not None or os.path.exists(os.path.join(state_dir, "up.pid"))
             and os.path.exists(os.path.join(state_dir, "client.toml")), timeout=60, what="xce up")
    assert proc.poll() is None, proc.stdout.read()
    line = proc.stdout.readline()
    assert line.startswith("xce cluster up: controller http://127.0.0.1:"), line
    return proc


def test_up_runs_jobs_down_stops_everything_and_up_resumes(tmp_path):
    state = str(tmp_path / "cluster")
    env = {"XCE_CONFIG": os.path.join(state, "client.toml"), "XCE_URL": "", "XCE_TOKEN": ""}
    up = start_up(state, 2, "--gpus", "2")
    try:
        hosts = json.loads(cli(env, "--json", "hosts").stdout)
        assert [(h["name"], h["state"]) for h in hosts] == [("host1", "OK"), ("host2", "OK")]
        assert [[g["id"] for g in h["gpus"]] for h in hosts] == [[0, 1], [0, 1]]  # --gpus 2: fake GPUs 0 and 1
        # each host reports the machine's memory as its mem counter, so rusage[mem=] can be met
        with open("/proc/meminfo") as fh:
            total = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1]) * 1024
        assert {h["counters"].get("mem") for h in hosts} == {total}
        assert oct(os.stat(env["XCE_CONFIG"]).st_mode & 0o777) == "0o600"
        # the site's LSF_ENVDIR, for LSF's commands and the tools that drive LSF, and the line that names it
        said = "".join(up.stdout.readline() for _ in range(4))
        envdir = os.path.join(state, "lsf", "conf")
        assert f"export LSF_ENVDIR={envdir}" in said, said
        assert read_conf(conf_path({"LSF_ENVDIR": envdir}))["LSF_UNIT_FOR_LIMITS"] == "MB"
        assert read_conf(params_path({"LSF_ENVDIR": envdir}))["CLEAN_PERIOD"] == "3600"
        job = json.loads(cli(env, "--json", "submit", "-J", "first", "--", "true").stdout)["id"]
        wait_for(lambda: json.loads(cli(env, "--json", "job", "show", str(job)).stdout)["state"] == "DONE",
                 what="job done")
        second = cli(env, "up", "--state-dir", state, "--listen", "127.0.0.1:0")
        assert second.returncode == 1 and "already up" in second.stderr + second.stdout
        r = cli({}, "down", "--state-dir", state)
        assert r.returncode == 0 and "stopped" in r.stdout
        assert up.wait(60) == 0
        assert processes_mentioning(state) == [], "xce down left processes behind"
        assert not os.path.exists(os.path.join(state, "up.pid"))
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
            up.wait(60)

    # resumes: same cluster, same jobs, workers rejoin with their tokens; now with attributes and counters,
    # on every host or on one (--attr/--counter [HOST:]K=V), so that the README's -R example can run
    up = start_up(state, 2, "--attr", "zone=a", "--attr", "host2:gpu=h100", "--counter", "host1:licenses=2")
    try:
        jobs = json.loads(cli(env, "--json", "jobs").stdout)
        assert [(j["id"], j["name"], j["state"]) for j in jobs] == [(job, "first", "DONE")]
        ping = json.loads(cli(env, "--json", "ping").stdout)
        assert ping["leader_epoch"] == 2
        hosts = {h["name"]: h for h in json.loads(cli(env, "--json", "hosts").stdout)}
        assert (hosts["host1"]["attrs"], hosts["host2"]["attrs"]) == ({"zone": "a"}, {"zone": "a", "gpu": "h100"})
        assert (hosts["host1"]["counters"].get("licenses"), hosts["host2"]["counters"].get("licenses")) == (2, None)
        again = json.loads(cli(env, "--json", "submit", "-n", "4", "-R", "select[zone==a] rusage[mem=64Mi] "
                                "span[ptile=2]", "--", "true").stdout)["id"]
        assert again == job + 1
        wait_for(lambda: json.loads(cli(env, "--json", "job", "show", str(again)).stdout)["state"] == "DONE",
                 what="job after resume done")
        up.send_signal(signal.SIGINT)  # Ctrl-C
        assert up.wait(60) == 0
        deadline = time.monotonic() + 10
        while processes_mentioning(state) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_mentioning(state) == []
    finally:
        if up.poll() is None:
            up.kill()
            up.wait(10)


def test_down_with_nothing_up_says_so(tmp_path):
    r = cli({}, "down", "--state-dir", str(tmp_path))
    assert r.returncode == 1 and "no cluster is up" in r.stderr


def test_up_says_why_the_controller_could_not_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli({}, "up", "--hosts", "1", "--state-dir", str(tmp_path / "c"), "--listen", f"127.0.0.1:{port}")
    assert r.returncode == 1 and "Address already in use" in r.stderr, r.stderr  # on the terminal, not only the log
    assert processes_mentioning(str(tmp_path / "c")) == []


def test_up_attr_and_counter_name_hosts_it_has(tmp_path):
    for option in ("--attr", "--counter"):
        r = cli({}, "up", "--hosts", "2", "--state-dir", str(tmp_path / "c"), option, "host3:zone=a")
        assert r.returncode == 2 and "no host 'host3' here (host1..host2)" in r.stderr, r.stderr
        r = cli({}, "up", "--hosts", "2", "--state-dir", str(tmp_path / "c"), option, "zone")
        assert r.returncode == 2 and "expected [HOST:]NAME=VALUE" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "c")
