"""Job throughput, XCE against Slurm 22.05 on this machine, in one invocation.

    python bench/throughput.py [N] [--slots 32] [--api-clients 4] [--no-slurm]
                               [--slurm-profile tuned] [--max-seconds 900]

XCE side: a local 4-host cluster (``xce up --hosts 4 --listen 127.0.0.1:0``
on a temp state dir, ``--slots 32`` per host = 128 job slots, the same as the
Slurm anchor's OverSubscribe=FORCE:64 on 2 CPUs), then N trivial jobs
(``true``, output to /dev/null) in three modes, each timed from the first
submission until no job is PEND/RUN/PSUSP any more (polled every --poll s,
as the Slurm script polls ``squeue``):

  array   one job array ``xce submit -J "t[1-N]" -o /dev/null -- true``
  api     N separate ``POST /v1/jobs`` from one process over keep-alive
          connections (httpx), --api-clients concurrent connections
  cli     N separate ``xce submit -o /dev/null -- true`` processes, one after
          another (what an ``sbatch`` loop is compared to), through
          ``.venv/bin/xce`` as ``make dev`` builds it: the native front
          (native/xce.c) passes each call to the warm CLI server
          (xce.cli.server, started by the first call, stopped at the end)
  cli-R   the same with ``-R "span[hosts=1]"``: a resource requirement
  cli-json  the same with ``--json``: the job's whole document printed
  bsub    N separate ``bsub -o /dev/null true`` processes (LSF's command: the same
          native front, linked as ``bsub`` by ``make dev``, served by the same warm
          server; the job runs ``/bin/sh -c true``, as LSF runs a command line)

``--repeat K`` runs the XCE modes K times, interleaved (array, api, cli, cli-R,
cli-json, array, ...), so that load from other work on a shared machine falls
on every mode alike; the ratios use each mode's median.

Slurm side (unless --no-slurm): ``../shared/bench/slurm/setup.sh`` (PROFILE
=--slurm-profile, default knobs; installs the Debian packages if missing),
``throughput.sh N both``, ``teardown.sh``.  If the Slurm side fails the XCE
numbers are still printed.

The table gives submitted/s (N / submission phase), completed/s (N /
makespan) and the ratio of XCE completed/s to the matching Slurm mode:
array vs ``sbatch --array``, api, cli and bsub vs N separate ``sbatch`` calls.
Everything is bounded by --max-seconds; every process started here is
stopped (by pid) on exit, error or Ctrl-C.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
VENV_BIN = os.path.join(ROOT, ".venv", "bin")
XCE = os.path.join(VENV_BIN, "xce")
BSUB = os.path.join(VENV_BIN, "bsub")
PYTHON = os.path.join(VENV_BIN, "python")
SLURM_DIR = os.path.normpath(os.path.join(ROOT, "..", "shared", "bench", "slurm"))
ACTIVE = ("PEND", "RUN", "STAGE_OUT", "PSUSP")
CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchTimeout(Exception):
    pass


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def clean_env(**extra: str) -> dict[str, str]:
    """Our environment without XCE settings that would override --config."""
    env = {k: v for k, v in os.environ.items() if k not in ("XCE_URL", "XCE_TOKEN", "XCE_CONFIG")}
    env.update(extra)
    return env


# ---------------------------------------------------------------- processes


def kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """TERM then KILL the process group led by ``proc`` (a session we started)."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run_group(argv: list[str], timeout: float, env: dict[str, str] | None = None,
              log_path: str | None = None) -> tuple[int | None, str]:
    """Run argv in its own session; returns (rc or None on timeout, stdout). stderr goes to log_path."""
    err = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err,
                                env=env, start_new_session=True)
    finally:
        if log_path:
            err.close()
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
        return proc.returncode, out.decode(errors="replace")
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out = proc.stdout.read() if proc.stdout else b""
        return None, out.decode(errors="replace")
    except BaseException:
        kill_group(proc)
        raise


def children_of(pid: int) -> list[int]:
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as fh:
                s = fh.read()
        except OSError:
            continue
        if int(s.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(p))
    return out


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(f[11]) + int(f[12])) / CLK_TCK  # utime + stime


