"""Users, roles and tokens: who may call the API and as what.

Roles:
- ``admin``  sees and changes everything;
- ``user``   sees and changes only their own jobs and their projects' objects;
- ``daemon`` a worker or provisioner identity, optionally bound to one host.

Tokens are random secrets handed out once; only their sha256 is a fact.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from xce.errors import Conflict, InvalidRequest, NotFound
from xce.model.facts import Fact, TokenIssued, TokenRevoked, UserDefined
from xce.model.names import check_name

if TYPE_CHECKING:
    from xce.model.state import Model


class Role(enum.StrEnum):
    ADMIN = "admin"
    USER = "user"
    DAEMON = "daemon"


@dataclass
class User:
    name: str
    role: Role
    projects: list[str] = field(default_factory=list)
    host: str | None = None
    created: float = 0.0

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


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token_secret() -> tuple[str, str]:
    """A fresh (token_id, secret).  The secret embeds the id so logs can name a token safely."""
    token_id = secrets.token_hex(6)
    return token_id, f"xce_{token_id}_{secrets.token_urlsafe(32)}"


# ---------------------------------------------------------------- decisions


def define_user(model: Model, name: str, role: str, projects: list[str], now: float,
                host: str | None = None, *, create_only: bool = False) -> list[Fact]:
    check_name("user", name)
    try:
        role = Role(role)
    except ValueError:
        raise InvalidRequest(f"unknown role {role!r}: expected one of admin, user, daemon") from None
    for p in projects:
        check_name("project", p)
        if p not in model.projects:
            raise NotFound(f"project {p!r} does not exist")
    if host is not None:
        check_name("host", host)
    existing = model.users.get(name)
    if existing is not None:
        if create_only:
            raise Conflict(f"user {name!r} already exists")
        if (existing.role, existing.projects, existing.host) == (role, list(projects), host):
            return []
    return [UserDefined(time=now, name=name, role=role.value, projects=list(projects), host=host)]


def issue_token(model: Model, user: str, now: float) -> tuple[list[Fact], str]:
    if user not in model.users:
        raise NotFound(f"user {user!r} does not exist")
    token_id, secret = new_token_secret()
    return [TokenIssued(time=now, token_id=token_id, user=user, token_hash=hash_token(secret))], secret


# ---------------------------------------------------------------- folds


def apply_user_defined(model: Model, f: UserDefined) -> None:
    old = model.users.get(f.name)
    model.users[f.name] = User(name=f.name, role=Role(f.role), projects=list(f.projects),
                               host=f.host, created=old.created if old else f.time)


def apply_token_issued(model: Model, f: TokenIssued) -> None:
    model.tokens[f.token_id] = Token(token_id=f.token_id, user=f.user,
                                     token_hash=f.token_hash, created=f.time)


def apply_token_revoked(model: Model, f: TokenRevoked) -> None:
    tok = model.tokens.get(f.token_id)
    if tok is not None:
        tok.revoked = True
