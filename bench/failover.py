"""Controller failover: how long clients and workers go unserved when the leader is SIGKILLed.

    python bench/failover.py [--kills 10] [--ttl 2.0]

Starts the tests' own PostgreSQL (``tests/pg.py``), two controllers on it (``[controller] lease_ttl``
= ``--ttl``) and one worker given both URLs.  Then, ``--kills`` times: a job is started that ends
shortly after the kill (so its worker must report it across the failover), the leader is SIGKILLed,
and from the kill on

- a client with both URLs submits a job: *submit* = kill -> that submission acknowledged;
- the running job's end is reported by its worker: *report* = max(kill, the job's own end time,
  written by the job) -> its DONE is visible on the new leader (polled every 20 ms).

The killed controller restarts as a standby before the next round.  Prints both, p50 and max, beside
the lease TTL.  Goal (issue 13): p50 within TTL + 1 s.  Every process it starts is stopped by pid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests import pg  # noqa: E402
from tests.helpers import ControllerProcess, WorkerProcess, kill_jobs_of, wait_for  # noqa: E402
from xce.client import Client  # noqa: E402

CONFIG = """
[controller]
lease_ttl = {ttl}
host_timeout = 30.0
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
"""


def leader_of(ctls: list[ControllerProcess]) -> ControllerProcess | None:
    for c in ctls:
        try:
            if c.proc is not None and c.proc.poll() is None and c.is_leader():
                return c
        except RuntimeError:
            pass
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--ttl", type=float, default=2.0, help="[controller] lease_ttl, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the state dirs and logs")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="xce-failover-")
    admin_dsn, stop_pg = pg.server()
    dsn = pg.fresh_database(admin_dsn)
    cfg = os.path.join(root, "xce.toml")
    with open(cfg, "w") as fh:
        fh.write(CONFIG.format(ttl=args.ttl))
    ctls = [ControllerProcess(state_dir=os.path.join(root, n), store=dsn, config=cfg) for n in "ab"]
    worker = None
    submit_times: list[float] = []
    report_times: list[float] = []
    try:
        ctls[0].start()
        ctls[1].start(wait_leader=False)
        token = ctls[0].token
        with open(os.path.join(ctls[1].state_dir, "admin.token"), "w") as fh:
            fh.write(token + "\n")
        urls = ",".join(c.url for c in ctls)
        worker = WorkerProcess(ctls[0], "host1", os.path.join(root, "host1"), slots=4, controllers=urls).start()
        client = Client(urls, token, timeout=10, failover=120)
        stamp_dir = os.path.join(root, "stamps")
        os.makedirs(stamp_dir)
        for i in range(args.kills):
            leader = wait_for(lambda: leader_of(ctls), timeout=120, what="a leader")
            wait_for(lambda: sum(p["role"] == "standby" for p in client.get("/v1/controllers")) == 1, timeout=60,
                     what="the standby to announce itself")
            stamp = os.path.join(stamp_dir, str(i))
            job = client.submit(["sh", "-c", f"sleep 0.5; date +%s.%N > {stamp}"], name=f"running{i}")
            client.wait_job(job["id"], ("RUN",), timeout=60, interval=0.02)
            killed = time.time()
            leader.kill()
            client.submit(["true"], name=f"after{i}")
            submit_times.append(time.time() - killed)
            done = client.wait_job(job["id"], timeout=120, interval=0.02)
            seen = time.time()
            assert done["state"] == "DONE", done
            with open(stamp) as fh:
                ended = float(fh.read())
            report_times.append(seen - max(killed, ended))
            leader.start(wait_leader=False)  # back as a standby
            print(f"kill {i + 1}: submit {submit_times[-1]:.2f}s, report {report_times[-1]:.2f}s", flush=True)
        client.close()
    finally:
        if worker is not None:
            worker.stop()
            kill_jobs_of(worker.work_dir)
        for c in ctls:
            c.stop()
        pg.drop_database(admin_dsn, dsn)
        stop_pg()
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")

    def line(what: str, values: list[float]) -> str:
        return (f"{what:<40} p50 {statistics.median(values):6.2f}s   max {max(values):6.2f}s   "
                f"(lease TTL {args.ttl:g}s; goal p50 <= {args.ttl + 1:g}s)")

    print(f"\n{args.kills} leader kills (SIGKILL), two controllers on PostgreSQL, one worker:")
    print(line("kill -> a submission is acknowledged", submit_times))
    print(line("kill -> a running job's report accepted", report_times))
    return 0


if __name__ == "__main__":
    sys.exit(main())
