"""Users, roles and tokens: who may call the API and as what.

Roles:
- ``admin``   sees and changes everything;
- ``user``    sees and changes only their own jobs and their projects' objects;
- ``daemon``  a worker identity bound to one host (its host's routes and node agent ``node:HOST``), or the
              provisioner (bound to no host: the shared claim agent ``provisioner`` only);
- ``metrics`` a scrape identity: ``/metrics`` and nothing else.

Every route belongs to one ``Surface``; ``check_surface`` says which roles reach it, so a new route is
closed to daemons and scrapers unless it says otherwise.  ``speaks_for_host`` / ``speaks_for_agent``
narrow the agent surface to the caller's own host or agent.

Tokens are random secrets handed out once; only their sha256 is a fact.  A token may carry an expiry
(a time, folded as data: ``authenticate`` compares it with the request's clock, so the fold stays
pure), may be revoked, and stops working while its user is disabled.
"""

from __future__ import annotations

import enum
import hashlib
import re
import secrets

from xce.agentnames import SHARED_AGENT, node_host
from xce.errors import Conflict, Forbidden, InvalidRequest, NotFound, Unauthenticated
from xce.model.entities.identity import Role, Token, User
from xce.model.facts import Fact, TokenIssued, TokenRevoked, UserDefined, UserDisabled
from xce.model.state import State
from xce.names import check_name
from xce.wire import TOKEN_SECRET



class Surface(enum.StrEnum):
    """What a route is for; each role reaches only some surfaces (``REACHES``)."""

    API = "api"          # the user-facing API: jobs, claims, catalog, identities, audit
    CATALOG = "catalog"  # read-only descriptions the claim agents need too (claim classes, ping)
    AGENT = "agent"      # worker host and claim agent routes (then narrowed to one host or agent)
    METRICS = "metrics"  # /metrics


REACHES: dict[Role, frozenset[Surface]] = {
    Role.ADMIN: frozenset(Surface),
    Role.USER: frozenset({Surface.API, Surface.CATALOG}),
    Role.DAEMON: frozenset({Surface.AGENT, Surface.CATALOG}),
    Role.METRICS: frozenset({Surface.METRICS}),
}


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_token_secret() -> tuple[str, str]:
    """A fresh (token_id, secret).  The secret embeds the id so logs can name a token safely."""
    token_id = secrets.token_hex(6)
    return token_id, f"xce_{token_id}_{secrets.token_urlsafe(32)}"


_SECRET = re.compile(TOKEN_SECRET)


def redact(text: str) -> str:
    """``text`` with any token secret in it cut to its id (``xce_<id>_***``): for what is kept or shown
    about a request someone else wrote (a secret pasted into a path or a name must not become a fact)."""
    return _SECRET.sub(r"xce_\1_***", text) if "xce_" in text else text


# ---------------------------------------------------------------- decisions


def define_user(model: State, name: str, role: str, projects: list[str], now: float,
                host: str | None = None, *, create_only: bool = False) -> list[Fact]:
    check_name("user", name)
    try:
        role = Role(role)
    except ValueError:
        raise InvalidRequest(f"unknown role {role!r}: expected one of "
                             f"{', '.join(r.value for r in Role)}") from None
    for p in projects:
        check_name("project", p)
        if p not in model.projects:
            raise NotFound(f"project {p!r} does not exist")
    if host is not None:
        check_name("host", host)
        if role is not Role.DAEMON:
            raise InvalidRequest(f"--host binds a daemon identity to a host; a {role.value} has none")
    existing = model.users.get(name)
    if existing is not None:
        if create_only:
            raise Conflict(f"user {name!r} already exists")
        if (existing.role, existing.projects, existing.host) == (role, list(projects), host):
            return []
    return [UserDefined(time=now, name=name, role=role.value, projects=list(projects), host=host)]


def issue_token(model: State, user: str, now: float,
                expires: float | None = None) -> tuple[list[Fact], str]:
    """A new token for ``user``, valid until ``expires`` (None: until revoked)."""
    u = model.users.get(user)
    if u is None:
        raise NotFound(f"user {user!r} does not exist")
    if u.disabled:
        raise Conflict(f"user {user!r} is disabled: enable it first (xce user enable {user})")
    if expires is not None and expires <= now:
        raise InvalidRequest("a token's expiry must be in the future")
    token_id, secret = new_token_secret()
    return [TokenIssued(time=now, token_id=token_id, user=user, token_hash=hash_token(secret),
                        expires=expires)], secret


def visible_token(model: State, actor: User, token_id: str) -> Token:
    """The token ``token_id`` if ``actor`` may see it (admins: any; others: their own); else 404 alike."""
    tok = model.tokens.get(token_id)
    if tok is None or not (actor.is_admin or tok.user == actor.name):
        raise NotFound(f"token {token_id!r} does not exist")
    return tok


def visible_tokens(model: State, actor: User, user: str | None = None) -> list[Token]:
    """Tokens ``actor`` may list: admins every token (or ``user``'s), others only their own."""
    if not actor.is_admin:
        if user is not None and user != actor.name:
            raise Forbidden(f"user {actor.name!r} may list only their own tokens")
        user = actor.name
    elif user is not None and user not in model.users:
        raise NotFound(f"user {user!r} does not exist")
    return sorted((t for t in model.tokens.values() if user is None or t.user == user),
                  key=lambda t: (t.created, t.token_id))


