"""Claims through the whole path, per provider: create, snapshot, clone, resize and delete, on simfs and btrfs.

    python bench/claims.py [--providers simfs,btrfs] [--n-simfs 1000] [--n-btrfs 500] [--clients 8]

For each provider, starts a local cluster (``xce up --hosts 1``: controller,
provisioner, one worker) in a temporary directory; for btrfs with
``--btrfs-loop`` (a loop-file btrfs that ``xce up`` makes under the state dir
and unmounts when it stops; the bench removes the directory: root only).
Then, from a few keep-alive REST clients, N of each, each phase waited for
before the next:

1. create N claims (1Mi, RWX) -> READY
2. snapshot each claim -> READY
3. clone each snapshot into a new claim (``from_snapshot``) -> READY
4. resize each original claim to 2Mi -> DONE
5. delete the clones and the claims (2N) -> RELEASED, then the snapshots -> RELEASED

Times come from the objects' own history (the controller's commit times),
so polling does not blur them: per phase, objects per second (N over the
span from the phase's first request to its last object's commit) and the
p50/p99 latency (request -> the state).  Goals (issue 10): btrfs claims
READY >= 200/s and snapshots READY >= 200/s; Kubernetes' dynamic
provisioning runs near 4 volumes/s (printed as the reference line; it is not
measured here).  Bounded by ``--max-seconds``; every cluster is stopped and
its directory removed on exit, error, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

import httpx  # noqa: E402

from xce.client.states import ClaimState, ResizeState, SnapshotState  # noqa: E402

XCE = [sys.executable, "-m", "xce.cli.main"]
POLL = 0.5  # seconds between listings while waiting (the times themselves come from the history)
K8S_VOLUMES_PER_S = 4.0  # Kubernetes dynamic provisioning, the peer figure the issue quotes
GOAL_PER_S = 200.0


class Deadline(Exception):
    pass


def list_all(c: httpx.Client, path: str) -> list[dict]:
    """Every object a listing has, page by page (a page holds at most 10,000; 2N claims may pass one)."""
    out: list[dict] = []
    params = {"all": "true", "limit": "10000"}
    while True:
        r = c.get(path, params=params)
        r.raise_for_status()
        out += r.json()
        cursor = r.headers.get("X-Next-Cursor")
        if not cursor:
            return out
        params["cursor"] = cursor


def start_cluster(state: str, flags: list[str], timeout: float) -> tuple[subprocess.Popen, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen(XCE + ["up", "--hosts", "1", "--state-dir", state, "--listen", "127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line = proc.stdout.readline()  # xce up bounds its own start (the controller, the hosts)
    if not line.startswith("xce cluster up"):
        proc.wait(timeout)
        raise SystemExit(f"xce up {' '.join(flags)} failed: {line}{proc.stdout.read()}")
    with open(os.path.join(state, "controller.url")) as fh:
        url = fh.read().strip()
    with open(os.path.join(state, "admin.token")) as fh:
        token = fh.read().strip()
    return proc, url, token


def stop_cluster(proc: subprocess.Popen) -> str:
    """SIGTERM to our ``xce up`` (it stops its daemons and unmounts what it mounted); its remaining output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stdout.read() if proc.stdout else ""


