"""Routes about the service and its catalog: ``/healthz``, ``/metrics``, ``/v1/ping``,
``/v1/controllers``, and the queues, application profiles and projects a submission names."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import Response

from xce.api import schemas
from xce.api.auth import authenticated, catalog_reader, metrics_reader
from xce.api.deps import Ctl, MetricsOf
from xce.api.responses import JSONResponse
from xce.api.views import apps_json, controllers_json, health_json, ping_json, projects_json, queues_json
from xce.model.identity import User

router = APIRouter(responses=schemas.ERRORS)


@router.get("/healthz", tags=["service"], response_model=schemas.HealthOut)
async def healthz(ctl: Ctl):
    return JSONResponse(health_json(ctl.serving))


@router.get("/metrics", tags=["service"], response_class=Response)
async def metrics_route(metrics: MetricsOf, _: User = Depends(metrics_reader)) -> Response:
    body, ctype = metrics.render()
    return Response(body, media_type=ctype)


@router.get("/v1/ping", response_model=schemas.PingOut, tags=["service"])
async def ping(ctl: Ctl, actor: User = Depends(catalog_reader)):
    await ctl.read_barrier()
    return JSONResponse(ping_json(ctl, actor))


@router.get("/v1/controllers", response_model=list[schemas.ControllerOut], tags=["service"])
async def list_controllers(ctl: Ctl, _: User = Depends(catalog_reader)):
    """The controllers sharing this store, as they last announced themselves (every lease period)."""
    await ctl.read_barrier()
    return JSONResponse(controllers_json(ctl))


@router.get("/v1/queues", response_model=list[schemas.QueueOut], tags=["catalog"])
async def list_queues(ctl: Ctl, _: User = Depends(authenticated)):
    await ctl.read_barrier()
    return JSONResponse(queues_json(ctl.model, ctl.config))


@router.get("/v1/apps", response_model=list[schemas.AppOut], tags=["catalog"])
async def list_apps(ctl: Ctl, _: User = Depends(authenticated)):
    """The application profiles (``xce submit --app NAME``): their template claims and staging class."""
    return JSONResponse(apps_json(ctl.config))


@router.get("/v1/projects", response_model=list[schemas.ProjectOut], tags=["catalog"])
async def list_projects(ctl: Ctl, actor: User = Depends(authenticated)):
    await ctl.read_barrier()
    return JSONResponse(projects_json(ctl.model, actor))
