"""Routes for standalone claims, claim classes, pools and orphans (``/v1/claims``, ``/v1/claimclasses``...).

Users create claims in projects they belong to and see only those projects'
claims; admins see everything.  Every create, delete and state transition is
in the audit trail (the transitions by the claim fold itself).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from xce.api.responses import JSONResponse

from xce.api import schemas
from xce.api.auth import admin, authenticated, catalog_reader
from xce.api.commands import mutate
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR_DOC, cursor_query, limit_query, newest_first
from xce.api.views import attachment_json, claim_classes_json, claim_json, orphans_json, pools_json
from xce.controller import history as controller_history
from xce.controller.core import Controller
from xce.errors import NotFound
from xce.model import Model
from xce.model import claims
from xce.model import snapshots
from xce.model.claims import TEMPLATE_NAME, ClaimSpec, ClaimState
from xce.model import history
from xce.model.identity import User
from xce.names import NAME_PATTERN
from xce.model.pools import snapshot_use

# a standalone claim's name, or a run's template claim's (``j12.1:scratch``)
ClaimName = Annotated[str, Path(pattern=f"({NAME_PATTERN})|({TEMPLATE_NAME.pattern})", max_length=96)]
InProject = Annotated[str | None, Query(max_length=63, description="the claim's project (names are per project)")]


router = APIRouter(tags=["claims"], responses=schemas.ERRORS)


def _claim_json(ctl: Controller, claim: claims.Claim) -> dict[str, Any]:
    """A live claim's document, with the scheduler's word on it and the provider's readings."""
    reading = ctl.observed.progress(ctl.model, claim.id)
    filling = {r.host: p.as_json() for r in claim.replicas
               if r.op is not None and (p := ctl.observed.replica_progress(ctl.model, claim.id, r.host)) is not None}
    return claim_json(claim, ctl.scheduling.claim_reason(claim.id),
                      resize_reason=ctl.scheduling.resize_reason(claim.id),
                      used_bytes=ctl.observed.used_bytes(claim.id),
                      transfer=reading.as_json() if reading is not None else None, replica_transfers=filling)


def _show(ctl: Controller, claim_id: int, status: int = 200) -> JSONResponse:
    return JSONResponse(_claim_json(ctl, ctl.model.claims[claim_id]), status_code=status)


@router.post("/v1/claims", status_code=201, response_model=schemas.ClaimOut)
async def create_claim(body: schemas.ClaimCreateRequest, request: Request, ctl: Ctl,
                       actor: User = Depends(authenticated)):
    spec = ClaimSpec(name=body.name, class_name=body.claim_class, size=body.size, access_mode=body.access_mode,
                     reclaim_policy=body.reclaim_policy, params=dict(body.params), project=body.project,
                     populate_from=body.populate_from, hosts=tuple(body.hosts), replicas=body.replicas,
                     cache=body.cache, snapshot_on_preempt=body.snapshot_on_preempt)

    def decide(model: Model):
        if body.from_snapshot is not None or body.from_claim is not None:
            return snapshots.clone(model, ctl.config, actor, spec, time.time(), from_snapshot=body.from_snapshot,
                                   from_claim=body.from_claim)
        return claims.create(model, ctl.config, actor, spec, time.time())

    return _show(ctl, await mutate(request, actor, f"claim/{body.name}", decide), 201)


@router.get("/v1/claims", response_model=list[schemas.ClaimOut], responses={200: {"headers": NEXT_CURSOR_DOC}})
async def list_claims(ctl: Ctl, actor: User = Depends(authenticated),
                      project: str | None = Query(None, max_length=63),
                      state: list[ClaimState] | None = Query(None),
                      all_states: bool = Query(False, alias="all", description="include RELEASED claims"),
                      retained: bool = Query(False, description="admins: released claims whose object is kept"),
                      limit: int = limit_query("claims"), cursor: str | None = cursor_query()):
    """The newest matching claims (one page), in id order within the page; ``X-Next-Cursor`` leads
    to older ones."""
    await ctl.read_barrier()
    match = claims.listing_match(actor, project, set(state) if state else None, all_states, retained)
    page, headers = newest_first(ctl.model.claims.values(), lambda c: c.id, match, limit, cursor, "claims")
    return JSONResponse([_claim_json(ctl, c) for c in page], headers=headers)


@router.get("/v1/claims/{name}", response_model=schemas.ClaimOut)
async def show_claim(name: ClaimName, ctl: Ctl, project: InProject = None, actor: User = Depends(authenticated)):
    """A claim, live or retired into the archive (the same document; a live one first)."""
    await ctl.read_barrier()
    try:
        return _show(ctl, claims.visible(ctl.model, actor, name, project).id)
    except NotFound as missing:
        found = await controller_history.archived_claims_named(ctl, name, history.archive_projects(actor, project))
        archived = history.visible_archived_claim(actor, name, found)
        if archived is None:
            raise missing from None
        return JSONResponse(claim_json(archived))


@router.get("/v1/claims/by-id/{claim_id}", response_model=schemas.ClaimOut)
async def show_claim_by_id(claim_id: int, ctl: Ctl, actor: User = Depends(authenticated)):
    await ctl.read_barrier()
    if claim_id in ctl.model.claims:
        return _show(ctl, claims.visible_by_id(ctl.model, actor, claim_id).id)
    archived = (await controller_history.claims_by_id(ctl, [claim_id])).get(claim_id) if 0 < claim_id < 2**63 else None
    return JSONResponse(claim_json(history.visible_archived_claim_by_id(actor, archived, claim_id)))


