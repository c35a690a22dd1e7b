"""The claim agent: the loop the provisioner runs (and the worker's node agent will), per DESIGN 6.

1. take a lease from the controller: a new **epoch** for every start;
2. long-poll for due ops (claims to create or release, orphans to release),
   taking them with their **intents** committed in the same call (``POST
   .../work``: the controller records attempt N of each op, and from then
   on it is this epoch's) before acting;
3. run the provider with ``run_provider`` (``posix_spawn``, JSON in and out,
   a timeout), one process per batch of ops of one provider;
4. report every result, fenced by the epoch: one reporter thread sends
   what has finished in one call, which also takes the ops those results
   opened (a staging claim's stage-in after its create) and, for a node
   agent, answers with the runs its host may now start (``on_dispatch``).

A call that takes ops is never sent twice blindly: if its answer is lost the
agent asks which open ops its epoch holds (``GET .../work?held=true``) and
runs those it is not running (``_held``, by op id).

The provisioner also tells the controller what each shared class's provider
can do (``capabilities``) once it holds its lease and at every scan: resizes,
snapshots and clones are offered by it.  Snapshot ops come in the same work as claim ops, with a ``snapshot_id``
that their intents and results carry back.

Orphan scans: the provisioner lists each shared class's objects, a node agent its host's node objects
of each node-scope class it has the provider of (replicas' and jobs' claims'), and the controller
decides which are orphans (and, from a node agent's listing, which READY replicas lost their object);
each releases its own orphans once due.  A node agent takes its listing and sends it with no report
between them: a replica READY at the controller then had its object when the listing was taken.

The agent keeps no state of its own: everything it needs to resume is in the
controller.  Restarted, it takes a new epoch, and the controller hands it
the ops whose intents an older epoch committed but never reported: it runs
them again with the same op_id (providers are idempotent by it).  A report
refused as ``stale_epoch`` means another agent took over: this one stops.

A failover of the controller changes nothing here: the agent's epoch and its intents are facts
in the log the new leader replays, and its client (several ``--controller`` URLs) follows the
leader, long-polls included.  Every call is idempotent (op ids, epochs), so the client may send
again one whose answer was lost.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from xce.agentnames import node_host
from xce.client import ApiError, Client, ClientError
from xce.providers.contract import ProviderReply, ProviderRequest
from xce.providers.runner import run_provider, run_simfs_in_process
from xce.wire import AgentOp, Dispatch, OpReport

log = logging.getLogger("xce.agent")


@dataclass(frozen=True)
class Provider:
    """How to run one provider: its command, timeout and private config (credentials stay here)."""

    name: str
    command: list[str]
    timeout: float = 60.0
    config: dict[str, Any] = field(default_factory=dict)
    in_process: bool = False  # simfs run inside the agent (the worker's built-in node-local directories)

    def run(self, cluster_id: str, requests: list[ProviderRequest]) -> list[ProviderReply]:
        if self.in_process:
            return run_simfs_in_process(self.config, cluster_id, requests, self.timeout)
        return run_provider(self.command, self.config, cluster_id, requests, self.timeout)


class Fenced(Exception):
    """Another agent holds a newer epoch: this one must stop acting."""


class _Refused(Exception):
    """The agent itself cannot run an op (no such provider): every op of the batch fails with this."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.code, self.message, self.retryable = code, message, retryable


def provider_op(item: AgentOp) -> str:
    """The contract's operation for a claim op: a node-scope claim is created by ``node_prepare``."""
    return "node_prepare" if item["op"] == "create" and item.get("scope") == "node" else item["op"]


def request_for(item: AgentOp) -> ProviderRequest:
    return ProviderRequest(op_id=item["op_id"], op=provider_op(item), claim_id=item.get("claim_id"),
                           claim_name=item.get("claim_name", ""), class_name=item.get("class_name", ""),
                           size_bytes=item.get("size_bytes") or 0, access_mode=item.get("access_mode", ""),
                           params=dict(item.get("params") or {}), tags=dict(item.get("tags") or {}),
                           handle=item.get("handle"), host=item.get("host"),
                           source_handle=item.get("source_handle") if item["op"] == "create" else None)


