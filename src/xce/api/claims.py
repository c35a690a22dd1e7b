"""Routes for standalone claims, claim classes, pools and orphans (``/v1/claims``, ``/v1/claimclasses``...).

Users create claims in projects they belong to and see only those projects'
claims; admins see everything.  Every create, delete and state transition is
in the audit trail (the transitions by the claim fold itself).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from xce.api.responses import JSONResponse

from xce.api import schemas as S
from xce.api.auth import admin, authenticated, catalog_reader
from xce.api.commands import mutate
from xce.api.paging import NEXT_CURSOR_DOC, cursor_query, limit_query, newest_first
from xce.api.views import attachment_json, claim_json, orphan_json
from xce.controller import history as CH
from xce.controller.core import Controller
from xce.errors import Forbidden, NotFound
from xce.model import Model
from xce.model import claims as C
from xce.model import snapshots as SN
from xce.model.claims import TEMPLATE_NAME, ClaimSpec, ClaimState
from xce.model import history as H
from xce.model.identity import User
from xce.names import NAME_PATTERN
from xce.model.orphans import claim_orphans
from xce.model.pools import snapshot_use

# a standalone claim's name, or a run's template claim's (``j12.1:scratch``)
ClaimName = Annotated[str, Path(pattern=f"({NAME_PATTERN})|({TEMPLATE_NAME.pattern})", max_length=96)]
InProject = Annotated[str | None, Query(max_length=63, description="the claim's project (names are per project)")]


def add_claim_routes(app: FastAPI, ctl: Controller) -> None:
    def view(claim: C.Claim) -> dict[str, Any]:
        reading = ctl.observed.progress(ctl.model, claim.id)
        return claim_json(claim, ctl.scheduling.claim_reason(claim.id), resize_reason=ctl.scheduling.resize_reason(claim.id),
                          used_bytes=ctl.observed.used_bytes(claim.id),
                          transfer=reading.as_json() if reading is not None else None)

    def show(claim_id: int, status: int = 200) -> JSONResponse:
        return JSONResponse(view(ctl.model.claims[claim_id]), status_code=status)

    @app.post("/v1/claims", status_code=201, response_model=S.ClaimOut, tags=["claims"])
    async def create_claim(body: S.ClaimCreateRequest, request: Request, actor: User = Depends(authenticated)):
        spec = ClaimSpec(name=body.name, class_name=body.claim_class, size=body.size, access_mode=body.access_mode,
                         reclaim_policy=body.reclaim_policy, params=dict(body.params), project=body.project,
                         populate_from=body.populate_from, hosts=tuple(body.hosts), replicas=body.replicas)

        def decide(model: Model):
            if body.from_snapshot is not None or body.from_claim is not None:
                return SN.clone(model, ctl.config, actor, spec, time.time(), from_snapshot=body.from_snapshot,
                                from_claim=body.from_claim)
            return C.create(model, ctl.config, actor, spec, time.time())

        return show(await mutate(request, actor, f"claim/{body.name}", decide), 201)

    @app.get("/v1/claims", response_model=list[S.ClaimOut], tags=["claims"],
             responses={200: {"headers": NEXT_CURSOR_DOC}})
    async def list_claims(actor: User = Depends(authenticated),
                          project: str | None = Query(None, max_length=63),
                          state: list[ClaimState] | None = Query(None),
                          all_states: bool = Query(False, alias="all", description="include RELEASED claims"),
                          retained: bool = Query(False, description="admins: released claims whose object is kept"),
                          limit: int = limit_query("claims"), cursor: str | None = cursor_query()):
        """The newest matching claims (one page), in id order within the page; ``X-Next-Cursor`` leads
        to older ones."""
        await ctl.read_barrier()
        if retained and not actor.is_admin:
            raise Forbidden("only admins list retained objects")
        states = set(state) if state else None

        def match(c: C.Claim) -> bool:
            if not C.may_see(actor, c):
                return False
            if project is not None and c.project != project:
                return False
            if retained:
                return c.retained
            if states is not None:
                return c.state in states
            return c.state is not ClaimState.RELEASED or all_states

        page, headers = newest_first(ctl.model.claims.values(), lambda c: c.id, match, limit, cursor, "claims")
        return JSONResponse([view(c) for c in page], headers=headers)

    @app.get("/v1/claims/{name}", response_model=S.ClaimOut, tags=["claims"])
    async def show_claim(name: ClaimName, project: InProject = None, actor: User = Depends(authenticated)):
        """A claim, live or retired into the archive (the same document; a live one first)."""
        await ctl.read_barrier()
        try:
            return show(C.visible(ctl.model, actor, name, project).id)
        except NotFound as missing:
            found = await CH.archived_claims_named(ctl, name, H.archive_projects(actor, project))
            archived = H.visible_archived_claim(actor, name, found)
            if archived is None:
                raise missing from None
            return JSONResponse(claim_json(archived))

    @app.get("/v1/claims/by-id/{claim_id}", response_model=S.ClaimOut, tags=["claims"])
    async def show_claim_by_id(claim_id: int, actor: User = Depends(authenticated)):
        await ctl.read_barrier()
        if claim_id in ctl.model.claims:
            return show(C.visible_by_id(ctl.model, actor, claim_id).id)
        archived = (await CH.claims_by_id(ctl, [claim_id])).get(claim_id) if 0 < claim_id < 2**63 else None
        return JSONResponse(claim_json(H.visible_archived_claim_by_id(actor, archived, claim_id)))

    @app.delete("/v1/claims/{name}", status_code=202, response_model=S.ClaimOut, tags=["claims"])
    async def delete_claim(name: ClaimName, request: Request, project: InProject = None,
                           actor: User = Depends(authenticated)):
        def decide(model: Model):
            claim = C.visible(model, actor, name, project)
            return C.delete(model, actor, name, time.time(), project), claim.id

        return show(await mutate(request, actor, f"claim/{name}", decide), 202)

    @app.post("/v1/claims/{name}/resize", status_code=202, response_model=S.ClaimOut, tags=["claims"])
    async def resize_claim(name: ClaimName, body: S.ClaimResizeRequest, request: Request, project: InProject = None,
                           actor: User = Depends(authenticated)):
        """Grow a READY claim (online when its class can).  The scheduler reserves the growth in the
        claim's pool, then the provisioner expands it; ``resize`` in the answer follows it."""
        claim_id = await mutate(request, actor, f"claim/{name}", lambda model: C.resize(
            model, ctl.config, actor, name, body.size, time.time(), project))
        return show(claim_id, 202)

    @app.post("/v1/claims/by-id/{claim_id}/purge", status_code=202, response_model=S.ClaimOut, tags=["claims"])
    async def purge_claim(claim_id: int, request: Request, actor: User = Depends(admin)):
        await mutate(request, actor, f"claim/{claim_id}",
                     lambda model: (C.purge(model, actor, claim_id, time.time()), None))
        return show(claim_id, 202)

    @app.post("/v1/claims/{name}/attachments", status_code=201, tags=["claims"])
    async def attach(name: ClaimName, body: S.AttachmentRequest, request: Request, project: InProject = None,
                     actor: User = Depends(admin)):
        attachment_id = await mutate(request, actor, f"claim/{name}", lambda model: C.add_attachment(
            model, actor, name, body.host, body.mode, time.time(), job_id=body.job_id, project=project))
        claim = C.visible(ctl.model, actor, name, project)
        return JSONResponse(attachment_json(next(a for a in claim.attachments if a.id == attachment_id)),
                            status_code=201)

    @app.delete("/v1/claims/{name}/attachments/{attachment_id}", tags=["claims"])
    async def detach(name: ClaimName, attachment_id: int, request: Request, project: InProject = None,
                     actor: User = Depends(admin)):
        def decide(model: Model):
            claim = C.visible(model, actor, name, project)
            return C.remove_attachment(model, actor, name, attachment_id, time.time(), project), claim.id

        return show(await mutate(request, actor, f"claim/{name}", decide))

    @app.get("/v1/claimclasses", tags=["claims"])
    async def list_classes(_: User = Depends(catalog_reader)):  # the claim agents read it too
        known = ctl.model.class_capabilities
        return JSONResponse([{"name": c.name, "provider": c.provider, "scope": c.scope, "pools": c.pools,
                              "access_modes": c.access_modes, "reclaim_policy": c.reclaim_policy,
                              "parameters": c.parameters, "allowed_parameters": c.allowed_parameters,
                              "description": c.description,
                              # None: no agent has asked the provider yet (it can do none of them until then)
                              "capabilities": dict(known[c.name].flags) if c.name in known else None}
                             for c in ctl.config.claim_classes])

    @app.get("/v1/pools", tags=["claims"])
    async def list_pools(_: User = Depends(authenticated)):
        """``capacity_bytes``: the configured capacity, or less if the provider reports less;
        ``used_bytes``: what placed claims and live snapshots reserve (``snapshot_bytes`` of it the
        snapshots); ``free_bytes``: what is left for new claims and snapshots (no more than the
        provider reports free); ``data_bytes``: what the claims hold, as last listed."""
        await ctl.read_barrier()
        rooms = ctl.observed.rooms(ctl.model, ctl.config)
        snapshots = snapshot_use(ctl.model)
        return JSONResponse([{"name": p.name, "capacity_bytes": rooms[p.name].capacity,
                              "configured_bytes": rooms[p.name].configured, "used_bytes": rooms[p.name].reserved,
                              "snapshot_bytes": snapshots.get(p.name, 0),
                              "free_bytes": rooms[p.name].free, "available_bytes": rooms[p.name].available,
                              "data_bytes": rooms[p.name].used, "description": p.description}
                             for p in ctl.config.pools])

    @app.get("/v1/orphans", tags=["claims"])
    async def list_orphans(_: User = Depends(admin)):
        await ctl.read_barrier()
        now = time.time()
        out: list[dict[str, Any]] = [orphan_json(o, now) for o in ctl.model.orphans.values()]
        grace = ctl.config.claims.orphan_grace
        for o in out:
            o["releases_in"] = None if o["retain"] else max(0.0, round(grace - o["age"], 1))
        for claim, why in claim_orphans(ctl.model):
            out.append({"kind": "claim", "claim_id": claim.id, "name": claim.name, "class": claim.class_name,
                        "state": claim.state.value, "project": claim.project, "reason": why,
                        "age": round(now - claim.created, 1)})
        return JSONResponse(out)
