"""Jobs with claims (scratch + stage-in/out), XCE against Slurm 22.05 burst buffers, in one invocation.

    python bench/claims_jobs.py [N] [--slots 32] [--api-clients 4] [--scratch 64Mi]
                                [--no-slurm] [--no-bb] [--slurm-profile tuned] [--max-seconds 900]

XCE side: a local 4-host cluster (``xce up --hosts 4 --listen 127.0.0.1:0
--slots 32`` on a temp state dir; each host has a 64Gi ``scratch`` counter,
the provisioner and simfs come with it), then two modes of N jobs each, all
submitted as separate ``POST /v1/jobs`` over --api-clients keep-alive
connections from one process:

  plain   ``sh -c 'date +%s.%N >STAMP'``, no claims
  claims  the same plus ``"scratch": "64Mi"``, ``"stage_in": [IN_i:in.bin]``
          (a 4 KiB random file per job) and ``"stage_out":
          ["out.bin:OUT_i"]``; the job copies ``$XCE_STAGE/in.bin`` to
          ``$XCE_STAGE/out.bin`` and writes 64 KiB to ``$XCE_SCRATCH``

After one warm-up job, per mode: submit -> start latency per job from the
job JSON (start_time - submit_time, the controller's clock: after stage-in for
claims jobs), p50 and p99; also "first line" latency, the client clock just
before the POST -> the timestamp the job wrote first (the same measure as on
the Slurm side); makespan = first submission (client clock) -> the last job's
end_time (for claims jobs: after stage-out); jobs/s = jobs submitted /
makespan.  Checked: every job DONE, every job's claims RELEASED, every
stage-out file there with its input's content, every template claim (``GET
/v1/claims?all=true``, form "template") RELEASED, nothing left under
TMP/hosts/host*/simfs/nodes/*/*.  Also printed: the daemons' CPU seconds per
mode and, for claims jobs, p50/p99 of each step (claims created, create op,
stage-in, start, stage-out, release) from the claims' ops and history.

Slurm side (unless --no-slurm): ``../shared/bench/slurm/setup.sh``
(PROFILE=--slurm-profile, default tuned), one warm-up job, N ``sbatch
--wrap`` jobs that write ``date +%s.%N`` first; then, if the burst_buffer/lua
plugin is installed (what bb_stagein.sh checks) and not --no-bb, ``BB=1 setup.sh`` with
``SCHED_PARAMS=batch_sched_delay=0,bf_interval=1`` (as run_all.sh: BB jobs
are started by the backfill scheduler) and N plain jobs again on that
configuration, then N batch scripts with ``#BB_LUA stagein=copy`` (the lua
copies a 4 KiB file at stage-in).  Root may not use burst buffers, so every
Slurm job is submitted by a bash ``sbatch`` loop running as ``nobody``
(runuser).  There is no accounting (accounting_storage/none), so latency =
the job's own first timestamp - the loop's $EPOCHREALTIME just before sbatch,
makespan = first sbatch -> ``squeue -n NAME`` empty (polled every --poll s),
DONE/failed = sdiag "Jobs completed"/"Jobs failed"+"Jobs canceled" (reset
before each mode).

One table; ratios: Slurm latency / XCE latency and XCE jobs/s / Slurm jobs/s,
plain vs plain (tuned) and claims vs burst-buffer stage-in (or vs plain Slurm
if there is no burst buffer, which the table says).  Everything is bounded by
--max-seconds; every process started here is stopped by pid on exit, error,
Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import os
import re
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from throughput import (  # noqa: E402  (the same cluster/process helpers as the throughput bench)
    ACTIVE, PYTHON, ROOT, SLURM_DIR, Api, XceCluster, clean_env, log,
    run_group, run_sides, wait_drained,
)

BB_PLUGIN = "/usr/lib/x86_64-linux-gnu/slurm-wlm/burst_buffer_lua.so"  # what bb_stagein.sh checks
BB_SCHED_PARAMS = "batch_sched_delay=0,bf_interval=1"  # run_all.sh's BB configuration
INPUT_BYTES = 4096


def cpu_tree_seconds(pid: int) -> tuple[float, float]:
    """(utime + stime of ``pid``, cutime + cstime: of its children it has waited for: provider, copy
    and job processes).  Apart, so that a worker's own Python and its job chains can be told apart."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return sum(int(x) for x in f[11:13]) / tick, sum(int(x) for x in f[13:15]) / tick


def daemon_cpu(cluster: XceCluster) -> dict[str, float]:
    """CPU seconds per daemon kind, children included; "KIND children" is the children's share."""
    out: dict[str, float] = {}
    for name, pid in cluster.daemons.items():
        key = "workers" if name.startswith("worker-") else name
        own, children = cpu_tree_seconds(pid)
        out[key] = out.get(key, 0.0) + own + children
        out[f"{key} children"] = out.get(f"{key} children", 0.0) + children
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def read_stamp(path: str) -> float | None:
    try:
        with open(path) as fh:
            return float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


# ---------------------------------------------------------------- XCE side


