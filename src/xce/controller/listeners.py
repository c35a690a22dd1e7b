"""Who the controller tells when something happens, and the tasks that run as long as it does.

The parts built on the controller (the scheduling loop, host liveness, long-poll wake-ups, metrics,
the retirement pass) register here, so the commit and leadership parts call them without knowing
them.  Every listener is called on the event loop, synchronously, in the order registered: it may
note something or wake a task, never wait.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from xce.model.facts import Fact

log = logging.getLogger("xce.controller")


@dataclass
class Listeners:
    # each committed batch's facts, once durable (scheduler pokes, worker and agent wake-ups, metrics)
    commit: list[Callable[[list[Fact]], None]] = field(default_factory=list)
    # this controller became leader: its model is loaded and its bootstrap committed
    leader: list[Callable[[], None]] = field(default_factory=list)
    # the server begins a graceful shutdown (long-polls return at once)
    shutdown: list[Callable[[], None]] = field(default_factory=list)
    # started with the controller, cancelled when it stops (scheduler, host monitor, retirement)
    background: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    def committed(self, facts: list[Fact]) -> None:
        """A batch is durable.  A listener that fails is logged: the batch is committed all the same."""
        for listener in self.commit:
            try:
                listener(facts)
            except Exception:
                log.exception("commit listener failed")

    def led(self) -> None:
        for listener in self.leader:
            listener()

    def shutting_down(self) -> None:
        for listener in self.shutdown:
            listener()
