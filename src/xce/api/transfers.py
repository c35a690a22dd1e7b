"""``GET /v1/transfers``: the URL schemes and remotes a user may stage from and to (``xce transfers list``).

What the controller's ``[transfers]`` names, never a credential (those are only in the workers'
``--transfer-config``).  A user sees the public schemes and the remotes their projects may use, with
those of their projects that may; an admin sees every remote and every project it lists.  Every
remote's name is listed for everyone (``remote_names``), without its details.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from xce.api import schemas
from xce.api.auth import authenticated
from xce.api.deps import Ctl
from xce.api.responses import JSONResponse
from xce.api.views import transfers_json
from xce.model.identity import User

router = APIRouter(tags=["transfers"], responses=schemas.ERRORS)


@router.get("/v1/transfers", response_model=schemas.TransfersOut)
async def list_transfers(ctl: Ctl, actor: User = Depends(authenticated)):
    return JSONResponse(transfers_json(ctl.config.transfers, actor))