def machine_busy(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over ``seconds`` (other load on the machine skews every number here)."""
    def sample() -> tuple[int, int]:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
        return sum(f), f[3] + f[4]  # total, idle + iowait
    t0, i0 = sample()
    time.sleep(seconds)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def filesystem_note(path: str) -> str:
    """Which filesystem holds ``path`` (both systems' files live there), and a warning when it is ext4
    without a journal.  There the inode allocator skips every inode freed in the last 60 s, or in the
    last 360 s while its inode table block is not yet written back (``recently_deleted`` in
    fs/ext4/ialloc.c), looking that block up for each one: after a run has deleted tens of thousands
    of files, every new file scans past them.  Measured on this VM's root filesystem: XCE's claims mode
    at 114 jobs/s as the first run of the day and 64-80 jobs/s within minutes of other runs; on a
    journaled ext4 100-106 jobs/s, run after run.  ``TMPDIR`` moves the bench's files."""
    real = os.path.realpath(path)
    best = ("", "?", "?")  # mount point, filesystem type, source
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            fields = line.split()
            point = fields[4].replace("\\040", " ")
            rest = fields[fields.index("-") + 1:]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[0]):
                best = (point, rest[0], rest[1])
    point, fstype, source = best
    note = f"bench files under {real}: {fstype} on {source}, mounted at {point}"
    if fstype == "ext4":
        dev = os.path.basename(source)
        try:
            journaled = any(n.startswith(f"{dev}-") for n in os.listdir("/proc/fs/jbd2"))
        except FileNotFoundError:
            journaled = False
        if not journaled:
            note += (" (no journal: its inode allocator slows down for minutes after many files were"
                     " deleted, so a run soon after another is slower; see filesystem_note in bench/throughput.py)")
    return note


# ---------------------------------------------------------------- XCE cluster


class XceCluster:
    def __init__(self, state_dir: str, hosts: int, slots: int, extra: tuple[str, ...] = ()) -> None:
        self.state_dir = state_dir
        self.hosts = hosts
        self.slots = slots
        self.extra = list(extra)  # more `xce up` arguments (bench/staging.py: --config, --transfer-config; bench/history.py: --config)
        self.config = os.path.join(state_dir, "client.toml")
        self.runtime = os.path.join(state_dir, "cli-runtime")  # the xce command's warm server (xce.cli.server)
        self.proc: subprocess.Popen | None = None
        self.daemons: dict[str, int] = {}  # name -> pid (controller, worker-hostN)
        self.url = ""
        self.token = ""
        self.stop_problems: list[str] = []

    def env(self) -> dict[str, str]:
        """What the xce command runs with: our environment, its servers in this cluster's directory."""
        return clean_env(XCE_RUNTIME_DIR=self.runtime)

    def cli(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        return subprocess.run([XCE, "--config", self.config, *args], capture_output=True, text=True,
                              timeout=timeout, env=self.env())

    def stop_cli_servers(self) -> None:
        """Stop (by pid) the warm CLI servers this cluster's calls started."""
        for name in os.listdir(self.runtime) if os.path.isdir(self.runtime) else ():
            if name.endswith(".pid"):
                try:
                    with open(os.path.join(self.runtime, name)) as fh:
                        os.kill(int(fh.read()), signal.SIGTERM)
                except (OSError, ValueError):
                    pass

    def start(self, timeout: float = 90.0) -> None:
        os.makedirs(self.runtime, mode=0o700, exist_ok=True)
        out = open(os.path.join(self.state_dir, "up.out"), "wb")
        try:
            # own session: a Ctrl-C here reaches only us; we stop it with `xce down`
            self.proc = subprocess.Popen(
                [XCE, "up", "--hosts", str(self.hosts), "--state-dir", self.state_dir,
                 "--listen", "127.0.0.1:0", "--slots", str(self.slots), *self.extra],
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=self.env(),
                start_new_session=True)
        finally:
            out.close()
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.config):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"xce up: no {self.config} after {timeout:g}s")
            time.sleep(0.05)
        while True:
            self._check_alive()
            r = self.cli("hosts", "--json")
            if r.returncode == 0:
                import json

                ok = [h["name"] for h in json.loads(r.stdout) if h["state"] == "OK"]
                if len(ok) >= self.hosts:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"xce up: {self.hosts} hosts not OK after {timeout:g}s: {r.stdout[:300]}")
            time.sleep(0.2)
        with open(self.config, "rb") as fh:
            cfg = tomllib.load(fh)
        self.url, self.token = cfg["url"], cfg["token"]
        printed = ""
        for _ in range(50):  # `xce up` prints its URL once the hosts are up
            with open(os.path.join(self.state_dir, "up.out")) as fh:
                printed = fh.read()
            if "controller http" in printed:
                break
            time.sleep(0.1)
        m = re.search(r"controller (http://\S+),", printed)
        if m and m.group(1) != self.url:
            log(f"note: xce up printed {m.group(1)} but client.toml says {self.url}")
        for pid in children_of(self.proc.pid):  # controller, worker-hostN, and whatever else xce up runs
            argv = cmdline(pid)
            kind = argv[argv.index("xce.cli.main") + 1] if "xce.cli.main" in argv[:-1] else f"pid{pid}"
            if kind == "worker" and "--host" in argv[:-1]:
                kind = "worker-" + argv[argv.index("--host") + 1]
            self.daemons[kind] = pid

    def _check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            with open(os.path.join(self.state_dir, "up.out"), errors="replace") as fh:
                tail = fh.read()[-2000:]
            raise RuntimeError(f"xce up exited with {self.proc.returncode}:\n{tail}")

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.daemons.items()}

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            self.stop_cli_servers()  # last: `xce down` itself is a call

    def _stop(self) -> None:
        if self.proc is None:
            return
        daemons = list(self.daemons.values()) or (children_of(self.proc.pid) if self.proc.poll() is None else [])
        if self.proc.poll() is None:
            try:
                t = time.monotonic()
                r = subprocess.run([XCE, "down", "--state-dir", self.state_dir], capture_output=True,
                                   text=True, timeout=45, env=self.env())
                log(f"xce down: rc={r.returncode} in {time.monotonic() - t:.1f}s: {(r.stdout + r.stderr).strip()}")
            except subprocess.TimeoutExpired:
                log("xce down did not return within 45 s")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                log(f"xce up (pid {self.proc.pid}) still running after xce down: SIGTERM")
                self.proc.terminate()
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    log(f"xce up (pid {self.proc.pid}) ignored SIGTERM: SIGKILL")
                    self.proc.kill()
                    self.proc.wait()
        # the daemons are in their own sessions: make sure none outlived `xce up`
        for pid in daemons:
            argv = cmdline(pid)
            if argv and any("xce" in a for a in argv):
                log(f"daemon pid {pid} ({' '.join(argv[-6:])}) outlived xce up: SIGKILL")
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.proc = None
        try:
            with open(os.path.join(self.state_dir, "up.out"), errors="replace") as fh:
                for line in fh:
                    if "did not stop" in line or "exited with" in line:
                        self.stop_problems.append(line.strip())
                        log(f"xce up said: {line.strip()}")
        except OSError:
            pass

    def log_problems(self, limit: int = 12) -> tuple[int, list[str]]:
        pat = re.compile(r"Traceback|ERROR|CRITICAL|Exception|error", re.I)
        hits: list[str] = []
        count = 0
        logs = os.path.join(self.state_dir, "logs")
        for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else ():
            with open(os.path.join(logs, name), errors="replace") as fh:
                for line in fh:
                    if pat.search(line):
                        count += 1
                        if len(hits) < limit:
                            hits.append(f"{name}: {line.rstrip()[:300]}")
        return count, hits


