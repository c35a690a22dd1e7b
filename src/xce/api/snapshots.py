"""Routes for snapshots (``/v1/snapshots``): take one of a claim, list, show, delete.

Users take, see and delete only their projects' snapshots; admins every
project's.  Decisions are in ``xce.model.snapshots``; every create and delete
is audited like any mutating call, and every state transition by the fold.
Clones are made through ``POST /v1/claims`` (``from_snapshot``, ``from_claim``).
"""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request

from xce.api import schemas
from xce.api.auth import authenticated
from xce.api.commands import mutate
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR_DOC, cursor_query, limit_query, newest_first
from xce.api.responses import JSONResponse
from xce.api.views import snapshot_json
from xce.controller.core import Controller
from xce.controller.observed import pool_free
from xce.model import snapshots
from xce.model.identity import User
from xce.model.snapshots import SnapshotState
from xce.names import NAME_PATTERN

SnapshotName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]
InProject = Annotated[str | None, Query(max_length=63, description="the snapshot's project (names are per project)")]


router = APIRouter(tags=["snapshots"], responses=schemas.ERRORS)


def _show(ctl: Controller, snapshot_id: int, status: int = 200) -> JSONResponse:
    return JSONResponse(snapshot_json(ctl.model.snapshots[snapshot_id]), status_code=status)


@router.post("/v1/snapshots", status_code=201, response_model=schemas.SnapshotOut)
async def create_snapshot(body: schemas.SnapshotCreateRequest, request: Request, ctl: Ctl,
                          actor: User = Depends(authenticated)):
    snapshot_id = await mutate(request, actor, f"snapshot/{body.name}", lambda model: snapshots.create(
        model, ctl.config, actor, body.claim, body.name, time.time(), body.project,
        free=pool_free(model, ctl.config, ctl.observed)))
    return _show(ctl, snapshot_id, 201)


@router.get("/v1/snapshots", response_model=list[schemas.SnapshotOut], responses={200: {"headers": NEXT_CURSOR_DOC}})
async def list_snapshots(ctl: Ctl, actor: User = Depends(authenticated),
                         project: str | None = Query(None, max_length=63),
                         claim: str | None = Query(None, max_length=63, description="of this claim only"),
                         state: list[SnapshotState] | None = Query(None),
                         all_states: bool = Query(False, alias="all", description="include RELEASED ones"),
                         limit: int = limit_query("snapshots"), cursor: str | None = cursor_query()):
    """The newest matching snapshots (one page), in id order within the page; ``X-Next-Cursor``
    leads to older ones."""
    await ctl.read_barrier()
    match = snapshots.listing_match(actor, project, claim, set(state) if state else None, all_states)
    page, headers = newest_first(ctl.model.snapshots.values(), lambda s: s.id, match, limit, cursor, "snapshots")
    return JSONResponse([snapshot_json(s) for s in page], headers=headers)


@router.get("/v1/snapshots/{name}", response_model=schemas.SnapshotOut)
async def show_snapshot(name: SnapshotName, ctl: Ctl, project: InProject = None,
                        actor: User = Depends(authenticated)):
    await ctl.read_barrier()
    return _show(ctl, snapshots.visible(ctl.model, actor, name, project).id)


@router.get("/v1/snapshots/by-id/{snapshot_id}", response_model=schemas.SnapshotOut)
async def show_snapshot_by_id(snapshot_id: int, ctl: Ctl, actor: User = Depends(authenticated)):
    await ctl.read_barrier()
    return _show(ctl, snapshots.visible_by_id(ctl.model, actor, snapshot_id).id)


@router.delete("/v1/snapshots/{name}", status_code=202, response_model=schemas.SnapshotOut)
async def delete_snapshot(name: SnapshotName, request: Request, ctl: Ctl, project: InProject = None,
                          actor: User = Depends(authenticated)):
    snapshot_id = await mutate(request, actor, f"snapshot/{name}",
                               lambda model: snapshots.delete(model, actor, name, time.time(), project))
    return _show(ctl, snapshot_id, 202)
