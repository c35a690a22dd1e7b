"""``make demo``: XCE's main job on one machine, end to end, with the real CLI.

Brings up a local cluster (``xce up``: a controller on the embedded SQLite
store and four worker hosts on loopback), runs a small mixed workload the way
a person would (an array, a multi-host job, a held job, a failing one, a
killed one, a requeued one), prints what happened and a summary table, and
stops the cluster with ``xce down``.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

XCE = [sys.executable, "-m", "xce.cli.main"]


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


class Demo:
    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.env = dict(os.environ, XCE_CONFIG=os.path.join(state_dir, "client.toml"))
        self.env.pop("XCE_URL", None)
        self.env.pop("XCE_TOKEN", None)

    def xce(self, *args: str, show: bool = True, check: bool = True) -> str:
        if show:
            print(f"$ xce {' '.join(shlex.quote(a) for a in args)}", flush=True)
        proc = subprocess.run(XCE + list(args), env=self.env, capture_output=True, text=True, timeout=120)
        if show and (proc.stdout or proc.stderr):
            print((proc.stdout + proc.stderr).rstrip(), flush=True)
        if check and proc.returncode != 0:
            raise SystemExit(f"demo: `xce {' '.join(args)}` failed with exit code {proc.returncode}")
        return proc.stdout

    def jobs(self) -> list[dict]:
        return json.loads(self.xce("--json", "jobs", "-a", show=False))

    def submit(self, *args: str) -> int:
        print(f"$ xce submit {' '.join(shlex.quote(a) for a in args)}", flush=True)
        job = json.loads(self.xce("--json", "submit", *args, show=False))
        print(f"Job <{job['id']}> is submitted to queue <{job['queue']}>.", flush=True)
        return job["id"]

    def wait(self, what: str, cond, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > deadline:
                raise SystemExit(f"demo: timed out waiting for {what}")
            time.sleep(0.2)

    def state(self, job_id: int) -> str:
        return json.loads(self.xce("--json", "job", "show", str(job_id), show=False))["state"]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="xce-demo-") as tmp:
        state_dir = os.path.join(tmp, "cluster")
        out = os.path.join(tmp, "out")
        os.makedirs(out)
        step(f"xce up: a controller and 4 worker hosts on loopback (state in {state_dir})")
        up = subprocess.Popen(XCE + ["up", "--hosts", "4", "--slots", "4", "--state-dir", state_dir,
                                     "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        demo = Demo(state_dir)
        try:
            first = up.stdout.readline()
            if not first.startswith("xce cluster up"):
                raise SystemExit(f"demo: xce up failed: {first}{up.stdout.read()}")
            print(first.rstrip())
            demo.xce("ping")
            demo.xce("hosts")

            step("a mixed workload")
            array = demo.submit("-J", "render[1-12]", "-o", f"{out}/render.%J.%I", "--",
                                "sh", "-c", "echo frame $XCE_ARRAY_INDEX on $XCE_HOST")
            wide = demo.submit("-n", "6", "-R", "span[ptile=2]", "-J", "wide", "-o", f"{out}/wide.out", "--",
                               "sh", "-c", 'echo "6 slots on: $XCE_HOSTS"')
            held = demo.submit("-H", "-J", "later", "--", "true")
            broken = demo.submit("-J", "typo", "--", "pyhton", "train.py")
            long = demo.submit("-J", "forever", "--", "sleep", "600")
            again = demo.submit("-r", "-J", "retry", "-o", f"{out}/retry.out", "--",
                                "sh", "-c", 'echo "run $XCE_RUN"; sleep 600')
            nowhere = demo.submit("-R", "select[gpu==h100]", "-J", "needs-gpu", "--", "true")

            step("what is pending, and why")
            demo.wait("the held job to be seen", lambda: demo.state(held) == "PSUSP")
            demo.xce("job", "why", str(held), str(nowhere))
            demo.xce("release", str(held))

            step("kill one job, requeue another")
            demo.wait("the long jobs to run", lambda: demo.state(long) == "RUN" and demo.state(again) == "RUN")
            demo.xce("kill", str(long), str(nowhere))
            demo.xce("requeue", str(again))
            demo.wait("the requeued job to run again",
                      lambda: json.loads(demo.xce("--json", "job", "show", str(again), show=False))["run"] == 2
                      and demo.state(again) == "RUN")
            demo.xce("kill", str(again))

            step("everything has ended")
            demo.wait("every job to end", lambda: all(j["state"] in ("DONE", "EXIT") for j in demo.jobs()))
            demo.xce("jobs", "-a")
            demo.xce("job", "show", str(broken))
            print(f"$ cat {out}/wide.out {out}/render.{array}.1 {out}/retry.out")
            for name in ("wide.out", f"render.{array}.1", "retry.out"):
                with open(os.path.join(out, name)) as fh:
                    print(fh.read().rstrip())

            step("summary")
            jobs = demo.jobs()
            rows = {}
            for j in jobs:
                key = (j["state"], j["exit_reason"] or "-")
                rows[key] = rows.get(key, 0) + 1
            width = max(len(r) for _, r in rows) + 2
            print(f"{'STATE':6}  {'REASON':{width}}  JOBS")
            for (state, reason), n in sorted(rows.items()):
                print(f"{state:6}  {reason:{width}}  {n}")
            trail = json.loads(demo.xce("--json", "audit", "--limit", "100000", show=False))
            print(f"{len(jobs)} jobs on {len(json.loads(demo.xce('--json', 'hosts', show=False)))} hosts; "
                  f"audit trail: {len(trail)} records")
        finally:
            step("xce down")
            subprocess.run(XCE + ["down", "--state-dir", state_dir], env=demo.env, timeout=120)
            try:
                rc = up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                rc = up.wait()
            print(up.stdout.read().rstrip())
            print(f"xce up exited with {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
