"""The leadership part of the controller: the lease, who else is on the store, recovery, following.

Every controller on the store announces itself (its advertised URL and log position,
``Store.announce``) and learns who leads and at which URL (``_survey``), so a standby's 503
(``NotLeader``) names the leader's URL without a store call per request.  A standby *follows* the
log (``_follow``): it folds what the leader commits into a model of its own, so when it takes the
lease it replays only the tail it had not read and serves within a bounded time.  A leader serves
only while its lease is live by its own clock (``Term.serving``).

Taking the lease (``_become_leader``): rebuild the model (``_recover``), complete the audit trail
from what the replay derived (``Store.backfill_audit`` keeps only the positions the table lacks:
none, unless the state was written before the trail moved to the store; a format-1 snapshot's
trail is moved the same way, and a fresh snapshot then replaces it), renew, then commit the
bootstrap (the config's facts, the admin token) before the term is ready.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import time
from dataclasses import dataclass

from xce.config import Config
from xce.controller.bootstrap import bootstrap_facts
from xce.controller.commit import Committer, Outcome
from xce.controller.listeners import Listeners
from xce.controller.model_snapshot import Recovered, catch_up, load_model
from xce.controller.term import Term
from xce.model import Model
from xce.model.identity import hash_token
from xce.store import LeaseLost, Store, StoreError

log = logging.getLogger("xce.controller")


@dataclass(frozen=True)
class Peer:
    """A controller on the same store as this one saw it last: ``role`` leader, standby, or
    unreachable (it stopped announcing itself)."""

    url: str
    role: str
    position: int
    age: float
    holder: str


class Leadership:
    def __init__(self, store: Store, config: Config, state_dir: str, term: Term, commit: Committer,
                 listeners: Listeners, writer: concurrent.futures.ThreadPoolExecutor) -> None:
        self.store = store
        self.config = config
        self.state_dir = state_dir
        self.term = term
        self.commit = commit
        self.listeners = listeners
        self.writer = writer  # recovery and following read on the writer thread: never beside an append
        self._lease_io = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="xce-lease")
        self.peers: list[Peer] = []  # who else is on the store, as the last survey saw them
        # a standby's model, folded from the log as the leader commits (None: not loaded yet)
        self._follower: Model | None = None

    async def run(self) -> None:
        """The lease loop: take the lease, or renew it; then survey the store (and follow the log)."""
        loop = asyncio.get_running_loop()
        term = self.term
        ttl = self.config.controller.lease_ttl
        while True:
            try:
                if not term.is_leader:
                    lease = await loop.run_in_executor(self._lease_io, self.store.acquire_lease, term.holder, ttl)
                    if lease is not None:
                        await self._become_leader(lease.epoch)
                else:
                    asked = time.monotonic()  # the lease runs from before we asked, to be safe
                    await loop.run_in_executor(self._lease_io, self.store.renew_lease, term.holder, term.epoch, ttl)
                    term.expires = asked + ttl
            except LeaseLost as e:
                term.step_down(f"lease lost: {e}")
            except StoreError as e:
                # OBSERVATION: the store did not answer.  The lease is still ours until it
                # would have expired; past that another controller may lead.
                if term.is_leader and time.monotonic() >= term.expires:
                    term.step_down(f"lease could not be renewed before it expired: {e}")
                else:
                    log.warning("lease call failed, retrying: %s", e)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease loop error")
            try:  # who leads, who stands by: for 503s, ping and xce controllers (never holds up the lease)
                await loop.run_in_executor(self._lease_io, self._survey)
                if not term.is_leader:
                    await loop.run_in_executor(self.writer, self._follow)
            except asyncio.CancelledError:
                raise
            except StoreError as e:
                log.debug("survey failed: %s", e)
            except Exception:
                log.exception("survey error")
            await asyncio.sleep(ttl / 3 if term.is_leader else min(1.0, ttl / 3))

    def _survey(self) -> None:
        """Announce ourselves, then read the lease and the members (on the lease thread)."""
        term = self.term
        position = self.commit.committed if term.is_leader else (self._follower.position if self._follower else 0)
        if term.url:
            self.store.announce(term.holder, term.url, position)
        lease = self.store.current_lease()
        members = self.store.members()
        by_holder = {m.holder: m for m in members}
        holder = lease.holder if lease is not None and lease.expires_at > 0 else None
        term.leader_holder = holder
        term.leader_epoch_seen = lease.epoch if lease is not None else term.leader_epoch_seen
        leader = by_holder.get(holder) if holder else None
        term.leader_url = leader.url if leader is not None else None
        quiet = max(3 * self.config.controller.lease_ttl, 5.0)  # announcing stopped: dead, paused or cut off
        self.peers = [Peer(url=m.url, role="leader" if m.holder == holder else "standby" if m.age < quiet
                           else "unreachable", position=m.position, age=m.age, holder=m.holder) for m in members]

    def _follow(self) -> None:
        """A standby folds what the leader committed since it last looked (on the writer thread)."""
        if self.term.is_leader:
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
        term = self.term
        recovered = await loop.run_in_executor(self.writer, self._recover, epoch)
        model = recovered.model
        self.commit.adopt(model)
        term.epoch = epoch
        if recovered.old_snapshot:  # its trail is in the table now: a snapshot without it replaces it
            await loop.run_in_executor(self.writer, self.commit.snapshot_now)
        # the replay may have taken a while: renew before serving, so the lease runs from now
        ttl = self.config.controller.lease_ttl
        asked = time.monotonic()
        await loop.run_in_executor(self._lease_io, self.store.renew_lease, term.holder, epoch, ttl)
        term.expires = asked + ttl
        term.leader_holder, term.leader_url, term.leader_epoch_seen = term.holder, term.url or None, epoch
        term.is_leader = True
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

        secret = await self.commit.execute(decide)
        if secret:
            fd = os.open(admin_token_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secret + "\n")
            os.replace(admin_token_path + ".tmp", admin_token_path)
        self.listeners.led()
        term.ready.set()

    async def resign(self) -> None:
        """A clean shutdown's end: snapshot and release the lease, so a standby can take over at once;
        then leave the members, so standbys and clients stop naming this controller at once."""
        loop = asyncio.get_running_loop()
        term = self.term
        if term.is_leader:
            try:
                await loop.run_in_executor(self.writer, self.commit.snapshot_now)
                await loop.run_in_executor(self.writer, self.store.release_lease, term.holder, term.epoch)
            except StoreError as e:
                log.warning("clean shutdown could not snapshot/release: %s", e)
        try:
            await loop.run_in_executor(self._lease_io, self.store.leave, term.holder)
        except StoreError:
            pass
        term.is_leader = False
        self._lease_io.shutdown(wait=True)


def _read_secret(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read().strip() or None
    except FileNotFoundError:
        return None
