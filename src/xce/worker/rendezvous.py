"""The rendezvous of a multi-host job: an address of its first host that its other hosts can reach (the
worker's advertised ``--address``) and a port reserved there for the run (``XCE_RDZV_HOST``,
``XCE_RDZV_PORT``), where a launcher such as torchrun's agents or a job's own rank 0 meets the others.

Reserved means no two running jobs on the host are given the same port: the worker keeps the ports of
its runs (in their journals, so a restarted worker keeps them too) and hands out one that none holds and
that nothing listens on when chosen (the kernel's pick of a free port).  Nothing holds the port open for
the job: a process of the job binds it.
"""

from __future__ import annotations

import hashlib
import secrets
import socket
import threading

from xce.wire import JOB_SECRET_PREFIX

__all__ = ["Ports", "new_secret"]

SECRET_BYTES = 32


def new_secret() -> tuple[str, str]:
    """A run's secret (``XCE_JOB_TOKEN``), which its ``blaunch`` presents to the controller, and its
    sha256, which is all the worker reports of it (the controller keeps tokens so: ``identity.hash_token``)."""
    secret = JOB_SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)
    return secret, hashlib.sha256(secret.encode()).hexdigest()


class Ports:
    """The rendezvous ports this host's runs hold."""

    def __init__(self, tries: int = 64) -> None:
        self._held: dict[tuple[int, int], int] = {}
        self._lock = threading.Lock()
        self._tries = tries

    def reserve(self, run: tuple[int, int]) -> int:
        """A port for ``run`` no other run here holds (the same one again for the same run)."""
        with self._lock:
            if run in self._held:
                return self._held[run]
            taken = set(self._held.values())
            for _ in range(self._tries):
                port = _free_port()
                if port not in taken:
                    self._held[run] = port
                    return port
        raise OSError(f"no free rendezvous port after {self._tries} tries")

    def adopt(self, run: tuple[int, int], port: int) -> None:
        """A run of an earlier life of this worker keeps its port."""
        with self._lock:
            self._held[run] = port

    def release(self, run: tuple[int, int]) -> None:
        with self._lock:
            self._held.pop(run, None)

    def held(self) -> dict[tuple[int, int], int]:
        with self._lock:
            return dict(self._held)


def _free_port() -> int:
    """A TCP port nothing listens on now, on every address of the host (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])
