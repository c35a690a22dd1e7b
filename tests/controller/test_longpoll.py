"""Which committed facts wake the claim agents' long-polls.

Work is derived from the model, so a missing wake-up is not wrong, only slow: the op waits for the
agent's poll to time out (``poll_wait``, 20 s by default).  A resize used to wait so: the fact that
opens its ``expand`` op (``ClaimResizeReserved``) woke nobody."""

from __future__ import annotations

from xce.controller.longpoll import AGENT_WAKE
from xce.model.facts import (
    AttachmentAdded, AttachmentRemoved, ClaimDeleteRequested, ClaimPlaced, ClaimPurgeRequested, ClaimResizeReserved,
    SnapshotCreated, SnapshotDeleteRequested,
)

# every fact that opens an op a claim agent runs
OPENS_AN_AGENT_OP = (ClaimPlaced, ClaimResizeReserved, ClaimDeleteRequested, ClaimPurgeRequested,
                     SnapshotCreated, SnapshotDeleteRequested, AttachmentAdded, AttachmentRemoved)


def test_every_fact_that_opens_an_agent_op_wakes_the_agents():
    assert [f.__name__ for f in OPENS_AN_AGENT_OP if f not in AGENT_WAKE] == []
