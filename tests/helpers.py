"""Real daemons for tests: start ``xce controller`` as a child process on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

import httpx

XCE = [sys.executable, "-m", "xce.cli.main"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@dataclass
class ControllerProcess:
    state_dir: str
    store: str | None = None
    config: str | None = None
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        with open(os.path.join(self.state_dir, "admin.token")) as fh:
            return fh.read().strip()

    def start(self, wait_leader: bool = True) -> ControllerProcess:
        cmd = XCE + ["controller", "--state-dir", self.state_dir, "--listen", f"127.0.0.1:{self.port}"]
        if self.store:
            cmd += ["--store", self.store]
        if self.config:
            cmd += ["--config", self.config]
        self.log = open(os.path.join(self.state_dir, f"controller-{self.port}.log"), "ab") \
            if os.path.isdir(self.state_dir) else None
        if self.log is None:
            os.makedirs(self.state_dir, exist_ok=True)
            self.log = open(os.path.join(self.state_dir, f"controller-{self.port}.log"), "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._healthy if not wait_leader else self.is_leader, what=f"controller on {self.url}")
        return self

    def _health(self) -> dict | None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"controller exited with {self.proc.returncode}; see {self.log.name}")
        try:
            return httpx.get(self.url + "/healthz", timeout=2).json()
        except httpx.HTTPError:
            return None

    def _healthy(self) -> bool:
        return self._health() is not None

    def is_leader(self) -> bool:
        h = self._health()
        return bool(h and h["leader"])

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30,
                            headers={"Authorization": f"Bearer {token or self.token}"})

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: no shutdown path runs."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM: clean shutdown (snapshot, release the lease)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode if self.proc else 0
