"""Whether this controller may act now, at which epoch, and who leads when it does not.

The controller's parts share one ``Term``.  The leadership part (``leadership.py``) is the only one
that begins a term, renews it and learns who else leads; the commit part (``commit.py``) refuses
commands and reads unless the term is live and fences its appends with the term's epoch.  Either
may end it (``step_down``): leadership when the lease is lost or could not be renewed in time, the
commit part when the store refuses an append (the model may then hold facts the store does not).

Liveness is judged on this process's own monotonic clock: a leader acts only while the lease it
renewed last has not run out by that clock, so a leader paused past its lease refuses reads and
writes until it has renewed (and its appends are fenced by the store in any case).  What the
refusal says comes from the last survey of the store, never from a store call per request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from xce.errors import NotLeader

log = logging.getLogger("xce.controller")


@dataclass
class Term:
    holder: str  # this controller's name on the store (host:pid:random)
    # the URL this controller advertises (its config's [controller] advertise, else its listen
    # address): what standbys' 503s name while it leads.  Never from a request.
    url: str = ""
    is_leader: bool = False
    epoch: int = 0  # the lease's epoch while leading: the store refuses appends fenced by an older one
    expires: float = 0.0  # monotonic time the lease runs out unless renewed
    # what the lease loop last learnt from the store: who leads, at which URL and epoch
    leader_holder: str | None = None
    leader_url: str | None = None
    leader_epoch_seen: int = 0
    # set once this term's bootstrap (config facts, the admin token) is committed; cleared on step-down
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def live(self) -> bool:
        """Leader, and the lease is live by this process's clock: commands and reads may proceed."""
        return self.is_leader and time.monotonic() < self.expires

    @property
    def serving(self) -> bool:
        """Live, and the term's bootstrap is committed: the API answers only then (a request in
        between would meet users and tokens not yet there)."""
        return self.live and self.ready.is_set()

    def step_down(self, reason: str) -> None:
        if self.is_leader:
            log.warning("stepping down: %s", reason)
        self.is_leader = False
        self.ready.clear()

    def not_leader(self) -> NotLeader:
        """The refusal of a controller that may not act now, naming the leader's URL if it knows it."""
        return NotLeader(self.not_leader_message(), leader=self.leader_url if self.leader_url != self.url else None)

    def not_leader_message(self) -> str:
        if self.is_leader:
            return "this controller's leader lease has run out; it is renewing it or stepping down"
        if self.leader_url and self.leader_url != self.url:
            return f"this controller is not the leader (leader: {self.leader_url}, epoch {self.leader_epoch_seen})"
        if self.leader_holder:
            return f"this controller is not the leader (leader: {self.leader_holder}, epoch {self.leader_epoch_seen})"
        return "this controller is not the leader (no leader yet: an election is under way)"