# ---------------------------------------------------------------- XCE modes


class Api:
    def __init__(self, url: str, token: str) -> None:
        import httpx

        self.httpx = httpx
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.client = httpx.Client(base_url=url, headers=self.headers, timeout=30.0)
        self.polls = 0
        self.poll_s = 0.0  # client-side latency of the completion polls (the controller's cost, roughly)

    def new_client(self):
        return self.httpx.Client(base_url=self.url, headers=self.headers, timeout=30.0)

    def jobs(self, states: tuple[str, ...] | None, brief: bool = False) -> list[dict]:
        """Every user's jobs in ``states`` (None: all); ``brief``: a listing's rows (what the completion
        poll needs, as Slurm's is ``squeue -h -o %i``), not the full documents (~800 KB a 1,000 jobs,
        whose rendering competed with the jobs for the controller)."""
        params = [("all", "true")] + [("state", s) for s in states or ()] + ([("view", "brief")] if brief else [])
        r = self.client.get("/v1/jobs", params=params)
        r.raise_for_status()
        return r.json()

    def close(self) -> None:
        self.client.close()


def wait_drained(api: Api, deadline: float, poll: float) -> tuple[float, bool]:
    """Poll until no job is PEND/RUN/PSUSP; (monotonic time seen empty, timed out?)."""
    last_note = time.monotonic()
    while True:
        try:
            t = time.monotonic()
            left = len(api.jobs(ACTIVE, brief=True))
            api.polls += 1
            api.poll_s += time.monotonic() - t
        except Exception as e:  # a transient error is retried until the deadline
            log(f"poll failed: {e!r}")
            left = -1
        now = time.monotonic()
        if left == 0:
            return now, False
        if now > deadline:
            return now, True
        if now - last_note > 10:
            log(f"  {left} jobs still PEND/RUN/PSUSP")
            last_note = now
        time.sleep(poll)


