"""What a route needs of the app, as FastAPI dependencies: the controller and the helpers beside it.

``create_app`` puts them on ``app.state``; a route names them in its signature (``ctl: Ctl``) and
stays a plain function in its module's ``APIRouter``, not a closure over the controller.  Each is
an ``async def``: FastAPI runs a plain ``def`` dependency in a thread pool, which would cost every
request a thread hop for an attribute read.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from xce.api.metrics import Metrics
from xce.controller.core import Controller
from xce.controller.hosts import HostMonitor
from xce.controller.longpoll import Waker


async def controller(request: Request) -> Controller:
    return request.app.state.controller


async def host_monitor(request: Request) -> HostMonitor:
    """The workers' last words and the work poll's wake-up (``controller.hosts``)."""
    return request.app.state.monitor


async def agent_waker(request: Request) -> Waker:
    """What wakes a claim agent's long poll (``controller.longpoll``)."""
    return request.app.state.agent_waker


async def metrics(request: Request) -> Metrics:
    return request.app.state.metrics


Ctl = Annotated[Controller, Depends(controller)]
Monitor = Annotated[HostMonitor, Depends(host_monitor)]
AgentWaker = Annotated[Waker, Depends(agent_waker)]
MetricsOf = Annotated[Metrics, Depends(metrics)]