@router.delete("/v1/claims/{name}", status_code=202, response_model=schemas.ClaimOut)
async def delete_claim(name: ClaimName, request: Request, ctl: Ctl, project: InProject = None,
                       actor: User = Depends(authenticated)):
    def decide(model: Model):
        claim = claims.visible(model, actor, name, project)
        return claims.delete(model, actor, name, time.time(), project), claim.id

    return _show(ctl, await mutate(request, actor, f"claim/{name}", decide), 202)


@router.post("/v1/claims/{name}/resize", status_code=202, response_model=schemas.ClaimOut)
async def resize_claim(name: ClaimName, body: schemas.ClaimResizeRequest, request: Request, ctl: Ctl,
                       project: InProject = None, actor: User = Depends(authenticated)):
    """Grow a READY claim (online when its class can).  The scheduler reserves the growth in the
    claim's pool, then the provisioner expands it; ``resize`` in the answer follows it."""
    claim_id = await mutate(request, actor, f"claim/{name}", lambda model: claims.resize(
        model, ctl.config, actor, name, body.size, time.time(), project))
    return _show(ctl, claim_id, 202)


@router.post("/v1/claims/{name}/warm", status_code=202, response_model=schemas.ClaimOut)
async def warm_claim(name: ClaimName, body: schemas.ReplicaHostsRequest, request: Request, ctl: Ctl,
                     project: InProject = None, actor: User = Depends(authenticated)):
    """A node-local claim's replica more on each host named: placed, made and filled as its first were."""
    claim_id = await mutate(request, actor, f"claim/{name}", lambda model: claims.warm(
        model, ctl.config, actor, name, tuple(body.hosts), time.time(), project))
    return _show(ctl, claim_id, 202)


@router.post("/v1/claims/{name}/evict", status_code=202, response_model=schemas.ClaimOut)
async def evict_claim(name: ClaimName, body: schemas.ReplicaHostsRequest, request: Request, ctl: Ctl,
                      project: InProject = None, actor: User = Depends(authenticated)):
    """Release a node-local claim's replica on each host named (refused while a job there uses it)."""
    claim_id = await mutate(request, actor, f"claim/{name}", lambda model: claims.evict(
        model, actor, name, tuple(body.hosts), time.time(), project))
    return _show(ctl, claim_id, 202)


@router.post("/v1/claims/by-id/{claim_id}/purge", status_code=202, response_model=schemas.ClaimOut)
async def purge_claim(claim_id: int, request: Request, ctl: Ctl, actor: User = Depends(admin)):
    await mutate(request, actor, f"claim/{claim_id}", lambda model: (claims.purge(model, actor, claim_id, time.time()),
                                                                     None))
    return _show(ctl, claim_id, 202)


@router.post("/v1/claims/{name}/attachments", status_code=201, response_model=schemas.AttachmentOut)
async def attach(name: ClaimName, body: schemas.AttachmentRequest, request: Request, ctl: Ctl,
                 project: InProject = None,
                 actor: User = Depends(admin)):
    attachment_id = await mutate(request, actor, f"claim/{name}", lambda model: claims.add_attachment(
        model, actor, name, body.host, body.mode, time.time(), job_id=body.job_id, project=project))
    claim = claims.visible(ctl.model, actor, name, project)
    return JSONResponse(attachment_json(next(a for a in claim.attachments if a.id == attachment_id)),
                        status_code=201)


@router.delete("/v1/claims/{name}/attachments/{attachment_id}", response_model=schemas.ClaimOut)
async def detach(name: ClaimName, attachment_id: int, request: Request, ctl: Ctl, project: InProject = None,
                 actor: User = Depends(admin)):
    def decide(model: Model):
        claim = claims.visible(model, actor, name, project)
        return claims.remove_attachment(model, actor, name, attachment_id, time.time(), project), claim.id

    return _show(ctl, await mutate(request, actor, f"claim/{name}", decide))


@router.get("/v1/claimclasses", response_model=list[schemas.ClaimClassOut])
async def list_classes(ctl: Ctl, _: User = Depends(catalog_reader)):  # the claim agents read it too
    return JSONResponse(claim_classes_json(ctl.config, ctl.model.class_capabilities))


@router.get("/v1/pools", response_model=list[schemas.PoolOut])
async def list_pools(ctl: Ctl, _: User = Depends(authenticated)):
    """``capacity_bytes``: the configured capacity, or less if the provider reports less;
    ``used_bytes``: what placed claims and live snapshots reserve (``snapshot_bytes`` of it the
    snapshots); ``free_bytes``: what is left for new claims and snapshots (no more than the
    provider reports free); ``data_bytes``: what the claims hold, as last listed."""
    await ctl.read_barrier()
    return JSONResponse(pools_json(ctl.config, ctl.observed.rooms(ctl.model, ctl.config), snapshot_use(ctl.model)))


@router.get("/v1/orphans", response_model=list[schemas.OrphanOut])
async def list_orphans(ctl: Ctl, _: User = Depends(admin)):
    await ctl.read_barrier()
    return JSONResponse(orphans_json(ctl.model, ctl.config.claims.orphan_grace, time.time()))