def result_for(item: AgentOp, reply: ProviderReply) -> OpReport:
    """The op's result as the agent reports it: what the provider made, or why it did not."""
    out = OpReport(op_id=item["op_id"], claim_id=item["claim_id"], ok=reply.ok, message=reply.message)
    if item.get("snapshot_id") is not None:  # a snapshot's op: the controller files it under the snapshot
        out["snapshot_id"] = item["snapshot_id"]
    if reply.ok:
        out["handle"], out["size_bytes"] = reply.handle, reply.size_bytes
        out["reachable_hosts"], out["host_labels"] = reply.reachable_hosts, dict(reply.host_labels or {})
        out["path"] = reply.path
        if reply.used_bytes is not None:  # (a claim's: a reading; a snapshot's: what its pool reserves)
            out["used_bytes"] = reply.used_bytes
    else:
        out["code"], out["retryable"], out["stderr_tail"] = reply.error_code or "ERROR", reply.retryable, reply.stderr_tail
    return out


LocalOp = Callable[[AgentOp], ProviderReply]
OnDispatch = Callable[[list[Dispatch]], None]

PROGRESS_INTERVAL = 1.0  # seconds between two progress calls of one agent (rclone's stats come as often)


class ProgressSender:
    """Readings of transfers in flight, sent to the controller by a thread of their own.

    Why a thread: the transfer's reader (``xce.transfers.run``, which drains rclone's log) must never
    wait on the controller, which may be slow or failing over.  Why one slot per op: a reading not
    sent yet is replaced by a newer one, so however fast readings come, the controller gets at most
    one call per ``interval`` for all of an agent's transfers together, each op's newest reading in
    it.  Readings are not facts (``controller/observed.py``): one lost is followed by the next."""

    def __init__(self, send: Callable[[list[dict[str, Any]]], None], stop: threading.Event,
                 interval: float = PROGRESS_INTERVAL) -> None:
        self._send, self._stop, self.interval = send, stop, interval
        self._pending: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def put(self, item: AgentOp, copied: int, total: int | None, rate: float | None) -> None:
        reading = {"op_id": item["op_id"], "claim_id": item["claim_id"], "bytes": max(0, int(copied)),
                   "total_bytes": total if total is None or total >= 0 else None,
                   "rate": rate if rate is None or rate >= 0 else None}
        with self._lock:
            self._pending[item["op_id"]] = reading
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="progress", daemon=True)
                self._thread.start()
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            with self._lock:
                readings, self._pending = list(self._pending.values()), {}
            if readings:
                self._send(readings)
                self._stop.wait(self.interval)  # the rate limit: readings meanwhile wait in their slots


