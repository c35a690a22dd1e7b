"""Bearer-token authentication and role checks.

The token's sha256 is looked up in the model; the identity found is put on
``request.state.actor`` so refusals can be audited under the right name.
"""

from __future__ import annotations

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from xce.errors import Forbidden, Unauthenticated, Unavailable
from xce.model.identity import User, hash_token

bearer = HTTPBearer(auto_error=False, description="an XCE token (xce token create)")


async def authenticated(request: Request,
                        creds: HTTPAuthorizationCredentials | None = Depends(bearer)) -> User:
    ctl = request.app.state.controller
    if not ctl.is_leader:  # a standby's model is not current: it cannot even check tokens
        raise Unavailable(ctl.not_leader_message())
    if creds is None or creds.scheme.lower() != "bearer" or not creds.credentials:
        raise Unauthenticated("missing bearer token (use --token, XCE_TOKEN or the config file)")
    user = ctl.model.user_for_token_hash(hash_token(creds.credentials))
    if user is None:
        raise Unauthenticated("invalid or revoked token")
    request.state.actor = user
    return user


async def admin(user: User = Depends(authenticated)) -> User:
    if not user.is_admin:
        raise Forbidden(f"user {user.name!r} is not an admin")
    return user
