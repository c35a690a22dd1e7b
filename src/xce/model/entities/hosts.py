"""What a host is: its state enum and the ``Host`` record.  Plain data; folded by ``xce.model.hosts``."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class HostState(enum.StrEnum):
    OK = "OK"
    UNAVAIL = "UNAVAIL"


@dataclass
class Host:
    name: str
    slots: int
    attrs: dict[str, str] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    state: HostState = HostState.OK
    reason: str = ""
    boot_id: str = ""
    registered: float = 0.0
    # job id -> slots held on this host, and job id -> counters held (kept by the job folds)
    held_slots: dict[str, int] = field(default_factory=dict)
    held_counters: dict[str, dict[str, float]] = field(default_factory=dict)
    # its GPUs as its worker found them: {id, uuid, model, memory (bytes)} each, by id; and job id ->
    # the GPUs a run holds here: {ids, exclusive (no other job may use them), gmem (bytes a GPU, or None)}
    gpus: list[dict[str, Any]] = field(default_factory=list)
    held_gpus: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = HostState(self.state)

    @property
    def slots_used(self) -> int:
        return sum(self.held_slots.values())

    def counters_used(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for held in self.held_counters.values():
            for k, v in held.items():
                used[k] = used.get(k, 0.0) + v
        return used
