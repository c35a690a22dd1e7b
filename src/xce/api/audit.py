"""``GET /v1/audit``: the audit trail, read from the store (never from memory), filtered and paged.

Pages run newest first: the first holds the newest ``limit`` records that
match, ``X-Next-Cursor`` leads to older ones (``xce.api.paging``).  Within a
page, records are in the order they were written (oldest to newest, as a log
tail reads and as the API always answered).  Users see only their own
records; admins everyone's, or one user's with ``user``.
"""

from __future__ import annotations

import math

from fastapi import APIRouter, Depends, Query

from xce.api import schemas
from xce.api.auth import authenticated
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR, NEXT_CURSOR_DOC, decode_cursor, encode_cursor
from xce.api.responses import JSONResponse
from xce.api.views import audit_json
from xce.errors import InvalidRequest
from xce.model.identity import User
from xce.store import AuditQuery

AUDIT_LIMIT = 100
MAX_AUDIT_LIMIT = 10_000
CURSOR_KIND = "audit"
#: text filters: printable, so nothing a backend cannot hold (PostgreSQL text refuses NUL)
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


router = APIRouter(tags=["audit"], responses=schemas.ERRORS)


@router.get("/v1/audit", response_model=list[schemas.AuditOut],
            responses={200: {"headers": NEXT_CURSOR_DOC}})
async def list_audit(ctl: Ctl, actor: User = Depends(authenticated),
                     since: float | None = Query(None, description="from this time (seconds since the Unix "
                                                                   "epoch), inclusive"),
                     until: float | None = Query(None, description="before this time, exclusive"),
                     user: str | None = Query(None, max_length=63, pattern=PRINTABLE,
                                              description="admins: only this user's records"),
                     target: str | None = Query(None, max_length=256, pattern=PRINTABLE,
                                                description="targets starting with this: claim/ckpt, job/12"),
                     action: str | None = Query(None, max_length=256, pattern=PRINTABLE,
                                                description="exactly this action: POST /v1/jobs, claim.state"),
                     result: str | None = Query(None, max_length=63, pattern=PRINTABLE,
                                                description="exactly this result: ok, or a refusal code"),
                     limit: int = Query(AUDIT_LIMIT, ge=1, le=MAX_AUDIT_LIMIT),
                     cursor: str | None = Query(None, max_length=64,
                                                description=f"the {NEXT_CURSOR} of the previous page")):
    """The newest matching records (one page), oldest first within the page."""
    for name, value in (("since", since), ("until", until)):
        if value is not None and not math.isfinite(value):
            raise InvalidRequest(f"{name} must be a finite time in seconds since the Unix epoch")
    if since is not None and until is not None and since > until:
        raise InvalidRequest("since is after until")
    if not actor.is_admin:
        user = actor.name  # users see only their own trail
    before = decode_cursor(CURSOR_KIND, cursor) if cursor is not None else None
    rows = await ctl.read_store(ctl.store.query_audit, AuditQuery(
        since=since, until=until, user=user, target=target or None, action=action, result=result,
        before_seq=before, limit=limit + 1))  # one more: does another page follow?
    page = rows[:limit]
    headers = {NEXT_CURSOR: encode_cursor(CURSOR_KIND, page[-1].seq)} if len(rows) > limit else None
    return JSONResponse([audit_json(r) for r in reversed(page)], headers=headers)
