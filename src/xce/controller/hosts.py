"""Worker liveness and the dispatch channel.

Heartbeats live in memory only; when a host misses them for
``host_timeout`` seconds the monitor records it UNAVAIL and decides its jobs
(requeue with ``-r``, else EXIT "host lost").  A new leader gives every host a
full timeout of grace before judging it.

Workers long-poll for work; ``HostWork.wait`` wakes them when a committed
fact concerns a job on their host.
"""

from __future__ import annotations

import asyncio
import logging
import time

from xce.controller.core import Controller, Outcome
from xce.controller.longpoll import HOST_WORK_WAKE, Waker
from xce.errors import XceError
from xce.model import Model
from xce.model import facts as F
from xce.model.facts import HostStateChanged
from xce.model.hosts import HostState
from xce.model.job_claims import host_lost

log = logging.getLogger("xce.hosts")


class HostMonitor:
    def __init__(self, ctl: Controller, timeout: float) -> None:
        self.ctl = ctl
        self.timeout = timeout
        self.last_seen: dict[str, float] = {}
        self.work = Waker(ctl, HOST_WORK_WAKE)  # the workers' long-polls for dispatches and kills
        ctl.leader_listeners.append(self._grace)
        ctl.background.append(self.run)

    def _grace(self) -> None:
        now = time.monotonic()
        self.last_seen = {name: now for name in self.ctl.model.hosts}

    def seen(self, host: str) -> None:
        self.last_seen[host] = time.monotonic()

    async def run(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.timeout / 4))
            if not self.ctl.is_leader:
                continue
            now = time.monotonic()
            for name, host in list(self.ctl.model.hosts.items()):
                if host.state is HostState.OK and now - self.last_seen.get(name, now) > self.timeout:
                    try:
                        await self.ctl.execute(lambda m, n=name: self._declare_lost(m, n))
                    except XceError as e:
                        log.warning("could not record host %s lost: %s", name, e)

    def _declare_lost(self, model: Model, name: str) -> Outcome:
        host = model.hosts.get(name)
        if host is None or host.state is not HostState.OK:
            return Outcome()
        now = time.time()
        log.warning("host %s missed heartbeats for %.0fs: UNAVAIL", name, self.timeout)
        facts: list[F.Fact] = [HostStateChanged(time=now, name=name, state=HostState.UNAVAIL.value,
                                                reason=f"no heartbeat for {self.timeout:g}s")]
        facts += host_lost(model, name, now)
        return Outcome(facts)
