"""``make demo``: XCE's main job on one machine, end to end.

Starts a controller on a temporary state directory (embedded SQLite store),
then uses the real ``xce`` CLI the way a person would: ping, submit jobs,
list them, show one, read the audit trail; then stops the controller cleanly.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

XCE = [sys.executable, "-m", "xce.cli.main"]


def step(title: str) -> None:
    print(f"\n=== {title}", flush=True)


def xce(env: dict[str, str], *args: str) -> str:
    print(f"$ xce {' '.join(shlex.quote(a) for a in args)}", flush=True)
    proc = subprocess.run(XCE + list(args), env=env, capture_output=True, text=True, timeout=60)
    out = proc.stdout + proc.stderr
    print(out.rstrip(), flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"demo: `xce {' '.join(args)}` failed with exit code {proc.returncode}")
    return proc.stdout


def wait_ready(url: str, state_dir: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"demo: controller exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                if b'"leader":true' in r.read() and os.path.exists(os.path.join(state_dir, "admin.token")):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit("demo: controller did not become ready")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="xce-demo-") as tmp:
        state_dir = os.path.join(tmp, "state")
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        step(f"start a controller on {state_dir} (embedded SQLite store)")
        log = open(os.path.join(tmp, "controller.log"), "w")
        proc = subprocess.Popen(XCE + ["controller", "--state-dir", state_dir, "--listen", f"127.0.0.1:{port}"],
                                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(url, state_dir, proc)
            with open(os.path.join(state_dir, "admin.token")) as fh:
                token = fh.read().strip()
            print(f"controller listening on {url}; admin token in {state_dir}/admin.token")
            env = dict(os.environ, XCE_URL=url, XCE_TOKEN=token)
            step("who am I talking to")
            xce(env, "ping")
            xce(env, "queues")
            step("submit jobs (they stay PEND until the scheduling issue lands)")
            xce(env, "submit", "-J", "hello", "--", "echo", "hello", "world")
            xce(env, "submit", "-n", "4", "-J", "train", "-r", "--", "python", "train.py", "--epochs", "3")
            step("list and show them")
            xce(env, "jobs")
            xce(env, "job", "show", "1")
            step("refusals are clear, one line, and audited")
            subprocess.run(XCE + ["submit", "-q", "nosuchqueue", "--", "true"], env=env)
            step("the audit trail")
            xce(env, "audit")
        finally:
            step("stop the controller (clean shutdown: snapshot, release the lease)")
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(30)
            log.close()
            print(f"controller exited with {rc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