def percentile(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def entered(history: list[dict], state: str) -> float:
    return next(h["time"] for h in history if h["state"] == state)


class Run:
    """One provider's cluster and the REST clients the phases use."""

    def __init__(self, url: str, token: str, clients: int, deadline: float) -> None:
        self.url, self.headers = url, {"Authorization": f"Bearer {token}"}
        self.clients = clients
        self.deadline = deadline
        self.rows: list[tuple] = []

    def fan_out(self, calls: list[tuple[str, str, dict | None]]) -> float:
        """Make the calls (method, path, body) from ``clients`` keep-alive connections; when they started."""
        chunks = [calls[i::self.clients] for i in range(self.clients)]

        def run(chunk):
            with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as c:
                for method, path, body in chunk:
                    r = c.request(method, path, json=body)
                    if r.status_code >= 300:
                        raise SystemExit(f"{method} {path}: {r.status_code} {r.text}")

        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(self.clients) as pool:
            list(pool.map(run, chunks))
        return t0

    def wait(self, path: str, names: set[str], done, failed, what: str) -> list[dict]:
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as c:
            while True:
                mine = [o for o in list_all(c, path) if o["name"] in names]
                if sum(bool(done(o)) for o in mine) == len(names):
                    return mine
                bad = [o for o in mine if failed(o)]
                if bad:
                    raise SystemExit(f"{len(bad)} {what} failed, e.g. {bad[0]['name']}: "
                                     f"{bad[0].get('last_error') or bad[0].get('resize')}")
                if time.monotonic() > self.deadline:
                    counts: dict[str, int] = {}
                    for o in mine:
                        counts[o["state"]] = counts.get(o["state"], 0) + 1
                    raise Deadline(f"--max-seconds passed waiting for {what}: {counts}")
                time.sleep(POLL)

    def row(self, what: str, t0: float, spans: list[tuple[float, float]]) -> None:
        """``spans``: (start, end) per object, from the controller's commit times."""
        lat = [end - start for start, end in spans]
        last = max(end for _, end in spans)
        self.rows.append((what, len(spans), last - t0, len(spans) / (last - t0),
                          statistics.median(lat) * 1000, percentile(lat, 99) * 1000))


def claims_done(state):
    return lambda c: c["state"] == state


def claim_failed(c) -> bool:
    return c["state"] == ClaimState.FAILED


def bench_provider(provider: str, n: int, args, tmp: str) -> tuple[list[tuple], str]:
    state = os.path.join(tmp, "cluster")
    flags = ["--btrfs-loop", args.btrfs_size] if provider == "btrfs" else []
    deadline = time.monotonic() + args.max_seconds
    up, url, token = start_cluster(state, flags, 60)
    try:
        run = Run(url, token, args.clients, deadline)
        claims = [f"b{i}" for i in range(n)]
        snaps = [f"s{i}" for i in range(n)]
        clones = [f"c{i}" for i in range(n)]

        t0 = run.fan_out([("POST", "/v1/claims", {"name": b, "class": provider, "size": "1Mi",
                                                  "access_mode": "RWX"}) for b in claims])
        got = run.wait("/v1/claims", set(claims), claims_done(ClaimState.READY), claim_failed, "claims READY")
        run.row("create -> READY", t0, [(c["created"], entered(c["history"], ClaimState.READY)) for c in got])

        t0 = run.fan_out([("POST", "/v1/snapshots", {"name": s, "claim": b}) for s, b in zip(snaps, claims)])
        got = run.wait("/v1/snapshots", set(snaps), lambda s: s["state"] == SnapshotState.READY,
                       lambda s: s["state"] == SnapshotState.FAILED, "snapshots READY")
        run.row("snapshot -> READY", t0, [(s["history"][0]["time"], entered(s["history"], SnapshotState.READY))
                                          for s in got])

        t0 = run.fan_out([("POST", "/v1/claims", {"name": c, "from_snapshot": s}) for c, s in zip(clones, snaps)])
        got = run.wait("/v1/claims", set(clones), claims_done(ClaimState.READY), claim_failed, "clones READY")
        run.row("clone -> READY", t0, [(c["created"], entered(c["history"], ClaimState.READY)) for c in got])

        t0 = run.fan_out([("POST", f"/v1/claims/{b}/resize", {"size": "2Mi"}) for b in claims])
        got = run.wait("/v1/claims", set(claims), lambda c: c["resize"] and c["resize"]["state"] == ResizeState.DONE,
                       lambda c: c["resize"] and c["resize"]["state"] == ResizeState.FAILED, "resizes DONE")
        run.row("resize -> DONE", t0, [(entered(c["resize"]["history"], ResizeState.REQUESTED),
                                        entered(c["resize"]["history"], ResizeState.DONE)) for c in got])

        t0 = run.fan_out([("DELETE", f"/v1/claims/{c}", None) for c in clones + claims])
        got = run.wait("/v1/claims", set(clones + claims), claims_done(ClaimState.RELEASED), claim_failed,
                       "claims RELEASED")
        run.row("delete -> RELEASED", t0, [(entered(c["history"], ClaimState.RELEASING),
                                            entered(c["history"], ClaimState.RELEASED)) for c in got])

        t0 = run.fan_out([("DELETE", f"/v1/snapshots/{s}", None) for s in snaps])
        got = run.wait("/v1/snapshots", set(snaps), lambda s: s["state"] == SnapshotState.RELEASED,
                       lambda s: s["state"] == SnapshotState.FAILED, "snapshots RELEASED")
        run.row("snapshot delete -> RELEASED", t0, [(entered(s["history"], SnapshotState.RELEASING),
                                                     entered(s["history"], SnapshotState.RELEASED)) for s in got])
        root = os.path.join(state, "btrfs", "mnt", "xce") if provider == "btrfs" else os.path.join(state, "simfs")
        left = sum(len([v for v in os.listdir(os.path.join(root, d)) if not v.startswith(".")])
                   for d in ("volumes", "snapshots") if os.path.isdir(os.path.join(root, d)))
        note = f"objects left in {provider} after the deletes: {left}"
    finally:
        rest = stop_cluster(up)
    if provider == "btrfs":
        mnt = os.path.join(state, "btrfs", "mnt")
        note += f"; {mnt} {'STILL MOUNTED' if os.path.ismount(mnt) else 'unmounted'} by xce up on stop"
        if os.path.ismount(mnt):
            note += f" ({rest.strip()})"
    return run.rows, note


def print_table(provider: str, n: int, rows: list[tuple], note: str, args) -> None:
    detail = "zero latency" if provider == "simfs" else f"a {args.btrfs_size} loop-file filesystem, quotas on"
    print(f"\n{provider}: N={n}, {args.clients} API clients, 1 provisioner, {detail}")
    print(f"  {'':28} {'objects':>7}  {'span s':>8}  {'per s':>8}  {'p50 ms':>8}  {'p99 ms':>8}")
    for what, count, span, rate, p50, p99 in rows:
        print(f"  {what:28} {count:7d}  {span:8.2f}  {rate:8.1f}  {p50:8.1f}  {p99:8.1f}")
    print(f"  {note}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--providers", default="simfs,btrfs", help="comma-separated: simfs, btrfs (default both)")
    ap.add_argument("--n-simfs", type=int, default=1000, help="claims (and snapshots, clones) on simfs")
    ap.add_argument("--n-btrfs", type=int, default=500, help="claims (and snapshots, clones) on btrfs")
    ap.add_argument("--clients", type=int, default=8, help="keep-alive REST clients")
    ap.add_argument("--btrfs-size", default="4Gi", help="the loop-file btrfs (sparse; default 4Gi)")
    ap.add_argument("--max-seconds", type=float, default=600, help="per provider, after which it gives up")
    ap.add_argument("--keep", action="store_true", help="keep the state dirs and logs (the btrfs is unmounted all "
                                                        "the same)")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # SystemExit: the finally blocks stop the clusters
    providers = [p.strip() for p in args.providers.split(",") if p.strip()]
    if bad := sorted(set(providers) - {"simfs", "btrfs"}):
        ap.error(f"unknown provider(s) {', '.join(bad)}")
    results = {}
    for provider in providers:
        if provider == "btrfs" and os.geteuid() != 0:
            print("\nbtrfs: skipped (a loop-file btrfs needs root)")
            continue
        n = args.n_simfs if provider == "simfs" else args.n_btrfs
        tmp = tempfile.mkdtemp(prefix=f"xce-bench-claims-{provider}-")
        try:
            rows, note = bench_provider(provider, n, args, tmp)
        except Deadline as e:
            print(f"\n{provider}: {e}")
            continue
        finally:
            mnt = os.path.join(tmp, "cluster", "btrfs", "mnt")
            if args.keep and not os.path.ismount(mnt):
                print(f"\n{provider}: kept {tmp}")
            elif not os.path.ismount(mnt):  # never remove a mounted filesystem's contents
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                print(f"\n{provider}: {mnt} is still mounted: left {tmp} in place")
        results[provider] = rows
        print_table(provider, n, rows, note, args)
    print(f"\nreference: Kubernetes dynamic provisioning runs near {K8S_VOLUMES_PER_S:g} volumes/s (the issue's peer "
          f"figure; no Kubernetes here). Goals: btrfs create and snapshot >= {GOAL_PER_S:g}/s.")
    for provider, rows in results.items():
        by = {r[0]: r[3] for r in rows}
        print(f"  {provider}: READY {by['create -> READY']:.0f}/s "
              f"({by['create -> READY'] / K8S_VOLUMES_PER_S:.0f}x Kubernetes), "
              f"snapshots {by['snapshot -> READY']:.0f}/s, clones {by['clone -> READY']:.0f}/s, "
              f"resizes {by['resize -> DONE']:.0f}/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
