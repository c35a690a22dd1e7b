"""Reads of a running job's output, asked of the worker on its host (``bpeek``, ``xce job peek``).

A job's output is written on its host; the controller has no copy and keeps none.  A peek is a
question the controller holds for the host's worker, which long-polls for them (``GET
/v1/hosts/{host}/peeks``), reads the run's output through its process (``/proc/PID/fd/1``: the file the
job itself opened, as its user, so no path the user chose is followed as root) and answers (``POST``).
The asker waits a bounded while for the answer.  Volatile, as ``observed`` readings are: never a fact,
lost with the leader (the asker asks again).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

MAX_WAITING = 256  # questions held for one host at once: beyond them a peek is refused (busy)


@dataclass
class Ask:
    id: int
    job_id: int
    run: int
    offset: int
    limit: int
    answer: asyncio.Future[dict[str, Any]] = field(
        repr=False, default_factory=lambda: asyncio.get_running_loop().create_future())

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, "job_id": self.job_id, "run": self.run, "offset": self.offset, "limit": self.limit}


class Peeks:
    """The questions each host's worker has not answered yet, and a wake-up for its long poll."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._asked: dict[str, dict[int, Ask]] = {}
        self._wake: dict[str, asyncio.Event] = {}

    def ask(self, host: str, job_id: int, run: int, offset: int, limit: int) -> Ask | None:
        """A question for ``host``'s worker (None: too many wait for it already)."""
        waiting = self._asked.setdefault(host, {})
        if len(waiting) >= MAX_WAITING:
            return None
        a = Ask(next(self._ids), job_id, run, offset, limit)
        waiting[a.id] = a
        self._event(host).set()
        return a

    def forget(self, host: str, ask: Ask) -> None:
        """The asker stopped waiting (answered, or timed out)."""
        self._asked.get(host, {}).pop(ask.id, None)

    async def asked(self, host: str, wait: float) -> list[dict[str, Any]]:
        """What ``host``'s worker is asked now, waiting up to ``wait`` seconds for a question."""
        event = self._event(host)
        if not self._asked.get(host) and wait > 0:
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), wait)
            except TimeoutError:
                pass
        return [a.as_json() for a in self._asked.get(host, {}).values()]

    def answer(self, host: str, peek_id: int, reply: dict[str, Any]) -> bool:
        """The worker's answer to one of its questions (False: nobody waits for it any more)."""
        a = self._asked.get(host, {}).pop(peek_id, None)
        if a is None or a.answer.done():
            return False
        a.answer.set_result(reply)
        return True

    def _event(self, host: str) -> asyncio.Event:
        event = self._wake.get(host)
        if event is None:
            event = self._wake[host] = asyncio.Event()
        return event