def submit_array(cluster: XceCluster, n: int, deadline: float) -> tuple[list[int], int]:
    r = cluster.cli("submit", "-J", f"t[1-{n}]", "-o", "/dev/null", "--", "true",
                    timeout=max(5.0, deadline - time.monotonic()))
    m = re.search(r"Job <(\d+)>", r.stdout)
    if r.returncode != 0 or not m:
        log(f"array submit failed rc={r.returncode}: {r.stdout.strip()} {r.stderr.strip()}")
        return [], 1
    first = int(m.group(1))
    return list(range(first, first + n)), 0


def submit_api(api: Api, n: int, clients: int, deadline: float) -> tuple[list[int], int]:
    counter = itertools.count()
    ids: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()
    body = {"command": ["true"], "stdout": "/dev/null"}

    def worker() -> None:
        with api.new_client() as c:
            while next(counter) < n and time.monotonic() < deadline:
                try:
                    r = c.post("/v1/jobs", json=body)
                    if r.status_code == 201:
                        with lock:
                            ids.append(r.json()["id"])
                        continue
                    err = f"HTTP {r.status_code} {r.text[:200]}"
                except Exception as e:
                    err = repr(e)
                with lock:
                    errors.append(err)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(1.0, deadline - time.monotonic() + 35))
    if errors:
        log(f"api submit: {len(errors)} errors, first: {errors[0]}")
    return ids, len(errors)


CLI_FORMS = {"cli": [], "cli-R": ["-R", "span[hosts=1]"], "cli-json": ["--json"], "bsub": []}


def submit_cli(cluster: XceCluster, n: int, deadline: float, form: str = "cli",
               front: str = XCE) -> tuple[list[int], int]:
    env = cluster.env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a real install has (and writes) cached bytecode
    argv = [front, "--config", cluster.config, "submit", *CLI_FORMS[form], "-o", "/dev/null", "--", "true"]
    if form == "bsub":  # LSF's command reads the client config from XCE_CONFIG, as xce does
        argv, env["XCE_CONFIG"] = [BSUB, "-o", "/dev/null", "true"], cluster.config
    ids: list[int] = []
    errors = 0
    first_err = ""
    for _ in range(n):
        if time.monotonic() > deadline:
            log(f"cli loop: submission phase hit its deadline after {len(ids) + errors} submissions")
            break
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=env)
        except subprocess.TimeoutExpired:
            errors += 1
            first_err = first_err or "timeout (30 s)"
            continue
        m = re.search(r'^Job <(\d+)>|^  "id": (\d+),$', r.stdout, re.M)
        if r.returncode == 0 and m:
            ids.append(int(m.group(1) or m.group(2)))
        else:
            errors += 1
            first_err = first_err or f"rc={r.returncode} {r.stdout.strip()} {r.stderr.strip()}"
    if errors:
        log(f"cli loop: {errors} failed submissions, first: {first_err}")
    return ids, errors


