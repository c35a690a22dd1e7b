"""Preemption: a pending job of a preemptive queue (``preemption = "PREEMPTIVE[low]"``, LSF's syntax)
that does not fit has runs of the queues it may preempt ended for it.

The victims: the fewest, lowest-priority, most recently started runs that free enough.  Runs are taken
lowest queue priority first, the most recently started first within one (they lose the least work),
until the job fits on its candidate hosts with what is free and what they hold (its template claims'
host counters too, on one host that gets its slots: ``JobView.node_counters``); then each taken run
the job fits without is given back, the last taken first.  Runs already ending (a kill asked, by an
earlier preemption or anyone) count as free, for the first job that waits for them: it takes no more.
A run is preempted for (or waited for by) one job per cycle.  The plan carries the decision (``Preemption``); ending the
victims through the kill path is the applier's (``jobs.preempt``); snapshotting their ``--snapshot-on-preempt``
claims is the model's, as it folds their end (``xce.model.preempt_snapshots``).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from xce.scheduler.plan import Preemption
from xce.scheduler.view import HostView, JobView, RunningView

_NONE: Mapping[str, float] = {}  # (read only) no template claims' counters


class Victims:
    """One cycle's preemptions, and the runs already promised to one."""

    def __init__(self, hosts: tuple[HostView, ...], running: tuple[RunningView, ...],
                 preemptable: Mapping[str, frozenset[str]]) -> None:
        self.index = {h.name: i for i, h in enumerate(hosts)}
        self.running = running
        self.preemptable = preemptable
        self.taken: set[int] = set()
        self.made: list[Preemption] = []

    def choose(self, job: JobView, cands: Sequence[int], free_slots: list[int], free_ctr: list[dict[str, float]],
               rusage: Mapping[str, float], per_host: int, node: Mapping[str, float] = _NONE) -> str | None:
        """Victims for ``job``, if its queue may preempt and enough can be freed: its pending reason then.
        ``node``: what its template claims take on its first host (``JobView.node_counters``), which one
        host it gets slots on must then have free as well."""
        queues = self.preemptable.get(job.queue)
        if not queues:
            return None
        want = job.slots
        on = set(cands)
        slots = {i: free_slots[i] for i in on}
        ctr = {i: dict(free_ctr[i]) for i in on}

        def add(r: RunningView, sign: int) -> None:
            for host, n in r.slots.items():
                i = self.index.get(host)
                if i in on:
                    slots[i] += sign * n
                    for name, amount in r.counters.get(host, {}).items():
                        ctr[i][name] = ctr[i].get(name, 0.0) + sign * amount

        def fits() -> bool:
            total = 0
            first = not node  # a host for its template claims' counters found
            for i in on:
                k = min(slots[i], want)
                for name, per_slot in rusage.items():
                    k = min(k, int(ctr[i].get(name, 0.0) // per_slot))
                got = (min(per_host, want) if k >= min(per_host, want) else 0) if per_host else max(k, 0)
                if got and not first:
                    first = all(ctr[i].get(name, 0.0) >= amount for name, amount in node.items())
                total += got
                if total >= want and first:
                    return True
            return False

        ending = [r for r in self.running if r.ending and r.job_id not in self.taken
                  and any(self.index.get(h) in on for h in r.slots)]
        for r in ending:
            add(r, 1)
        if ending and fits():  # (what they free goes to this job: the first that waits for them)
            self.taken.update(r.job_id for r in ending)
            return f"waiting for preempted job(s) {', '.join(str(r.job_id) for r in ending)} to end"
        pool = sorted((r for r in self.running if r.queue in queues and r.priority < job.priority and not r.ending
                       and r.job_id not in self.taken and any(self.index.get(h) in on for h in r.slots)),
                      key=lambda r: (r.priority, -r.start, -r.job_id))
        chosen: list[RunningView] = []
        for r in pool:
            add(r, 1)
            chosen.append(r)
            if fits():
                break
        else:
            return None
        for r in reversed(chosen[:-1]):  # the fewest: give back each the job fits without
            add(r, -1)
            if fits():
                chosen.remove(r)
            else:
                add(r, 1)
        self.taken.update(r.job_id for r in chosen)
        self.made.append(Preemption(job_id=job.id, victims=tuple((r.job_id, r.run) for r in chosen)))
        return (f"preempting job(s) {', '.join(str(r.job_id) for r in chosen)} "
                f"(queue {', '.join(sorted({r.queue for r in chosen}))}): it starts when their slots are free")
