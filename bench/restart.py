"""A controller on the embedded SQLite store SIGKILLed and restarted: how soon it answers.

    python bench/restart.py [--rounds 5] [--ttl 10] [--src DIR]

Starts one controller (``[controller] lease_ttl`` = ``--ttl``) on a temp state dir and, ``--rounds``
times: SIGKILLs it, starts it again at once, and measures from the kill to

- *leader*: ``/healthz`` says leader (polled every 10 ms);
- *submit*: a ``POST /v1/jobs`` acknowledged right after.

``--src`` runs the controller from another source tree (``PYTHONPATH``), e.g. an export of an older
commit, to compare: ``git archive <commit> src | tar -x -C /tmp/before`` then ``--src /tmp/before/src``.
Prints each round and the p50/max.  Every process it starts is stopped by pid.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from tests.helpers import free_port  # noqa: E402

CONFIG = """
[controller]
lease_ttl = {ttl}
[[users]]
name = "admin"
role = "admin"
projects = ["default"]
[[queues]]
name = "default"
[[projects]]
name = "default"
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ttl", type=float, default=10.0)
    ap.add_argument("--src", default=None, help="run the controller from this source tree")
    ap.add_argument("--max-wait", type=float, default=60.0, help="give up on a round after this many seconds")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.src:
        env["PYTHONPATH"] = os.path.abspath(args.src)
    with tempfile.TemporaryDirectory(prefix="xce-restart-") as tmp:
        cfg = os.path.join(tmp, "xce.toml")
        with open(cfg, "w") as fh:
            fh.write(CONFIG.format(ttl=args.ttl))
        state = os.path.join(tmp, "ctl")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(os.path.join(tmp, "controller.log"), "ab")
        cmd = [sys.executable, "-m", "xce.cli.main", "controller", "--state-dir", state,
               "--listen", f"127.0.0.1:{port}", "--config", cfg]
        proc: subprocess.Popen | None = None

        def start() -> subprocess.Popen:
            return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)

        def leader(deadline: float) -> bool:
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/healthz", timeout=1).json().get("leader"):
                        return True
                except (httpx.HTTPError, ValueError):
                    pass
                time.sleep(0.01)
            return False

        leaders, submits = [], []
        try:
            proc = start()
            if not leader(time.monotonic() + args.max_wait):
                print("the first controller never led")
                return 1
            for i in range(args.rounds):
                t0 = time.monotonic()
                proc.kill()
                proc.wait()
                proc = start()
                if not leader(t0 + args.max_wait):
                    print(f"round {i + 1}: no leader within {args.max_wait}s")
                    return 1
                t_leader = time.monotonic() - t0
                with open(os.path.join(state, "admin.token")) as fh:
                    token = fh.read().strip()
                r = httpx.post(url + "/v1/jobs", json={"command": ["true"]}, timeout=30,
                               headers={"Authorization": f"Bearer {token}"})
                t_submit = time.monotonic() - t0
                if r.status_code != 201:
                    print(f"round {i + 1}: submission refused: {r.status_code} {r.text[:200]}")
                    return 1
                leaders.append(t_leader)
                submits.append(t_submit)
                print(f"round {i + 1}: kill -> leader {t_leader:.3f}s, kill -> submission acknowledged {t_submit:.3f}s")
        finally:
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
    print(f"lease TTL {args.ttl}s; kill -> leader p50 {statistics.median(leaders):.3f}s max {max(leaders):.3f}s; "
          f"kill -> submission p50 {statistics.median(submits):.3f}s max {max(submits):.3f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
