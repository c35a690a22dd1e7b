"""Where claim data may live on this host: the only directories a worker publishes into jobs or stages into.

A claim's data path reaches the worker from the controller, which took it
from an agent's report.  The controller accepts a report only from the agent
that holds the op's intent, but the worker still trusts nothing it did not
configure itself: before it bind-mounts a claim into a job's sandbox, or
copies files into a staging claim, the path must resolve (symlinks followed)
to a directory strictly inside one of its storage roots:

- the ``root`` of each of its node providers (``--provider-config``; by
  default its built-in simfs under the work directory), and
- each ``--storage-root DIR``: shared storage mounted on this host, where
  the provisioner's providers put shared claims.

A path outside them (``/etc``, ``/``, a symlink out of a root) is refused:
the job is not started, or the stage op fails permanently, and the reason
names the path.
"""

from __future__ import annotations

import os
from typing import Any, Iterable


class OutsideStorage(Exception):
    """A claim path that is not strictly inside any storage root of this worker."""


class StorageRoots:
    def __init__(self, roots: Iterable[str]) -> None:
        self.roots = sorted({os.path.realpath(r) for r in roots if r})

    @classmethod
    def of(cls, providers: dict[str, Any], extra: Iterable[str] = ()) -> StorageRoots:
        """The roots of ``providers`` (each provider's private config ``root``) and ``extra``."""
        found = [p.config["root"] for p in providers.values() if isinstance(p.config.get("root"), str)]
        return cls([*found, *extra])

    def check(self, path: str | None, what: str) -> str:
        """``path`` resolved, if it lies strictly inside a root; else ``OutsideStorage``.  (Whether it
        exists is the caller's question: a missing directory inside a root may yet appear.)"""
        if not path or not os.path.isabs(path):
            raise OutsideStorage(f"{what} has no data path on this host ({path!r})")
        real = os.path.realpath(path)
        for root in self.roots:
            if real != root and real.startswith(root.rstrip("/") + "/"):
                return real
        raise OutsideStorage(f"{what}: {path} is outside this worker's storage roots "
                             f"({', '.join(self.roots) or 'none configured'}): refused")
