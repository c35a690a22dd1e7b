"""Bounded history under load: up to 1,000,000 trivial jobs through a local cluster, and what it costs.

    python bench/history.py [--max-jobs 1000000] [--max-seconds 3600] [--checkpoints 10000,100000,1000000]
                            [--keep-finished 5s] [--array 5000] [--backlog 10000] [--hosts 4] [--slots 32]

A local cluster (``xce up --hosts 4 --slots 32`` on a temp state dir, with a config whose
``[controller] keep_finished`` is ``--keep-finished``) runs job arrays of ``--array`` elements of
``true`` with ``-o /dev/null``, submitted through the REST API whenever fewer than ``--backlog`` jobs
are unfinished.  At each checkpoint (finished jobs: 10k, 100k, 1M, those up to ``--max-jobs``)
submission stops, the cluster drains, and it prints:

- the jobs still in the live model once drained (``LIVE``: the finished ones of the last
  ``--keep-finished``, so more at a higher rate) and the controller's RSS (``VmRSS``) then
  (``RSS_LIVE``);
- the controller's RSS once those have retired too (``RSS_MiB``): every checkpoint then holds the
  same live state, none, so what grows from one to the next is what history costs.  The goal compares
  these: ``RSS_LIVE`` follows the rate as much as history.  The rest is measured then too, and the
  store's size (``xce.db`` and its WAL);
- the newest snapshot's size and the time it took to write (the commit pause it causes), from the
  controller's log;
- restart to first answer: the store copied (SQLite's online backup) and a second controller started
  on the copy, from its start to its first ``GET /v1/jobs`` answered;
- jobs/s over the window since the previous checkpoint (its drain included; pauses for measuring are not);
- p50/p99 of ``GET /v1/jobs?view=brief`` (what ``xce jobs`` asks: its newest 1,000 rows) and ``GET /v1/history/jobs?limit=100`` (``xce hist
  --limit 100``), sampled every second while jobs ran in the window, and of the two CLI commands end
  to end (process start included) at the checkpoint.

Goals (issue 12): RSS at 1M within 1.5x of RSS at 10k; restart < 2 s at 1M; jobs/s of the last window
within 10% of the first; ``xce jobs`` p99 < 100 ms throughout.  Bounded by ``--max-jobs`` and
``--max-seconds`` (it stops by itself and reports what it reached); every process it starts is stopped
by pid.  The machine should be otherwise idle: it prints how busy it was before starting.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from throughput import PYTHON, XceCluster, clean_env, filesystem_note, log, machine_busy  # noqa: E402

from tests.helpers import free_port  # noqa: E402
from xce.config import DEFAULT_CONFIG  # noqa: E402
from xce.units import parse_duration  # noqa: E402


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def gauge(api: httpx.Client, name: str) -> float:
    """One of the controller's ``/metrics`` gauges."""
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise RuntimeError(f"/metrics has no {name}")


def wait_retired(api: httpx.Client, timeout: float) -> float:
    """Wait until every finished job has left the live model (the cluster is drained); the seconds it took."""
    t0 = time.monotonic()
    while gauge(api, "xce_jobs_finished_live") > 0:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"finished jobs still live after {timeout:g}s")
        time.sleep(0.5)
    return time.monotonic() - t0


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


class Sampler(threading.Thread):
    """Times the two listings once a second while jobs run (a connection of its own)."""

    def __init__(self, url: str, token: str) -> None:
        super().__init__(daemon=True)
        self.c = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self.jobs: list[float] = []
        self.hist: list[float] = []
        self.on = threading.Event()
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            if self.on.is_set():
                for path, params, out in (("/v1/jobs", {"view": "brief"}, self.jobs),
                                          ("/v1/history/jobs", {"limit": 100}, self.hist)):
                    t = time.perf_counter()
                    try:
                        self.c.get(path, params=params).raise_for_status()
                    except httpx.HTTPError:
                        continue
                    out.append((time.perf_counter() - t) * 1000)
            self.stopped.wait(1.0)

    def take(self) -> tuple[list[float], list[float]]:
        out = (self.jobs, self.hist)
        self.jobs, self.hist = [], []
        return out


