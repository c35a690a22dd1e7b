"""Queues and projects as records.  Plain data; defined and folded by ``xce.model.catalog``."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_HALF_LIFE = 5 * 3600.0  # seconds: [controller] fairshare_half_life's default (LSF's HIST_HOURS)


@dataclass
class Queue:
    name: str
    priority: int
    description: str = ""


@dataclass
class Project:
    name: str
    description: str = ""
    # fair share (xce.model.fairshare): usage halves every usage_half_life seconds; per user,
    # [at, slot-seconds, GPU-seconds, claim byte-seconds] decayed to time ``at``
    usage_half_life: float = DEFAULT_HALF_LIFE
    usage: dict[str, list[float]] = field(default_factory=dict)
