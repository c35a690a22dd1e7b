"""History routes: ``GET /v1/history/jobs`` (``xce hist``), ``GET /v1/usage`` (``xce usage``) and
``GET /v1/fairshare`` (``xce fairshare``: shares, decayed usage and priority).

Both read the store's archive and the finished records still live, merged so that each record is
counted once (``xce.controller.history``).  Users read their own jobs and usage; admins their own,
one user's (``user``) or everyone's (``all``), as ``GET /v1/jobs``.  History pages newest id first
with ``limit``, ``cursor`` and ``X-Next-Cursor``, like every list that grows with history.
"""

from __future__ import annotations

import math
import time
from typing import Literal

from fastapi import APIRouter, Depends, Query

from xce.api import schemas
from xce.api.auth import authenticated
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR, NEXT_CURSOR_DOC, cursor_query, decode_cursor, encode_cursor
from xce.api.responses import JSONResponse
from xce.api.views import fairshare_json, history_json, usage_json
from xce.controller import history as controller_history
from xce.controller.view import fairshare_view
from xce.scheduler.fairshare import standings
from xce.errors import InvalidRequest
from xce.model import history
from xce.model.fairshare import members, visible_projects
from xce.model.history import history_scope
from xce.model.identity import User
from xce.model.jobs import JobState
from xce.records import HistoryQuery, UsageQuery

HISTORY_LIMIT = 100
MAX_HISTORY_LIMIT = 10_000
CURSOR_KIND = "hist"
FINISHED = (JobState.DONE, JobState.EXIT)
PRINTABLE = r"^[^\x00-\x1f\x7f]*$"


def _window(since: float | None, until: float | None) -> None:
    for name, value in (("since", since), ("until", until)):
        if value is not None and not math.isfinite(value):
            raise InvalidRequest(f"{name} must be a finite time in seconds since the Unix epoch")
    if since is not None and until is not None and since > until:
        raise InvalidRequest("since is after until")


router = APIRouter(tags=["history"], responses=schemas.ERRORS)


@router.get("/v1/history/jobs", response_model=list[schemas.HistoryJobOut],
            responses={200: {"headers": NEXT_CURSOR_DOC}})
async def job_history(ctl: Ctl, actor: User = Depends(authenticated),
                      since: float | None = Query(None, description="ended at or after this time (seconds "
                                                                    "since the Unix epoch)"),
                      until: float | None = Query(None, description="ended before this time"),
                      user: str | None = Query(None, max_length=63, pattern=PRINTABLE,
                                               description="admins: only this user's jobs"),
                      all_users: bool = Query(False, alias="all", description="admins: every user's jobs"),
                      project: str | None = Query(None, max_length=63, pattern=PRINTABLE),
                      state: list[JobState] | None = Query(None, description="DONE or EXIT"),
                      name: str | None = Query(None, max_length=1024, pattern=PRINTABLE),
                      array: int | None = Query(None, ge=1, le=2**63 - 1,
                                                description="only the elements of this job array"),
                      limit: int = Query(HISTORY_LIMIT, ge=1, le=MAX_HISTORY_LIMIT),
                      cursor: str | None = cursor_query()):
    """Finished jobs (DONE, EXIT), live or archived: the newest that match (one page), in id order
    within the page; ``X-Next-Cursor`` leads to older ones."""
    _window(since, until)
    states = tuple(s.value for s in state) if state else tuple(s.value for s in FINISHED)
    if state and not all(s in FINISHED for s in state):
        raise InvalidRequest("history holds finished jobs: state is DONE or EXIT (xce jobs lists the others)")
    who = history_scope(actor, user, all_users or array is not None)
    before = decode_cursor(CURSOR_KIND, cursor) if cursor is not None else None
    await ctl.read_barrier()
    query = HistoryQuery(since=since, until=until, user=who, project=project, states=states, name=name,
                         array_parent=array, before_id=before, limit=limit + 1)  # one more: a next page?
    jobs, archived = await controller_history.history(ctl, query)
    page = jobs[:limit]
    headers = {NEXT_CURSOR: encode_cursor(CURSOR_KIND, page[-1].id)} if len(jobs) > limit else None
    # newest first across pages, in id order within one, as every paged list
    return JSONResponse([history_json(j, j.id in archived) for j in reversed(page)], headers=headers)


@router.get("/v1/usage", response_model=list[schemas.UsageOut])
async def usage(ctl: Ctl, actor: User = Depends(authenticated),
                since: float | None = Query(None, description="jobs that ended and claims released at or "
                                                              "after this time"),
                until: float | None = Query(None, description="... and before this time"),
                user: str | None = Query(None, max_length=63, pattern=PRINTABLE,
                                         description="admins: only this user's jobs and claims"),
                all_users: bool = Query(False, alias="all", description="admins: everyone's"),
                project: str | None = Query(None, max_length=63, pattern=PRINTABLE),
                by: Literal["project", "user"] = Query("project", description="user: each project's "
                                                       "row followed by a row per user (jobs and claims they own)")):
    """Per-project totals over the window: jobs finished, slot-hours and CPU-hours of their last runs,
    claims released and their byte-hours (size times life), as ``sacct``/``bacct`` sum them."""
    _window(since, until)
    who = history_scope(actor, user, all_users)
    await ctl.read_barrier()
    rows = await controller_history.usage(ctl, UsageQuery(since=since, until=until, user=who, project=project,
                                                          by_user=by == "user"))
    if by == "user":
        rows = history.with_project_totals(rows)
    return JSONResponse([usage_json(u) for u in rows])


@router.get("/v1/fairshare", response_model=schemas.FairShareOut)
async def fairshare(ctl: Ctl, actor: User = Depends(authenticated)):
    """Fair share standings (LSF's ``bhpart``, Slurm's ``sshare``): each project's share, decayed usage,
    slots held and dynamic priority, then its users'.  Users see their own projects; admins all."""
    await ctl.read_barrier()
    config, model = ctl.config, ctl.model
    rows = standings(fairshare_view(model, config, time.time()), members(model))
    shown = visible_projects(actor, {r[0] for r in rows})
    rows = [r for r in rows if r[0] in shown]
    return JSONResponse(fairshare_json(config.fairshare, config.controller.fairshare_half_life_seconds, rows))
