"""``GET /v1/transfers``: the URL schemes and remotes a user may stage from and to (``xce transfers list``).

What the controller's ``[transfers]`` names, never a credential (those are only in the workers'
``--transfer-config``).  A user sees the public schemes and the remotes their projects may use, with
those of their projects that may; an admin sees every remote and every project it lists.  Every
remote's name is listed for everyone (``remote_names``), without its details.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from xce.api.auth import authenticated
from xce.api.responses import JSONResponse
from xce.controller.core import Controller
from xce.model.identity import User


def transfers_for(ctl: Controller, actor: User) -> dict[str, Any]:
    site = ctl.config.transfers
    remotes = []
    for r in site.remotes:
        projects = list(r.projects) if actor.is_admin else \
            [p for p in actor.projects if r.allows(p)]
        if projects:
            remotes.append({**r.public(), "projects": projects})
    schemes = [{"scheme": s, "via": "public", "projects": ["*"]} for s in site.public_schemes]
    for r in remotes:
        schemes += [{"scheme": s, "via": r["name"], "projects": r["projects"]} for s in r["schemes"]]
    # every remote's name, details aside: xce submit reads NAME:path as a remote (which the controller
    # then refuses with the reason) rather than as a relative path, whoever submits it
    return {"schemes": schemes, "remotes": remotes, "remote_names": [r.name for r in site.remotes]}


def add_transfer_routes(app: FastAPI, ctl: Controller) -> None:
    @app.get("/v1/transfers", tags=["transfers"])
    async def list_transfers(actor: User = Depends(authenticated)):
        return JSONResponse(transfers_for(ctl, actor))