class Workload:
    """Inputs, expected outputs and the job-written start stamps, under TMP/data."""

    def __init__(self, tmp: str, n: int) -> None:
        self.n = n
        self.base = os.path.join(tmp, "data")
        self.inputs = os.path.join(self.base, "in")
        self.outputs = os.path.join(self.base, "out")
        self.stamps = os.path.join(self.base, "stamps")
        for d in (self.inputs, self.outputs, self.stamps):
            os.makedirs(d)
        for i in range(n):
            with open(self.input(i), "wb") as fh:
                fh.write(os.urandom(INPUT_BYTES))

    def input(self, i: int) -> str:
        return os.path.join(self.inputs, f"in-{i}.bin")

    def output(self, i: int) -> str:
        return os.path.join(self.outputs, f"out-{i}.bin")

    def stamp(self, mode: str, i: int) -> str:
        return os.path.join(self.stamps, f"{mode}-{i}")

    def body(self, mode: str, i: int, scratch: str) -> dict:
        stamp = f"date +%s.%N >{self.stamp(mode, i)}"
        if mode == "plain":
            return {"command": ["sh", "-c", stamp], "stdout": "/dev/null"}
        script = (f'set -e; {stamp}; cp "$XCE_STAGE/in.bin" "$XCE_STAGE/out.bin"; '
                  'head -c 65536 /dev/zero >"$XCE_SCRATCH/scratch.bin"')
        return {"command": ["sh", "-c", script], "stdout": "/dev/null", "scratch": scratch,
                "stage_in": [f"{self.input(i)}:in.bin"], "stage_out": [f"out.bin:{self.output(i)}"]}


def submit_api(api: Api, wl: Workload, mode: str, args,
               deadline: float) -> tuple[dict[int, tuple[int, float]], list[str]]:
    """N separate POST /v1/jobs; returns {job id: (index, client wall time just before its POST)}, errors."""
    counter = itertools.count()
    subs: dict[int, tuple[int, float]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        with api.new_client() as c:
            while time.monotonic() < deadline:
                i = next(counter)
                if i >= wl.n:
                    return
                body = wl.body(mode, i, args.scratch)
                t = time.time()
                try:
                    r = c.post("/v1/jobs", json=body)
                    if r.status_code == 201:
                        with lock:
                            subs[r.json()["id"]] = (i, t)
                        continue
                    err = f"job {i}: HTTP {r.status_code} {r.text[:300]}"
                except Exception as e:
                    err = f"job {i}: {e!r}"
                with lock:
                    errors.append(err)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(args.api_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 35))
    return subs, errors


def get_all(api: Api, path: str, params: list[tuple[str, str]]) -> list[dict]:
    """Every record of a paged list (``X-Next-Cursor``): one page holds at most 10,000, and the
    default page the newest 1,000, fewer than N=1,000 claims jobs' 2,000 template claims."""
    out: list[dict] = []
    cursor = None
    while True:
        r = api.client.get(path, params=params + [("limit", "10000")] + ([("cursor", cursor)] if cursor else []))
        r.raise_for_status()
        out += r.json()
        cursor = r.headers.get("X-Next-Cursor")
        if not cursor:
            return out


def claims_of(api: Api) -> list[dict]:
    return get_all(api, "/v1/claims", [("all", "true")])


def jobs_of(api: Api) -> list[dict]:
    return get_all(api, "/v1/jobs", [("all", "true")])


def simfs_leftovers(state: str) -> list[str]:
    return sorted(glob.glob(os.path.join(state, "hosts", "host*", "simfs", "nodes", "*", "*")))


def claims_timeline(jobs: list[dict], tmpl: list[dict]) -> dict[str, list[float]]:
    """Where a claims job's time goes, from the job JSON and its claims' ops/history (controller times)."""
    by_job: dict[int, dict[str, dict]] = {}
    for c in tmpl:
        by_job.setdefault(c["job_id"], {})[c["class"]] = c

    def op_time(c: dict, op: str, result: str) -> float | None:
        return next((o["time"] for o in c.get("ops") or [] if o["op"] == op and o["result"] == result), None)

    def state_time(c: dict, state: str) -> float | None:
        return next((h["time"] for h in c["history"] if h["state"] == state), None)

    seg: dict[str, list[float]] = {}

    def add(name: str, a: float | None, b: float | None) -> None:
        if a is not None and b is not None:
            seg.setdefault(name, []).append(b - a)
    for j in jobs:
        cl = by_job.get(j["id"], {})
        sc, st = cl.get("scratch"), cl.get("stage")
        if not sc or not st or not j.get("start_time"):
            continue
        created = min(sc["created"], st["created"])
        c_started = [op_time(c, "create", "started") for c in (sc, st)]
        c_ok = [op_time(c, "create", "ok") for c in (sc, st)]
        si_started, si_ok = op_time(st, "stage_in", "started"), op_time(st, "stage_in", "ok")
        so_started, so_ok = op_time(st, "stage_out", "started"), op_time(st, "stage_out", "ok")
        released = [state_time(c, "RELEASED") for c in (sc, st)]
        add("submit->claims created", j["submit_time"], created)
        add("created->create started", created, max(filter(None, c_started), default=None))
        add("create op", max(filter(None, c_started), default=None), max(filter(None, c_ok), default=None))
        add("create ok->stage-in started", op_time(st, "create", "ok"), si_started)
        add("stage-in op", si_started, si_ok)
        add("ready->job start", max(filter(None, [si_ok, state_time(sc, "READY")]), default=None), j["start_time"])
        add("job start->stage-out started", j["start_time"], so_started)
        add("stage-out op", so_started, so_ok)
        add("stage-out ok->end_time", so_ok, j.get("end_time"))
        add("end_time->claims released", j.get("end_time"), max(filter(None, released), default=None)
            if all(released) else None)
    return seg


