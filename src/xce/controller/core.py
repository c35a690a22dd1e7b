"""The controller core: leadership, group commit, the model, snapshots.

Every change goes through ``Controller.execute(decide)``.  ``decide`` is a
pure function of the current model that returns an ``Outcome``: the facts to
commit, a result for the caller, and possibly the refusal the caller gets
(refusals commit their audit fact too).  A single commit task runs the decide
functions of all queued commands one after another, folds their facts, and
appends the whole batch in **one** store transaction (group commit) before any
of those callers hear back.

While a batch is being written the model already holds its facts; readers
call ``read_barrier()`` first, so nobody is shown a fact that is not yet
durable.  If an append fails, the model may hold facts the store does not:
the controller steps down and, when it leads again, rebuilds the model from
the store.  A retirement is the exception (``execute(..., fold_after_commit=True)``):
it commits alone and is folded once durable, so reads need not wait for it.

Leadership (``_lease_loop``): every controller on the store announces itself (its advertised URL
and log position, ``Store.announce``) and learns who leads and at which URL, so a standby's 503
(``NotLeader``) names the leader's URL without a store call per request.  A standby *follows* the
log: it folds what the leader commits into a model of its own, so when it takes the lease it
replays only the tail it had not read and serves within a bounded time.  A leader serves only
while its lease is live by its own clock (``serving``): a paused leader that wakes up refuses
reads and writes until it has renewed, and its appends are fenced by the store in any case.

The audit trail is not in the model (``xce.model.audit``): folding a batch
fills the model's transient audit outbox, and the batch's append carries
those records into the store's audit table in the same transaction.  At
start-up the replayed tail derives its records again and ``backfill_audit``
keeps only those of positions the table lacks (none, unless the state was
written before the trail moved to the store); a format-1 snapshot's trail is
moved the same way, and a fresh snapshot then replaces it.  The archive is
written the same way: a batch that retires records carries their whole
documents (``history.retiring``, asked before the fold drops them) into the
archive tables with its facts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import orjson
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from xce.controller.bootstrap import bootstrap_facts
from xce.controller.memory import release_free_memory
from xce.controller.observed import Observed
from xce.config import Config
from xce.errors import NotLeader, Unavailable, XceError
from xce.model import Model, decode, encode
from xce.model.audit import AuditOutbox
from xce.model.claims import Claim
from xce.model.facts import Fact, RecordsRetired
from xce.model.history import job_columns, released_time, retiring
from xce.model.jobs import Job
from xce.model.identity import hash_token
from xce.model.state import SNAPSHOT_FORMAT
from xce.model.transitions import ImpossibleTransition
from xce.store import (ArchivedClaim, ArchivedJob, AuditQuery, AuditRecord, LeaseLost, Record, Snapshot, Store,
                       StoreError)

log = logging.getLogger("xce.controller")

MAX_BATCH = 2048


@dataclass
class Outcome:
    facts: list[Fact] = field(default_factory=list)
    result: Any = None
    error: XceError | None = None


Decide = Callable[[Model], Outcome]
#: the jobs and claims a batch retires, each with its retirement fact's position: archived with the batch
Retired = tuple[list[tuple[int, Job]], list[tuple[int, Claim]]]


@dataclass
class _Command:
    decide: Decide
    future: asyncio.Future
    fold_after_commit: bool = False  # decided alone, folded once durable (``Controller.execute``)


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


@dataclass
class Recovered:
    """What start-up rebuilds: the model, and whether its snapshot is of an older format."""

    model: Model
    old_snapshot: bool = False


def catch_up(store: Store, model: Model) -> bool:
    """Fold every record after ``model.position`` into ``model``; False (and nothing folded past the
    gap) if the log no longer holds the records that follow it (compacted behind a newer snapshot)."""
    while True:
        records = store.read_after(model.position)
        if not records:
            return True
        for rec in records:
            if rec.position != model.position + 1:
                return False
            model.apply(rec.position, decode(rec.type, rec.version, rec.payload))


def load_model(store: Store) -> Recovered:
    """Latest snapshot plus every fact after it.

    The model comes back with an audit outbox holding the records its replay derived (and those
    of a format-1 snapshot): the caller hands them to ``Store.backfill_audit``, which keeps only
    what the trail lacks.
    """
    snap = store.load_snapshot()
    data = orjson.loads(snap.data) if snap else None
    model = Model.from_snapshot(data) if data else Model()
    if model.audit_outbox is None:
        model.audit_outbox = AuditOutbox()
    recovered = Recovered(model, old_snapshot=data is not None and data.get("format") != SNAPSHOT_FORMAT)
    if not catch_up(store, model):
        raise RuntimeError(f"log gap after position {model.position}")
    return recovered


@dataclass(frozen=True)
class Peer:
    """A controller on the same store as this one saw it last: ``role`` leader, standby, or
    unreachable (it stopped announcing itself)."""

    url: str
    role: str
    position: int
    age: float
    holder: str


class Controller:
    def __init__(self, store: Store, config: Config, state_dir: str, holder: str | None = None,
                 url: str = "") -> None:
        self.store = store
        self.config = config
        self.state_dir = state_dir
        self.holder = holder or f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        # the URL this controller advertises (its config's [controller] advertise, else its listen
        # address): what standbys' 503s name while it leads.  Never from a request.
        self.url = url
        # what the lease loop last learnt from the store: the leader (holder, epoch, url) and peers
        self.leader_holder: str | None = None
        self.leader_url: str | None = None
        self.leader_epoch_seen = 0
        self.peers: list[Peer] = []
        # a standby's model, folded from the log as the leader commits (None: not loaded yet)
        self._follower: Model | None = None
        self.model = Model()
        self.epoch = 0
        self.is_leader = False
        self.committed = 0
        self.stats = CommitStats()
        self._queue: asyncio.Queue[_Command] | None = None
        self._inflight: asyncio.Future | None = None
        # readers waiting for the batch in flight (read_barrier); the commit loop lets them run
        # before it decides the next batch
        self._readers: list[asyncio.Future] = []
        self._writer = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-writer")
        self._lease_io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-lease")
        # audit queries: off the writer thread (the stores read on their own connections)
        self._reader = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-reader")
        self._tasks: list[asyncio.Task] = []
        self._since_snapshot = 0
        self._leader_event: asyncio.Event | None = None
        self._stopping = False
        self._lease_expires = 0.0
        # called on the event loop with each committed batch's facts (scheduler pokes, worker wake-ups)
        self.commit_listeners: list[Callable[[list[Fact]], None]] = []
        # called on the event loop when this controller becomes leader (after the model is loaded)
        self.leader_listeners: list[Callable[[], None]] = []
        # started with the controller; cancelled on stop (scheduler, host monitor)
        self.background: list[Callable[[], Any]] = []
        # called on the event loop when the server begins a graceful shutdown (wake long-polls)
        self.shutdown_listeners: list[Callable[[], None]] = []
        # the scheduler's latest pending reasons (volatile: recomputed every cycle, not facts)
        self.pending_reasons: dict[int, str] = {}
        self.idle_reason: str | None = None  # every pending job's reason when no host has room at all
        # when the latest cycle planned only the first queue_depth pending jobs: what the others are
        # told, and what the latest full pass said of each (xce.controller.scheduling)
        self.beyond_depth_reason: str | None = None
        self.full_pass_reasons: dict[int, str] = {}
        self.claim_reasons: dict[int, str] = {}  # the same for standalone claims waiting for a pool
        self.resize_reasons: dict[int, str] = {}  # ... and for resizes waiting for room in their pool
        # what claim agents observe of storage (capacity, used bytes): readings, not facts
        self.observed = Observed()

    def pending_reason(self, job_id: int) -> str | None:
        """The scheduler's latest word on a pending job (volatile, recomputed every cycle)."""
        reason = self.pending_reasons.get(job_id)
        if reason is None and self.beyond_depth_reason is not None:
            reason = self.full_pass_reasons.get(job_id) or self.beyond_depth_reason
        return reason or self.idle_reason

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._leader_event = asyncio.Event()
        self._tasks = [asyncio.create_task(self._commit_loop(), name="xce-commit"),
                       asyncio.create_task(self._lease_loop(), name="xce-lease")]
        self._tasks += [asyncio.create_task(run()) for run in self.background]

    async def wait_leader(self, timeout: float | None = None) -> bool:
        assert self._leader_event is not None
        try:
            await asyncio.wait_for(self._leader_event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def begin_shutdown(self) -> None:
        """The server is about to drain its requests: let long-running ones return now."""
        for listener in self.shutdown_listeners:
            listener()

    async def stop(self) -> None:
        """Clean shutdown: drain, snapshot, release the lease so a standby can take over at once."""
        self._stopping = True
        if self._inflight is not None:
            await asyncio.shield(self._inflight)
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        loop = asyncio.get_running_loop()
        if self.is_leader:
            try:
                await loop.run_in_executor(self._writer, self._snapshot_now)
                await loop.run_in_executor(self._writer, self.store.release_lease, self.holder, self.epoch)
            except StoreError as e:
                log.warning("clean shutdown could not snapshot/release: %s", e)
        try:  # standbys and clients stop naming this controller at once
            await loop.run_in_executor(self._lease_io, self.store.leave, self.holder)
        except StoreError:
            pass
        self.is_leader = False
        self._writer.shutdown(wait=True)
        self._lease_io.shutdown(wait=True)
        self._reader.shutdown(wait=True)

    # ------------------------------------------------------------ leadership

    async def _lease_loop(self) -> None:
        loop = asyncio.get_running_loop()
        ttl = self.config.controller.lease_ttl
        while True:
            try:
                if not self.is_leader:
                    lease = await loop.run_in_executor(self._lease_io, self.store.acquire_lease, self.holder, ttl)
                    if lease is not None:
                        await self._become_leader(lease.epoch)
                else:
                    asked = time.monotonic()  # the lease runs from before we asked, to be safe
                    await loop.run_in_executor(self._lease_io, self.store.renew_lease, self.holder, self.epoch, ttl)
                    self._lease_expires = asked + ttl
            except LeaseLost as e:
                self._step_down(f"lease lost: {e}")
            except StoreError as e:
                # OBSERVATION: the store did not answer.  The lease is still ours until it
                # would have expired; past that another controller may lead.
                if self.is_leader and time.monotonic() >= self._lease_expires:
                    self._step_down(f"lease could not be renewed before it expired: {e}")
                else:
                    log.warning("lease call failed, retrying: %s", e)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease loop error")
            try:  # who leads, who stands by: for 503s, ping and xce controllers (never holds up the lease)
                await loop.run_in_executor(self._lease_io, self._survey)
                if not self.is_leader:
                    await loop.run_in_executor(self._writer, self._follow)
            except asyncio.CancelledError:
                raise
            except StoreError as e:
                log.debug("survey failed: %s", e)
            except Exception:
                log.exception("survey error")
            await asyncio.sleep(ttl / 3 if self.is_leader else min(1.0, ttl / 3))

    def _survey(self) -> None:
        """Announce ourselves, then read the lease and the members (on the lease thread)."""
        position = self.committed if self.is_leader else (self._follower.position if self._follower else 0)
        if self.url:
            self.store.announce(self.holder, self.url, position)
        lease = self.store.current_lease()
        members = self.store.members()
        by_holder = {m.holder: m for m in members}
        holder = lease.holder if lease is not None and lease.expires_at > 0 else None
        self.leader_holder = holder
        self.leader_epoch_seen = lease.epoch if lease is not None else self.leader_epoch_seen
        leader = by_holder.get(holder) if holder else None
        self.leader_url = leader.url if leader is not None else None
        quiet = max(3 * self.config.controller.lease_ttl, 5.0)  # announcing stopped: dead, paused or cut off
        self.peers = [Peer(url=m.url, role="leader" if m.holder == holder else "standby" if m.age < quiet
                           else "unreachable", position=m.position, age=m.age, holder=m.holder) for m in members]

    def _follow(self) -> None:
        """A standby folds what the leader committed since it last looked (on the writer thread)."""
        if self.is_leader:
            return
        if self._follower is None:
            recovered = load_model(self.store)
            if recovered.old_snapshot:  # its trail has yet to move to the store: the next leader loads cold
                return
            recovered.model.take_audit()  # the leader wrote these with their facts
            self._follower = recovered.model
            return
        if not catch_up(self.store, self._follower):  # compacted past us: load again next time
            self._follower = None
        else:
            self._follower.take_audit()

    def _recover(self, epoch: int) -> Recovered:
        """Rebuild the model from the store (a standby: the tail its follower has not read) and
        complete the audit trail from what the replay derived."""
        follower, self._follower = self._follower, None
        if follower is not None and catch_up(self.store, follower):
            recovered = Recovered(follower)
            log.info("taking over from the followed log at position %d", follower.position)
        else:
            recovered = load_model(self.store)
        added = self.store.backfill_audit(epoch, recovered.model.take_audit())
        if added:
            log.info("audit trail: %d record(s) recovered from the log and the snapshot", added)
        return recovered

    async def _become_leader(self, epoch: int) -> None:
        loop = asyncio.get_running_loop()
        recovered = await loop.run_in_executor(self._writer, self._recover, epoch)
        model = recovered.model
        self.model = model
        self.committed = model.position
        self.epoch = epoch
        if recovered.old_snapshot:  # its trail is in the table now: a snapshot without it replaces it
            await loop.run_in_executor(self._writer, self._snapshot_now)
        # the replay may have taken a while: renew before serving, so the lease runs from now
        ttl = self.config.controller.lease_ttl
        asked = time.monotonic()
        await loop.run_in_executor(self._lease_io, self.store.renew_lease, self.holder, epoch, ttl)
        self._lease_expires = asked + ttl
        self.leader_holder, self.leader_url, self.leader_epoch_seen = self.holder, self.url or None, epoch
        self.is_leader = True
        log.info("leader at epoch %d, log position %d", epoch, model.position)
        admin_token_path = os.path.join(self.state_dir, "admin.token")
        held = _read_secret(admin_token_path)

        def decide(m: Model) -> Outcome:
            # a missing admin token, or one revoked or expired meanwhile, is replaced: the file (0600, in the
            # controller's own state dir) is the way back in for whoever runs the controller
            now = time.time()
            need = held is None or m.user_for_token_hash(hash_token(held), now) is None
            facts, secret = bootstrap_facts(m, self.config, now, need_admin_token=need)
            return Outcome(facts, result=secret)

        secret = await self.execute(decide)
        if secret:
            fd = os.open(admin_token_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secret + "\n")
            os.replace(admin_token_path + ".tmp", admin_token_path)
        for listener in self.leader_listeners:
            listener()
        assert self._leader_event is not None
        self._leader_event.set()

    @property
    def serving(self) -> bool:
        """Leader, its leadership's bootstrap (config facts, the admin token) is committed, and its
        lease is live by its own clock: the API answers only then (a request in between would meet
        users and tokens not yet there; a leader paused past its lease may have been replaced)."""
        return (self.is_leader and self._leader_event is not None and self._leader_event.is_set()
                and time.monotonic() < self._lease_expires)

    def _step_down(self, reason: str) -> None:
        if self.is_leader:
            log.warning("stepping down: %s", reason)
        self.is_leader = False
        if self._leader_event is not None:
            self._leader_event.clear()

    # ------------------------------------------------------------ commands

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
        if self._stopping or not self.is_leader or time.monotonic() >= self._lease_expires:
            raise self.not_leader()
        assert self._queue is not None
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
        if not self.is_leader or time.monotonic() >= self._lease_expires:
            raise self.not_leader()
        if self._inflight is None:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._readers.append(waiter)
        await waiter
        if not self.is_leader:
            raise self.not_leader()  # the append was refused: the model holds facts the store does not

    def _release_readers(self) -> bool:
        """Wake the readers waiting for the batch just ended; whether there were any."""
        readers, self._readers = self._readers, []
        for waiter in readers:
            if not waiter.done():  # done: its request was cancelled
                waiter.set_result(None)
        return bool(readers)

    def not_leader(self) -> NotLeader:
        """The refusal of a controller that may not act now, naming the leader's URL if it knows it
        (from the last survey of the store: no store call per request)."""
        return NotLeader(self.not_leader_message(), leader=self.leader_url if self.leader_url != self.url else None)

    def not_leader_message(self) -> str:
        if self.is_leader:
            return "this controller's leader lease has run out; it is renewing it or stepping down"
        if self.leader_url and self.leader_url != self.url:
            return f"this controller is not the leader (leader: {self.leader_url}, epoch {self.leader_epoch_seen})"
        if self.leader_holder:
            return f"this controller is not the leader (leader: {self.leader_holder}, epoch {self.leader_epoch_seen})"
        return "this controller is not the leader (no leader yet: an election is under way)"

    async def _commit_loop(self) -> None:
        assert self._queue is not None
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
            if not self.is_leader:
                for cmd in batch + ([carried] if carried else []):
                    if not cmd.future.done():
                        cmd.future.set_exception(self.not_leader())
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
                    await loop.run_in_executor(self._writer, self._append, records, audit, retired)
                except StoreError as e:
                    self._step_down(f"append refused: {type(e).__name__}: {e}")
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
                for listener in self.commit_listeners:
                    try:
                        listener(facts)
                    except Exception:
                        log.exception("commit listener failed")
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
                    await loop.run_in_executor(self._writer, self._snapshot_now)
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
                self._add_retiring(retired, record.position, f)
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
            self._add_retiring(retired, record.position, f)
        return [out], records, out.facts, retired

    def _add_retiring(self, retired: Retired, position: int, fact: Fact) -> None:
        """If ``fact`` is a retirement, add the archive documents of what its fold will drop, as the
        model holds them now (before that fold): the store writes them with the fact."""
        if isinstance(fact, RecordsRetired):
            jobs, claims = retiring(self.model, fact)
            retired[0].extend((position, j) for j in jobs)
            retired[1].extend((position, c) for c in claims)

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
        self.store.append(self.epoch, records, audit, jobs=[archived_job(p, j) for p, j in jobs],
                          claims=[archived_claim(p, c) for p, c in claims])

    # ------------------------------------------------------------ audit and archive

    async def read_store(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, a store read (the archive), off the event loop and the writer thread.  Only the
        leader answers, like every read; a retired record is in its table once its fact committed."""
        if not self.is_leader:
            raise self.not_leader()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, fn, *args)
        except StoreError as e:
            raise Unavailable(f"the store cannot answer: {e}") from e

    async def query_audit(self, query: AuditQuery) -> list[AuditRecord]:
        """Audit records from the store, newest first.  Only the leader answers, like every read: a
        record is in the table once its batch committed, so this reads nothing that is not durable."""
        if not self.is_leader:
            raise self.not_leader()
        try:
            return await asyncio.get_running_loop().run_in_executor(self._reader, self.store.query_audit, query)
        except StoreError as e:
            raise Unavailable(f"the store cannot answer: {e}") from e

    # ------------------------------------------------------------ snapshots

    def _snapshot_now(self) -> None:
        """Write a snapshot of the committed model and compact the log behind it.

        Runs on the writer thread between batches, so the model equals the committed log.
        """
        # orjson, straight from the entities: a whole-model snapshot is the controller's one big
        # serialisation, and the commit loop waits for it (it must see one model)
        began = time.monotonic()
        data = self.model.snapshot_json()
        position = self.model.position
        self.store.write_snapshot(self.epoch, Snapshot(position=position, data=data))
        took = time.monotonic() - began  # what the commit loop waited for (compaction is after)
        size = len(data)
        del data
        self.store.compact(self.epoch, position)
        release_free_memory()  # the encoding's pages: the snapshot is the controller's peak
        self._since_snapshot = 0
        self.stats.snapshots += 1
        self.stats.last_snapshot_bytes, self.stats.last_snapshot_seconds = size, took
        log.info("snapshot at position %d (%d bytes, %.3f s)", position, size, took)


def archived_job(position: int, job: Job) -> ArchivedJob:
    """A retired job as its archive row: indexed columns, and every field (history too) as JSON."""
    return ArchivedJob(**job_columns(job), position=position, doc=orjson.dumps(job).decode())


def archived_claim(position: int, claim: Claim) -> ArchivedClaim:
    return ArchivedClaim(id=claim.id, name=claim.name, project=claim.project, owner=claim.owner,
                         form=claim.form.value, class_name=claim.class_name, job_id=claim.job_id,
                         size_bytes=claim.size_bytes, created=claim.created, released=released_time(claim),
                         position=position, doc=orjson.dumps(claim).decode())


def _read_secret(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None
