"""The controller: its parts put together, and the face the API talks to.

General layout (each part a module of its own; ``Controller`` only assembles them and answers for
them, so routes need one object and one import):

- ``commit.Committer``        every change, decided in order and committed in groups; the read barrier
- ``leadership.Leadership``   the lease, the survey of the store, a standby following the log,
                              recovery and the bootstrap of a new term
- ``term.Term``               whether this controller may act now, at which epoch; who leads otherwise
- ``model_snapshot``          the whole model written to the store, and the log compacted behind it
- ``archive.StoreReads``      reads of the archive and the audit trail (rows written with the batches)
- ``listeners.Listeners``     who hears of commits, leadership and shutdown; background tasks
- ``observed.Observed``       what claim agents observe of storage: readings, not facts
- ``scheduling.SchedulerLoop`` the scheduling loop, and its latest word on what waits and why

The parts share two threads: the writer (appends, model snapshots, recovery, following: one at a
time, so a snapshot or a recovery always sees the committed log) and the reader (archive and audit
queries, never held up by a write).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import uuid
from typing import Any, Callable, TypeVar

from xce.config import Config
from xce.controller.archive import StoreReads
from xce.controller.commit import MAX_BATCH, CommitStats, Committer, Decide, Outcome
from xce.controller.leadership import Leadership, Peer
from xce.controller.listeners import Listeners
from xce.controller.observed import Observed
from xce.controller.peeks import Peeks
from xce.controller.scheduling import SchedulerLoop
from xce.controller.term import Term
from xce.errors import NotLeader
from xce.model import Model
from xce.store import Store

__all__ = ["MAX_BATCH", "Controller", "Decide", "Outcome", "Peer"]

T = TypeVar("T")


class Controller:
    def __init__(self, store: Store, config: Config, state_dir: str, holder: str | None = None,
                 url: str = "") -> None:
        self.store = store
        self.config = config
        self.state_dir = state_dir
        self.term = Term(holder=holder or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}", url=url)
        self.listeners = Listeners()
        self.observed = Observed()
        self.peeks = Peeks()  # questions for workers about their runs' output (bpeek)
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-writer")
        self.commit = Committer(store, config, self.term, self.listeners, self._writer)
        self.leadership = Leadership(store, config, state_dir, self.term, self.commit, self.listeners, self._writer)
        self.reads = StoreReads(self.term)
        self.scheduling = SchedulerLoop(self.commit, self.term, self.listeners, config, self.observed)
        self._tasks: list[asyncio.Task] = []

    # ------------------------------------------------------------ what the routes read

    @property
    def model(self) -> Model:
        """The live model: call ``read_barrier`` first, so nothing shown is not durable yet."""
        return self.commit.model

    @property
    def committed(self) -> int:
        return self.commit.committed

    @property
    def stats(self) -> CommitStats:
        return self.commit.stats

    @property
    def holder(self) -> str:
        return self.term.holder

    @property
    def url(self) -> str:
        return self.term.url

    @property
    def is_leader(self) -> bool:
        return self.term.is_leader

    @property
    def epoch(self) -> int:
        return self.term.epoch

    @property
    def serving(self) -> bool:
        return self.term.serving

    @property
    def peers(self) -> list[Peer]:
        return self.leadership.peers

    async def execute(self, decide: Decide, *, fold_after_commit: bool = False) -> Any:
        """``Committer.execute``: ``decide``'s result once its facts are durable."""
        return await self.commit.execute(decide, fold_after_commit=fold_after_commit)

    async def read_barrier(self) -> None:
        """``Committer.read_barrier``: until every fact in the model is durable."""
        await self.commit.read_barrier()

    async def read_store(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a read of the archive or the audit trail (``StoreReads.read``)."""
        return await self.reads.read(fn, *args)

    def not_leader(self) -> NotLeader:
        return self.term.not_leader()

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self.commit.run(), name="xce-commit"),
                       asyncio.create_task(self.leadership.run(), name="xce-lease")]
        self._tasks += [asyncio.create_task(run()) for run in self.listeners.background]

    async def wait_leader(self, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self.term.ready.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def begin_shutdown(self) -> None:
        """The server is about to drain its requests: let long-running ones return now."""
        self.listeners.shutting_down()

    async def stop(self) -> None:
        """Clean shutdown: drain, snapshot, release the lease so a standby can take over at once."""
        await self.commit.drain()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        await self.leadership.resign()
        self._writer.shutdown(wait=True)
        self.reads.close()
