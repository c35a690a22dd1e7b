"""The commit part of the controller: every change, decided in order and committed in groups.

Every change goes through ``Committer.execute(decide)``.  ``decide`` is a pure function of the
current model that returns an ``Outcome``: the facts to commit, a result for the caller, and
possibly the refusal the caller gets (refusals commit their audit fact too).  A single commit task
(``run``) runs the decide functions of all queued commands one after another, folds their facts,
and appends the whole batch in **one** store transaction (group commit) before any of those callers
hear back.

While a batch is being written the model already holds its facts; readers call ``read_barrier()``
first, so nobody is shown a fact that is not yet durable.  If an append fails, the model may hold
facts the store does not: the controller steps down and, when it leads again, rebuilds the model
from the store.  A retirement is the exception (``execute(..., fold_after_commit=True)``): it
commits alone and is folded once durable, so reads need not wait for it.

The audit trail is not in the model (``xce.model.audit``): folding a batch fills the model's
transient audit outbox, and the batch's append carries those records into the store's audit table
in the same transaction.  The archive is written the same way (``archive.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from xce.config import Config
from xce.controller.archive import Retired, add_retiring, archived_claim, archived_job
from xce.controller.listeners import Listeners
from xce.controller.model_snapshot import write_snapshot
from xce.controller.term import Term
from xce.errors import Unavailable, XceError
from xce.model import Model, encode
from xce.model.facts import Fact, RecordsRetired
from xce.model.transitions import ImpossibleTransition
from xce.store import AuditRecord, Record, Store, StoreError

log = logging.getLogger("xce.controller")

MAX_BATCH = 2048


@dataclass
class Outcome:
    facts: list[Fact] = field(default_factory=list)
    result: Any = None
    error: XceError | None = None


Decide = Callable[[Model], Outcome]


@dataclass
class _Command:
    decide: Decide
    future: asyncio.Future
    fold_after_commit: bool = False  # decided alone, folded once durable (``Committer.execute``)


@dataclass
class CommitStats:
    batches: int = 0
    facts: int = 0
    commands: int = 0
    snapshots: int = 0
    last_batch: int = 0
    last_snapshot_bytes: int = 0
    last_snapshot_seconds: float = 0.0
    retired: int = 0  # jobs and claims retired into the archive (controller/history.py)


class Committer:
    def __init__(self, store: Store, config: Config, term: Term, listeners: Listeners,
                 writer: concurrent.futures.ThreadPoolExecutor) -> None:
        self.store = store
        self.config = config
        self.term = term
        self.listeners = listeners
        self.writer = writer  # the one thread that writes to the store
        self.model = Model()
        self.committed = 0
        self.stats = CommitStats()
        self._queue: asyncio.Queue[_Command] = asyncio.Queue()
        self._inflight: asyncio.Future | None = None
        # readers waiting for the batch in flight (read_barrier); the commit loop lets them run
        # before it decides the next batch
        self._readers: list[asyncio.Future] = []
        self._since_snapshot = 0
        self._stopping = False

    def adopt(self, model: Model) -> None:
        """A new term's model, every fact of it durable (the leadership part recovered it)."""
        self.model = model
        self.committed = model.position

    async def execute(self, decide: Decide, *, fold_after_commit: bool = False) -> Any:
        """Run ``decide`` in the commit order; return its result once its facts are durable.

        Raises the outcome's error (after its audit facts are durable), or
        ``Unavailable`` if this controller is not the leader or the store refused.

        ``fold_after_commit``: a retirement (its one fact a ``RecordsRetired``).  It is decided in a
        batch of its own, its archive documents are the records as the model holds them
        (``history.retiring``), and its fact is folded only once durable: readers do not wait for its
        commit (the model they see is all durable), which writes thousands of documents for a large
        array's retirement (5,000: ~0.05 s idle, 0.3-0.4 s under load).
        """
        if self._stopping or not self.term.live:
            raise self.term.not_leader()
        fut = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Command(decide, fut, fold_after_commit))
        outcome: Outcome = await fut
        if outcome.error is not None:
            raise outcome.error
        return outcome.result

    async def read_barrier(self) -> None:
        """Wait until every fact already in the model is durable: until the batch in flight, if any,
        is committed.  The commit loop lets the readers waiting for a batch run before it decides
        the next one (whose facts would not be durable yet), so a steady stream of writes delays a
        read by one commit, never until the writes stop."""
        if not self.term.live:
            raise self.term.not_leader()
        if self._inflight is None:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._readers.append(waiter)
        await waiter
        if not self.term.is_leader:
            raise self.term.not_leader()  # the append was refused: the model holds facts the store does not

    async def drain(self) -> None:
        """Take no more commands, and wait for the batch in flight."""
        self._stopping = True
        if self._inflight is not None:
            await asyncio.shield(self._inflight)

    def _release_readers(self) -> bool:
        """Wake the readers waiting for the batch just ended; whether there were any."""
        readers, self._readers = self._readers, []
        for waiter in readers:
            if not waiter.done():  # done: its request was cancelled
                waiter.set_result(None)
        return bool(readers)

    async def run(self) -> None:
        """The commit loop."""
        loop = asyncio.get_running_loop()
        carried: _Command | None = None  # a command taken from the queue that must start the next batch
        while True:
            batch = [carried or await self._queue.get()]
            carried = None
            while not batch[0].fold_after_commit and len(batch) < MAX_BATCH and not self._queue.empty():
                cmd = self._queue.get_nowait()
                if cmd.fold_after_commit:
                    carried = cmd
                    break
                batch.append(cmd)
            if not self.term.is_leader:
                for cmd in batch + ([carried] if carried else []):
                    if not cmd.future.done():
                        cmd.future.set_exception(self.term.not_leader())
                carried = None
                continue
            fold_after = batch[0].fold_after_commit
            if fold_after:  # the model stays as it is, all durable, until the fact is
                outcomes, records, facts, retired = self._decide_unfolded(batch[0])
                audit = []
            else:
                outcomes, records, facts, retired = self._decide_batch(batch)
                audit = self.model.take_audit()  # the batch's records: committed with its facts, or not at all
            readers = False
            if records:
                if not fold_after:
                    self._inflight = loop.create_future()
                try:
                    await loop.run_in_executor(self.writer, self._append, records, audit, retired)
                except StoreError as e:
                    self.term.step_down(f"append refused: {type(e).__name__}: {e}")
                    for cmd in batch:
                        if not cmd.future.done():
                            cmd.future.set_exception(Unavailable(f"commit refused by the store: {e}"))
                    continue
                finally:
                    if self._inflight is not None:
                        self._inflight.set_result(None)
                        self._inflight = None
                        readers = self._release_readers()
                if fold_after:
                    self._fold(records, facts)
                self.committed = self.model.position
                self.stats.batches += 1
                self.stats.facts += len(records)
                self.stats.last_batch = len(batch)
                self._since_snapshot += len(records)
                self.listeners.committed(facts)
            self.stats.commands += len(batch)
            for cmd, out in zip(batch, outcomes):
                if not cmd.future.done():
                    cmd.future.set_result(out)
            if readers:
                # OBSERVATION: readers wait for this batch.  Their wake-ups are queued already; one
                # yield runs them, on the committed model, before the next batch's decisions
                await asyncio.sleep(0)
            if self._since_snapshot >= self.config.controller.snapshot_every:
                try:
                    await loop.run_in_executor(self.writer, self.snapshot_now)
                except StoreError as e:
                    log.warning("snapshot failed, will retry: %s", e)

    def _decide_batch(self, batch: list[_Command]) -> tuple[list[Outcome], list[Record], list[Fact], Retired]:
        outcomes: list[Outcome] = []
        records: list[Record] = []
        facts: list[Fact] = []
        retired: Retired = ([], [])
        for cmd in batch:
            out, encoded = self._decide(cmd)
            for f, (t, v, payload) in zip(out.facts, encoded):
                record = Record(position=self.model.position + 1, type=t, version=v, payload=payload)
                add_retiring(retired, self.model, record.position, f)
                self._fold([record], [f])
                records.append(record)
            facts.extend(out.facts)
            outcomes.append(out)
        return outcomes, records, facts, retired

    def _decide_unfolded(self, cmd: _Command) -> tuple[list[Outcome], list[Record], list[Fact], Retired]:
        """A ``fold_after_commit`` command's decision and its records, not folded yet."""
        out, encoded = self._decide(cmd)
        if any(not isinstance(f, RecordsRetired) for f in out.facts) or len(out.facts) > 1:
            log.error("a decision folded after its commit must be one retirement, not %s",
                      [type(f).__name__ for f in out.facts])
            out, encoded = Outcome(error=XceError("internal error: not a retirement")), []
        records = [Record(position=self.model.position + 1 + i, type=t, version=v, payload=payload)
                   for i, (t, v, payload) in enumerate(encoded)]
        retired: Retired = ([], [])
        for record, f in zip(records, out.facts):
            add_retiring(retired, self.model, record.position, f)
        return [out], records, out.facts, retired

    def _decide(self, cmd: _Command) -> tuple[Outcome, list[tuple[str, int, str]]]:
        """Run one command's decide function; its outcome and its facts encoded."""
        try:
            out = cmd.decide(self.model)
        except XceError as e:
            out = Outcome(error=e)
        except Exception as e:  # a bug in a decide function must not take the batch down
            log.exception("decide failed")
            out = Outcome(error=XceError(f"internal error: {type(e).__name__}"))
        try:  # encoded before any is applied: a fact the store cannot hold must not reach the model
            return out, [encode(f) for f in out.facts]
        except (TypeError, ValueError) as e:
            log.exception("a decision's facts cannot be encoded")
            return Outcome(error=XceError(f"internal error: {type(e).__name__}")), []

    def _fold(self, records: list[Record], facts: list[Fact]) -> None:
        for record, f in zip(records, facts):
            try:
                self.model.apply(record.position, f)
            except ImpossibleTransition as e:
                # a decide function produced a fact its state machine forbids: the model now holds
                # part of a decision the log does not.  The log is the truth: stop here, loudly, and
                # let a restart (or a standby) replay it, as Nomad's FSM panics
                log.critical("impossible transition from a decision, stopping the controller: %s", e)
                os._exit(70)

    def _append(self, records: list[Record], audit: list[AuditRecord], retired: Retired) -> None:
        """One batch into the store (on the writer thread): its facts, its audit records, and the whole
        documents of what it retired (the entities left the model; nothing changes them any more)."""
        jobs, claims = retired
        self.store.append(self.term.epoch, records, audit, jobs=[archived_job(p, j) for p, j in jobs],
                          claims=[archived_claim(p, c) for p, c in claims])

    def snapshot_now(self) -> None:
        """A model snapshot (``model_snapshot.py``), on the writer thread between batches."""
        written = write_snapshot(self.store, self.term.epoch, self.model)
        self._since_snapshot = 0
        self.stats.snapshots += 1
        self.stats.last_snapshot_bytes, self.stats.last_snapshot_seconds = written.size, written.seconds
