"""Reads of output asked of the worker on its host: a running job's (``bpeek``, ``xce job peek``) and a
task's (``blaunch`` relays its remote tasks' output to its own, as LSF's does).

A job's and a task's output are written on their host; the controller has no copy and keeps none.  A
read is a question the controller holds for the host's worker, which long-polls for them (``GET
/v1/hosts/{host}/peeks``) and answers (``POST``): a peek through the run's process
(``/proc/PID/fd/1``: the file the job itself opened, as its user, so no path the user chose is followed
as root), a task's output from the spool its worker keeps for it (``xce.worker.relay``), held by the
worker until there is some (a long poll).  The asker waits a bounded while for the answer.  Volatile, as
``observed`` readings are: never a fact, lost with the leader (the asker asks again).

Bounded: at most ``MAX_WAITING`` questions per host, each answered with at most the bytes it asked for
(``limit``); an answer is handed to its asker and dropped, so the controller holds no more than that.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

MAX_WAITING = 256  # questions held for one host at once: beyond them a read is refused (busy)
PEEK = "peek"  # a running job's output, from an offset (job_id, run, offset, limit)
TASK_OUTPUT = "task_output"  # a task's stdout and stderr, from offsets (job_id, run, task, out, err, limit, wait)
TASK_INPUT = "task_input"  # blaunch's stdin for a task, from an offset (job_id, run, task, offset, data, eof, wait)


def answer_limit(limit: int, max_body_bytes: int) -> int:
    """Bytes of output one worker answer may carry: ``limit``, or less where the answer (base64 in JSON,
    posted by the worker) would not fit in a request body the controller takes (``max_body_bytes``):
    a worker's answer refused with 413 would leave its asker waiting for nothing."""
    return max(1024, min(limit, (max_body_bytes - 4096) * 3 // 4))


@dataclass
class Ask:
    id: int
    question: dict[str, Any]  # its kind and what it asks (PEEK, TASK_OUTPUT)
    answer: asyncio.Future[dict[str, Any]] = field(
        repr=False, default_factory=lambda: asyncio.get_running_loop().create_future())

    def as_json(self) -> dict[str, Any]:
        return {"id": self.id, **self.question}


class Peeks:
    """The questions each host's worker has not answered yet, and a wake-up for its long poll."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._asked: dict[str, dict[int, Ask]] = {}
        self._wake: dict[str, asyncio.Event] = {}

    def ask(self, host: str, kind: str, **question: Any) -> Ask | None:
        """A question for ``host``'s worker (None: too many wait for it already)."""
        waiting = self._asked.setdefault(host, {})
        if len(waiting) >= MAX_WAITING:
            return None
        a = Ask(next(self._ids), {"kind": kind, **question})
        waiting[a.id] = a
        self._event(host).set()
        return a

    def forget(self, host: str, ask: Ask) -> None:
        """The asker stopped waiting (answered, or timed out)."""
        self._asked.get(host, {}).pop(ask.id, None)

    async def asked(self, host: str, wait: float, held: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
        """What ``host``'s worker is asked now, but for the questions it ``held`` (it holds a task's read
        until there is output), waiting up to ``wait`` seconds for a question."""
        event = self._event(host)
        if not self._new(host, held) and wait > 0:
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), wait)
            except TimeoutError:
                pass
        return [a.as_json() for a in self._new(host, held)]

    def _new(self, host: str, held: frozenset[int]) -> list[Ask]:
        return [a for a in self._asked.get(host, {}).values() if a.id not in held]

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
