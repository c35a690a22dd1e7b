"""Bearer-token authentication and role checks.

The token's sha256 is looked up in the model; the identity found is put on
``request.state.actor`` so refusals can be audited under the right name.

``authenticated`` reads the ``Authorization`` header itself rather than
through FastAPI's ``HTTPBearer`` sub-dependency: every request pays for each
dependency FastAPI resolves, and this is the one on every route.  The
OpenAPI document declares the scheme (``SECURITY_SCHEME``, added by the app).
"""

from __future__ import annotations

from fastapi import Depends, Request

from xce.errors import Forbidden, Unauthenticated, Unavailable
from xce.model.identity import User, hash_token

SECURITY_SCHEME = {"bearer": {"type": "http", "scheme": "bearer", "description": "an XCE token (xce token create)"}}


async def authenticated(request: Request) -> User:
    ctl = request.app.state.controller
    if not ctl.is_leader:  # a standby's model is not current: it cannot even check tokens
        raise Unavailable(ctl.not_leader_message())
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    credentials = credentials.strip()
    if scheme.lower() != "bearer" or not credentials:
        raise Unauthenticated("missing bearer token (use --token, XCE_TOKEN or the config file)")
    user = ctl.model.user_for_token_hash(hash_token(credentials))
    if user is None:
        raise Unauthenticated("invalid or revoked token")
    request.state.actor = user
    return user


async def admin(user: User = Depends(authenticated)) -> User:
    if not user.is_admin:
        raise Forbidden(f"user {user.name!r} is not an admin")
    return user
