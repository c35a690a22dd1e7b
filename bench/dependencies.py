"""Job dependencies, XCE against Slurm 22.05 on this machine, in one invocation.

    python bench/dependencies.py [--chain 1000] [--dag 10000] [--slurm-chain 100] [--slurm-dag 10000]
                                 [--no-slurm] [--max-seconds 1500]

Two shapes, each on both sides, each started held so that what is measured is the release of
dependent jobs, not how fast they were submitted:

  chain   job 1 <- job 2 <- ... <- job N, each ``done(previous)`` (Slurm: ``--dependency=afterok:``);
          every job writes the time its process starts and ends (``date +%s.%N``), and the figure is
          the child's start minus its parent's end: how long a finished job keeps its dependent
          waiting (p50, p90, max)
  dag     a root, N children that each wait for it (one array, ``-w done(ROOT)``), and a sink waiting
          for every child (``-w done(ARRAY)``; Slurm: ``--dependency=afterok:ARRAY``): N + 2 jobs over
          the makespan from the root's release to the sink's end

Slurm releases a dependent at its next scheduling pass (about a second here, ``tuned`` profile), so a
1,000-job chain would take it 20-40 minutes: its chain is ``--slurm-chain`` long (100 by default),
which measures the same per-link figure.  Marks go to a directory on tmpfs (/dev/shm) on both sides.
XCE: ``xce up --hosts 4 --slots 32`` (128 slots, as Slurm's FORCE:64 on 2 CPUs), jobs submitted over
the REST API.  Everything is bounded by --max-seconds and every process started is stopped by pid.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from throughput import (  # noqa: E402  (the bench directory's shared harness)
    ROOT, SLURM_DIR, Api, XceCluster, clean_env, log, run_group, run_sides,
)

sys.path.insert(0, os.path.join(ROOT, "src"))
from xce.config import DEFAULT_CONFIG  # noqa: E402

MARK = """#!/bin/sh
# mark.sh DIR LABEL: when this job's process started and ended, in seconds since the epoch
date +%s.%N > "$1/$2.start"
date +%s.%N > "$1/$2.end"
"""


def marks(d: str, label: str) -> tuple[float, float] | None:
    try:
        with open(os.path.join(d, f"{label}.start")) as a, open(os.path.join(d, f"{label}.end")) as b:
            return float(a.read()), float(b.read())
    except (OSError, ValueError):
        return None


def wait_file(path: str, deadline: float, poll: float = 0.05) -> bool:
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)
    time.sleep(0.05)  # the end mark is written right after the start mark
    return True


def link_latencies(d: str, n: int) -> list[float]:
    """Each chain link's child start minus its parent's end, seconds (links whose marks are missing are skipped)."""
    out = []
    for i in range(2, n + 1):
        parent, child = marks(d, f"c{i - 1}"), marks(d, f"c{i}")
        if parent and child:
            out.append(child[0] - parent[1])
    return out


def summary(side: str, shape: str, n: int, lat: list[float] | None = None, makespan: float | None = None,
            timed_out: bool = False) -> dict:
    r: dict = {"side": side, "shape": shape, "n": n, "timed_out": timed_out}
    if lat:
        lat = sorted(lat)
        r.update(p50_ms=1e3 * statistics.median(lat), p90_ms=1e3 * lat[int(0.9 * (len(lat) - 1))],
                 max_ms=1e3 * lat[-1], links=len(lat))
    if makespan:
        r.update(makespan_s=makespan, jobs_per_s=(n + 2) / makespan)
    return r


# ---------------------------------------------------------------- XCE


def xce_side(args, tmp: str, deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    mark = os.path.join(tmp, "mark.sh")
    with open(mark, "w") as fh:
        fh.write(MARK)
    os.chmod(mark, 0o755)
    config = os.path.join(tmp, "xce.toml")
    with open(config, "w") as fh:  # the DAG's fan-out waits at once: more than the default per-user bound
        fh.write(DEFAULT_CONFIG.replace("max_pending_jobs_per_user = 10000",
                                        f"max_pending_jobs_per_user = {args.dag + args.chain + 10}"))
    cluster = XceCluster(os.path.join(tmp, "xce"), args.hosts, args.slots, extra=("--config", config))
    cleanup.append(cluster.stop)
    cluster.start()
    api = Api(cluster.url, cluster.token)
    cleanup.append(api.close)

    def submit(command: list[str], **fields) -> int:
        r = api.client.post("/v1/jobs", json={"command": command, "stdout": "/dev/null", **fields})
        r.raise_for_status()
        return int(r.json()["id"])

    results = []
    d = tempfile.mkdtemp(prefix="xce-chain-", dir="/dev/shm")
    cleanup.append(lambda: shutil.rmtree(d, ignore_errors=True))
    log(f"xce chain of {args.chain}")
    prev = submit([mark, d, "c1"], hold=True)
    first = prev
    for i in range(2, args.chain + 1):
        prev = submit([mark, d, f"c{i}"], dependency=f"done({prev})")
    api.client.post(f"/v1/jobs/{first}/release").raise_for_status()
    ok = wait_file(os.path.join(d, f"c{args.chain}.end"), min(deadline, time.monotonic() + args.shape_timeout))
    results.append(summary("xce", "chain", args.chain, link_latencies(d, args.chain), timed_out=not ok))
    log(f"xce chain: {results[-1]}")

    d2 = tempfile.mkdtemp(prefix="xce-dag-", dir="/dev/shm")
    cleanup.append(lambda: shutil.rmtree(d2, ignore_errors=True))
    log(f"xce dag of {args.dag}")
    root = submit([mark, d2, "root"], hold=True)
    fan = submit(["true"], name=f"fan[1-{args.dag}]", dependency=f"done({root})")
    submit([mark, d2, "sink"], dependency=f"done({fan})")
    api.client.post(f"/v1/jobs/{root}/release").raise_for_status()
    ok = wait_file(os.path.join(d2, "sink.end"), min(deadline, time.monotonic() + args.shape_timeout))
    r, s = marks(d2, "root"), marks(d2, "sink")
    results.append(summary("xce", "dag", args.dag, makespan=s[1] - r[0] if r and s else None, timed_out=not ok))
    log(f"xce dag: {results[-1]}")
    return results, [f"xce: xce up --hosts {args.hosts} --slots {args.slots}; marks on /dev/shm"]


# ---------------------------------------------------------------- Slurm


def slurm_side(args, tmp: str, deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    d = os.path.join(tmp, "slurm")
    os.makedirs(d)
    logf = os.path.join(tmp, "slurm-bench.log")
    env = clean_env(PROFILE=args.slurm_profile, SLURM_CONF=os.path.join(d, "etc", "slurm.conf"))

    def teardown() -> None:
        run_group(["bash", os.path.join(SLURM_DIR, "teardown.sh"), d], 90, env=clean_env(PURGE="1"), log_path=logf)

    cleanup.append(teardown)
    rc, _ = run_group(["bash", os.path.join(SLURM_DIR, "setup.sh"), d], max(60, deadline - time.monotonic() - 100),
                      env=env, log_path=logf)
    if rc != 0:
        return [], [f"slurm: setup.sh failed (rc={rc}); see {logf}"]
    mark = os.path.join(tmp, "mark.sh")

    def sbatch(*opts: str, wrap: str) -> str:
        r = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "-D", "/tmp", *opts, f"--wrap={wrap}"],
                           capture_output=True, text=True, env=env, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch {' '.join(opts)}: {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def release(job: str) -> None:
        subprocess.run(["scontrol", "release", job], check=True, env=env, timeout=60, capture_output=True)

    results = []
    m = tempfile.mkdtemp(prefix="slurm-chain-", dir="/dev/shm")
    os.chmod(m, 0o777)
    cleanup.append(lambda: shutil.rmtree(m, ignore_errors=True))
    n = args.slurm_chain
    log(f"slurm chain of {n}")
    prev = first = sbatch("-H", wrap=f"{mark} {m} c1")
    for i in range(2, n + 1):
        prev = sbatch(f"--dependency=afterok:{prev}", wrap=f"{mark} {m} c{i}")
    release(first)
    ok = wait_file(os.path.join(m, f"c{n}.end"), min(deadline, time.monotonic() + args.shape_timeout))
    results.append(summary("slurm", "chain", n, link_latencies(m, n), timed_out=not ok))
    log(f"slurm chain: {results[-1]}")
    subprocess.run(["scancel", "--quiet", *(str(j) for j in (first,))], env=env, capture_output=True, timeout=60)

    m2 = tempfile.mkdtemp(prefix="slurm-dag-", dir="/dev/shm")
    os.chmod(m2, 0o777)
    cleanup.append(lambda: shutil.rmtree(m2, ignore_errors=True))
    log(f"slurm dag of {args.slurm_dag}")
    root = sbatch("-H", wrap=f"{mark} {m2} root")
    fan = sbatch(f"--array=1-{args.slurm_dag}", f"--dependency=afterok:{root}", wrap="true")
    sbatch(f"--dependency=afterok:{fan}", wrap=f"{mark} {m2} sink")
    release(root)
    ok = wait_file(os.path.join(m2, "sink.end"), min(deadline, time.monotonic() + args.shape_timeout))
    r, s = marks(m2, "root"), marks(m2, "sink")
    results.append(summary("slurm", "dag", args.slurm_dag, makespan=s[1] - r[0] if r and s else None,
                           timed_out=not ok))
    log(f"slurm dag: {results[-1]}")
    return results, [f"slurm: PROFILE={args.slurm_profile} (setup.sh), marks on /dev/shm"]


# ---------------------------------------------------------------- report


def report(xce: list[dict], slurm: list[dict], notes: list[str], elapsed: float) -> None:
    def get(rows: list[dict], shape: str) -> dict:
        return next((r for r in rows if r["shape"] == shape), {})

    print()
    print(f"{'shape':8} {'side':6} {'n':>6} {'p50 ms':>8} {'p90 ms':>8} {'max ms':>8} {'jobs/s':>8} "
          f"{'makespan s':>10}  timed out")
    for shape in ("chain", "dag"):
        for r in (get(xce, shape), get(slurm, shape)):
            if r:
                print(f"{shape:8} {r['side']:6} {r['n']:6d} {r.get('p50_ms', float('nan')):8.1f} "
                      f"{r.get('p90_ms', float('nan')):8.1f} {r.get('max_ms', float('nan')):8.1f} "
                      f"{r.get('jobs_per_s', float('nan')):8.1f} {r.get('makespan_s', float('nan')):10.1f}  "
                      f"{'yes' if r['timed_out'] else 'no'}")
    xc, sc, xd, sd = get(xce, "chain"), get(slurm, "chain"), get(xce, "dag"), get(slurm, "dag")
    if xc.get("p50_ms") and sc.get("p50_ms"):
        print(f"chain: dependent start after its parent's end, p50: Slurm / XCE = {sc['p50_ms'] / xc['p50_ms']:.1f}x "
              f"(goal >= 10x, and XCE < 50 ms: {xc['p50_ms']:.1f} ms)")
    if xd.get("jobs_per_s") and sd.get("jobs_per_s"):
        print(f"dag: jobs/s XCE / Slurm = {xd['jobs_per_s'] / sd['jobs_per_s']:.1f}x (goal >= 4x)")
    for n in notes:
        print(f"note: {n}")
    print(f"elapsed {elapsed:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chain", type=int, default=1000, help="XCE chain length (default 1000)")
    ap.add_argument("--dag", type=int, default=10000, help="XCE fan-out width (default 10000)")
    ap.add_argument("--slurm-chain", type=int, default=100, help="Slurm chain length (default 100)")
    ap.add_argument("--slurm-dag", type=int, default=10000, help="Slurm fan-out width (default 10000)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=32)
    ap.add_argument("--shape-timeout", type=float, default=600.0, help="cap per shape and side, s")
    ap.add_argument("--no-slurm", action="store_true")
    ap.add_argument("--slurm-profile", default="tuned", choices=("tuned", "htc", "default"))
    ap.add_argument("--max-seconds", type=float, default=1500.0)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if min(args.chain, args.dag, args.slurm_chain, args.slurm_dag) < 2:
        ap.error("every size must be >= 2")
    xce, slurm, notes, rc, elapsed = run_sides(args, "xce-deps-", 0.4, xce_side, slurm_side)
    report(xce, slurm, notes, elapsed)
    return rc


if __name__ == "__main__":
    sys.exit(main())
