"""Prometheus metrics for ``/metrics``: request counts, commit batching, log position, leadership,
claims per class and pool (by state, bytes requested and used, provider ops by outcome) and pools
(capacity, reserved, free), and what runs used (CPU seconds by project, max RSS).

Claim and pool gauges are read from the model (and the provider readings of ``controller.observed``)
at scrape time; op outcomes are counted from committed facts, so they start at zero with the process,
as Prometheus counters do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from xce.model.facts import (
    ClaimOpFailed, ClaimOpSucceeded, Fact, JobFinished, JobProcessEnded, JobRequeued, ReplicaOpFailed, ReplicaOpSucceeded,
)

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
            "xce_model_snapshots": ("snapshots of the model written to the store", lambda: ctl.stats.snapshots),
            "xce_jobs": ("jobs in the model", lambda: len(ctl.model.jobs)),
            "xce_jobs_finished_live": ("finished jobs not yet retired into the archive",
                                       lambda: len(ctl.model.finished_jobs)),
            "xce_claims_live": ("claims in the model (RELEASED ones until retired)", lambda: len(ctl.model.claims)),
            "xce_model_snapshot_bytes_last": ("size of the newest model snapshot this controller wrote",
                                        lambda: ctl.stats.last_snapshot_bytes),
            "xce_model_snapshot_seconds_last": ("seconds the newest model snapshot paused commits",
                                          lambda: ctl.stats.last_snapshot_seconds),
            "xce_retired_records": ("jobs and claims this controller retired into the archive",
                                    lambda: ctl.stats.retired),
            "xce_plan_rejections": ("scheduler decisions the plan applier rejected (each retried with backoff)",
                                    lambda: ctl.scheduling.rejections.total),
            "xce_plan_retry_delay_seconds": ("the wait before a rejected plan is made again (0: not backing off)",
                                             lambda: ctl.scheduling.rejections.backoff.delay),
        }
        for name, (doc, fn) in gauges.items():
            Gauge(name, doc, registry=self.registry).set_function(fn)
        self.claim_ops = Counter("xce_claim_ops", "provider op results by claim class, pool, op and outcome "
                                 "(ok; retry: failed, tried again; failed: failed for good)",
                                 ["class", "pool", "op", "outcome"], registry=self.registry)
        self.run_cpu = Counter("xce_run_cpu_seconds", "user + system CPU seconds of runs that ended, by project",
                               ["project"], registry=self.registry)
        self.run_rss = Histogram("xce_run_max_rss_bytes", "the largest process's max RSS of each run that ended",
                                 buckets=[2.0**k for k in range(24, 37, 2)], registry=self.registry)
        self.registry.register(_ClaimCollector(ctl))
        self._ctl = ctl
        ctl.listeners.commit.append(self._on_commit)

    def _on_commit(self, facts: list[Fact]) -> None:
        for f in facts:
            if isinstance(f, (JobFinished, JobRequeued, JobProcessEnded)) and f.usage:
                self._count_usage(f.job_id, f.usage)
                continue
            if isinstance(f, (ClaimOpSucceeded, ReplicaOpSucceeded)):
                outcome = "ok"
            elif isinstance(f, (ClaimOpFailed, ReplicaOpFailed)):
                outcome = "retry" if f.next_retry is not None else "failed"
            else:
                continue
            claim = self._ctl.model.claims.get(f.claim_id)
            # c12.expand.1, a5.attach; a replica's c12.r1.populate.1
            kind = 2 if isinstance(f, (ReplicaOpSucceeded, ReplicaOpFailed)) else 1
            parts = f.op_id.split(".")
            op = parts[kind] if len(parts) > kind else "?"
            self.claim_ops.labels(claim.class_name if claim else "?", (claim.pool if claim else None) or "",
                                  op, outcome).inc()

    def _count_usage(self, job_id: int, usage: dict) -> None:
        job = self._ctl.model.jobs.get(job_id)
        cpu = (usage.get("cpu_user_s") or 0.0) + (usage.get("cpu_sys_s") or 0.0)
        if cpu:
            self.run_cpu.labels(job.project if job else "?").inc(cpu)
        if usage.get("max_rss_bytes") is not None:
            self.run_rss.observe(usage["max_rss_bytes"])

    def count_request(self, method: str, status: int) -> None:
        key = (method, status)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self.requests.labels(method, str(status))
        child.inc()

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _ClaimCollector:
    """Claims, snapshots and pools as gauges, read at scrape time."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    def describe(self):  # nothing at registration: collect() reads the live model
        return []

    def collect(self):
        model, config = self.ctl.model, self.ctl.config
        states = GaugeMetricFamily("xce_claims", "claims by class, pool and state", labels=["class", "pool", "state"])
        asked = GaugeMetricFamily("xce_claim_requested_bytes", "bytes live claims ask for (quota use), by class and "
                                  "pool", labels=["class", "pool"])
        used = GaugeMetricFamily("xce_claim_used_bytes", "bytes live claims hold, as their providers last listed "
                                 "them, by class and pool", labels=["class", "pool"])
        counts: dict[tuple[str, str, str], int] = {}
        asked_by: dict[tuple[str, str], int] = {}
        used_by: dict[tuple[str, str], int] = {}
        for c in list(model.claims.values()):
            key = (c.class_name, c.pool or "")
            counts[(*key, c.state.value)] = counts.get((*key, c.state.value), 0) + 1
            if c.live:
                asked_by[key] = asked_by.get(key, 0) + c.charged_bytes
                if (u := self.ctl.observed.used_bytes(c.id)) is not None:
                    used_by[key] = used_by.get(key, 0) + u
        for labels, n in sorted(counts.items()):
            states.add_metric(list(labels), n)
        for labels, n in sorted(asked_by.items()):
            asked.add_metric(list(labels), n)
        for labels, n in sorted(used_by.items()):
            used.add_metric(list(labels), n)
        yield from (states, asked, used)
        snaps = GaugeMetricFamily("xce_snapshots", "snapshots by class and state", labels=["class", "state"])
        snap_bytes = GaugeMetricFamily("xce_snapshot_bytes", "bytes live snapshots charge to quotas, by class",
                                       labels=["class"])
        snap_counts: dict[tuple[str, str], int] = {}
        snap_bytes_by: dict[str, int] = {}
        for snap in list(model.snapshots.values()):
            key = (snap.class_name, snap.state.value)
            snap_counts[key] = snap_counts.get(key, 0) + 1
            if snap.live:
                snap_bytes_by[snap.class_name] = snap_bytes_by.get(snap.class_name, 0) + snap.charged_bytes
        for labels, n in sorted(snap_counts.items()):
            snaps.add_metric(list(labels), n)
        for cls, n in sorted(snap_bytes_by.items()):
            snap_bytes.add_metric([cls], n)
        yield from (snaps, snap_bytes)
        rooms = self.ctl.observed.rooms(model, config)
        for name, doc, value in (("capacity", "capacity (configured, or less as its provider reports)",
                                  lambda r: r.capacity),
                                 ("reserved", "bytes placed claims and reserved resizes take", lambda r: r.reserved),
                                 ("free", "bytes left for new claims and resizes", lambda r: r.free)):
            g = GaugeMetricFamily(f"xce_pool_{name}_bytes", f"a pool's {doc}", labels=["pool"])
            for room in rooms.values():
                g.add_metric([room.name], value(room))
            yield g
