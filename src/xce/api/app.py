"""The REST API: routes under ``/v1``, ``/healthz``, ``/metrics`` and ``/openapi.json``.

Each API module holds one ``APIRouter`` of plain route functions; the controller reaches them
through ``xce.api.deps`` (``app.state``).  Routes translate HTTP, ``xce.api.views`` shapes the JSON,
the model decides.

Every mutating route goes through ``mutate``: the decision, its facts and its
audit record are committed together before the response is sent.  Every
refusal (4xx) is audited as well, under the caller's name when it is known.
The trail is read back from the store by ``GET /v1/audit`` (``xce.api.audit``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from starlette.exceptions import HTTPException as StarletteHTTPException

import xce
from xce.api import agents, audit, claims, history, identity, jobs, service, snapshots, tasks, transfers, workers
from xce.api.auth import SECURITY_SCHEME
from xce.api.commands import audit_refusal
from xce.api.metrics import Metrics
from xce.api.refusals import RefusalLimiter
from xce.api.responses import JSONResponse
from xce.api.views import error_json
from xce.controller.core import Controller, Outcome
from xce.controller.history import Retirement
from xce.controller.hosts import HostMonitor
from xce.controller.longpoll import AGENT_WAKE, Waker
from xce.errors import NotLeader, XceError

def _error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse(error_json(code, message), status_code=status)


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, before the route reads them."""

    def __init__(self, app, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        for k, v in scope["headers"]:
            if k == b"content-length":
                try:
                    too_big = int(v) > self.limit
                except ValueError:
                    too_big = True
                if too_big:
                    resp = _error_response(413, "too_large", f"request body over {self.limit} bytes")
                    return await resp(scope, receive, send)
        seen = 0

        async def limited():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.limit:  # a chunked body has no length to check up front
                    # an HTTPException passes through FastAPI's body reading unchanged (anything
                    # else it turns into a 400 "error parsing the body"); answered 413 by http_error
                    raise StarletteHTTPException(413, f"request body over {self.limit} bytes")
            return msg

        return await self.app(scope, limited, send)


class RequestCounter:
    """Count requests by method and status (pure ASGI: no per-request task or copy)."""

    def __init__(self, app, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def counting_send(message):
            if message["type"] == "http.response.start":
                self.metrics.count_request(scope["method"], message["status"])
            await send(message)

        return await self.app(scope, receive, counting_send)


#: every module's router, the busiest first: FastAPI tries the routes in order on every request.
#: The app serves their routes as one flat list (``FastAPI(routes=...)``) rather than through
#: ``include_router``: an included router is matched as a unit and then again route by route, which
#: cost a third of a request's routing and dependency time (``docs/decisions/controller-performance.md``);
#: the OpenAPI document is the same either way (each router gives its routes their tags and the
#: error answers, ``schemas.ERRORS``).
ROUTERS = (jobs.router, workers.router, claims.router, snapshots.router, audit.router, history.router,
           transfers.router, agents.router, service.router, identity.router, tasks.router)


def create_app(controller: Controller, on_leader: Callable[[], None] | None = None) -> FastAPI:
    """The app: the controller and the helpers routes depend on (``xce.api.deps``) on ``app.state``,
    each module's router, the middleware, the error shapes and the OpenAPI document."""
    refusals = RefusalLimiter.from_config(controller.config.controller)
    app = FastAPI(title="XCE", version=xce.__version__, lifespan=_lifespan(controller, refusals,
                                                                                             on_leader),
                  description="XCE workload manager API. Every route but /healthz needs a bearer token.",
                  routes=[route for router in ROUTERS for route in router.routes])
    app.state.controller = controller
    app.state.refusals = refusals
    app.state.monitor = HostMonitor(controller)
    app.state.agent_waker = Waker(controller, AGENT_WAKE)
    app.state.scheduler = controller.scheduling
    app.state.retirement = Retirement(controller)
    metrics = app.state.metrics = Metrics(controller)
    app.add_middleware(BodyLimit, limit=controller.config.controller.max_body_bytes)
    app.add_middleware(RequestCounter, metrics=metrics)
    app.add_exception_handler(XceError, xce_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.openapi = lambda: openapi(app)  # type: ignore[method-assign]
    return app


def _lifespan(controller: Controller, refusals: RefusalLimiter, on_leader: Callable[[], None] | None):
    """The controller's start and stop around the app's life; the leader announced once it leads, and
    the held-back refusals' summaries committed every half window (and at the end)."""
    async def commit_refusal_summaries(force: bool = False) -> None:
        """Best effort: lost if this controller cannot commit."""
        if not controller.is_leader:
            return
        facts = refusals.flush(force)
        if facts:
            try:
                await controller.execute(lambda m: Outcome(facts))
            except XceError:
                pass

    async def flush_refusals() -> None:
        while True:
            await asyncio.sleep(refusals.window / 2)
            await commit_refusal_summaries()

    async def announce() -> None:
        await controller.wait_leader()
        if on_leader is not None:
            on_leader()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await controller.start()
        announcer = asyncio.create_task(announce())
        flusher = asyncio.create_task(flush_refusals())
        try:
            yield
        finally:
            announcer.cancel()
            flusher.cancel()
            await commit_refusal_summaries(force=True)
            await controller.stop()

    return lifespan


# ------------------------------------------------------------ errors: every one answered {"error": {...}}

async def xce_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, XceError)
    if exc.status < 500 and not getattr(exc, "audited", False):
        await audit_refusal(request, exc.code, exc.message)
    if isinstance(exc, NotLeader):  # nothing was done: the client may go to the leader it names
        return JSONResponse(error_json(exc.code, exc.message, leader=exc.leader), status_code=exc.status)
    return _error_response(exc.status, exc.code, exc.message)


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    parts = []
    for err in exc.errors()[:5]:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc or 'body'}: {err.get('msg')}")
    message = "invalid request: " + "; ".join(parts)
    await audit_refusal(request, "invalid_request", message)
    return _error_response(422, "invalid_request", message)


async def http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "http_error")
    await audit_refusal(request, code, str(exc.detail))
    return _error_response(exc.status_code, code, str(exc.detail))


def openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, with the bearer scheme every route but /healthz requires."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEME
        for path, ops in schema.get("paths", {}).items():
            if path != "/healthz":
                for op in ops.values():
                    op["security"] = [{"bearer": []}]
        app.openapi_schema = schema
    return app.openapi_schema
