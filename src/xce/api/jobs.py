"""Routes for jobs (``/v1/jobs``): submit, list, show, and the actions on one job.

Registered before every other route: FastAPI tries routes in order, and a
submission is the request the controller answers most often.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import ValidationError
from starlette.responses import Response

from xce.api import schemas
from xce.api.auth import authenticated
from xce.api.commands import mutate
from xce.api.deps import Ctl
from xce.api.paging import NEXT_CURSOR_DOC, cursor_query, limit_query, newest_first
from xce.api.responses import JSONResponse
from xce.api.views import job_brief_json, job_json, peek_json, submitted_json
from xce.controller import history as controller_history
from xce.config import Config
from xce.controller.core import Controller
from xce.controller.peeks import PEEK, answer_limit
from xce.errors import Conflict, Unavailable
from xce.model import jobs
from xce.model import Model
from xce.model.facts import Fact
from xce.model.history import visible_archived_job
from xce.model.identity import User
from xce.model import job_changes, job_claims
from xce.model.jobs import JobState, visible_job
from xce.units import parse_signal
from xce.wire import Submission


class SubmitRoute(APIRoute):
    """``POST /v1/jobs`` without FastAPI's per-request dependency solving, for the controller's most
    frequent request.  The same endpoint, the same authentication, the same model validating the
    JSON body (pydantic parses it directly), and errors raised to the same handlers; the OpenAPI
    document is generated from the endpoint's signature as for any route."""

    def get_route_handler(self):
        endpoint = self.endpoint

        async def handle(request: Request) -> Response:
            actor = await authenticated(request)
            try:
                body = schemas.JobSubmitRequest.model_validate_json(await request.body())
            except ValidationError as e:
                raise RequestValidationError(e.errors(include_url=False)) from None
            return await endpoint(body=body, request=request, actor=actor, ctl=request.app.state.controller)

        return handle


router = APIRouter(tags=["jobs"], responses=schemas.ERRORS)


def _job_json(ctl: Controller, job: jobs.Job) -> dict[str, Any]:
    """A live job's document, with the scheduler's word on it and its staging's progress (readings)."""
    return job_json(ctl.model, job, ctl.scheduling.pending_reason(job.id),
                    lambda claim_id: ctl.observed.progress(ctl.model, claim_id))


async def submit_job(body: schemas.JobSubmitRequest, request: Request, ctl: Ctl, actor: User = Depends(authenticated)):
    spec, claims = job_claims.request_specs(Submission.from_body(body.model_dump()))
    job_id = await mutate(request, actor, "job",
                          lambda model: job_claims.submit(model, actor, spec, claims, time.time(), ctl.config),
                          target_of=lambda new_id: f"job/{new_id}")
    job = ctl.model.jobs[job_id]
    return JSONResponse(submitted_json(_job_json(ctl, job), jobs.submission_warnings(ctl.model, job)), status_code=201)


router.add_api_route("/v1/jobs", submit_job, methods=["POST"], response_model=schemas.JobOut, status_code=201,
                     route_class_override=SubmitRoute)


@router.get("/v1/jobs", response_model=list[schemas.JobOut] | list[schemas.JobBriefOut],
            responses={200: {"headers": NEXT_CURSOR_DOC}})
async def list_jobs(ctl: Ctl, actor: User = Depends(authenticated),
                    user: str | None = Query(None, max_length=63, description="only this user's jobs"),
                    all_users: bool = Query(False, alias="all", description="admins: every user's jobs"),
                    queue: str | None = Query(None, max_length=63),
                    state: list[JobState] | None = Query(None),
                    array: int | None = Query(None, description="only the elements of this job array"),
                    ids: list[int] | None = Query(None, alias="id", max_length=1000, description=(
                        "these jobs (an array's id: its elements), finished ones too, live or retired into the "
                        "archive, in id order, unpaged: what a poller asks (LSF's bjobs ID...)")),
                    limit: int = limit_query("jobs"), cursor: str | None = cursor_query(),
                    view: Literal["full", "brief"] = Query("full", description="brief: a listing's row "
                                                           "per job (what xce jobs shows)")):
    """The newest matching jobs (one page), in id order within the page; ``X-Next-Cursor`` leads to
    older ones."""
    await ctl.read_barrier()
    user = jobs.listing_user(actor, user, all_users, named=array is not None or bool(ids))
    match = jobs.listing_match(user, queue, set(state) if state else None, array)
    if ids:
        found, archived = await controller_history.jobs_by_id(ctl, [i for i in ids if 0 < i < 2**63])
        found = [j for j in found if match(j)]
        if view == "brief":
            return JSONResponse([job_brief_json(j) for j in found])
        ended = await controller_history.claims_of(ctl, (j for j in found if j.id in archived))
        return JSONResponse([job_json(ended, j) if j.id in archived else _job_json(ctl, j) for j in found])

    # ids ascend in the model: newest first, then in id order.  A listing is bounded and paged:
    # GET /v1/jobs?all=true on a big cluster was tens of megabytes in one answer
    page, headers = newest_first(ctl.model.jobs.values(), lambda j: j.id, match, limit, cursor, "jobs")
    if view == "brief":
        return JSONResponse([job_brief_json(j) for j in page], headers=headers)
    return JSONResponse([_job_json(ctl, j) for j in page], headers=headers)


