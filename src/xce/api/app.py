"""The REST API: routes under ``/v1``, ``/healthz``, ``/metrics`` and ``/openapi.json``.

Every mutating route goes through ``mutate``: the decision, its facts and its
audit record are committed together before the response is sent.  Every
refusal (4xx) is audited as well, under the caller's name when it is known.
The trail is read back from the store by ``GET /v1/audit`` (``xce.api.audit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Annotated, Any, Callable

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

import xce
from xce.api import schemas
from xce.api.responses import JSONResponse
from xce.api.auth import SECURITY_SCHEME, admin, authenticated, catalog_reader, metrics_reader
from xce.api.metrics import Metrics
from xce.api.paging import NEXT_CURSOR, NEXT_CURSOR_DOC, cursor_query, decode_key_cursor, encode_key_cursor, limit_query
from xce.api.commands import audit_refusal, mutate
from xce.api.refusals import RefusalLimiter
from xce.api.views import token_json, user_json
from xce.api.agents import add_agent_routes
from xce.api.audit import add_audit_routes
from xce.api.history import add_history_routes
from xce.api.claims import add_claim_routes
from xce.api.snapshots import add_snapshot_routes
from xce.api.jobs import add_job_routes
from xce.api.transfers import add_transfer_routes
from xce.api.workers import add_worker_routes
from xce.controller.core import Controller, Outcome, Peer
from xce.controller.history import Retirement
from xce.controller.hosts import HostMonitor
from xce.controller.longpoll import AGENT_WAKE, Waker
from xce.errors import NotLeader, XceError
from xce.model import Model
from xce.model.identity import (User, define_user, issue_token, revoke_token, set_user_disabled,
                                visible_token, visible_tokens)
from xce.names import NAME_PATTERN

TokenId = Annotated[str, Path(pattern=r"^[0-9a-f]{1,32}$", max_length=32,
                              description="the id shown by xce token list (the secret's xce_ID_ part)")]
UserName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=63)]

ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ErrorResponse} for code in (400, 401, 403, 404, 409, 413, 422, 503)
}


def _error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


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


def create_app(controller: Controller, on_leader: Callable[[], None] | None = None) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await controller.start()

        async def announce() -> None:
            await controller.wait_leader()
            if on_leader is not None:
                on_leader()

        announcer = asyncio.create_task(announce())
        flusher = asyncio.create_task(flush_refusals())
        try:
            yield
        finally:
            announcer.cancel()
            flusher.cancel()
            await commit_refusal_summaries(force=True)
            await controller.stop()

    async def commit_refusal_summaries(force: bool = False) -> None:
        """The held-back refusals' summaries, as facts; best effort (lost if this controller cannot commit)."""
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

    app = FastAPI(title="XCE", version=xce.__version__, responses=ERRORS, lifespan=lifespan,
                  description="XCE workload manager API. Every route but /healthz needs a bearer token.")
    app.state.controller = controller
    refusals = app.state.refusals = RefusalLimiter.from_config(controller.config.controller)
    monitor = HostMonitor(controller)
    app.state.scheduler = controller.scheduling
    app.state.retirement = Retirement(controller)
    # the busiest routes first: FastAPI tries them in order on every request
    add_job_routes(app, controller)
    add_worker_routes(app, controller, monitor)
    add_claim_routes(app, controller)
    add_snapshot_routes(app, controller)
    add_audit_routes(app, controller)
    add_history_routes(app, controller)
    add_transfer_routes(app, controller)
    add_agent_routes(app, controller, Waker(controller, AGENT_WAKE))
    metrics = Metrics(controller)
    app.add_middleware(BodyLimit, limit=controller.config.controller.max_body_bytes)

    # ------------------------------------------------------------ errors

    @app.exception_handler(XceError)
    async def xce_error(request: Request, exc: XceError):
        if exc.status < 500 and not getattr(exc, "audited", False):
            await audit_refusal(request, exc.code, exc.message)
        if isinstance(exc, NotLeader):  # nothing was done: the client may go to the leader it names
            return JSONResponse({"error": {"code": exc.code, "message": exc.message, "leader": exc.leader}},
                                status_code=exc.status)
        return _error_response(exc.status, exc.code, exc.message)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
            parts.append(f"{loc or 'body'}: {err.get('msg')}")
        message = "invalid request: " + "; ".join(parts)
        await audit_refusal(request, "invalid_request", message)
        return _error_response(422, "invalid_request", message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}.get(exc.status_code, "http_error")
        await audit_refusal(request, code, str(exc.detail))
        return _error_response(exc.status_code, code, str(exc.detail))

    # ------------------------------------------------------------ service

    @app.get("/healthz", tags=["service"])
    async def healthz() -> dict[str, Any]:
        return {"ok": True, "leader": controller.serving}

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def metrics_route(_: User = Depends(metrics_reader)) -> Response:
        body, ctype = metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/v1/ping", response_model=schemas.PingOut, tags=["service"])
    async def ping(actor: User = Depends(catalog_reader)):
        await controller.read_barrier()
        return JSONResponse({
            "version": xce.__version__, "cluster_id": controller.model.cluster_id,
            "leader": controller.is_leader, "leader_epoch": controller.epoch,
            "log_position": controller.committed, "store": controller.store.backend,
            "user": actor.name, "role": actor.role.value, "url": controller.url,
            "standbys": sorted(p.url for p in controller.peers if p.role == "standby"),
        })

    @app.get("/v1/controllers", response_model=list[schemas.ControllerOut], tags=["service"])
    async def list_controllers(_: User = Depends(catalog_reader)):
        """The controllers sharing this store, as they last announced themselves (every lease period)."""
        await controller.read_barrier()
        head = controller.committed
        peers = {p.url: p for p in controller.peers}
        if controller.url:  # this one, as of now rather than its last announcement
            peers[controller.url] = Peer(url=controller.url, role="leader", position=head, age=0.0,
                                         holder=controller.holder)
        out = [{"url": p.url, "role": p.role, "log_position": p.position, "behind": max(0, head - p.position),
                "seen": round(p.age, 3)} for p in peers.values()]
        out.sort(key=lambda c: (c["role"] != "leader", c["url"]))
        return JSONResponse(out)

    # ------------------------------------------------------------ catalog

    @app.get("/v1/queues", response_model=list[schemas.QueueOut], tags=["catalog"])
    async def list_queues(_: User = Depends(authenticated)):
        await controller.read_barrier()
        model = controller.model
        counts: dict[str, list[int]] = {q: [0, 0] for q in model.queues}
        # from the model's indexes: the live jobs are mostly finished ones waiting to retire
        for job_id in model.waiting_jobs:
            if (c := counts.get(model.jobs[job_id].queue)) is not None:
                c[0] += 1
        for job_id in model.jobs.keys() - model.waiting_jobs - model.finished_jobs.keys():
            job = model.jobs[job_id]
            if job.started and (c := counts.get(job.queue)) is not None:
                c[1] += 1
        queues = sorted(model.queues.values(), key=lambda q: (-q.priority, q.name))
        configured = {q.name: q for q in controller.config.queues}  # (defaults a submission reads)
        return JSONResponse([{"name": q.name, "priority": q.priority, "description": q.description,
                              "pending": counts[q.name][0], "running": counts[q.name][1],
                              "stage_class": getattr(configured.get(q.name), "stage_class", None)} for q in queues])

    @app.get("/v1/apps", response_model=list[schemas.AppOut], tags=["catalog"])
    async def list_apps(_: User = Depends(authenticated)):
        """The application profiles (``xce submit --app NAME``): their template claims and staging class."""
        return JSONResponse([{"name": a.name, "description": a.description, "stage_class": a.stage_class,
                              "claims": [{"name": c.name, "claim_class": c.claim_class, "size": c.size}
                                         for c in a.claims]} for a in controller.config.apps])

    @app.get("/v1/projects", response_model=list[schemas.ProjectOut], tags=["catalog"])
    async def list_projects(actor: User = Depends(authenticated)):
        await controller.read_barrier()
        projects = [p for p in controller.model.projects.values()
                    if actor.is_admin or p.name in actor.projects]
        return JSONResponse([{"name": p.name, "description": p.description}
                             for p in sorted(projects, key=lambda p: p.name)])

    # ------------------------------------------------------------ identities

    @app.get("/v1/users", response_model=list[schemas.UserOut], tags=["identity"])
    async def list_users(_: User = Depends(admin)):
        await controller.read_barrier()
        return JSONResponse([user_json(u) for u in sorted(controller.model.users.values(),
                                                          key=lambda u: u.name)])

    @app.post("/v1/users", response_model=schemas.UserOut, status_code=201, tags=["identity"])
    async def create_user(body: schemas.UserCreateRequest, request: Request, actor: User = Depends(admin)):
        def decide(model: Model):
            return define_user(model, body.name, body.role, body.projects, time.time(),
                               host=body.host, create_only=True), body.name

        name = await mutate(request, actor, f"user/{body.name}", decide)
        return JSONResponse(user_json(controller.model.users[name]), status_code=201)

    async def set_disabled(request: Request, actor: User, name: str, disabled: bool):
        await mutate(request, actor, f"user/{name}",
                     lambda model: (set_user_disabled(model, name, disabled, time.time()), None))
        return JSONResponse(user_json(controller.model.users[name]))

    @app.post("/v1/users/{name}/disable", response_model=schemas.UserOut, tags=["identity"])
    async def disable_user(name: UserName, request: Request, actor: User = Depends(admin)):
        """Every token of the user is refused (401) until the user is enabled again; jobs are untouched."""
        return await set_disabled(request, actor, name, True)

    @app.post("/v1/users/{name}/enable", response_model=schemas.UserOut, tags=["identity"])
    async def enable_user(name: UserName, request: Request, actor: User = Depends(admin)):
        return await set_disabled(request, actor, name, False)

    @app.post("/v1/tokens", response_model=schemas.TokenOut, status_code=201, tags=["identity"])
    async def create_token(body: schemas.TokenCreateRequest, request: Request, actor: User = Depends(admin)):
        def decide(model: Model):
            facts, secret = issue_token(model, body.user, time.time(), expires=body.expires)
            return facts, (facts[0].token_id, secret)

        token_id, secret = await mutate(request, actor, f"user/{body.user}", decide)
        return JSONResponse({"token_id": token_id, "user": body.user, "token": secret, "expires": body.expires},
                            status_code=201)

    @app.get("/v1/tokens", response_model=list[schemas.TokenInfo], tags=["identity"],
             responses={200: {"headers": NEXT_CURSOR_DOC}})
    async def list_tokens(actor: User = Depends(authenticated),
                          user: str | None = Query(None, pattern=NAME_PATTERN, max_length=63,
                                                   description="admins: only this user's tokens"),
                          limit: int = limit_query("tokens"), cursor: str | None = cursor_query(128)):
        """Admins: every token (or one user's); users: their own.  Never a secret or a hash.  The newest
        (one page), oldest first within it; revoked tokens stay, so ``X-Next-Cursor`` leads to older ones."""
        await controller.read_barrier()
        now = time.time()
        tokens = visible_tokens(controller.model, actor, user)  # by (created, token id)
        if cursor is not None:
            before = decode_key_cursor("tokens", cursor)
            tokens = [t for t in tokens if (t.created, t.token_id) < before]
        page = tokens[-limit:]
        headers = {NEXT_CURSOR: encode_key_cursor("tokens", page[0].created, page[0].token_id)} \
            if len(tokens) > limit else None
        return JSONResponse([token_json(t, now) for t in page], headers=headers)

    @app.delete("/v1/tokens/{token_id}", response_model=schemas.TokenInfo, tags=["identity"])
    async def delete_token(token_id: TokenId, request: Request, actor: User = Depends(authenticated)):
        """Revoke a token (admins: any; users: their own).  It is refused from the next request on."""
        await mutate(request, actor, f"token/{token_id}",
                     lambda model: (revoke_token(model, actor, token_id, time.time()), None))
        return JSONResponse(token_json(visible_token(controller.model, actor, token_id), time.time()))

    app.add_middleware(RequestCounter, metrics=metrics)

    def openapi() -> dict[str, Any]:
        """The generated document, with the bearer scheme every route but /healthz requires."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEME
            for path, ops in schema.get("paths", {}).items():
                if path != "/healthz":
                    for op in ops.values():
                        op["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app