def run_xce_mode(mode: str, cluster: XceCluster, api: Api, wl: Workload, args, deadline: float) -> dict:
    _, to = wait_drained(api, min(deadline, time.monotonic() + 60), args.poll)
    if to:
        log(f"xce {mode}: queue not empty before the run")
    log(f"xce mode={mode} N={wl.n}")
    cpu0 = daemon_cpu(cluster)
    t0_wall = time.time()
    t0 = time.monotonic()
    subs, errors = submit_api(api, wl, mode, args, deadline)
    submit_s = time.monotonic() - t0
    first_submit = min((t for _, t in subs.values()), default=t0_wall)
    # a submission phase cut short by the deadline still gets a few seconds to drain what it submitted
    _, timed_out = wait_drained(api, max(deadline, time.monotonic() + 10), args.poll)
    problems: list[str] = [f"submit: {e}" for e in errors[:3]]
    if len(errors) > 3:
        problems.append(f"submit: ... {len(errors)} submission errors in all")
    if len(subs) + len(errors) < wl.n:
        problems.append(f"submission phase cut short by the mode's deadline: {len(subs)} of {wl.n} submitted")
    jobs = [j for j in jobs_of(api) if j["id"] in subs]
    if timed_out:
        active = [j["id"] for j in jobs if j["state"] in ACTIVE]
        log(f"xce {mode}: timeout with {len(active)} jobs active; killing them")
        problems.append(f"timeout: {len(active)} jobs still PEND/RUN/PSUSP at the deadline (killed)")
        for jid in active:
            try:
                api.client.post(f"/v1/jobs/{jid}/kill")
            except Exception:
                pass
    done = sum(j["state"] == "DONE" for j in jobs)
    failed = len(jobs) - done + len(errors)
    for j in [j for j in jobs if j["state"] != "DONE"][:3]:
        problems.append(f"job {j['display_id']}: state={j['state']} "
                        f"exit_code={j['exit_code']} signal={j.get('signal')} reason={j.get('exit_reason')!r} "
                        f"pending={j.get('pending_reason')!r} hosts={j['hosts']}")
    lat = [j["start_time"] - j["submit_time"] for j in jobs if j.get("start_time")]
    first_line = []
    missing_stamps = 0
    for j in jobs:
        i, t = subs[j["id"]]
        s = read_stamp(wl.stamp(mode, i))
        if s is None:
            missing_stamps += 1
        else:
            first_line.append(s - t)
    if missing_stamps:
        problems.append(f"{missing_stamps} jobs wrote no start stamp")
    ends = [j["end_time"] for j in jobs if j.get("end_time")]
    makespan = (max(ends) - first_submit) if ends else float("nan")

    # Claims are released after the job's end_time: wait (bounded) until every run's own claims (workspace;
    # scratch and stage for claims jobs) and every template claim of these jobs are RELEASED
    want_job_claims = 3 if mode == "claims" else 1
    want_tmpl = 2 * len(jobs) if mode == "claims" else 0
    ids = set(subs)
    wait_until = max(min(deadline, time.monotonic() + 120), time.monotonic() + 15)
    tmpl: list[dict] = []
    while True:
        try:
            jobs = [j for j in jobs_of(api) if j["id"] in ids]
            tmpl = [c for c in claims_of(api) if c["form"] == "template" and c.get("job_id") in ids]
        except Exception as e:
            log(f"xce {mode}: could not list jobs/claims: {e!r}")
        job_claims_bad = []
        for j in jobs:
            cl = j.get("claims") or []
            bad = [c for c in cl if c.get("state") != "RELEASED"]
            if bad or len(cl) < want_job_claims:
                job_claims_bad.append((j, bad))
        unreleased = [c for c in tmpl if c["state"] != "RELEASED"]
        settled = not job_claims_bad and not unreleased and len(tmpl) >= want_tmpl
        if settled or time.monotonic() > wait_until:
            break
        time.sleep(args.poll)
    checks: dict = {"job_claims_ok": len(jobs) - len(job_claims_bad)}
    for j, bad in job_claims_bad[:3]:
        problems.append(f"job {j['display_id']} claims: " + ", ".join(
            f"{c.get('name')}={c.get('state')} (last_error={c.get('last_error')!r})" for c in bad)
            + ("" if bad else f" only {len(j.get('claims') or [])} claims listed"))
    if mode == "claims":
        released_at = [h["time"] for c in tmpl for h in c["history"] if h["state"] == "RELEASED"]
        checks["template_claims"] = len(tmpl)
        checks["template_released"] = len(tmpl) - len(unreleased)
        checks["claims_drained_s"] = (max(released_at) - first_submit) if released_at else None
        counts: dict[str, int] = {}
        for c in unreleased:
            counts[c["state"]] = counts.get(c["state"], 0) + 1
        if unreleased or len(tmpl) != want_tmpl:
            problems.append(f"template claims: {len(tmpl)} for {len(jobs)} jobs (want 2 each: scratch + stage), "
                            f"not RELEASED: {counts or 'none'}")
        for c in unreleased[:3]:
            problems.append(f"claim {c['id']} {c['name']} ({c['class']}) {c['state']} host={c.get('host')} "
                            f"attempts={c['attempts']} last_error={c.get('last_error')!r} "
                            f"history={[h['state'] + ': ' + h['reason'] for h in c['history']][-3:]}")
        checks["timeline"] = claims_timeline(jobs, tmpl)
        good = bad_content = absent = 0
        for j in jobs:
            i, _ = subs[j["id"]]
            try:
                with open(wl.output(i), "rb") as fh:
                    got = fh.read()
            except OSError:
                absent += 1
                continue
            with open(wl.input(i), "rb") as fh:
                if got == fh.read():
                    good += 1
                else:
                    bad_content += 1
        checks["outputs_ok"] = good
        if absent or bad_content:
            problems.append(f"stage-out: {absent} output files missing, {bad_content} with wrong content "
                            f"(of {len(jobs)})")
    cpu1 = daemon_cpu(cluster)
    checks["cpu_s"] = {k: v - cpu0.get(k, 0.0) for k, v in cpu1.items()}
    left = simfs_leftovers(cluster.state_dir)
    checks["simfs_left"] = len(left)
    if left:
        problems.append(f"simfs: {len(left)} entries left under hosts/host*/simfs/nodes/*/*, e.g. {left[:3]}")
    ok = not problems and done == wl.n
    res = {"system": "xce", "mode": mode, "n": wl.n, "submitted": len(subs), "done": done, "failed": failed,
           "lat": lat, "first_line": first_line, "makespan_s": makespan,
           "jobs_per_s": len(subs) / makespan if makespan and makespan == makespan and makespan > 0 else float("nan"),
           "submit_s": submit_s, "timeout": timed_out, "checks": checks, "problems": problems, "ok": ok}
    log(f"xce mode={mode}: submitted {len(subs)} in {submit_s:.2f}s, makespan {makespan:.2f}s, DONE={done} "
        f"failed={failed} checks={ {k: v for k, v in checks.items() if k not in ('timeline', 'cpu_s')} } "
        f"{'ok' if ok else 'PROBLEMS'}")
    for p in problems:
        log(f"xce {mode}: {p}")
    return res


