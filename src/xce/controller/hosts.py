"""Worker liveness, fencing, and the dispatch channel.

Heartbeats live in memory only.  A host that misses them for ``host_timeout`` seconds is recorded
UNAVAIL: nothing new is placed there, and its runs are *not* yet given up.  A run's shepherd ends the
run by itself once its worker has had no answer from the controller for ``fence_time`` (its lease,
``docs/decisions/runs-and-fencing.md``); so the monitor gives the host's runs up (requeues them
with ``-r``, else EXIT "host lost", and fences its attachments so an RWO claim may be attached
elsewhere) only ``fence_time + fence_margin`` after it declared the host lost, that is at least
``host_timeout + fence_time + fence_margin`` after it last heard from it: by then every shepherd there
has killed its run.  A host that registers again before that keeps the runs it still has.

Every interval is measured on this process's monotonic clock; nothing compares clocks across hosts.
A new leader knows nothing of its predecessor's clock: it gives every host a full ``host_timeout``
before judging it, and every host already UNAVAIL the whole fence and margin again from its own start.

Workers long-poll for work; ``HostWork.wait`` wakes them when a committed fact concerns a job on their
host.
"""

from __future__ import annotations

import asyncio
import logging
import time

from xce.controller.commit import Outcome
from xce.controller.core import Controller
from xce.controller.launchers import Launchers
from xce.controller.longpoll import HOST_WORK_WAKE, TASK_WAKE, Waker
from xce.errors import XceError
from xce.model import Model
from xce.model.facts import Fact, HostStateChanged
from xce.model.hosts import HostState
from xce.model.job_claims import host_lost

log = logging.getLogger("xce.hosts")


class HostMonitor:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        cfg = ctl.config.controller
        self.timeout = cfg.host_timeout
        self.fence = cfg.fence_time  # what a worker's lease lasts past its last answered heartbeat
        self.give_up_after = ctl.config.give_up_after  # from declaring a host lost to giving its runs up
        self.last_seen: dict[str, float] = {}
        self.lost_since: dict[str, float] = {}  # UNAVAIL hosts: when (monotonic) their fence began
        self.work = Waker(ctl, HOST_WORK_WAKE)  # the workers' long-polls for dispatches and orders
        self.tasks = Waker(ctl, TASK_WAKE)  # blaunch's waits for its run's start and its tasks' ends
        self.launchers = Launchers(ctl)  # a task lives no longer than its blaunch asks for it
        ctl.listeners.leader.append(self._grace)
        ctl.listeners.background.append(self.run)

    def _grace(self) -> None:
        now = time.monotonic()
        self.last_seen = {name: now for name in self.ctl.model.hosts}
        # OBSERVATION: a host UNAVAIL in the log may have answered our predecessor moments before it
        # fell: its runs get the whole fence again, on this clock
        self.lost_since = {name: now for name, h in self.ctl.model.hosts.items() if h.state is HostState.UNAVAIL}

    def seen(self, host: str) -> None:
        self.last_seen[host] = time.monotonic()

    def registered(self, host: str) -> None:
        """The host registered again: it is no longer lost, and its runs are its own again."""
        self.seen(host)
        self.lost_since.pop(host, None)

    def give_up_in(self, host: str) -> float | None:
        """Seconds until a lost host's runs are given up (None: not lost here)."""
        since = self.lost_since.get(host)
        return None if since is None else max(0.0, since + self.give_up_after - time.monotonic())

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout / 4))
            if not self.ctl.is_leader:
                continue
            now = time.monotonic()
            for name, host in list(self.ctl.model.hosts.items()):
                if host.state is HostState.OK and now - self.last_seen.get(name, now) > self.timeout:
                    await self._execute(f"record host {name} lost", lambda m, n=name: self._declare_lost(m, n))
                elif host.state is HostState.UNAVAIL and name not in self.lost_since:
                    self.lost_since[name] = now  # OBSERVATION: lost before this leader saw it go; see _grace
                elif host.state is HostState.UNAVAIL and now - self.lost_since[name] >= self.give_up_after:
                    await self._execute(f"give the runs of host {name} up", lambda m, n=name: self._give_up(m, n))

    async def _execute(self, what: str, decide) -> None:
        try:
            await self.ctl.execute(decide)
        except XceError as e:
            log.warning("could not %s: %s", what, e)

    def _declare_lost(self, model: Model, name: str) -> Outcome:
        host = model.hosts.get(name)
        if host is None or host.state is not HostState.OK:
            return Outcome()
        log.warning("host %s missed heartbeats for %.0fs: UNAVAIL; its runs are given up in %.0fs unless it "
                    "registers again (its shepherds end them after %.0fs without word)", name, self.timeout,
                    self.give_up_after, self.fence)
        self.lost_since[name] = time.monotonic()
        return Outcome([HostStateChanged(
            time=time.time(), name=name, state=HostState.UNAVAIL.value,
            reason=f"no heartbeat for {self.timeout:g}s; its runs are fenced and given up after "
                   f"{self.give_up_after:g}s more unless it returns")])

    def _give_up(self, model: Model, name: str) -> Outcome:
        """The fence has run out: every run the host had is dead by its shepherd's hand (or never
        started), so its jobs are decided and its attachments fenced.  Idempotent: a host with nothing
        left gives no facts."""
        host = model.hosts.get(name)
        if host is None or host.state is not HostState.UNAVAIL:
            return Outcome()  # OBSERVATION: it registered again in time
        facts: list[Fact] = host_lost(model, name, time.time())
        if facts:
            log.warning("host %s: fence over, giving its runs up (%d facts)", name, len(facts))
        return Outcome(facts)
