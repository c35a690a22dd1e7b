"""Prometheus metrics for ``/metrics``: request counts, commit batching, log position, leadership."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

if TYPE_CHECKING:
    from xce.controller.core import Controller


class Metrics:
    def __init__(self, ctl: Controller) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("xce_http_requests", "API requests by method and status",
                                ["method", "status"], registry=self.registry)
        self._children: dict[tuple[str, int], object] = {}
        gauges = {
            "xce_log_position": ("committed log position", lambda: ctl.committed),
            "xce_leader": ("1 if this controller holds the leader lease", lambda: int(ctl.is_leader)),
            "xce_leader_epoch": ("epoch of the lease this controller holds", lambda: ctl.epoch),
            "xce_commit_batches": ("store transactions committed", lambda: ctl.stats.batches),
            "xce_commit_facts": ("facts committed", lambda: ctl.stats.facts),
            "xce_commit_commands": ("commands decided", lambda: ctl.stats.commands),
            "xce_snapshots": ("snapshots written", lambda: ctl.stats.snapshots),
            "xce_jobs": ("jobs in the model", lambda: len(ctl.model.jobs)),
        }
        for name, (doc, fn) in gauges.items():
            Gauge(name, doc, registry=self.registry).set_function(fn)

    def count_request(self, method: str, status: int) -> None:
        key = (method, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(method, str(status))
        child.inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
