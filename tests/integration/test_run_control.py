"""Runs that stop when told and stay inside what they asked for, on a real cluster (as root: each run in
a cgroup of its own), through the CLI as a user would (issue 28).

- ``xce kill``: SIGINT and SIGTERM once, SIGKILL after the queue's ``terminate_grace``; a flood of work
  polls and repeated kills re-delivers nothing.  ``xce kill -s SIGNAL`` sends that one signal only.
- ``-M`` and ``rusage[mem=]`` are the run's memory limit; a run over it ends EXIT and says so.
- the whole tree goes with the job, ``setsid`` grandchildren included.
- ``xce stop`` / ``xce resume`` freeze and thaw a running job (USUSP).
- usage: max RSS and CPU seconds of each run, in ``job show``, ``hist`` and ``usage``.
"""

from __future__ import annotations

import glob
import json
import os
import time

import pytest

from tests.helpers import Cluster, process_alive, wait_for
from tests.integration.conftest import cluster_config

ROOT = os.geteuid() == 0
pytestmark = pytest.mark.skipif(not ROOT, reason="cgroups need root (CI runs as root)")

CONFIG = cluster_config(30.0) + """
[[queues]]
name = "graceful"
priority = 30
terminate_grace = 2.0
"""


@pytest.fixture(scope="module")
def cl(tmp_path_factory):
    root = tmp_path_factory.mktemp("runcontrol")
    cfg = root / "xce.toml"
    cfg.write_text(CONFIG)
    c = Cluster(str(root), config=str(cfg)).start()
    c.add_worker("h1", slots=4)
    yield c
    c.stop()