def restart_seconds(db: str, token_file: str, config: str, work: str, timeout: float = 120.0) -> float:
    """A controller started on a copy of the store: seconds from its start to its first answer."""
    copy = os.path.join(work, "restart")
    shutil.rmtree(copy, ignore_errors=True)
    os.makedirs(copy)
    src = sqlite3.connect(db)
    dst = sqlite3.connect(os.path.join(copy, "xce.db"))
    with dst:
        src.backup(dst)
    src.close()
    dst.close()
    shutil.copy(token_file, os.path.join(copy, "admin.token"))
    with open(token_file) as fh:
        token = fh.read().strip()
    port = free_port()
    logf = open(os.path.join(work, "restart.log"), "ab")
    t0 = time.perf_counter()
    proc = subprocess.Popen([PYTHON, "-m", "xce.cli.main", "controller", "--state-dir", copy, "--listen",
                             f"127.0.0.1:{port}", "--config", config], stdout=logf, stderr=subprocess.STDOUT,
                            env=clean_env())
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"},
                          timeout=5) as c:
            while time.perf_counter() - t0 < timeout:
                try:
                    if c.get("/v1/jobs", params={"limit": 1}).status_code == 200:
                        return time.perf_counter() - t0
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None:
                    logf.flush()
                    with open(logf.name, "rb") as fh:
                        said = fh.read()[-2000:].decode(errors="replace")
                    raise RuntimeError(f"the restarted controller exited with {proc.returncode}; its log ends:\n{said}")
                time.sleep(0.01)
        raise RuntimeError(f"the restarted controller did not answer within {timeout:g}s")
    finally:
        proc.kill()  # ours, by pid
        proc.wait()
        logf.close()
        shutil.rmtree(copy, ignore_errors=True)


def last_snapshot(logs: str) -> tuple[int, int, float] | None:
    """(position, bytes, seconds) of the controller's newest snapshot, from its log."""
    found = None
    pat = re.compile(r"snapshot at position (\d+) \((\d+) bytes, ([\d.]+) s\)")
    with open(os.path.join(logs, "controller.log"), errors="replace") as fh:
        for line in fh:
            m = pat.search(line)
            if m:
                found = (int(m.group(1)), int(m.group(2)), float(m.group(3)))
    return found


