"""What an op is: provider work with a stable id (``OpKind``, ``Op``).  Plain data.

Claims, their attachments and snapshots each hold their open op in an ``Op``; the one discipline
all of them follow (intent before action, fenced results, retries) is ``xce.model.ops``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class OpKind(enum.StrEnum):
    CREATE = "create"  # a node-scope claim's create is the provider's node_prepare
    RELEASE = "release"
    STAGE_IN = "stage_in"  # template staging claims: copied in by the node agent before the job
    STAGE_OUT = "stage_out"  # ... and out after it
    ATTACH = "attach"  # attachments: a standalone claim made reachable on a job's host
    DETACH = "detach"
    EXPAND = "expand"  # a READY claim grown to its resize's size (CSI ControllerExpandVolume)
    CREATE_SNAPSHOT = "create_snapshot"  # snapshots (``xce.model.snapshots``): their own ops
    DELETE_SNAPSHOT = "delete_snapshot"
    POPULATE = "populate"  # a claim filled from a URL or remote after its create (Kubernetes volume populators)


@dataclass
class Op:
    """The provider call a claim, an attachment or a snapshot is waiting for.  ``epoch`` is set once
    an agent committed its intent; ``agent`` is who committed it."""

    op_id: str
    kind: OpKind
    attempts: int = 0
    agent: str | None = None
    epoch: int | None = None
    next_retry: float | None = None  # None: due now

    def __post_init__(self) -> None:
        self.kind = OpKind(self.kind)