def _lines(path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_killed_job_sees_one_sigterm_and_sigkill_comes_after_its_queues_grace(cl, tmp_path):
    log = tmp_path / "log"
    script = tmp_path / "counter.py"
    script.write_text(f"""
import signal, time
log = open({str(log)!r}, "a", buffering=1)
def on(sig, frame):
    log.write(f"{{signal.Signals(sig).name}} {{time.time()}}\\n")
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
log.write("ready\\n")
while True:
    log.write(f"alive {{time.time()}}\\n")
    time.sleep(0.05)
""")
    job = cl.submit("-q", "graceful", "--", "python3", str(script))
    cl.wait_state(job, "RUN")
    wait_for(lambda: "ready" in _lines(log), what="the job's handlers set")
    cl.xce("kill", str(job))
    with cl.api() as api:  # kills again, through the API (quick, inside the 2 s grace even on a busy machine)
        for _ in range(5):  # and the worker polls again: nothing is delivered twice
            assert api.post(f"/v1/jobs/{job}/kill").status_code == 200
    ended = cl.wait_state(job, "EXIT")
    lines = _lines(log)
    terms = [float(ln.split()[1]) for ln in lines if ln.startswith("SIGTERM")]
    assert len(terms) == 1, lines
    assert sum(ln.startswith("SIGINT") for ln in lines) == 1, lines
    last_alive = max(float(ln.split()[1]) for ln in lines if ln.startswith("alive"))
    assert last_alive - terms[0] >= 1.8, "SIGKILL came before the queue's 2 s grace"
    assert (ended["exit_reason"], ended["signal"]) == ("killed by admin", 9)


def test_kill_s_sends_that_one_signal_and_the_job_decides(cl, tmp_path):
    log = tmp_path / "log"
    job = cl.submit("--", "sh", "-c", f"trap 'echo usr1 >> {log}; exit 4' USR1; echo ready >> {log}; "
                                      "while true; do sleep 0.05; done")
    cl.wait_state(job, "RUN")
    wait_for(lambda: "ready" in _lines(log), what="the job's trap set")
    out = cl.xce("kill", "-s", "USR1", str(job)).stdout
    assert f"Job <{job}> is signalled" in out
    ended = cl.wait_state(job, "EXIT")
    assert _lines(log) == ["ready", "usr1"]
    assert (ended["exit_code"], ended["exit_reason"]) == (4, "nonzero exit code 4"), "not a kill: no SIGKILL"
    r = cl.xce("kill", "-s", "NOPE", str(job), ok=False)
    assert r.returncode == 1 and "unknown signal" in r.stderr


def test_a_job_over_its_memory_limit_ends_exit_with_the_reason(cl):
    hog = "b = bytearray(200 << 20); b[::4096] = b'x' * (len(b) // 4096)"
    job = cl.submit("-M", "64Mi", "--", "python3", "-c", hog)
    ended = cl.wait_state(job, "EXIT")
    assert ended["exit_reason"] == "memory limit 64 MiB exceeded"
    assert ended["mem_limit"] == 64 << 20
    # rusage[mem=] reserves on the host's mem counter (the machine's memory) and, without -M, is the limit
    job = cl.submit("-R", "rusage[mem=100Mi]", "--", "python3", "-c", hog.replace("200", "300"))
    assert cl.wait_state(job, "EXIT")["exit_reason"] == "memory limit 100 MiB exceeded"
    fits = cl.submit("-M", "256Mi", "--", "python3", "-c", hog)
    assert cl.wait_state(fits, "DONE", "EXIT")["state"] == "DONE"


def test_a_killed_job_leaves_no_process_behind_setsid_or_not(cl, tmp_path):
    pids = tmp_path / "pids"
    job = cl.submit("--", "sh", "-c", f"setsid sleep 600 & echo $! >> {pids}; "
                                      f"sh -c 'sleep 600 & echo $! >> {pids}; wait' & wait")
    cl.wait_state(job, "RUN")
    wait_for(lambda: len(_lines(pids)) == 2, what="two grandchildren started")
    left = [int(p) for p in _lines(pids)]
    assert all(process_alive(p) for p in left)
    cl.xce("kill", str(job))
    cl.wait_state(job, "EXIT")
    wait_for(lambda: not any(process_alive(p) for p in left), what="every process of the job gone")


def test_a_stopped_job_makes_no_progress_until_resumed(cl, tmp_path):
    ticks = tmp_path / "ticks"
    job = cl.submit("--", "sh", "-c", f"i=0; while [ $i -lt 100 ]; do echo $i >> {ticks}; i=$((i+1)); sleep 0.05; done")
    cl.wait_state(job, "RUN")
    wait_for(lambda: len(_lines(ticks)) > 3, what="ticking")
    assert f"Job <{job}> is stopped" in cl.xce("stop", str(job)).stdout
    assert cl.job(job)["state"] == "USUSP"
    # frozen once the shepherd has the order: the count stops moving
    wait_for(lambda: (n := len(_lines(ticks))) == (time.sleep(0.3) or len(_lines(ticks))) and n, what="frozen")
    n = len(_lines(ticks))
    time.sleep(0.6)
    assert len(_lines(ticks)) == n and cl.job(job)["state"] == "USUSP"
    assert "stopped on h1" in cl.xce("job", "why", str(job)).stdout
    cl.xce("resume", str(job))
    assert cl.job(job)["state"] == "RUN"
    assert cl.wait_state(job, "DONE")["state"] == "DONE"
    assert len(_lines(ticks)) == 100
    states = [h["state"] for h in cl.job(job)["history"]]
    assert states[-3:] == ["USUSP", "RUN", "DONE"]
    r = cl.xce("resume", str(job), ok=False)
    assert r.returncode == 1 and "only a stopped (USUSP) job can be resumed" in r.stderr


def test_usage_is_recorded_per_run_and_shown(cl, tmp_path):
    mem = cl.submit("--", "python3", "-c", "b = bytearray(200 << 20); b[::4096] = b'x' * (len(b) // 4096)")
    busy = cl.submit("--", "python3", "-c", "import time\nt = time.process_time()\n"
                                            "while time.process_time() - t < 1.0: pass")
    m, b = cl.wait_state(mem, "DONE"), cl.wait_state(busy, "DONE")
    assert m["usage"]["max_rss_bytes"] >= 200 << 20
    cpu = b["usage"]["cpu_user_s"] + b["usage"]["cpu_sys_s"]
    assert 1.0 <= cpu < 5.0, b["usage"]
    shown = cl.xce("job", "show", str(mem)).stdout
    assert "Usage:" in shown and "max RSS" in shown
    hist = json.loads(cl.xce("--json", "hist").stdout)
    listed = next(j for j in hist if j["id"] == busy)["usage"]
    assert listed == b["usage"]
    table = cl.xce("hist").stdout.splitlines()
    assert "MAX_RSS" in table[0] and "CPU_TIME" in table[0]
    rows = json.loads(cl.xce("--json", "usage", "-a", "--by-user").stdout)
    total = next(r for r in rows if r["project"] == "default" and r["user"] is None)
    mine = next(r for r in rows if r["project"] == "default" and r["user"] == "admin")
    assert mine["cpu_hours"] * 3600 >= 1.0 and total["cpu_hours"] >= mine["cpu_hours"]
    assert "CPU_HOURS" in cl.xce("usage", "-a", "--by-user").stdout.splitlines()[0]
    with cl.api() as c:
        metrics = c.get("/metrics").text
    cpu_total = next(float(line.split()[-1]) for line in metrics.splitlines()
                     if line.startswith('xce_run_cpu_seconds_total{project="default"}'))
    assert cpu_total >= cpu
    assert "xce_run_max_rss_bytes_bucket" in metrics


def test_a_worker_that_stops_leaves_no_idle_cgroup_behind(cl):
    """Its pooled run cgroups, and its subtree once empty, go when it stops (SIGTERM): a host's worker
    stopped for good, or ``xce down``, leaves nothing in the hierarchies."""
    from tests.conftest import _cgroup_dirs

    w = cl.add_worker("h-stops", slots=1, attrs={"stops": "yes"})
    job_id = cl.submit("-R", "select[stops==yes]", "--", "true")
    assert cl.wait_state(job_id, "DONE")["hosts"] == ["h-stops"]
    # its subtree in each hierarchy: xce-HOST-<8 hex of its work directory> (worker/cgroups.py)
    bases = [b for d in _cgroup_dirs().values() for b in glob.glob(os.path.join(d, "xce-h-stops-*"))]
    # its idle run cgroup, kept for the next run
    assert any(os.path.isdir(b) and any(os.path.isdir(os.path.join(b, e)) for e in os.listdir(b)) for b in bases)
    w.stop()
    assert [b for b in bases if os.path.exists(b)] == []