def run_mode(name: str, cluster: XceCluster, api: Api, n: int, args, mode_deadline: float) -> dict:
    # the queue must be empty before a measurement
    _, to = wait_drained(api, min(mode_deadline, time.monotonic() + 60), args.poll)
    if to:
        log(f"{name}: queue not empty before the run")
    cpu0 = cluster.cpu()
    polls0, poll_s0 = api.polls, api.poll_s
    log(f"xce mode={name} N={n}")
    t0 = time.monotonic()
    w0 = time.time()
    if name == "array":
        ids, errs = submit_array(cluster, n, mode_deadline)
    elif name == "api":
        ids, errs = submit_api(api, n, args.api_clients, mode_deadline)
    else:
        ids, errs = submit_cli(cluster, n, mode_deadline, name, args.front or XCE)
    tsub = time.monotonic()
    # a submission phase cut short by the deadline still gets a few seconds to drain what it submitted
    tend, timed_out = wait_drained(api, max(mode_deadline, time.monotonic() + 10), args.poll)
    cpu1 = cluster.cpu()
    idset = set(ids)
    done = exited = left = 0
    last_end = None
    exit_examples: list[str] = []
    try:
        for j in api.jobs(None):
            if j["id"] not in idset:
                continue
            if j["state"] == "DONE":
                done += 1
            elif j["state"] == "EXIT":
                exited += 1
                if len(exit_examples) < 3:
                    exit_examples.append(f"job {j['display_id']}: exit_code={j['exit_code']} "
                                         f"signal={j['signal']} reason={j['exit_reason']!r} hosts={j['hosts']}")
            else:
                left += 1
            if j.get("end_time"):
                last_end = max(last_end or 0.0, j["end_time"])
    except Exception as e:
        log(f"{name}: could not list jobs: {e!r}")
    if timed_out:
        log(f"{name}: timeout: {left} jobs still active; killing them")
        active = [j["id"] for j in api.jobs(ACTIVE) if j["id"] in idset]
        for jid in active:
            if time.monotonic() > mode_deadline + 30:
                break
            try:
                api.client.post(f"/v1/jobs/{jid}/kill")
            except Exception:
                pass
    for ex in exit_examples:
        log(f"{name}: EXIT {ex}")
    submit_s = tsub - t0
    makespan_s = tend - t0
    ctl_cpu = cpu1.get("controller", 0.0) - cpu0.get("controller", 0.0)
    wrk_cpu = sum(v - cpu0.get(k, 0.0) for k, v in cpu1.items() if k.startswith("worker-"))
    res = {"mode": name, "system": "xce", "n": n, "submitted": len(ids), "submit_errors": errs,
           "submit_s": submit_s, "makespan_s": makespan_s,
           "submit_rate": len(ids) / submit_s if submit_s > 0 else float("inf"),
           "jobs_per_s": len(ids) / makespan_s if makespan_s > 0 else float("inf"),
           "done": done, "exit": exited, "left": left, "timeout": timed_out,
           "end_makespan_s": (last_end - w0) if last_end else None,
           "ctl_cpu_s": ctl_cpu, "workers_cpu_s": wrk_cpu,
           "polls": api.polls - polls0, "poll_s": api.poll_s - poll_s0}
    log(f"xce mode={name}: submitted {len(ids)} in {submit_s:.2f}s, makespan {makespan_s:.2f}s, "
        f"DONE={done} EXIT={exited} active={left} controller_cpu={ctl_cpu:.1f}s workers_cpu={wrk_cpu:.1f}s")
    return res


