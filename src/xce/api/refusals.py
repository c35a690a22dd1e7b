"""Refused requests are audited, but nobody who can reach the port can grow the log at will.

Every refusal used to be one durable ``AuditRecorded`` fact, so a loop of
requests with a bad token grew the store without limit.  Refusals are now
admitted per *source* and result code through a token bucket: the source is
the client address for a request without a valid identity, and the user
once authenticated.  Within the bucket a refusal is recorded as before;
beyond it, repeats are only counted in memory and recorded as ONE fact ("N
more refusals like this from 127.0.0.1 in the last 10 s") when the next one
is let through or when the window closes (``flush``, called periodically).
A global bucket bounds all sources together, and the number of sources
tracked is capped (the least recently seen is forgotten first, its count
carried into one summary for "other sources"), so memory is bounded too.

Records and summaries alike are ``AuditRecorded`` facts: durable in the log,
and their audit records reach the store's audit table in the same
transaction (``xce.model.audit``), never the controller's memory.

The limiter is plain data and arithmetic with an injected clock: the
controller calls it from its event loop; a lock keeps it safe from any
thread all the same.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable

from xce.config import ControllerConfig
from xce.model.facts import AuditRecorded

#: summaries written one by one per flush; beyond that, the rest are summed into one fact
MAX_SUMMARIES = 100

Key = tuple[str, str]  # (source, result code); source "addr 127.0.0.1" or "user alice"


@dataclass
class _Source:
    tokens: float
    stamp: float  # monotonic time of the last refill
    held: int = 0  # refusals counted but not yet recorded
    held_since: float = 0.0  # monotonic time of the first of them
    user: str = "-"
    action: str = ""
    target: str = ""
    detail: str = ""


class RefusalLimiter:
    """Which refusals to record as facts, and the summaries of the ones held back."""

    def __init__(self, rate: float, burst: int, window: float, max_sources: int, global_rate: float,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.rate, self.burst, self.window, self.max_sources = rate, burst, window, max_sources
        self.global_rate, self.global_burst = global_rate, 10 * burst
        self.clock, self.wall = clock, wall
        self._sources: OrderedDict[Key, _Source] = OrderedDict()
        self._global = _Source(tokens=float(self.global_burst), stamp=clock())
        self._forgotten: dict[str, int] = {}  # result code -> refusals held by sources no longer tracked
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, c: ControllerConfig) -> RefusalLimiter:
        return cls(c.refusal_audit_rate, c.refusal_audit_burst, c.refusal_audit_window, c.refusal_audit_sources,
                   c.refusal_audit_global_rate)

    def admit(self, source: str, user: str, action: str, target: str, code: str, detail: str) -> list[AuditRecorded]:
        """The facts to commit for this refusal: none (counted for a later summary), or this one's
        record, preceded by the summary of the repeats held back since the last one recorded."""
        with self._lock:
            now = self.clock()
            st = self._source((source, code), now)
            self._refill(st, self.rate, self.burst, now)
            self._refill(self._global, self.global_rate, self.global_burst, now)
            if st.tokens < 1 or self._global.tokens < 1:
                if st.held == 0:
                    st.held_since = now
                st.held += 1
                st.user, st.action, st.target, st.detail = user, action, target, detail
                return []
            st.tokens -= 1
            self._global.tokens -= 1
            facts = [self._summary((source, code), st, now)] if st.held else []
            facts.append(AuditRecorded(time=self.wall(), user=user, action=action, target=target[:256],
                                       result=code, detail=detail[:512]))
            return facts

    def flush(self, force: bool = False) -> list[AuditRecorded]:
        """Summaries of the repeats held back for at least a window (all of them if ``force``)."""
        with self._lock:
            now = self.clock()
            due = [(k, st) for k, st in self._sources.items()
                   if st.held and (force or now - st.held_since >= self.window)]
            facts = [self._summary(k, st, now) for k, st in due[:MAX_SUMMARIES]]
            for (_, code), st in due[MAX_SUMMARIES:]:
                self._forgotten[code] = self._forgotten.get(code, 0) + st.held
                st.held = 0
            for code, n in sorted(self._forgotten.items()):
                facts.append(AuditRecorded(time=self.wall(), user="-", action="-", target="-", result=code,
                                           detail=f"{n} more refusal(s) from other sources (audit of refusals "
                                                  "is rate-limited)"))
            self._forgotten.clear()
            return facts

    def tracked(self) -> int:
        return len(self._sources)

    # ------------------------------------------------------------ internals

    def _source(self, key: Key, now: float) -> _Source:
        st = self._sources.get(key)
        if st is not None:
            self._sources.move_to_end(key)
            return st
        while len(self._sources) >= self.max_sources:
            (_, code), old = self._sources.popitem(last=False)
            if old.held:
                self._forgotten[code] = self._forgotten.get(code, 0) + old.held
        st = self._sources[key] = _Source(tokens=float(self.burst), stamp=now)
        return st

    @staticmethod
    def _refill(st: _Source, rate: float, burst: float, now: float) -> None:
        st.tokens = min(float(burst), st.tokens + (now - st.stamp) * rate)
        st.stamp = now

    def _summary(self, key: Key, st: _Source, now: float) -> AuditRecorded:
        source, code = key
        who = source.partition(" ")[2]
        fact = AuditRecorded(time=self.wall(), user=st.user, action=st.action, target=st.target[:256], result=code,
                             detail=f"{st.held} more refusal(s) like this from {who} in the last "
                                    f"{max(1, round(now - st.held_since))} s (audit of refusals is rate-limited); "
                                    f"the last: {st.detail}"[:512])
        st.held = 0
        return fact
