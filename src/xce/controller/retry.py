"""Rejected plans: retried with a bounded backoff, counted, and their reasons recorded.

The plan applier rejects a decision the model no longer allows (``applier.py``).  Usually the
model moved on between the view and the apply, and the next plan, made from the newer model, is
fine.  But if the scheduler and the applier disagree for good (a bug, or a condition one of them
sees and the other does not), every plan is rejected again; retrying at once replanned every 50 ms
forever, holding the event loop and a thread for nothing.  So a cycle with rejections schedules its
retry after a delay: the loop's normal pace (``min_interval``) at first, doubling with every cycle
that is rejected again, up to ``MAX_RETRY_DELAY``.  Meanwhile the periodic tick does not plan: the
retry timer stands in for it, so a persistent rejection costs one cycle per ``MAX_RETRY_DELAY``.

What ends the backoff:
- a cycle with nothing rejected (its plan applied whole, or there was nothing to apply): the
  disagreement is over;
- a fact that may let more be placed (the loop's poke: a job submitted or finished, a host joined or
  changed, a claim op's result...): it may change the outcome, so the loop plans at once, and a
  rejection after it starts again from the normal pace.  Facts the loop does not poke on (a token
  revoked, a reading of a pool's capacity) are seen by the retry, at most ``MAX_RETRY_DELAY`` later.

Each rejected decision keeps its reason and how many cycles in a row it was rejected, shown as the
job's pending reason (``xce job why``) or the claim's; each reason is logged once, when it first
appears or changes, not once a cycle.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from xce.controller.applier import ApplyResult

log = logging.getLogger("xce.scheduler")

#: the longest wait before a rejected plan is made again (when nothing else happens meanwhile)
MAX_RETRY_DELAY = 5.0
#: rejected ids named in one log line; the rest are counted
_LOGGED_IDS = 10


@dataclass
class Backoff:
    first: float
    cap: float
    delay: float = 0.0  # the current wait (0: not backing off)

    def next(self) -> float:
        """The wait before the next retry: ``first``, then twice the last, never over ``cap``."""
        self.delay = min(self.cap, self.delay * 2 if self.delay else self.first)
        return self.delay

    def reset(self) -> None:
        self.delay = 0.0


@dataclass(frozen=True)
class Rejection:
    why: str
    times: int  # cycles in a row that planned the decision and saw it rejected


# what a rejected decision is, for each kind of decision in a plan
_KINDS = {"job": "plan", "claim": "placement", "resize": "reservation"}


@dataclass
class Rejections:
    """The decisions the latest cycle saw rejected, and the backoff of the loop's retries."""

    backoff: Backoff
    total: int = 0  # decisions rejected since the process started (``/metrics``)
    current: dict[tuple[str, int], Rejection] = field(default_factory=dict)  # (kind, id) -> the latest

    def note(self, result: ApplyResult | None) -> float | None:
        """A cycle's apply (None: it had nothing to apply).  Returns the wait before its retry, or
        None when nothing was rejected (the backoff is over)."""
        rejected = {} if result is None else {
            **{("job", i): why for i, why in result.rejected.items()},
            **{("claim", i): why for i, why in result.claims_rejected.items()},
            **{("resize", i): why for i, why in result.resizes_rejected.items()}}
        before, self.current = self.current, {}
        if not rejected:
            self.backoff.reset()
            return None
        self.total += len(rejected)
        delay = self.backoff.next()
        changed: dict[tuple[str, str], list[int]] = {}
        for key, why in rejected.items():
            last = before.get(key)
            self.current[key] = Rejection(why, last.times + 1 if last is not None else 1)
            if last is None or last.why != why:
                changed.setdefault((key[0], why), []).append(key[1])
        for (kind, why), ids in changed.items():
            named = ", ".join(map(str, ids[:_LOGGED_IDS])) + (f" and {len(ids) - _LOGGED_IDS} more"
                                                              if len(ids) > _LOGGED_IDS else "")
            log.warning("%s rejected for %s %s: %s; retrying in %gs, backing off",
                        _KINDS[kind], kind, named, why, delay)
        return delay

    def reasons(self, kind: str) -> dict[int, str]:
        """What each rejected decision of ``kind`` (job, claim, resize) is told while it waits."""
        return {i: _reason(kind, r, self.backoff.delay) for (k, i), r in self.current.items() if k == kind}


def _reason(kind: str, r: Rejection, delay: float) -> str:
    times = f" {r.times} times in a row" if r.times > 1 else ""
    return f"{_KINDS[kind]} rejected{times} ({r.why}); retrying in {delay:g}s"