def xce_side(args, tmp: str, xce_deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    log("precompiling src/ (python -m compileall -q src)")
    subprocess.run([PYTHON, "-m", "compileall", "-q", "src"], cwd=ROOT, timeout=120,
                   env=clean_env(), check=False)
    wl = Workload(tmp, args.n)
    state = os.path.join(tmp, "xce")
    os.makedirs(state, mode=0o700)  # admin token inside
    cluster = XceCluster(state, args.hosts, args.slots)
    cleanup.append(cluster.stop)
    log(f"starting xce up --hosts {args.hosts} --slots {args.slots} --state-dir {state}")
    t = time.monotonic()
    cluster.start()
    log(f"xce cluster up in {time.monotonic() - t:.1f}s at {cluster.url}: daemons {cluster.daemons}")
    notes.append(f"xce: {args.hosts} hosts x {args.slots} slots = {args.hosts * args.slots} job slots, "
                 f"{args.api_clients} keep-alive REST clients, scratch {args.scratch}, "
                 f"controller {cluster.url}, state {state}")
    api = Api(cluster.url, cluster.token)
    cleanup.append(api.close)
    t = time.time()  # one job through the fresh cluster before measuring, as on the Slurm side
    r = api.client.post("/v1/jobs", json={"command": ["true"], "stdout": "/dev/null"})
    warm = "?"
    while r.status_code == 201 and time.time() < t + 30:
        warm = api.client.get(f"/v1/jobs/{r.json()['id']}").json().get("state", "?")
        if warm not in ACTIVE:
            break
        time.sleep(0.02)
    notes.append(f"xce warm-up job: HTTP {r.status_code}, {warm} after {time.time() - t:.2f}s")
    results = []
    modes = ("plain", "claims")
    for i, mode in enumerate(modes):
        remaining = xce_deadline - time.monotonic()
        if remaining < 10:
            notes.append(f"xce {mode}: skipped, out of time budget")
            continue
        budget = min(args.mode_timeout, remaining / (len(modes) - i))
        results.append(run_xce_mode(mode, cluster, api, wl, args, time.monotonic() + budget))
    api.close()
    cluster.stop()
    count, hits = cluster.log_problems()
    notes.append(f"xce logs: {count} lines matching error/exception/traceback in {state}/logs")
    notes.extend("  " + h for h in hits)
    notes.extend(f"xce stop: {p}" for p in cluster.stop_problems)
    return results, notes


# ---------------------------------------------------------------- Slurm side

# one bash loop (as the submitting user) runs all N sbatch calls; a line per job: INDEX EPOCHREALTIME JOBID|ERR
SUBMIT_LOOP = r"""
set -u
N="$1"; NAME="$2"; OUT="$3"; LIMIT="$4"; shift 4
t0=$SECONDS
for ((i = 1; i <= N; i++)); do
  ts=$EPOCHREALTIME
  if jid="$(timeout 30 sbatch --parsable -J "$NAME" -o /dev/null "$@" 2>>"$OUT.err")" && [ -n "$jid" ]; then
    echo "$i $ts ${jid%%;*}" >>"$OUT"
  else
    echo "$i $ts ERR" >>"$OUT"
  fi
  [ $((SECONDS - t0)) -lt "$LIMIT" ] || { echo "submission phase exceeded ${LIMIT}s at i=$i" >&2; break; }
done
"""


class Slurm:
    def __init__(self, args, tmp: str, cleanup: list) -> None:
        self.args = args
        self.d = os.path.join(tmp, "slurm")
        os.makedirs(self.d)
        self.work = os.path.join(tmp, "slurm-work")  # the jobs' cwd and stamps, written by `nobody`
        os.makedirs(os.path.join(self.work, "stamps"))
        for p in (self.work, os.path.join(self.work, "stamps")):
            os.chmod(p, 0o1777)
        self.logf = os.path.join(tmp, "slurm-bench.log")
        self.conf = os.path.join(self.d, "etc", "slurm.conf")
        self.started = False
        self.as_user = ["runuser", "-u", args.slurm_user, "--"] if os.geteuid() == 0 else []
        with open(os.path.join(self.work, "submit.sh"), "w") as fh:
            fh.write(SUBMIT_LOOP)
        cleanup.append(self.teardown)

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(SLURM_CONF=self.conf, **extra)

    def setup(self, timeout: float, **knobs: str) -> tuple[bool, str]:
        log(f"slurm setup {knobs} in {self.d}; output in {self.logf}")
        self.started = True  # even a failed setup may have started daemons: teardown stops what is in pids
        t = time.monotonic()
        rc, _ = run_group(["bash", os.path.join(SLURM_DIR, "setup.sh"), self.d], timeout,
                          env=clean_env(RESULTS=os.path.join(self.d, "results.tsv"), **knobs), log_path=self.logf)
        log(f"slurm setup rc={rc} in {time.monotonic() - t:.1f}s")
        if rc == 0:
            return True, ""
        with open(self.logf, errors="replace") as fh:
            tail = fh.read().splitlines()[-10:]
        why = "timed out" if rc is None else f"failed with rc={rc}"
        return False, "\n".join([f"slurm: setup.sh {knobs} {why}; last lines of {self.logf}:"]
                                + ["  " + line for line in tail])

    def teardown(self) -> None:
        if not self.started:
            return
        self.started = False
        rc, _ = run_group(["bash", os.path.join(SLURM_DIR, "teardown.sh"), self.d], 90,
                          env=clean_env(PURGE="0" if self.args.keep else "1"), log_path=self.logf)
        log(f"slurm teardown rc={rc}")

    def cmd(self, argv: list[str], timeout: float = 20.0) -> tuple[int | None, str]:
        return run_group(argv, timeout, env=self.env(), log_path=self.logf)

    def config_line(self) -> str:
        try:
            with open(self.conf) as fh:
                return re.sub(r"^# generated by \S+\s*", "", fh.readline().strip())
        except OSError:
            return "?"

    def sdiag(self) -> dict[str, int]:
        _, out = self.cmd(["sdiag"])
        vals = {}
        for key in ("Jobs submitted", "Jobs started", "Jobs completed", "Jobs canceled", "Jobs failed"):
            m = re.search(rf"^\s*{key}:\s*(\d+)", out, re.M)
            vals[key] = int(m.group(1)) if m else -1
        return vals

    def queued(self, name: str | None) -> int | None:
        """How many jobs (named ``name``, or all) squeue lists; None if squeue failed."""
        rc, out = self.cmd(["squeue", "-h", *(["-n", name] if name else []), "-o", "%i"])
        return len(out.split()) if rc == 0 else None

    def warm_up(self, timeout: float = 30.0) -> str:
        """One job through a fresh cluster before measuring (as the submitting user); its latency, printed."""
        stamp = os.path.join(self.work, "stamps", f"warmup-{time.monotonic_ns()}")
        name = f"cj_warmup_{os.getpid()}"
        t = time.time()
        rc, _ = run_group([*self.as_user, "bash", "-c", f'cd "$0" && exec sbatch --parsable -J {name} -o /dev/null '
                           f'"--wrap=date +%s.%N >{stamp}"', self.work], 30, env=self.env(), log_path=self.logf)
        end = time.monotonic() + timeout
        while (self.queued(name) != 0 or read_stamp(stamp) is None) and time.monotonic() < end:
            time.sleep(0.05)
        s = read_stamp(stamp)
        return f"warm-up job: sbatch rc={rc}, " + (f"started after {s - t:.2f}s" if s else "did not start")

    def run(self, mode: str, n: int, deadline: float) -> dict:
        args = self.args
        name = f"cj_{mode}_{os.getpid()}"
        stamps = os.path.join(self.work, "stamps", mode)
        os.makedirs(stamps)
        os.chmod(stamps, 0o1777)
        stamp = f"date +%s.%N >{stamps}/$SLURM_JOB_ID"
        if mode == "bb-copy":
            script = os.path.join(self.work, "bb_job.sh")
            with open(script, "w") as fh:  # directives first: burst_buffer.lua reads the leading # lines
                fh.write(f"#!/bin/sh\n#SBATCH -o /dev/null\n#BB_LUA stagein=copy\n{stamp}\n")
            os.chmod(script, 0o755)
            sbatch_args = [script]
        else:
            sbatch_args = [f"--wrap={stamp}"]
        subs_file = os.path.join(self.work, f"subs.{mode}")
        t_wait = time.monotonic()
        while self.queued(None) not in (0, None) and time.monotonic() < t_wait + 30:
            time.sleep(args.poll)  # the queue must be empty before a measurement
        self.cmd(["sdiag", "-r"])
        log(f"slurm mode={mode} N={n} name={name} ({self.config_line()})")
        limit = max(5, int(deadline - time.monotonic() - 10))
        t0 = time.monotonic()
        # the loop runs as the submitting user in the jobs' cwd (--wrap jobs inherit it)
        rc, _ = run_group([*self.as_user, "bash", "-c", f'cd "$0" && exec bash {self.work}/submit.sh "$@"',
                           self.work, str(n), name, subs_file, str(limit), *sbatch_args],
                          limit + 40, env=self.env(), log_path=self.logf)
        submit_s = time.monotonic() - t0
        subs: list[tuple[int, float, str]] = []
        try:
            with open(subs_file) as fh:
                for line in fh:
                    f = line.split()
                    if len(f) == 3:
                        subs.append((int(f[0]), float(f[1]), f[2]))
        except OSError:
            pass
        ok_subs = [(i, t, j) for i, t, j in subs if j != "ERR"]
        errors = len(subs) - len(ok_subs) + (n - len(subs))
        problems = []
        if rc != 0:
            problems.append(f"submission loop rc={rc}")
        if errors:
            try:
                with open(subs_file + ".err", errors="replace") as fh:
                    first = fh.readline().strip()
            except OSError:
                first = ""
            problems.append(f"{errors} of {n} sbatch calls failed or not made; first error: {first!r}")
        # makespan: first sbatch -> squeue shows none of them (as throughput.sh)
        timed_out = False
        last_note = time.monotonic()
        end_wall = time.time()
        while True:
            q = self.queued(name)
            end_wall = time.time()
            if q == 0:
                break
            if time.monotonic() > deadline:
                timed_out = True
                break
            if time.monotonic() - last_note > 10:
                log(f"  slurm {mode}: {q} jobs still in squeue")
                last_note = time.monotonic()
            time.sleep(args.poll)
        if timed_out:
            _, out = self.cmd(["squeue", "-h", "-n", name, "-o", "%i %T %r"])
            problems.append(f"timeout: {len(out.splitlines())} jobs still queued, e.g. {out.splitlines()[:3]} "
                            f"(scancel'ed)")
            log(f"slurm {mode}: timeout, scancel -n {name}")
            self.cmd(["scancel", "-n", name], 30)
            t = time.monotonic()
            while self.queued(name) not in (0, None) and time.monotonic() < t + 60:
                time.sleep(0.5)
        diag = self.sdiag()
        lat = []
        for _, t, jid in ok_subs:
            s = read_stamp(os.path.join(stamps, jid))
            if s is not None:
                lat.append(s - t)
        if len(lat) < len(ok_subs):
            problems.append(f"{len(ok_subs) - len(lat)} submitted jobs wrote no start stamp")
        first = min((t for _, t, _ in subs), default=float("nan"))
        makespan = end_wall - first
        done = diag["Jobs completed"]
        failed = max(0, diag["Jobs failed"]) + max(0, diag["Jobs canceled"]) + errors
        if done != n:
            problems.append(f"sdiag: {diag}")
        res = {"system": "slurm", "mode": mode, "n": n, "submitted": len(ok_subs), "done": done, "failed": failed,
               "lat": lat, "first_line": lat, "makespan_s": makespan,
               "jobs_per_s": len(ok_subs) / makespan if makespan > 0 else float("nan"), "submit_s": submit_s,
               "timeout": timed_out, "checks": {"stamps": len(lat)}, "problems": problems,
               "ok": not problems and len(lat) == n, "cfg": self.config_line()}
        log(f"slurm mode={mode}: submitted {len(ok_subs)} in {submit_s:.2f}s, makespan {makespan:.2f}s, "
            f"sdiag {diag}, stamps {len(lat)}")
        for p in problems:
            log(f"slurm {mode}: {p}")
        return res


def slurm_side(args, tmp: str, deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    results: list[dict] = []
    remaining = deadline - time.monotonic()
    if remaining < 120:
        notes.append(f"slurm: skipped, only {remaining:.0f}s of the time budget left")
        return results, notes
    s = Slurm(args, tmp, cleanup)
    bb = not args.no_bb and os.path.exists(BB_PLUGIN)
    if args.no_bb:
        notes.append("slurm bb: skipped (--no-bb): claims are compared with plain Slurm")
    elif not bb:
        notes.append(f"slurm bb: {BB_PLUGIN} not installed: claims are compared with plain Slurm")
    ok, why = s.setup(min(remaining - 100, 900), PROFILE=args.slurm_profile)
    if not ok:
        notes.append(why)
        s.teardown()
        return results, notes
    runs = 3 if bb else 1

    def budget(left_runs: int) -> float:  # share what is left (less teardown time) among the remaining runs
        return time.monotonic() + max(20.0, (deadline - time.monotonic() - 80) / left_runs)

    notes.append(f"slurm ({args.slurm_profile}): {s.warm_up()}")
    results.append(s.run("plain", args.n, budget(runs)))
    notes.append(f"slurm plain: {results[-1]['cfg']} ({os.cpu_count()} CPUs)")
    if bb:
        if deadline - time.monotonic() < 120:
            notes.append("slurm bb: skipped, out of time budget")
        else:
            ok, why = s.setup(min(deadline - time.monotonic() - 60, 300), PROFILE=args.slurm_profile, BB="1",
                              SCHED_PARAMS=BB_SCHED_PARAMS)
            if not ok:
                notes.append(why)
            else:
                with open(s.conf) as fh:
                    if not re.search(r"^BurstBufferType=burst_buffer/lua", fh.read(), re.M):
                        notes.append("slurm bb: setup.sh did not enable burst_buffer/lua")
                notes.append(f"slurm (BB=1): {s.warm_up()}")
                results.append(s.run("plain-bbcfg", args.n, budget(2)))
                results.append(s.run("bb-copy", args.n, budget(1)))
                notes.append(f"slurm bb: {results[-1]['cfg']}")
    notes.append(f"slurm: jobs submitted by a bash sbatch loop as {args.slurm_user!r} (root may not use burst "
                 f"buffers); no accounting in this setup: latency = job's first `date +%s.%N` - "
                 f"$EPOCHREALTIME before sbatch; makespan = first sbatch -> squeue empty (polled every "
                 f"{args.poll:g}s); DONE/FAILED = sdiag Jobs completed / failed+canceled")
    s.teardown()
    return results, notes


# ---------------------------------------------------------------- report


def fmt(x, spec: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def ms(values: list[float], p: float) -> float:
    return percentile(values, p) * 1000.0


def report(args, results: list[dict], notes: list[str], elapsed: float, busy_line: str) -> None:
    by = {(r["system"], r["mode"]): r for r in results}
    labels = {("xce", "plain"): "plain (REST POST, no claims)",
              ("xce", "claims"): f"claims (scratch {args.scratch} + 4K stage-in/out)",
              ("slurm", "plain"): f"plain (sbatch --wrap, {args.slurm_profile})",
              ("slurm", "plain-bbcfg"): "plain (sbatch --wrap, BB=1 cfg, bf_interval=1)",
              ("slurm", "bb-copy"): "burst buffer (#BB_LUA stagein=copy, 4K)"}
    print()
    print(f"claims_jobs N={args.n}")
    print("  S->S = submit->start: XCE job JSON start_time - submit_time; Slurm (no accounting): the job's first "
          "timestamp - client clock just before sbatch")
    print("  1ST = client clock just before submitting -> the job's first timestamp (`date +%s.%N`), both systems")
    print(f"  makespan = first submission -> last job ended (XCE: its end_time, after stage-out; Slurm: squeue empty, "
          f"polled every {args.poll:g}s); jobs/s = jobs submitted / makespan")
    hdr = (f"{'SYSTEM':6} {'MODE':48} {'N':>5} {'S->S P50 MS':>11} {'S->S P99 MS':>11} {'1ST P50 MS':>10} "
           f"{'1ST P99 MS':>10} {'MAKESPAN_S':>10} {'JOBS/S':>7} {'DONE':>5} {'FAILED':>6}  CHECKS")
    print(hdr)
    print("-" * len(hdr))
    for key in (("xce", "plain"), ("xce", "claims"), ("slurm", "plain"), ("slurm", "plain-bbcfg"),
                ("slurm", "bb-copy")):
        r = by.get(key)
        if r is None:
            continue
        c = r["checks"]
        if key[0] == "xce":
            check = f"claims released {c['job_claims_ok']}/{r['n']} jobs"
            if "template_claims" in c:
                check += (f", template {c['template_released']}/{c['template_claims']}, outputs ok "
                          f"{c['outputs_ok']}/{r['n']}")
            check += f", simfs left {c['simfs_left']}"
        else:
            check = f"stamps {c['stamps']}/{r['n']}"
        check += "" if r["submitted"] == r["n"] else f" PARTIAL ({r['submitted']}/{r['n']} submitted)"
        check += "" if r["ok"] else " PROBLEMS"
        check += " TIMEOUT" if r["timeout"] else ""
        print(f"{key[0]:6} {labels[key]:48} {r['n']:>5} {fmt(ms(r['lat'], 50)):>11} {fmt(ms(r['lat'], 99)):>11} "
              f"{fmt(ms(r['first_line'], 50)):>10} {fmt(ms(r['first_line'], 99)):>10} "
              f"{fmt(r['makespan_s'], '.2f'):>10} {fmt(r['jobs_per_s']):>7} {r['done']!s:>5} {r['failed']!s:>6}  "
              f"{check}")
    print()
    print("ratios XCE vs Slurm (latency: Slurm / XCE, >1 = XCE starts jobs sooner; jobs/s: XCE / Slurm):")
    claims_peer = "bb-copy" if ("slurm", "bb-copy") in by else "plain"
    pairs = [("plain", "plain", "xce plain vs slurm plain"),
             ("claims", claims_peer, "xce claims vs slurm " + ("burst-buffer stage-in" if claims_peer == "bb-copy"
                                                               else "plain (no burst buffer run)"))]
    for xm, sm, label in pairs:
        x, s = by.get(("xce", xm)), by.get(("slurm", sm))
        if not x or not s:
            print(f"  {label:58} - (no {'xce' if not x else 'slurm'} run)")
            continue

        def ratio(a: float, b: float) -> str:
            return f"{a / b:.2f}" if a == a and b == b and b > 0 else "-"
        print(f"  {label:58} S->S p50 {ratio(ms(s['lat'], 50), ms(x['lat'], 50))}  "
              f"p99 {ratio(ms(s['lat'], 99), ms(x['lat'], 99))}  "
              f"1st-line p50 {ratio(ms(s['first_line'], 50), ms(x['first_line'], 50))}  "
              f"p99 {ratio(ms(s['first_line'], 99), ms(x['first_line'], 99))}  "
              f"jobs/s {ratio(x['jobs_per_s'], s['jobs_per_s'])}")
    print()
    for r in results:
        extra = ""
        if r["checks"].get("claims_drained_s") is not None:
            extra = f"; last template claim RELEASED {r['checks']['claims_drained_s']:.2f}s after the first submission"
        print(f"{r['system']} {r['mode']}: submission phase {r['submit_s']:.2f}s for {r['submitted']} jobs{extra}")
        if r["checks"].get("cpu_s"):
            print("  CPU seconds during the mode (children included: jobs, providers, copies): " + ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(r["checks"]["cpu_s"].items())))
        if r["checks"].get("timeline"):
            print(f"  where a claims job's time goes (controller times; p50 / p99 ms over "
                  f"{max(len(v) for v in r['checks']['timeline'].values())} jobs):")
            for name, vals in r["checks"]["timeline"].items():
                print(f"    {name:32} {fmt(ms(vals, 50)):>8} / {fmt(ms(vals, 99)):>8}")
        for p in r["problems"]:
            print(f"  problem: {p}")
    print(busy_line)
    for n in notes:
        print(n)
    print(f"total bench time {elapsed:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=200, help="jobs per mode (default 200)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=32, help="XCE slots per host (default 32)")
    ap.add_argument("--api-clients", type=int, default=4, help="concurrent keep-alive connections (default 4)")
    ap.add_argument("--scratch", default="64Mi", help="scratch claim size per claims job (default 64Mi)")
    ap.add_argument("--poll", type=float, default=0.2, help="completion poll interval, s (default 0.2)")
    ap.add_argument("--mode-timeout", type=float, default=300.0, help="cap per XCE mode, s")
    ap.add_argument("--no-slurm", action="store_true", help="skip the Slurm side")
    ap.add_argument("--no-bb", action="store_true", help="skip Slurm's burst-buffer runs")
    ap.add_argument("--slurm-profile", default="tuned", choices=("tuned", "htc", "default"))
    ap.add_argument("--slurm-user", default="nobody", help="who submits the Slurm jobs when run as root")
    ap.add_argument("--max-seconds", type=float, default=900.0, help="hard cap on the whole bench (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the temp state dirs (logs) afterwards")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("N must be >= 1")

    xce_res, slurm_res, notes, rc, elapsed = run_sides(args, "xce-claims-jobs-", 0.4, xce_side, slurm_side)
    results = xce_res + slurm_res
    busy_line = notes.pop(0)  # printed with the table's header here
    report(args, results, notes, elapsed, busy_line)
    if rc == 0 and any(not r["ok"] for r in results if r["system"] == "xce"):
        rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
