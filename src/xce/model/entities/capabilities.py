"""What a claim class's provider said it can do.  Plain data; reported and folded by
``xce.model.capabilities``."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ClassCapabilities:
    class_name: str
    provider: str
    agent: str
    time: float
    flags: dict[str, bool] = field(default_factory=dict)  # FLAGS -> what the provider said
    access_modes: list[str] = field(default_factory=list)