def xce_side(args, tmp: str, xce_deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    log("precompiling src/ (python -m compileall -q src)")
    subprocess.run([PYTHON, "-m", "compileall", "-q", "src"], cwd=ROOT, timeout=120,
                   env=clean_env(), check=False)
    state = os.path.join(tmp, "xce")
    os.makedirs(state, mode=0o700)  # admin token inside
    cluster = XceCluster(state, args.hosts, args.slots)
    cleanup.append(cluster.stop)
    log(f"starting xce up --hosts {args.hosts} --slots {args.slots} --state-dir {state}")
    t = time.monotonic()
    cluster.start()
    log(f"xce cluster up in {time.monotonic() - t:.1f}s at {cluster.url}: daemons {cluster.daemons}")
    notes.append(f"xce: {args.hosts} hosts x {args.slots} slots = {args.hosts * args.slots} job slots "
                 f"(xce up --slots {args.slots}), controller {cluster.url}, state {state}")
    front = args.front or XCE
    with open(front, "rb") as fh:
        native = fh.read(4) == b"\x7fELF"
    notes.append(f"xce cli: {front} is the {'native front (native/xce.c)' if native else 'Python entry script'}"
                 + (" (--front: another build's, against this tree's daemons)" if args.front else ""))
    api = Api(cluster.url, cluster.token)
    cleanup.append(api.close)
    results = []
    modes = [m for m in ("array", "api", *CLI_FORMS) if m in args.modes.split(",")] * args.repeat
    for i, mode in enumerate(modes):
        # share what is left of the XCE budget among the remaining modes, at most --mode-timeout each
        remaining = xce_deadline - time.monotonic()
        if remaining < 10:
            notes.append(f"xce {mode}: skipped, out of time budget")
            continue
        budget = min(args.mode_timeout, remaining / (len(modes) - i) if i < len(modes) - 1 else remaining)
        results.append({**run_mode(mode, cluster, api, args.n, args, time.monotonic() + budget),
                        "rep": i // (len(modes) // args.repeat) + 1})
    cluster.stop()
    count, hits = cluster.log_problems()
    notes.append(f"xce logs: {count} lines matching error/exception/traceback in {state}/logs")
    notes.extend("  " + h for h in hits)
    notes.extend(f"xce stop: {p}" for p in cluster.stop_problems)
    return results, notes


# ---------------------------------------------------------------- Slurm side


def parse_slurm_lines(out: str) -> list[dict]:
    res = []
    for line in out.splitlines():
        if not line.startswith("slurm "):
            continue
        kv = dict(re.findall(r"(\w+)=(\[[^\]]*\]|\S+)", line))

        def num(k: str) -> float:
            try:
                return float(kv.get(k, "nan"))
            except ValueError:
                return float("nan")
        mode = kv.get("mode", "?")
        res.append({"mode": "sbatch-loop" if mode == "sbatch" else mode, "system": "slurm",
                    "n": int(kv.get("N", 0)), "submitted": int(kv.get("N", 0)) - int(num("submit_errors") or 0),
                    "submit_errors": int(num("submit_errors") or 0),
                    "submit_s": num("submit_s"), "makespan_s": num("makespan_s"),
                    "submit_rate": num("submit_rate"), "jobs_per_s": num("jobs_per_s"),
                    "done": kv.get("completed", "?"), "exit": kv.get("failed", "?"),
                    "timeout": kv.get("timeout") == "1", "ctl_cpu_s": num("ctld_cpu_s"),
                    "workers_cpu_s": num("slurmd_cpu_s"), "raw": line})
    return res


def slurm_side(args, tmp: str, deadline: float, cleanup: list) -> tuple[list[dict], list[str]]:
    notes: list[str] = []
    d = os.path.join(tmp, "slurm")
    os.makedirs(d)
    logf = os.path.join(tmp, "slurm-bench.log")
    env = clean_env(PROFILE=args.slurm_profile, RESULTS=os.path.join(d, "results.tsv"))
    started = {"setup": False}

    def teardown() -> None:
        if not started["setup"]:
            return
        started["setup"] = False
        rc, _ = run_group(["bash", os.path.join(SLURM_DIR, "teardown.sh"), d], 90,
                          env=clean_env(PURGE="0" if args.keep else "1"), log_path=logf)
        log(f"slurm teardown rc={rc}")

    cleanup.append(teardown)
    remaining = deadline - time.monotonic()
    if remaining < 120:
        notes.append(f"slurm: skipped, only {remaining:.0f}s of the time budget left")
        return [], notes
    log(f"slurm setup (PROFILE={args.slurm_profile}) in {d}; output in {logf}")
    started["setup"] = True  # even a failed setup may have started daemons: teardown stops what is in pids
    t = time.monotonic()
    rc, _ = run_group(["bash", os.path.join(SLURM_DIR, "setup.sh"), d], remaining - 100, env=env, log_path=logf)
    log(f"slurm setup rc={rc} in {time.monotonic() - t:.1f}s")
    if rc != 0:
        with open(logf, errors="replace") as fh:
            tail = fh.read().splitlines()[-12:]
        why = "timed out" if rc is None else f"failed with rc={rc}"
        notes.append(f"slurm: setup.sh {why}; last lines of {logf}:")
        notes.extend("  " + line for line in tail)
        if os.path.exists("/tmp/slurm-bench-apt.log"):
            with open("/tmp/slurm-bench-apt.log", errors="replace") as fh:
                notes.extend("  apt: " + line for line in fh.read().splitlines()[-5:])
        teardown()
        return [], notes
    remaining = deadline - time.monotonic() - 80  # keep time for teardown
    # throughput.sh bounds each of its two modes by RUN_TIMEOUT (plus up to 60 s of scancel)
    run_timeout = int(max(20, min(600, remaining / 2 - 70)))
    env["RUN_TIMEOUT"] = str(run_timeout)
    log(f"slurm throughput.sh {args.n} both (RUN_TIMEOUT={run_timeout})")
    rc, out = run_group(["bash", os.path.join(SLURM_DIR, "throughput.sh"), str(args.n), "both", d],
                        max(30, remaining), env=env, log_path=logf)
    results = parse_slurm_lines(out)
    for r in results:
        log(f"slurm: {r['raw']}")
    if rc != 0 or len(results) < 2:
        notes.append(f"slurm: throughput.sh rc={rc} with {len(results)} result lines; see {logf}")
    if results:
        cfg = re.search(r"cfg=\[([^\]]*)\]", results[0]["raw"])
        notes.append(f"slurm: {cfg.group(1) if cfg else ''} ("
                     f"{os.cpu_count()} CPUs, OverSubscribe=FORCE:64 = {2 * 64 if os.cpu_count() == 2 else '?'} slots)")
    teardown()
    return results, notes


# ---------------------------------------------------------------- report


def fmt(x, spec: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def report(args, xce: list[dict], slurm: list[dict], notes: list[str], elapsed: float) -> None:
    import statistics

    by = {(r["system"], r["mode"]): r for r in slurm}
    pairs = {"array": "array", "api": "sbatch-loop", "cli": "sbatch-loop", "cli-R": "sbatch-loop",
             "cli-json": "sbatch-loop", "bsub": "sbatch-loop"}
    labels = {"array": "array (one xce submit -J t[1-N])",
              "api": f"api separate ({args.api_clients} keep-alive conns, 1 process)",
              "cli": "cli loop (N xce submit processes)",
              "cli-R": "cli loop, -R span[hosts=1]",
              "cli-json": "cli loop, --json",
              "bsub": "bsub loop (N bsub processes)",
              "slurm array": "array (one sbatch --array=1-N)",
              "slurm sbatch-loop": "sbatch loop (N sbatch processes)"}
    print()
    print(f"throughput N={args.n}  (makespan = first submission -> no job pending/running, polled every "
          f"{args.poll:g}s; completed/s = jobs / makespan)")
    hdr = (f"{'MODE':48} {'SYSTEM':6} {'SUBMITTED/S':>11} {'COMPLETED/S':>11} {'MAKESPAN_S':>10} "
           f"{'DONE':>5} {'EXIT':>5} {'CTL_CPU_S':>9} {'EXEC_CPU_S':>10}  XCE/SLURM")
    print(hdr)
    print("-" * len(hdr))
    rows = [(labels[r["mode"]] + (f" #{r['rep']}" if args.repeat > 1 else ""), r) for r in xce]
    rows += [(labels[f"slurm {r['mode']}"], r) for r in slurm]
    for label, r in rows:
        ratio = ""
        if r["system"] == "xce":
            peer = by.get(("slurm", pairs[r["mode"]]))
            if peer and peer["jobs_per_s"] and peer["jobs_per_s"] == peer["jobs_per_s"]:
                ratio = f"{r['jobs_per_s'] / peer['jobs_per_s']:.2f}x vs slurm {pairs[r['mode']]}"
            else:
                ratio = "- (no slurm run)"
        flag = " TIMEOUT" if r.get("timeout") else ""
        if r["submitted"] < r["n"]:
            flag += f" PARTIAL ({r['submitted']}/{r['n']} submitted)"
        print(f"{label:48} {r['system']:6} {fmt(r['submit_rate']):>11} {fmt(r['jobs_per_s']):>11} "
              f"{fmt(r['makespan_s'], '.2f'):>10} {r['done']!s:>5} {r['exit']!s:>5} "
              f"{fmt(r.get('ctl_cpu_s'), '.1f'):>9} {fmt(r.get('workers_cpu_s'), '.1f'):>10}  {ratio}{flag}")
    print()
    print("ratios (XCE completed/s / Slurm completed/s" + (", each XCE mode's median of its runs):" if args.repeat > 1
                                                          else "):"))
    for xm in pairs:
        runs = [r["jobs_per_s"] for r in xce if r["mode"] == xm]
        s = by.get(("slurm", pairs[xm]))
        val = (f"{statistics.median(runs) / s['jobs_per_s']:.2f}" if runs and s and s["jobs_per_s"] == s["jobs_per_s"]
               and s["jobs_per_s"] else "-")
        print(f"  {xm + ' vs slurm ' + pairs[xm]:36} {val}")
    print()
    print("CTL_CPU_S: controller (xce) / slurmctld CPU seconds during the mode; EXEC_CPU_S: the 4 xce workers /"
          " slurmd (slurmstepd not counted). Slurm DONE/EXIT = sdiag jobs completed/failed.")
    for r in xce:
        if r["end_makespan_s"] is not None:
            print(f"xce {r['mode']}: last job end_time - first submission = {r['end_makespan_s']:.2f}s; "
                  f"submission phase {r['submit_s']:.2f}s; submit errors {r['submit_errors']}; "
                  f"still active {r['left']}; {r['polls']} completion polls took {r['poll_s']:.2f}s")
    for n in notes:
        print(n)
    print(f"total bench time {elapsed:.0f}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1000, help="jobs per mode (default 1000)")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--slots", type=int, default=32,
                    help="XCE slots per host (default 32: 4 x 32 = 128, Slurm's FORCE:64 x 2 CPUs)")
    ap.add_argument("--api-clients", type=int, default=4, help="concurrent keep-alive connections (default 4)")
    ap.add_argument("--poll", type=float, default=0.2, help="completion poll interval, s (Slurm's: 0.2)")
    ap.add_argument("--modes", default="array,api,cli,cli-R,cli-json,bsub",
                    help="XCE modes to run (default array,api,cli,cli-R,cli-json,bsub)")
    ap.add_argument("--repeat", type=int, default=1, help="run the XCE modes this many times, interleaved")
    ap.add_argument("--mode-timeout", type=float, default=300.0, help="cap per XCE mode, s")
    ap.add_argument("--no-slurm", action="store_true", help="skip the Slurm side")
    ap.add_argument("--front", help="the xce command the cli loops run (default: this tree's); another "
                    "build's native front measures this tree's daemons with the front held fixed")
    ap.add_argument("--slurm-profile", default="tuned", choices=("tuned", "htc", "default"))
    ap.add_argument("--max-seconds", type=float, default=900.0, help="hard cap on the whole bench (default 900)")
    ap.add_argument("--keep", action="store_true", help="keep the temp state dirs (logs) afterwards")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("N must be >= 1")

    xce_res, slurm_res, notes, rc, elapsed = run_sides(args, "xce-throughput-", 0.5, xce_side, slurm_side)
    report(args, xce_res, slurm_res, notes, elapsed)
    return rc


def run_sides(args, prefix: str, xce_share: float, xce_side, slurm_side):
    """Both sides of a bench under one time cap, each cleaned up whatever happens (error, Ctrl-C,
    SIGTERM, the cap): ``(xce results, slurm results, notes, exit code, seconds)``.  ``xce_share`` is
    the part of the cap the XCE side may use when Slurm runs too; notes start with how busy the
    machine was."""
    notes: list[str] = []
    t_start = time.monotonic()
    # the last 150 s of the cap are kept for stopping things (xce down, teardown.sh: each bounded)
    measure = max(60.0, args.max_seconds - 150)
    deadline = t_start + measure
    xce_deadline = t_start + (measure * xce_share if not args.no_slurm else measure)

    def on_signal(signum, frame):
        raise KeyboardInterrupt if signum != signal.SIGALRM else BenchTimeout(f"{args.max_seconds:g}s cap")

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored (`cmd &`)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGALRM, on_signal)
    signal.alarm(int(measure + 20))  # a hard stop for the measurements if a bound above failed

    busy = machine_busy()
    notes.append(f"machine: {os.cpu_count()} CPUs, {100 * busy:.0f}% busy in the second before the bench "
                 f"(load average at start {os.getloadavg()[0]:.2f})")
    log(notes[0])
    if busy > 0.15:
        log(f"warning: the machine is already {100 * busy:.0f}% busy: numbers will be skewed")
    tmp = tempfile.mkdtemp(prefix=prefix)
    notes.append(filesystem_note(tmp))
    log(notes[-1])
    os.chmod(tmp, 0o755)  # munged wants every directory above its socket world-executable; `nobody` needs x
    cleanup: list = []
    xce_res: list[dict] = []
    slurm_res: list[dict] = []
    rc = 0
    try:
        try:
            xce_res, n1 = xce_side(args, tmp, xce_deadline, cleanup)
            notes += n1
        except (KeyboardInterrupt, BenchTimeout):
            raise
        except Exception as e:
            notes.append(f"xce side failed: {e!r}")
            log(f"xce side failed: {e!r}")
            rc = 1
        finally:
            for fn in reversed(cleanup):
                fn()
            cleanup.clear()
        if not args.no_slurm:
            try:
                slurm_res, n2 = slurm_side(args, tmp, deadline, cleanup)
                notes += n2
            except (KeyboardInterrupt, BenchTimeout):
                raise
            except Exception as e:
                notes.append(f"slurm side failed: {e!r}")
                log(f"slurm side failed: {e!r}")
        else:
            notes.append("slurm: skipped (--no-slurm)")
    except (KeyboardInterrupt, BenchTimeout) as e:
        notes.append(f"interrupted: {type(e).__name__} {e}")
        log(f"interrupted ({type(e).__name__}): cleaning up")
        rc = 130
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # let the cleanup finish
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for fn in reversed(cleanup):
            try:
                fn()
            except Exception as e:
                log(f"cleanup step failed: {e!r}")
        if args.keep:
            notes.append(f"state kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return xce_res, slurm_res, notes, rc, time.monotonic() - t_start


if __name__ == "__main__":
    sys.exit(main())