def whose(actor: User, user: str | None, everyone: bool, refusal: str) -> str | None:
    """Whose records a listing reads (None: every user's): a user's own only (naming another is refused
    with ``refusal``); an admin's own unless they name a user or ask for ``everyone``'s."""
    if not actor.is_admin:
        if user not in (None, actor.name):
            raise InvalidRequest(refusal)
        return actor.name
    return actor.name if user is None and not everyone else user


def revoke_token(model: State, actor: User, token_id: str, now: float) -> list[Fact]:
    """Revoke a token (admins: any; users: their own).  Revoking a revoked token changes nothing."""
    tok = visible_token(model, actor, token_id)
    return [] if tok.revoked else [TokenRevoked(time=now, token_id=token_id)]


def set_user_disabled(model: State, name: str, disabled: bool, now: float) -> list[Fact]:
    """Disable (or enable) a user: every token of theirs is refused while disabled.

    The last enabled admin cannot be disabled: nobody could enable anyone again.
    """
    u = model.users.get(name)
    if u is None:
        raise NotFound(f"user {name!r} does not exist")
    if u.disabled == disabled:
        return []
    if disabled and u.is_admin and not any(o.is_admin and not o.disabled and o.name != name
                                           for o in model.users.values()):
        raise Conflict(f"user {name!r} is the last enabled admin: enable or create another admin first")
    return [UserDisabled(time=now, name=name, disabled=disabled)]


def authenticate(model: State, token_hash: str, now: float) -> User:
    """The identity a token's hash stands for at ``now``; 401 when revoked, expired or disabled.

    Unknown and revoked tokens get the same answer, so a caller cannot tell one from the other.
    """
    tok = model.token_for_hash(token_hash)
    user = model.users.get(tok.user) if tok is not None and not tok.revoked else None
    if tok is None or user is None:
        raise Unauthenticated("invalid or revoked token")
    if tok.expired(now):
        raise Unauthenticated("token expired")
    if user.disabled:
        raise Unauthenticated(f"user {user.name} is disabled")
    return user


def hosts_locked_out(model: State, now: float) -> frozenset[str]:
    """Hosts none of whose daemon identities can authenticate at ``now``: each identity bound to the
    host is disabled or holds no token that is neither revoked nor expired.  Such a host gets no new
    allocations: its credentials were taken back (a host lost or stolen), its worker's polls and
    heartbeats are refused already, and a job placed there would be handed to nobody, or to
    whoever still holds a poll opened before.  A host no daemon identity is bound to (a worker run
    with an admin token) is not judged here."""
    bound = {u.name: u.host for u in model.users.values() if u.role is Role.DAEMON and u.host is not None}
    if not bound:
        return frozenset()
    live = {bound[t.user] for t in model.tokens.values()
            if t.user in bound and not t.revoked and not t.expired(now) and not model.users[t.user].disabled}
    return frozenset(h for h in bound.values() if h not in live)


def _roles_reaching(surface: Surface) -> str:
    roles = [r.value for r in Role if surface in REACHES[r]]
    return ", ".join(roles[:-1]) + " and " + roles[-1] if len(roles) > 1 else roles[0]


def check_surface(user: User, surface: Surface, what: str) -> None:
    """Refuse (403) a role on a surface it does not reach; ``what`` names the request."""
    if surface not in REACHES[user.role]:
        raise Forbidden(f"{user.role.value} {user.name!r} may not {what} "
                        f"(for {_roles_reaching(surface)} identities only)")


def speaks_for_host(user: User, host: str) -> None:
    """Worker host routes: admins, and the daemon identity bound to that very host."""
    if user.is_admin or (user.role is Role.DAEMON and user.host is not None and user.host == host):
        return
    raise Forbidden(f"{user.name!r} may not act for host {host!r}"
                    + (": it is bound to no host" if user.role is Role.DAEMON and user.host is None else ""))


def speaks_for_agent(user: User, agent: str) -> None:
    """Claim agent routes: the provisioner identity (a daemon bound to no host) for ``provisioner``,
    a host's daemon identity for ``node:HOST``, and admins for any."""
    if user.is_admin:
        return
    if user.role is Role.DAEMON:
        if agent == SHARED_AGENT and user.host is None:
            return
        if user.host is not None and user.host == node_host(agent):
            return
    raise Forbidden(f"{user.name!r} may not act as claim agent {agent!r}")


# ---------------------------------------------------------------- folds


def apply_user_defined(model: State, f: UserDefined) -> None:
    old = model.users.get(f.name)
    model.users[f.name] = User(name=f.name, role=Role(f.role), projects=list(f.projects),
                               host=f.host, created=old.created if old else f.time,
                               disabled=old.disabled if old else False)


def apply_user_disabled(model: State, f: UserDisabled) -> None:
    u = model.users.get(f.name)
    if u is not None:
        u.disabled = f.disabled


def apply_token_issued(model: State, f: TokenIssued) -> None:
    model.tokens[f.token_id] = Token(token_id=f.token_id, user=f.user,
                                     token_hash=f.token_hash, created=f.time, expires=f.expires)


def apply_token_revoked(model: State, f: TokenRevoked) -> None:
    tok = model.tokens.get(f.token_id)
    if tok is not None and not tok.revoked:
        tok.revoked = True
        tok.revoked_time = f.time
