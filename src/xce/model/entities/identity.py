"""Who may call the API: a ``User`` with its ``Role``, and its ``Token`` records.  Plain data.

What each role reaches, how tokens are made and checked, and the folds: ``xce.model.identity``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Role(enum.StrEnum):
    ADMIN = "admin"
    USER = "user"
    DAEMON = "daemon"
    METRICS = "metrics"


@dataclass
class User:
    name: str
    role: Role
    projects: list[str] = field(default_factory=list)
    host: str | None = None
    created: float = 0.0
    disabled: bool = False

    def __post_init__(self) -> None:
        self.role = Role(self.role)

    @property
    def is_admin(self) -> bool:
        return self.role is Role.ADMIN


@dataclass
class Token:
    token_id: str
    user: str
    token_hash: str
    created: float = 0.0
    revoked: bool = False
    expires: float | None = None
    revoked_time: float | None = None

    def expired(self, now: float) -> bool:
        return self.expires is not None and now >= self.expires
