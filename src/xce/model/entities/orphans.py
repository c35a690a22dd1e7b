"""A provider object no claim owns, as first seen.  Plain data; found and folded by ``xce.model.orphans``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Orphan:
    handle: str
    class_name: str
    provider: str
    claim_id: int | None
    first_seen: float
    tags: dict[str, str] = field(default_factory=dict)
    size_bytes: int | None = None
    kind: str = "volume"  # or "snapshot"
    host: str | None = None  # a node object's host: its worker lists it and releases it (None: the provisioner's)

    @property
    def retain(self) -> bool:
        return self.tags.get("xce.reclaim") == "retain"
