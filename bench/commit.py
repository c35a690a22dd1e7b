"""Sustained acknowledged job submissions per second through the REST API.

    python bench/commit.py [--seconds S] [--clients 1,8,64] [--backends sqlite,postgresql]

Starts a real controller per backend (SQLite in a temp state dir; PostgreSQL
on a private server started for the run), then for each client count runs
that many concurrent keep-alive HTTP clients, each submitting jobs one after
another for S seconds, and counts 201 answers (each one a committed job).
Group commit is what lets many clients share one fsync.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.helpers import ControllerProcess  # noqa: E402
from xce.config import DEFAULT_CONFIG  # noqa: E402

# the embedded defaults, but no per-user cap on pending jobs: the bench submits tens of thousands
CONFIG = DEFAULT_CONFIG.replace("max_pending_jobs_per_user = 10000", "max_pending_jobs_per_user = 100000000")

BODY = json.dumps({"command": ["true"], "name": "bench"}).encode()


async def client(port: int, token: str, deadline: float, lat: list[float], errors: list[int]) -> int:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    req = (f"POST /v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n").encode() + BODY
    acked = 0
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        writer.write(req)
        status_line = await reader.readline()
        length = 0
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b""):
                break
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await reader.readexactly(length)
        status = int(status_line.split()[1])
        if status == 201:
            acked += 1
            lat.append(time.monotonic() - t0)
        else:
            errors.append(status)
    writer.close()
    return acked


async def run_load(port: int, token: str, clients: int, seconds: float) -> dict:
    lat: list[float] = []
    errors: list[int] = []
    t0 = time.monotonic()
    counts = await asyncio.gather(*(client(port, token, t0 + seconds, lat, errors) for _ in range(clients)))
    elapsed = time.monotonic() - t0
    lat.sort()
    return {"acked": sum(counts), "seconds": elapsed, "rate": sum(counts) / elapsed,
            "p50_ms": 1000 * statistics.median(lat) if lat else float("nan"),
            "p99_ms": 1000 * lat[int(0.99 * (len(lat) - 1))] if lat else float("nan"),
            "errors": len(errors)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--backends", default="sqlite,postgresql")
    args = ap.parse_args()
    try:
        import uvloop
        uvloop.install()
    except ImportError:
        pass
    rows = []
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix=f"xce-bench-{backend}-") as tmp:
            stop_pg = None
            store = None
            if backend == "postgresql":
                from tests.pg import fresh_database, start_private_server

                admin_dsn = os.environ.get("XCE_TEST_PG_DSN")
                if admin_dsn is None:
                    admin_dsn, stop_pg = start_private_server()
                store = fresh_database(admin_dsn)
            config = os.path.join(tmp, "xce.toml")
            with open(config, "w") as fh:
                fh.write(CONFIG)
            ctl = ControllerProcess(state_dir=os.path.join(tmp, "ctl"), store=store, config=config).start()
            try:
                for n in (int(c) for c in args.clients.split(",")):
                    r = asyncio.run(run_load(ctl.port, ctl.token, n, args.seconds))
                    rows.append((backend, n, r))
                    print(f"  {backend:10} clients={n:<3} {r['rate']:8.0f} acked/s", file=sys.stderr, flush=True)
            finally:
                ctl.stop()
                if stop_pg:
                    stop_pg()
    print(f"{'BACKEND':10} {'CLIENTS':>7} {'ACKED':>8} {'SECONDS':>7} {'ACKED/S':>8} {'P50_MS':>7} {'P99_MS':>7} {'ERRORS':>6}")
    for backend, n, r in rows:
        print(f"{backend:10} {n:7d} {r['acked']:8d} {r['seconds']:7.1f} {r['rate']:8.0f} "
              f"{r['p50_ms']:7.2f} {r['p99_ms']:7.2f} {r['errors']:6d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
