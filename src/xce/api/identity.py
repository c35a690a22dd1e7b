"""Routes for identities (``/v1/users``, ``/v1/tokens``): users, their roles and projects, and tokens.

Admins define users and issue tokens; a user lists and revokes their own tokens.  The decisions are
``xce.model.identity``'s; a secret is in one answer only, the one that issues it.
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from xce.api import schemas
from xce.api.auth import admin, authenticated
from xce.api.commands import mutate
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR, NEXT_CURSOR_DOC, cursor_query, decode_key_cursor, encode_key_cursor, limit_query
from xce.api.responses import JSONResponse
from xce.api.views import token_created_json, token_json, user_json, users_json
from xce.controller.core import Controller
from xce.model import Model
from xce.model.identity import (User, define_user, issue_token, revoke_token, set_user_disabled, visible_token,
                                visible_tokens)
from xce.names import NAME_PATTERN

TokenId = Annotated[str, Path(pattern=r"^[0-9a-f]{1,32}$", max_length=32,
                              description="the id shown by xce token list (the secret's xce_ID_ part)")]
UserName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]

router = APIRouter(tags=["identity"], responses=schemas.ERRORS)


@router.get("/v1/users", response_model=list[schemas.UserOut])
async def list_users(ctl: Ctl, _: User = Depends(admin)):
    await ctl.read_barrier()
    return JSONResponse(users_json(ctl.model))


@router.post("/v1/users", response_model=schemas.UserOut, status_code=201)
async def create_user(body: schemas.UserCreateRequest, request: Request, ctl: Ctl, actor: User = Depends(admin)):
    def decide(model: Model):
        return define_user(model, body.name, body.role, body.projects, time.time(),
                           host=body.host, create_only=True), body.name

    name = await mutate(request, actor, f"user/{body.name}", decide)
    return JSONResponse(user_json(ctl.model.users[name]), status_code=201)


async def _set_disabled(request: Request, ctl: Controller, actor: User, name: str, disabled: bool) -> JSONResponse:
    await mutate(request, actor, f"user/{name}",
                 lambda model: (set_user_disabled(model, name, disabled, time.time()), None))
    return JSONResponse(user_json(ctl.model.users[name]))


@router.post("/v1/users/{name}/disable", response_model=schemas.UserOut)
async def disable_user(name: UserName, request: Request, ctl: Ctl, actor: User = Depends(admin)):
    """Every token of the user is refused (401) until the user is enabled again; jobs are untouched."""
    return await _set_disabled(request, ctl, actor, name, True)


@router.post("/v1/users/{name}/enable", response_model=schemas.UserOut)
async def enable_user(name: UserName, request: Request, ctl: Ctl, actor: User = Depends(admin)):
    return await _set_disabled(request, ctl, actor, name, False)


@router.post("/v1/tokens", response_model=schemas.TokenOut, status_code=201)
async def create_token(body: schemas.TokenCreateRequest, request: Request, actor: User = Depends(admin)):
    def decide(model: Model):
        facts, secret = issue_token(model, body.user, time.time(), expires=body.expires)
        return facts, (facts[0].token_id, secret)

    token_id, secret = await mutate(request, actor, f"user/{body.user}", decide)
    return JSONResponse(token_created_json(token_id, body.user, secret, body.expires), status_code=201)


@router.get("/v1/tokens", response_model=list[schemas.TokenInfo], responses={200: {"headers": NEXT_CURSOR_DOC}})
async def list_tokens(ctl: Ctl, actor: User = Depends(authenticated),
                      user: str | None = Query(None, pattern=NAME_PATTERN, max_length=63,
                                               description="admins: only this user's tokens"),
                      limit: int = limit_query("tokens"), cursor: str | None = cursor_query(128)):
    """Admins: every token (or one user's); users: their own.  Never a secret or a hash.  The newest
    (one page), oldest first within it; revoked tokens stay, so ``X-Next-Cursor`` leads to older ones."""
    await ctl.read_barrier()
    now = time.time()
    tokens = visible_tokens(ctl.model, actor, user)  # by (created, token id)
    if cursor is not None:
        before = decode_key_cursor("tokens", cursor)
        tokens = [t for t in tokens if (t.created, t.token_id) < before]
    page = tokens[-limit:]
    headers = {NEXT_CURSOR: encode_key_cursor("tokens", page[0].created, page[0].token_id)} \
        if len(tokens) > limit else None
    return JSONResponse([token_json(t, now) for t in page], headers=headers)


@router.delete("/v1/tokens/{token_id}", response_model=schemas.TokenInfo)
async def delete_token(token_id: TokenId, request: Request, ctl: Ctl, actor: User = Depends(authenticated)):
    """Revoke a token (admins: any; users: their own).  It is refused from the next request on."""
    await mutate(request, actor, f"token/{token_id}",
                 lambda model: (revoke_token(model, actor, token_id, time.time()), None))
    return JSONResponse(token_json(visible_token(ctl.model, actor, token_id), time.time()))