def cli_ms(cluster: XceCluster, *args: str, n: int = 5) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = cluster.cli(*args)
        if r.returncode == 0:
            out.append((time.perf_counter() - t) * 1000)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-jobs", type=int, default=1_000_000)
    ap.add_argument("--max-seconds", type=float, default=3600.0)
    ap.add_argument("--checkpoints", default="10000,100000,1000000")
    ap.add_argument("--keep-finished", default="5s")
    ap.add_argument("--snapshot-every", type=int, default=20_000)
    ap.add_argument("--array", type=int, default=5000)
    ap.add_argument("--backlog", type=int, default=10_000)
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--keep", action="store_true", help="keep the state dir")
    args = ap.parse_args()
    deadline = time.monotonic() + args.max_seconds
    points = sorted({int(x) for x in args.checkpoints.split(",") if int(x) <= args.max_jobs} | {args.max_jobs})
    log(f"machine busy before starting: {machine_busy():.0%} of all CPUs")
    work = tempfile.mkdtemp(prefix="xce-history-")
    log(filesystem_note(work))
    state = os.path.join(work, "state")
    os.makedirs(state)
    config = os.path.join(work, "xce.toml")
    with open(config, "w") as fh:
        fh.write(DEFAULT_CONFIG.replace('keep_finished = "5m"', f'keep_finished = "{args.keep_finished}"')
                 .replace("snapshot_every = 50000", f"snapshot_every = {args.snapshot_every}")
                 .replace("max_pending_jobs_per_user = 10000",
                          f"max_pending_jobs_per_user = {args.backlog + args.array}"))
    cluster = XceCluster(state, args.hosts, args.slots, extra=("--config", config))
    sampler: Sampler | None = None
    rows: list[dict] = []
    stop = {"why": ""}

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    try:
        cluster.start()
        ctl_pid = cluster.daemons["controller"]
        db = glob.glob(os.path.join(state, "**", "xce.db"), recursive=True)[0]
        token_file = os.path.join(os.path.dirname(db), "admin.token")
        logs = os.path.join(state, "logs")
        api = httpx.Client(base_url=cluster.url, headers={"Authorization": f"Bearer {cluster.token}"}, timeout=60)
        sampler = Sampler(cluster.url, cluster.token)
        sampler.start()

        def unfinished() -> int:
            return sum(q["pending"] + q["running"] for q in api.get("/v1/queues").json())

        submitted = finished = 0
        window_start, window_from, running_s = time.monotonic(), 0, 0.0
        for point in points:
            sampler.on.set()
            window_start = time.monotonic()
            while finished < point:
                if time.monotonic() > deadline:
                    stop["why"] = f"--max-seconds {args.max_seconds:g} reached"
                    break
                left = unfinished()
                finished = submitted - left
                if left < args.backlog and submitted < point:
                    n = min(args.array, point - submitted)
                    r = api.post("/v1/jobs", json={"command": ["true"], "name": f"h[1-{n}]", "stdout": "/dev/null"})
                    r.raise_for_status()
                    submitted += n
                    continue
                time.sleep(0.5)
            sampler.on.clear()
            window = time.monotonic() - window_start
            running_s += window
            api_jobs, api_hist = sampler.take()
            if stop["why"]:
                log(f"stopping: {stop['why']} at {finished} finished jobs")
                break
            # the cluster is drained: what the controller holds now is the finished jobs not yet retired
            # (those of the last keep_finished), more at a higher rate.  RSS is compared once they have
            # retired too, so every checkpoint compares the same live state (none) and what is left is
            # what history costs; restart is timed then as well, on an otherwise idle machine
            live, rss_drained = gauge(api, "xce_jobs"), rss_mib(ctl_pid)
            retire_s = wait_retired(api, parse_duration(args.keep_finished) + 120)
            snap = last_snapshot(logs)
            size = sum(os.path.getsize(p) for p in (db, db + "-wal") if os.path.exists(p))
            restart = restart_seconds(db, token_file, config, work)
            row = {"finished": finished, "live": int(live), "rss_drained_mib": rss_drained, "retire_s": retire_s,
                   "rss_mib": rss_mib(ctl_pid), "store_mib": size / 2**20,
                   "snap_kib": snap[1] / 1024 if snap else float("nan"), "snap_s": snap[2] if snap else float("nan"),
                   "restart_s": restart, "jobs_s": (finished - window_from) / window,
                   "jobs_p50": pct(api_jobs, 50), "jobs_p99": pct(api_jobs, 99),
                   "hist_p50": pct(api_hist, 50), "hist_p99": pct(api_hist, 99),
                   "cli_jobs_p50": pct(cli_ms(cluster, "jobs"), 50),
                   "cli_hist_p50": pct(cli_ms(cluster, "hist", "--limit", "100"), 50),
                   "samples": len(api_jobs)}
            rows.append(row)
            log("checkpoint " + ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                          for k, v in row.items()))
            window_from = finished
    except KeyboardInterrupt:
        log("interrupted")
    finally:
        if sampler is not None:
            sampler.stopped.set()
        cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    head = ("FINISHED", "LIVE", "RSS_LIVE", "RSS_MiB", "STORE_MiB", "SNAP_KiB", "SNAP_s", "RESTART_s", "JOBS/s",
            "JOBS_p50ms", "JOBS_p99ms", "HIST_p50ms", "HIST_p99ms", "CLI_JOBS_ms", "CLI_HIST_ms")
    print(" ".join(f"{h:>11}" for h in head))
    for r in rows:
        print(" ".join(f"{v:>11.4g}" if isinstance(v, float) else f"{v:>11}" for v in (
            r["finished"], r["live"], r["rss_drained_mib"], r["rss_mib"], r["store_mib"], r["snap_kib"],
            r["snap_s"], r["restart_s"], r["jobs_s"],
            r["jobs_p50"], r["jobs_p99"], r["hist_p50"], r["hist_p99"], r["cli_jobs_p50"], r["cli_hist_p50"])))
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        print(f"RSS last/first: {last['rss_mib'] / first['rss_mib']:.2f}x (goal <= 1.5)   "
              f"jobs/s last/first: {last['jobs_s'] / first['jobs_s']:.2f} (goal >= 0.9)   "
              f"restart at {last['finished']}: {last['restart_s']:.2f} s (goal < 2)   "
              f"GET /v1/jobs?view=brief p99 max: {max(r['jobs_p99'] for r in rows):.1f} ms (goal < 100)")
    if stop["why"]:
        print(f"(stopped early: {stop['why']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
