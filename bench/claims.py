"""Standalone claims through the whole path: API -> scheduler placement -> provisioner -> simfs -> READY.

    python bench/claims.py [N] [--clients 8]

Starts a local cluster (``xce up --hosts 1``: controller, provisioner with
simfs at zero latency, one worker) in a temporary directory, creates N
claims through the REST API from a few keep-alive clients, waits until all
are READY, then deletes them all and waits until all are RELEASED.  Times
come from the claims' own history (the controller's commit times), so
polling does not blur them.  Prints claims READY per second and the
p50/p99 create -> READY latency, and the same for delete -> RELEASED.
Goal (issue 4): at least 200 claims READY/s at N=1,000 on the 2-core box.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import httpx  # noqa: E402

XCE = [sys.executable, "-m", "xce.cli.main"]
DEADLINE = 600.0


def start_cluster(state: str) -> tuple[subprocess.Popen, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(XCE + ["up", "--hosts", "1", "--state-dir", state, "--listen", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line = proc.stdout.readline()
    if not line.startswith("xce cluster up"):
        raise SystemExit(f"xce up failed: {line}{proc.stdout.read()}")
    with open(os.path.join(state, "controller.url")) as fh:
        url = fh.read().strip()
    with open(os.path.join(state, "admin.token")) as fh:
        token = fh.read().strip()
    return proc, url, token


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wait_all(client: httpx.Client, names: set[str], state: str, deadline: float) -> list[dict]:
    while True:
        claims = client.get("/v1/claims", params={"all": "true"}).json()
        mine = [c for c in claims if c["name"] in names]
        if sum(c["state"] == state for c in mine) == len(names):
            return mine
        failed = [c for c in mine if c["state"] == "FAILED"]
        if failed:
            raise SystemExit(f"{len(failed)} claims FAILED, e.g. {failed[0]['name']}: {failed[0]['last_error']}")
        if time.monotonic() > deadline:
            counts = {}
            for c in mine:
                counts[c["state"]] = counts.get(c["state"], 0) + 1
            raise SystemExit(f"timed out waiting for {state}: {counts}")
        time.sleep(0.2)


def entered(claim: dict, state: str) -> float:
    return next(h["time"] for h in claim["history"] if h["state"] == state)


def report(what: str, start_state: str, end_state: str, claims: list[dict], t0: float) -> None:
    lat = [entered(c, end_state) - entered(c, start_state) if start_state != "CREATE" else
           entered(c, end_state) - c["created"] for c in claims]
    last = max(entered(c, end_state) for c in claims)
    rate = len(claims) / (last - t0)
    print(f"{what:22} {len(claims):6d}  {last - t0:8.2f}  {rate:9.1f}  {statistics.median(lat) * 1000:8.1f}"
          f"  {percentile(lat, 99) * 1000:8.1f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="xce-bench-claims-") as tmp:
        state = os.path.join(tmp, "cluster")
        up, url, token = start_cluster(state)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            names = [f"b{i}" for i in range(args.n)]
            deadline = time.monotonic() + DEADLINE

            def create(chunk: list[str]) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                    for name in chunk:
                        r = c.post("/v1/claims", json={"name": name, "class": "simfs", "size": "1Mi",
                                                       "access_mode": "RWX"})
                        r.raise_for_status()

            def delete(chunk: list[str]) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                    for name in chunk:
                        c.delete(f"/v1/claims/{name}").raise_for_status()

            chunks = [names[i::args.clients] for i in range(args.clients)]
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client, \
                    concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
                t0 = time.time()
                list(pool.map(create, chunks))
                submitted = time.time() - t0
                ready = wait_all(client, set(names), "READY", deadline)
                t1 = time.time()
                list(pool.map(delete, chunks))
                deleted = time.time() - t1
                released = wait_all(client, set(names), "RELEASED", deadline)
            print(f"\nN={args.n} standalone claims, {args.clients} API clients, simfs with zero latency, "
                  f"1 provisioner; API calls took {submitted:.2f}s (create) and {deleted:.2f}s (delete)\n")
            print(f"{'':22} {'claims':>6}  {'span s':>8}  {'claims/s':>9}  {'p50 ms':>8}  {'p99 ms':>8}")
            report("create -> READY", "CREATE", "READY", ready, t0)
            report("delete -> RELEASED", "RELEASING", "RELEASED", released, t1)
            left = os.listdir(os.path.join(state, "simfs", "volumes"))
            print(f"\nvolumes left in simfs after the deletes: {len([v for v in left if not v.startswith('.')])}")
        finally:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