@router.get("/v1/jobs/{job_id}", response_model=schemas.JobOut)
async def show_job(job_id: int, ctl: Ctl, actor: User = Depends(authenticated)):
    """A job, live or retired into the archive (the same document: every field, its claims, its history)."""
    await ctl.read_barrier()
    if job_id in ctl.model.jobs:
        return JSONResponse(_job_json(ctl, visible_job(ctl.model, actor, job_id)))
    archived = await controller_history.archived_job(ctl, job_id) if 0 < job_id < 2**63 else None
    job = visible_archived_job(actor, archived, job_id)
    return JSONResponse(job_json(await controller_history.claims_of(ctl, [job]), job))


Decide = Callable[[Model, Config, User, int, float], list[Fact]]

#: the actions on one job (``POST /v1/jobs/{id}/ACTION``), each a decision of ``model.jobs``
ACTIONS: dict[str, Decide] = {
    "kill": lambda m, config, a, i, now: jobs.kill(m, a, i, now, config=config),
    "requeue": lambda m, config, a, i, now: jobs.kill(m, a, i, now, requeue=True, config=config),
    "hold": lambda m, config, a, i, now: jobs.hold(m, a, i, now),
    "release": lambda m, config, a, i, now: jobs.release(m, a, i, now),
    "stop": lambda m, config, a, i, now: jobs.suspend(m, a, i, now),
    "resume": lambda m, config, a, i, now: jobs.resume(m, a, i, now),
}


async def act(request: Request, ctl: Controller, actor: User, job_id: int, decide: Callable[[Model], list[Fact]]):
    """Commit one action on a job; its document as the action left it.  The job itself, not its id,
    comes back from the decision: a job that ended may be retired before this answer is rendered."""
    job = await mutate(request, actor, f"job/{job_id}", lambda model: (decide(model), model.jobs.get(job_id)))
    return JSONResponse(_job_json(ctl, job))


def _action_route(decide: Decide):
    async def action(job_id: int, request: Request, ctl: Ctl, actor: User = Depends(authenticated)):
        return await act(request, ctl, actor, job_id,
                         lambda model: decide(model, ctl.config, actor, job_id, time.time()))

    return action


for _name, _decide in ACTIONS.items():
    router.add_api_route(f"/v1/jobs/{{job_id}}/{_name}", _action_route(_decide), methods=["POST"],
                         response_model=schemas.JobOut, name=f"job_{_name}")


@router.post("/v1/jobs/{job_id}/modify", response_model=schemas.JobOut)
async def modify_job(job_id: int, body: schemas.JobModifyRequest, request: Request, ctl: Ctl,
                     actor: User = Depends(authenticated)):
    """A pending job's queue, slots, -R, -W, -w, -sp, name, or an array's limit (``xce mod``, LSF's
    ``bmod``); an array's id changes every element still waiting."""
    changes = job_changes.JobChanges(**body.model_dump())
    return await act(request, ctl, actor, job_id,
                     lambda model: job_changes.modify(model, actor, job_id, changes, time.time(), ctl.config))


PEEK_WAIT = 10.0  # seconds the asker waits for the worker's answer


@router.get("/v1/jobs/{job_id}/output", response_model=schemas.OutputOut)
async def job_output(job_id: int, ctl: Ctl, actor: User = Depends(authenticated),
                     offset: int = Query(-1, ge=-1, le=2**62, description="from this byte; -1: the last limit bytes"),
                     limit: int = Query(1 << 20, ge=1, le=4 << 20)):
    """A running job's output so far, read by the worker on its host (``bpeek``): ``data`` (base64) from
    ``offset``, and the output's ``size``."""
    await ctl.read_barrier()
    host, run = jobs.peek_target(ctl.model, actor, job_id)
    ask = ctl.peeks.ask(host, PEEK, job_id=job_id, run=run, offset=offset,
                        limit=answer_limit(limit, ctl.config.controller.max_body_bytes))
    if ask is None:
        raise Unavailable(f"host {host} has too many output reads waiting: try again", code="busy")
    try:
        reply = await asyncio.wait_for(asyncio.shield(ask.answer), PEEK_WAIT)
    except TimeoutError:
        raise Unavailable(f"the worker on {host} did not answer in {PEEK_WAIT:g}s: try again",
                          code="no_answer") from None
    finally:
        ctl.peeks.forget(host, ask)
    if reply.get("error"):
        raise Conflict(f"job {job_id}'s output on {host}: {reply['error']}", code="not_running")
    return JSONResponse(peek_json(job_id, host, reply))


@router.post("/v1/jobs/{job_id}/signal", response_model=schemas.JobOut)
async def signal_job(job_id: int, body: schemas.SignalRequest, request: Request, ctl: Ctl,
                     actor: User = Depends(authenticated)):
    """One signal to a running job's processes, once (``xce kill -s``, LSF's ``bkill -s``)."""
    signum = parse_signal(body.signal)
    return await act(request, ctl, actor, job_id,
                     lambda model: jobs.send_signal(model, actor, job_id, time.time(), signum))