class ClaimAgent:
    """``local_ops`` are ops the agent does itself rather than through a provider (the node
    agent's stage-in and stage-out copies).  ``on_dispatch`` gets the runs a node agent's report
    made startable (the worker starts them, as if its own poll had said so)."""

    def __init__(self, client: Client, agent: str, providers: dict[str, Provider], *, batch: int = 64,
                 concurrency: int = 4, poll_wait: float = 20.0, inventory_classes: bool = True,
                 local_ops: dict[str, LocalOp] | None = None, on_dispatch: OnDispatch | None = None) -> None:
        self.client = client
        self.agent = agent
        self.host = node_host(agent)  # a node agent's host (None: the provisioner)
        self.providers = providers
        self.local_ops = local_ops or {}
        self.on_dispatch = on_dispatch
        # results waiting for the reporter, and the op ids this agent holds: taken, not yet reported
        self._results: queue.Queue[list[OpReport]] = queue.Queue()
        self._held: set[str] = set()
        self._held_lock = threading.Lock()
        # one report or one recovery of held ops at a time: a recovery never sees an op as open that a
        # report in flight is closing (it would run it again)
        self._report_lock = threading.Lock()
        self._recover = threading.Event()  # an answer that took ops was lost: ask which we hold
        self.batch = batch
        self.poll_wait = poll_wait
        self.inventory_classes = inventory_classes
        self.holder = f"{os.uname().nodename}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.epoch = 0
        self.cluster_id = ""
        self.scan_interval = 30.0
        self._pool = concurrent.futures.ThreadPoolExecutor(concurrency, thread_name_prefix="provider")
        self._stop = threading.Event()
        self._fenced = threading.Event()
        # orphan releases (provider, then report) and inventories (list, then report) take turns: an
        # inventory between a release and its report would record the object "gone", not "released"
        self._orphan_lock = threading.Lock()
        self._inflight = threading.Semaphore(concurrency * 2)  # bounded: polls wait when providers are busy
        # ops with intents waiting for a provider process, per provider, and the processes running
        self.concurrency = concurrency
        self._queued: dict[str | None, list[AgentOp]] = {}
        self._running: dict[str | None, int] = {}
        self._slots = threading.Condition()
        self.progress = ProgressSender(self._send_progress, self._stop)

    @property
    def base(self) -> str:
        return f"/v1/agents/{self.agent}"

    # ------------------------------------------------------------ controller calls

    def _call(self, method: str, path: str, body: Any = None, params: Any = None,
              timeout: float | None = None, idempotent: bool | None = None) -> Any:
        try:
            return self.client.request(method, self.base + path, body=body, params=params, timeout=timeout,
                                       idempotent=idempotent)
        except ApiError as e:
            if e.code == "stale_epoch":
                self._fenced.set()
                raise Fenced(e.message) from None
            raise

    def take_lease(self) -> None:
        reply = self._call("POST", "/lease", {"holder": self.holder})
        self.epoch, self.cluster_id = reply["epoch"], reply["cluster_id"]
        self.scan_interval = float(reply.get("orphan_scan_interval", 30.0))
        log.info("%s: lease taken, epoch %d", self.agent, self.epoch)

    def _first_capabilities(self) -> None:
        """Report the classes' capabilities as soon as the lease is taken, retrying with backoff until
        the controller has them: in a thread of its own, so that a slow or hung provider never delays
        claim work (until then the controller refuses resizes, snapshots and clones for its classes).
        Later scans report them again: a changed answer is a new fact."""
        delay = 0.5
        while not self._stop.is_set() and not self._fenced.is_set():
            try:
                self.report_capabilities(self.client.get("/v1/claimclasses"))
                return
            except Fenced:
                return
            except ClientError as e:
                log.warning("capabilities not reported yet, retrying in %.1fs: %s", delay, e.message)
            except Exception:
                log.exception("capabilities could not be asked; retrying in %.1fs", delay)
            self._stop.wait(delay)
            delay = min(delay * 2, 30.0)

    def report_progress(self, item: AgentOp, copied: int, total: int | None, rate: float | None) -> None:
        """How far a transfer of ``item``'s op has copied: a reading for the leader's memory, handed to the
        progress sender (its own thread; the newest reading per op, at most one call a second)."""
        self.progress.put(item, copied, total, rate)

    def _send_progress(self, readings: list[dict[str, Any]]) -> None:
        """Best effort: a lost reading is followed by the next one, a second later."""
        try:
            self._call("POST", "/progress", {"epoch": self.epoch, "items": readings}, timeout=10.0)
        except (ClientError, Fenced) as e:
            log.debug("progress of %s not reported: %s", ",".join(r["op_id"] for r in readings), e)

    def _report(self, results: list[OpReport], orphans_released: list[str] | None = None,
                take: int = 0) -> dict[str, Any]:
        """Until the controller has it (or we are fenced): a result is never dropped.  ``take``: the
        first attempt also takes up to that many ops now due; it is not sent again as it was (its
        answer may be lost with ops taken: the agent then asks which it holds)."""
        delay = 0.2
        while True:
            body: dict[str, Any] = {"epoch": self.epoch, "results": results,
                                    "orphans_released": orphans_released or []}
            if take:
                body["take"] = take
            try:
                reply = self._call("POST", "/reports", body, idempotent=False if take else None)
                for op_id, why in reply.get("refused", {}).items():
                    log.warning("report for %s refused: %s", op_id, why)
                return reply
            except ClientError as e:
                if take and not isinstance(e, ApiError):  # no answer: some ops may be ours now
                    self._recover.set()
                take = 0  # sent again as a plain report: results are idempotent by op id
                if self._stop.is_set():
                    return {}  # the next life re-drives these ops with the same op ids
                log.warning("report failed, retrying in %.1fs: %s", delay, e.message)
                self._stop.wait(delay)
                delay = min(delay * 2, 5.0)

    def _reporter(self) -> None:
        """Send what has finished, in one call per round (under load many ops' results share it); the
        call takes the ops they opened, and a node agent's answer names the runs its host may start."""
        while True:
            try:
                batch = list(self._results.get(timeout=0.5))
            except queue.Empty:
                if self._stop.is_set() or self._fenced.is_set():
                    return  # (a fenced agent still sends what its pool finishes: it is refused, and says so)
                continue
            while True:
                try:
                    batch += self._results.get_nowait()
                except queue.Empty:
                    break
            try:
                with self._report_lock:
                    reply = self._report(batch, take=0 if self._stop.is_set() else self.batch * 4)
                    with self._held_lock:
                        self._held.difference_update(r["op_id"] for r in batch)
                work = reply.get("work") or {}
                if work.get("dispatch") and self.on_dispatch is not None:
                    self.on_dispatch(work["dispatch"])  # first: a run waits for nothing else
                if work.get("ops"):
                    self._dispatch(work["ops"], [], wait=False)
                if self._recover.is_set():
                    self._recover_held()
            except Fenced:
                log.warning("%s: fenced by a newer epoch; stopping", self.agent)
                return
            except ClientError as e:
                log.warning("%s: after a report: %s", self.agent, e.message)
            except Exception:
                log.exception("%s: after a report", self.agent)

    def _recover_held(self) -> None:
        """An answer that took ops was lost: run the open ops this epoch holds that we are not running."""
        with self._report_lock:
            if not self._recover.is_set():
                return
            work = self._call("GET", "/work", params={"epoch": self.epoch, "held": "true", "limit": 10_000})
            self._recover.clear()
        with self._held_lock:
            lost = [o for o in work["ops"] if o["op_id"] not in self._held]
        if lost:
            log.warning("%s: running %d op(s) whose taking answer was lost: %s", self.agent, len(lost),
                        ", ".join(o["op_id"] for o in lost[:5]))
            self._dispatch(lost, [], wait=False)

    # ------------------------------------------------------------ running ops

    def _queue(self, name: str | None, items: list[AgentOp], wait: bool) -> None:
        """Ops for provider ``name``, to run as soon as it has a free slot.  ``wait``: the poll loop
        waits here while a full round of batches is queued already (it takes no more ops while the
        providers are busy); the reporter never waits (results waiting behind it would hold the room)."""
        with self._slots:
            self._queued.setdefault(name, []).extend(items)
        self._start_batches(name)
        with self._slots:
            while (wait and sum(map(len, self._queued.values())) >= self.batch * self.concurrency
                   and not self._stop.is_set() and not self._fenced.is_set()):
                self._slots.wait(1.0)

    def _start_batches(self, name: str | None) -> None:
        """A provider process for the queued ops while the provider has a free slot (``concurrency``).

        Ops that come while every slot is busy wait, and go together in the next batch: under load a
        provider runs few processes of many ops rather than many of few (for btrfs, whose changes take
        the root's lock in turn, each batch is one hold of it and one commit for its used bytes)."""
        with self._slots:
            while self._queued.get(name) and self._running.get(name, 0) < self.concurrency:
                items, self._queued[name] = self._queued[name][:self.batch], self._queued[name][self.batch:]
                try:
                    self._pool.submit(self._run_queued, name, items)
                except RuntimeError:  # stopping: the next life runs these ops again (their intents are facts)
                    return
                self._running[name] = self._running.get(name, 0) + 1

    def _run_queued(self, name: str | None, items: list[AgentOp]) -> None:
        try:
            self._run_batch(self.providers.get(name or ""), items)
        finally:
            with self._slots:
                self._running[name] -= 1
                self._slots.notify_all()
            self._start_batches(name)

    def _run_batch(self, provider: Provider | None, items: list[AgentOp]) -> None:
        try:
            if provider is None:
                raise _Refused("NO_PROVIDER", f"this agent has no provider {items[0].get('provider')!r} "
                                              "configured", retryable=False)
            started = time.monotonic()
            missing = self._missing(provider, items)
            run = [i for i in items if i["op_id"] not in missing]
            ran = iter(provider.run(self.cluster_id, [request_for(i) for i in run]) if run else [])
            replies = [missing[i["op_id"]] if i["op_id"] in missing else next(ran) for i in items]
            log.debug("%s: %d ops (%s) in %.3fs", provider.name, len(items),
                      ",".join(sorted({i["op"] for i in items})), time.monotonic() - started)
        except _Refused as e:
            replies = [ProviderReply(op_id=i["op_id"], ok=False, error_code=e.code, retryable=e.retryable,
                                     message=e.message) for i in items]
        except Exception as e:  # an op with an intent must always get a result, or it would hang
            log.exception("batch failed")
            replies = [ProviderReply(op_id=i["op_id"], ok=False, error_code="AGENT_ERROR", retryable=True,
                                     message=f"{self.agent}: {type(e).__name__}: {e}") for i in items]
        self._results.put([result_for(i, r) for i, r in zip(items, replies)])

    def _run_local(self, handler: LocalOp, item: AgentOp, permit: bool = True) -> None:
        try:
            try:
                reply = handler(item)
            except Exception as e:  # an op with an intent must always get a result
                log.exception("%s failed", item["op"])
                reply = ProviderReply(op_id=item["op_id"], ok=False, error_code="AGENT_ERROR", retryable=True,
                                      message=f"{self.agent}: {type(e).__name__}: {e}")
            self._results.put([result_for(item, reply)])
        finally:
            if permit:
                self._inflight.release()

    def _list(self, provider: Provider, class_name: str, host: str | None) -> ProviderReply:
        req = ProviderRequest(op_id=f"list.{uuid.uuid4().hex[:12]}", op="list", class_name=class_name, host=host)
        return provider.run(self.cluster_id, [req])[0]

    def _missing(self, provider: Provider, items: list[AgentOp]) -> dict[str, ProviderReply]:
        """The replies of ops that must find their object (``must_exist``: a lost host's replica that only
        jobs filled) and do not: it is gone, and so is its data (``DATA_LOST``, for good).  The others run."""
        out: dict[str, ProviderReply] = {}
        listings: dict[tuple[str, str | None], ProviderReply] = {}
        for i in items:
            if not i.get("must_exist"):
                continue
            key = (i.get("class_name", ""), i.get("host"))
            if key not in listings:
                listings[key] = self._list(provider, *key)
            listing = listings[key]
            if not listing.ok:
                out[i["op_id"]] = ProviderReply(op_id=i["op_id"], ok=False, error_code=listing.error_code or "ERROR",
                                                retryable=True, message=f"cannot check {i['must_exist']}: "
                                                                        f"{listing.message}")
            elif i["must_exist"] not in {o.get("handle") for o in listing.objects or []}:
                out[i["op_id"]] = ProviderReply(op_id=i["op_id"], ok=False, error_code="DATA_LOST", retryable=False,
                                                message=f"object {i['must_exist']} is gone from {i.get('host')}: "
                                                        "its data is lost")
        return out

    def _release_orphans(self, provider: Provider | None, items: list[dict[str, Any]]) -> None:
        try:
            if provider is None:
                return
            requests = [ProviderRequest(op_id=i["op_id"], op="release", class_name=i["class_name"],
                                        handle=i["handle"], host=i.get("host"), tags=dict(i.get("tags") or {}))
                        for i in items]
            with self._orphan_lock:  # an inventory taken now would see them gone before we say why
                replies = provider.run(self.cluster_id, requests)
                done = [i["handle"] for i, r in zip(items, replies) if r.ok]
                for i, r in zip(items, replies):
                    if not r.ok:
                        log.warning("orphan %s not released: %s %s", i["handle"], r.error_code, r.message)
                if done:
                    self._report([], done)
        except Fenced:
            pass
        except Exception:
            log.exception("orphan release failed")
        finally:
            self._inflight.release()

    def _dispatch(self, ops: list[AgentOp], orphans: list[dict[str, Any]], wait: bool = True) -> None:
        """Run ``ops``, whose intents this epoch holds (taken with them), unless we run them already.
        ``wait``: for room among the ops in flight (the poll: it takes no more while providers are busy);
        the reporter never waits (results waiting behind it would hold that room), and what a report
        takes is bounded by its ``take``."""
        with self._held_lock:
            ops = [o for o in ops if o["op_id"] not in self._held]
            self._held.update(o["op_id"] for o in ops)
        by_provider: dict[str | None, list[AgentOp]] = {}
        for o in ops:
            if o["op"] in self.local_ops:
                self._pool.submit(self._run_local, self.local_ops[o["op"]], o, self._inflight.acquire(wait))
            else:
                by_provider.setdefault(o.get("provider"), []).append(o)
        for name, items in by_provider.items():
            self._queue(name, items, wait)
        orphans_by: dict[str, list[dict[str, Any]]] = {}
        for orphan in orphans:
            orphans_by.setdefault(orphan["provider"], []).append(orphan)
        for provider_name, releases in orphans_by.items():
            self._inflight.acquire()
            self._pool.submit(self._release_orphans, self.providers.get(provider_name), releases)

    # ------------------------------------------------------------ capabilities

    def _ask_capabilities(self, provider: Provider, class_name: str) -> dict[str, Any] | None | bool:
        """The provider's ``capabilities`` (None: it answered UNSUPPORTED, so it can do none of them;
        False: no answer now, ask again at the next scan)."""
        req = ProviderRequest(op_id=f"capabilities.{uuid.uuid4().hex[:12]}", op="capabilities",
                              class_name=class_name)
        try:
            reply = provider.run(self.cluster_id, [req])[0]
        except Exception as e:
            log.warning("capabilities of %s failed: %s", provider.name, e)
            return False
        if reply.ok:
            return reply.capabilities
        if reply.error_code == "UNSUPPORTED":
            return None
        log.warning("capabilities of %s failed: %s %s", provider.name, reply.error_code, reply.message)
        return False

    def report_capabilities(self, classes: list[dict[str, Any]]) -> None:
        """Ask each shared class's provider what it can do and tell the controller (which records a
        fact only when an answer changes, so this runs with every scan)."""
        answers: dict[str, dict[str, Any] | None | bool] = {}
        out = []
        for cls in classes:
            if cls["scope"] != "shared" or cls["provider"] not in self.providers:
                continue
            name = cls["provider"]
            if name not in answers:
                answers[name] = self._ask_capabilities(self.providers[name], cls["name"])
            if answers[name] is not False:
                out.append({"class_name": cls["name"], "provider": name, "capabilities": answers[name]})
        if out:
            reply = self._call("POST", "/capabilities", {"epoch": self.epoch, "classes": out})
            for class_name, why in reply.get("refused", {}).items():
                log.warning("capabilities of class %s refused: %s", class_name, why)

    # ------------------------------------------------------------ inventory (orphan scans)

    def _capacity(self, provider: Provider, class_name: str) -> tuple[int | None, int | None]:
        """The provider's ``health`` reading: (capacity_bytes, available_bytes), None where it says none."""
        req = ProviderRequest(op_id=f"health.{uuid.uuid4().hex[:12]}", op="health", class_name=class_name)
        try:
            reply = provider.run(self.cluster_id, [req])[0]
        except Exception as e:
            log.warning("health of %s failed: %s", provider.name, e)
            return None, None
        if not reply.ok:
            return None, None
        return reply.capacity_bytes, reply.available_bytes

    def scan(self) -> None:
        """List every class's provider objects and hand them to the controller to find orphans."""
        classes = self.client.get("/v1/claimclasses")
        if self.host is not None:
            self.scan_node(classes)
            return
        self.report_capabilities(classes)
        capacity: dict[str, tuple[int | None, int | None]] = {}
        for cls in classes:
            if cls["scope"] != "shared" or cls["provider"] not in self.providers:
                continue
            provider = self.providers[cls["provider"]]
            if provider.name not in capacity:
                capacity[provider.name] = self._capacity(provider, cls["name"])
            req = ProviderRequest(op_id=f"list.{uuid.uuid4().hex[:12]}", op="list", class_name=cls["name"])
            with self._orphan_lock:  # not while an orphan release is between its provider and its report
                reply = provider.run(self.cluster_id, [req])[0]
                if not reply.ok:
                    log.warning("list on %s failed: %s %s", cls["name"], reply.error_code, reply.message)
                    continue
                objects = [{"handle": o.get("handle"), "tags": o.get("tags") or {},
                            "size_bytes": o.get("size_bytes"), "created": o.get("created"),
                            "used_bytes": o.get("used_bytes"), "kind": o.get("kind") or "volume"}
                           for o in reply.objects or []]
                total, available = capacity[provider.name]
                out = self._call("POST", "/inventory", {"epoch": self.epoch, "class_name": cls["name"],
                                                        "provider": provider.name, "objects": objects,
                                                        "capacity_bytes": total, "available_bytes": available})
            if out.get("new_orphans"):
                log.warning("%d new orphan(s) in class %s", out["new_orphans"], cls["name"])

    def scan_node(self, classes: list[dict[str, Any]]) -> None:
        """A node agent's scan: its host's node objects, listed once per provider it has and sent for each
        node-scope class of that provider.  No report goes out between a listing and its inventories
        (``_report_lock``): a replica the controller has READY then had its object when it was listed."""
        by_provider: dict[str, list[str]] = {}
        for cls in classes:
            if cls["scope"] == "node" and cls["provider"] in self.providers:
                by_provider.setdefault(cls["provider"], []).append(cls["name"])
        for name, class_names in by_provider.items():
            provider = self.providers[name]
            with self._orphan_lock, self._report_lock:
                reply = self._list(provider, class_names[0], self.host)
                if not reply.ok:
                    log.warning("list on %s failed: %s %s", name, reply.error_code, reply.message)
                    continue
                objects = [{"handle": o.get("handle"), "tags": o.get("tags") or {}, "size_bytes": o.get("size_bytes"),
                            "created": o.get("created"), "used_bytes": o.get("used_bytes"),
                            "kind": o.get("kind") or "volume"} for o in reply.objects or []]
                new = sum(self._call("POST", "/inventory", {"epoch": self.epoch, "class_name": class_name,
                                                            "provider": name, "objects": objects}
                                     ).get("new_orphans", 0) for class_name in class_names)
            if new:
                log.warning("%d new orphan(s) of provider %s on %s", new, name, self.host)

    def _scan_loop(self) -> None:
        while not self._stop.wait(self.scan_interval):
            try:
                self.scan()
            except Fenced:
                return
            except ClientError as e:
                log.warning("orphan scan failed: %s", e.message)
            except Exception:
                log.exception("orphan scan failed")

    # ------------------------------------------------------------ main loop

    def run(self) -> int:
        while not self._stop.is_set():
            try:
                self.take_lease()
                break
            except ClientError as e:
                log.warning("cannot take the %s lease yet: %s", self.agent, e.message)
                self._stop.wait(1.0)
        if self.inventory_classes:
            threading.Thread(target=self._scan_loop, daemon=True, name="orphan-scan").start()
        if self.inventory_classes and self.host is None:
            # at once, not a scan interval later: resize, snapshot and clone requests wait on it
            threading.Thread(target=self._first_capabilities, daemon=True, name="capabilities").start()
        reporter = threading.Thread(target=self._reporter, daemon=True, name="reporter")
        reporter.start()
        while not self._stop.is_set() and not self._fenced.is_set():
            try:
                if self._recover.is_set():
                    self._recover_held()
                # the ops due, taken with their intents (never sent twice blindly: see _recover_held)
                work = self._call("POST", "/work", {"epoch": self.epoch},
                                  params={"wait": self.poll_wait, "limit": self.batch * 4},
                                  timeout=self.poll_wait + self.client.timeout, idempotent=False)
                self._dispatch(work["ops"], work["orphans"])
            except Fenced as e:
                log.warning("%s: %s; another agent took over, stopping", self.agent, e)
                break
            except ClientError as e:
                if not isinstance(e, ApiError):  # no answer: it may have taken ops
                    self._recover.set()
                log.warning("work poll failed: %s", e.message)
                self._stop.wait(1.0)
        self._pool.shutdown(wait=True, cancel_futures=False)
        reporter.join()  # what the pool finished is reported before we go (or left to the next life)
        return 3 if self._fenced.is_set() else 0

    def stop(self) -> None:
        self._stop.set()
