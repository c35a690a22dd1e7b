"""Fencing: how long a rerunnable job waits for its run elsewhere when its worker is SIGKILLed.

    python bench/fencing.py [--kills 5] [--host-timeout 10] [--fence 30] [--margin 5]

One controller (SQLite) with ``[controller] host_timeout``, ``fence_time`` and ``fence_margin`` as given
(default: the shipped defaults), and two workers.  ``--kills`` times: a rerunnable job that writes a
timestamp every 50 ms is started, the worker of its host is SIGKILLed (the host stays up: its shepherd
goes on), and from the kill on

- *fenced* = kill -> the job's last timestamp on that host (its shepherd killed it when its lease ran
  out: about ``fence`` after the worker's last answered heartbeat);
- *requeued run starts* = kill -> the job's first timestamp on the other host.

The killed worker is restarted before the next round.  Prints p50 and max of both beside
``host_timeout + fence`` and the controller's own bound, ``host_timeout + fence + margin``; and checks
that no round had the two runs overlap (fenced before the rerun).  Every process it starts is stopped
by pid.
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

from tests.helpers import ControllerProcess, WorkerProcess, kill_jobs_of, wait_for  # noqa: E402
from xce.client import Client  # noqa: E402

CONFIG = """
[controller]
host_timeout = {host_timeout}
fence_time = {fence}
fence_margin = {margin}
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
"""


def stamps(path: str) -> list[tuple[str, float]]:
    try:
        with open(path) as fh:
            return [(h, float(t)) for h, t in (line.split() for line in fh if line.count(" ") == 1)]
    except OSError:
        return []


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=5)
    ap.add_argument("--host-timeout", type=float, default=10.0, help="[controller] host_timeout, seconds")
    ap.add_argument("--fence", type=float, default=30.0, help="[controller] fence_time, seconds")
    ap.add_argument("--margin", type=float, default=5.0, help="[controller] fence_margin, seconds")
    ap.add_argument("--keep", action="store_true", help="keep the state dirs and logs")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="xce-fencing-")
    cfg = os.path.join(root, "xce.toml")
    with open(cfg, "w") as fh:
        fh.write(CONFIG.format(host_timeout=args.host_timeout, fence=args.fence, margin=args.margin))
    ctl = ControllerProcess(state_dir=os.path.join(root, "ctl"), config=cfg)
    workers: dict[str, WorkerProcess] = {}
    fenced: list[float] = []
    rerun: list[float] = []
    overlaps = 0
    try:
        ctl.start()
        for h in ("host1", "host2"):
            workers[h] = WorkerProcess(ctl, h, os.path.join(root, h), slots=2).start()
        client = Client(ctl.url, ctl.token, timeout=10)
        for i in range(args.kills):
            ledger = os.path.join(root, f"ledger{i}")
            job = client.submit(["sh", "-c", f'while true; do echo "$XCE_HOST $(date +%s.%N)" >> {ledger}; '
                                             "sleep 0.05; done"], rerunnable=True, name=f"fenced{i}")
            first = client.wait_job(job["id"], ("RUN",), timeout=60, interval=0.02)["hosts"][0]
            other = "host2" if first == "host1" else "host1"
            wait_for(lambda: len(stamps(ledger)) >= 5, what="the job writing")
            killed = time.time()
            workers[first].kill()
            wait_for(lambda: any(h == other for h, _ in stamps(ledger)), timeout=4 * (
                args.host_timeout + args.fence + args.margin), interval=0.02, what="the run elsewhere")
            got = stamps(ledger)
            last_first = max(t for h, t in got if h == first)
            first_other = min(t for h, t in got if h == other)
            fenced.append(last_first - killed)
            rerun.append(first_other - killed)
            overlaps += last_first >= first_other
            print(f"kill {i + 1}: fenced {fenced[-1]:.2f}s, requeued run started {rerun[-1]:.2f}s", flush=True)
            client.kill(job["id"])
            workers[first].start()  # back, with its old run reported as fenced
            client.wait_job(job["id"], timeout=60, interval=0.05)
        client.close()
    finally:
        for w in workers.values():
            w.stop()
            kill_jobs_of(w.work_dir)
        ctl.stop()
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}")

    bound = args.host_timeout + args.fence

    def line(what: str, values: list[float]) -> str:
        return (f"{what:<36} p50 {statistics.median(values):6.2f}s   max {max(values):6.2f}s   "
                f"(host_timeout + fence = {bound:g}s; + margin = {bound + args.margin:g}s)")

    print(f"\n{args.kills} worker kills (SIGKILL; the host and the shepherd stay up), one controller on SQLite:")
    print(line("kill -> run 1 fenced (last write)", fenced))
    print(line("kill -> the requeued run starts", rerun))
    print(f"rounds where the two runs overlapped: {overlaps} of {args.kills}")
    return 1 if overlaps else 0


if __name__ == "__main__":
    sys.exit(main())
