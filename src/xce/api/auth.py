"""Bearer-token authentication and role checks.

The token's sha256 is looked up in the model and judged at the request's
clock (``identity.authenticate``: revoked, expired, disabled); the identity
found is put on ``request.state.actor`` so refusals can be audited under the
right name.

Every route depends on exactly one of the surface dependencies below, and
each admits only the roles that reach its surface (``identity.REACHES``):

- ``authenticated``   the user-facing API (admins and users);
- ``catalog_reader``  read-only descriptions the daemons need too (ping, claim classes);
- ``agent_identity``  worker host and claim agent routes (admins and daemons, then narrowed to
                      the caller's own host or agent by the route);
- ``metrics_reader``  ``/metrics`` (admins and metrics identities).

So a daemon or scrape token stolen from a host reaches nothing a user could
use, and a new route is closed to them unless it opts in.

The dependencies read the ``Authorization`` header themselves rather than
through FastAPI's ``HTTPBearer`` sub-dependency: every request pays for each
dependency FastAPI resolves, and this is the one on every route.  The
OpenAPI document declares the scheme (``SECURITY_SCHEME``, added by the app).
"""

from __future__ import annotations

import time

from fastapi import Depends, Request

from xce.errors import Forbidden, Unauthenticated
from xce.model.identity import Surface, User, authenticate, check_surface, hash_token

SECURITY_SCHEME = {"bearer": {"type": "http", "scheme": "bearer", "description": "an XCE token (xce token create)"}}


def identify(request: Request) -> User:
    """Whoever the bearer token stands for now, whatever their role (401 if nobody)."""
    ctl = request.app.state.controller
    if not ctl.serving:  # a standby's model is not current: it cannot even check tokens
        raise ctl.not_leader()
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        raise Unauthenticated("missing bearer token (use --token, XCE_TOKEN or the config file)")
    user = authenticate(ctl.model, hash_token(credentials), time.time())
    request.state.actor = user
    return user


def recheck(request: Request) -> User:
    """A long-poll's caller, judged again as it wakes (``identify`` on the model of now): a token
    revoked or expired, or a user disabled, while the poll waited is refused (401) before the poll
    hands over what it waited for."""
    return identify(request)


def _on(request: Request, surface: Surface) -> User:
    user = identify(request)
    if not user.is_admin:  # (admins reach every surface: skip building the message)
        route = request.scope.get("route")
        check_surface(user, surface, f"{request.method} {route.path if route is not None else request.url.path}")
    return user


async def authenticated(request: Request) -> User:
    """The user-facing API: admins and users."""
    return _on(request, Surface.API)


async def catalog_reader(request: Request) -> User:
    """Read-only catalog routes that daemons need as well as users."""
    return _on(request, Surface.CATALOG)


async def agent_identity(request: Request) -> User:
    """Worker host and claim agent routes: admins and daemons (each route narrows to its own)."""
    return _on(request, Surface.AGENT)


async def metrics_reader(request: Request) -> User:
    """``/metrics``: admins and metrics (scrape) identities."""
    return _on(request, Surface.METRICS)


async def admin(user: User = Depends(authenticated)) -> User:
    if not user.is_admin:
        raise Forbidden(f"user {user.name!r} is not an admin")
    return user
