"""Routes for claim agents (``/v1/agents/{agent}/...``): lease, work, intents, reports, inventory.

Agents also report what each class's provider can do (``capabilities``), which
resizes, snapshots and clones are offered or refused by.

The agent named ``provisioner`` runs shared-scope ops: an admin or a daemon
identity bound to no host may speak for it.  ``node:HOST`` is the node agent
of worker HOST: only that host's daemon identity (or an admin).  The decision
is ``identity.speaks_for_agent``.  Every call
after the lease carries the agent's epoch; a call from an older epoch (an
agent that was restarted or replaced) is refused whole with 409
``stale_epoch``, so a late report can never change a claim.

What each call means is decided in the model (``xce.model.agents``, over the
one op discipline of ``xce.model.ops``); these routes translate HTTP and JSON.  On the wire an op
is ``xce.wire.AgentOp`` (``views.agent_op_json`` makes it) and its result ``xce.wire.OpReport``.

Handoffs: ``POST .../work`` is ``GET .../work`` and ``POST .../intents`` in
one call (the ops due now, each with its intent committed before the answer),
and a report may ``take`` the ops it opened in the same commit (a staging
claim's ``stage_in`` after its ``create``), and a node agent's report answers
with its host's runs whose readiness gate it opened (``dispatch``, as ``GET
/v1/hosts/HOST/work`` would): a staged job's steps no longer wait for a
long-poll to wake, answer, and be answered again.  An intent is still
committed before the agent hears of its op.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Annotated, Any, Callable

from fastapi import APIRouter, Depends, Path, Query, Request

from xce.agentnames import NODE_PREFIX, SHARED_AGENT
from xce.api import schemas
from xce.api.auth import agent_identity, recheck
from xce.api.commands import mutate
from xce.api.deps import AgentWaker, Ctl
from xce.api.responses import JSONResponse
from xce.api.views import (agent_reports_json, agent_work_json, capabilities_json, intents_json, inventory_json,
                           lease_json, no_agent_work_json, progress_json)
from xce.controller.core import Controller
from xce.controller.longpoll import Waker
from xce.model import Model
from xce.model import agents
from xce.model import claims
from xce.model import ops
from xce.model.facts import Fact, OrphanSeen
from xce.model.identity import User, speaks_for_agent
from xce.wire import OpReport

AgentName = Annotated[str, Path(pattern=rf"^({SHARED_AGENT}|{NODE_PREFIX}[a-z0-9][a-z0-9\-_.]{{0,62}})$",
                                max_length=80)]

_rng = random.SystemRandom()


def op_reports(body: schemas.ReportsRequest) -> list[OpReport]:
    """The results of a report as ``OpReport``s: the keys the agent sent, checked by ``schemas.OpResult``."""
    return [OpReport(**r.model_dump()) for r in body.results]  # type: ignore[typeddict-item]



router = APIRouter(tags=["agents"], responses=schemas.ERRORS)


def _grace(ctl: Controller) -> float:
    return ctl.config.claims.orphan_grace


def _take(ctl: Controller, agent: str, epoch: int, limit: int, dispatch: bool = False) -> Callable[[Model], Any]:
    """The decision that takes the ops due to ``agent`` (their intents recorded), answering its work."""
    def decide(model: Model) -> tuple[list[Fact], dict[str, Any]]:
        facts, work = agents.take(model, agent, epoch, limit, time.time(), _grace(ctl), dispatch)
        return facts, agent_work_json(model, ctl.config, agent, work)

    return decide


async def wait_for_work(ctl: Controller, channel: Waker, agent: str, epoch: int, wait: float) -> None:
    """Until the agent has work, ``wait`` seconds pass, or the server stops.  A waking fact may bring
    no work for this agent (another agent's op, the report of an op it still runs): the poll waits
    on rather than answering empty, or every busy agent would poll in a loop of empty answers."""
    deadline = time.monotonic() + wait
    while not agents.has_work(ctl.model, agent, time.time(), _grace(ctl)) and not channel.closing:
        left = deadline - time.monotonic()
        due_at = agents.next_due(ctl.model, agent)
        if left <= 0 or (due_at is not None and due_at <= time.time()):
            return  # the time is up, or a retry fell due yet is not work: answer, the agent polls again
        await channel.wait(left, due_at)
        await ctl.read_barrier()
        ops.check_epoch(ctl.model, agent, epoch)


@router.post("/v1/agents/{agent}/lease", response_model=schemas.LeaseOut)
async def take_lease(agent: AgentName, body: schemas.LeaseRequest, request: Request, ctl: Ctl,
                     actor: User = Depends(agent_identity)):
    speaks_for_agent(actor, agent)
    epoch = await mutate(request, actor, f"agent/{agent}", lambda model: ops.lease(model, agent, body.holder,
                                                                                   time.time()))
    return JSONResponse(lease_json(agent, epoch, ctl.model.cluster_id, ctl.config.claims.orphan_scan_interval))


@router.get("/v1/agents/{agent}/work", response_model=schemas.AgentWorkOut)
async def work(agent: AgentName, request: Request, ctl: Ctl, channel: AgentWaker, epoch: int = Query(..., ge=1),
               actor: User = Depends(agent_identity),
               wait: float = Query(0, ge=0, le=60), limit: int = Query(256, ge=1, le=10_000),
               held: bool = Query(False)):
    """The ops due to the agent (long-polled).  ``held``: instead, the open ops whose intents its
    current epoch holds, for an agent that lost the answer of a call that handed some out (it runs
    those it is not running: op ids tell)."""
    speaks_for_agent(actor, agent)
    await ctl.read_barrier()
    ops.check_epoch(ctl.model, agent, epoch)
    if held:
        return JSONResponse(agent_work_json(ctl.model, ctl.config, agent, agents.held(ctl.model, agent, limit),
                                            held=True))

    def due() -> dict[str, Any]:
        return agent_work_json(ctl.model, ctl.config, agent, agents.work(ctl.model, agent, time.time(), limit,
                                                                         _grace(ctl)))

    out = due()
    if not out["ops"] and not out["orphans"] and wait > 0:
        await wait_for_work(ctl, channel, agent, epoch, wait)
        speaks_for_agent(recheck(request), agent)  # its token may have been revoked while it waited
        out = due()
    return JSONResponse(out)


@router.post("/v1/agents/{agent}/work", response_model=schemas.AgentWorkOut)
async def take_work(agent: AgentName, body: schemas.TakeWorkRequest, request: Request, ctl: Ctl, channel: AgentWaker,
                    actor: User = Depends(agent_identity), wait: float = Query(0, ge=0, le=60),
                    limit: int = Query(256, ge=1, le=10_000)):
    """``GET .../work`` and ``POST .../intents`` in one call: the ops due now, each with its intent
    committed before this answers (so the agent acts at once), long-polled like ``GET .../work``
    until some are due.  A poll that finds nothing commits nothing."""
    speaks_for_agent(actor, agent)
    await ctl.read_barrier()
    ops.check_epoch(ctl.model, agent, body.epoch)
    if not agents.has_work(ctl.model, agent, time.time(), _grace(ctl)) and wait > 0:
        await wait_for_work(ctl, channel, agent, body.epoch, wait)
        speaks_for_agent(recheck(request), agent)  # its token may have been revoked while it waited
        if not agents.has_work(ctl.model, agent, time.time(), _grace(ctl)):
            return JSONResponse(no_agent_work_json())
    return JSONResponse(await mutate(request, actor, f"agent/{agent}", _take(ctl, agent, body.epoch, limit),
                                     quiet_if_empty=True))


@router.post("/v1/agents/{agent}/intents", response_model=schemas.IntentsOut)
async def intents(agent: AgentName, body: schemas.IntentsRequest, request: Request,
                  actor: User = Depends(agent_identity)):
    speaks_for_agent(actor, agent)
    refs = [agents.IntentRef(r.op_id, r.claim_id, r.snapshot_id) for r in body.ops]

    def decide(model: Model):
        facts, accepted, refused = agents.intents(model, agent, body.epoch, refs, time.time())
        return facts, intents_json(accepted, refused)

    return JSONResponse(await mutate(request, actor, f"agent/{agent}", decide))


@router.post("/v1/agents/{agent}/reports", response_model=schemas.AgentReportsOut)
async def reports(agent: AgentName, body: schemas.ReportsRequest, request: Request, ctl: Ctl,
                  actor: User = Depends(agent_identity)):
    speaks_for_agent(actor, agent)
    results = [claims.OpResult(**report) for report in op_reports(body)]

    def decide(model: Model):
        reported = agents.report(model, ctl.config.claims, agent, body.epoch, results, body.orphans_released,
                                 time.time(), _rng)
        return reported.facts, reported

    # with ``take``, the take is queued right behind the report, so it decides on the model the report
    # changed (and both usually share one commit); each answers only once its facts are durable
    answers = await asyncio.gather(
        mutate(request, actor, f"agent/{agent}", decide),
        *([mutate(request, actor, f"agent/{agent}", _take(ctl, agent, body.epoch, body.take, dispatch=True),
                  quiet_if_empty=True)] if body.take > 0 else []), return_exceptions=True)
    for answer in answers:
        if isinstance(answer, BaseException):
            raise answer
    reported: agents.Reported = answers[0]
    now = time.time()
    for claim_id, nbytes in reported.used:  # readings (controller/observed.py), kept once facts are durable
        ctl.observed.note_used(ctl.model, claim_id, nbytes, now)
    return JSONResponse(agent_reports_json(reported.refused, answers[1] if body.take > 0 else None))


@router.post("/v1/agents/{agent}/progress", response_model=schemas.ProgressOut)
async def report_progress(agent: AgentName, body: schemas.ProgressRequest, ctl: Ctl,
                          actor: User = Depends(agent_identity)):
    """How far transfers in flight have copied: readings in the leader's memory (``controller/observed.py``
    says why they are not facts), taken only for ops whose intent this agent holds in this epoch."""
    speaks_for_agent(actor, agent)
    await ctl.read_barrier()
    ops.check_epoch(ctl.model, agent, body.epoch)
    now = time.time()
    taken = 0
    for item in body.items:
        if not agents.holds_transfer(ctl.model, agent, body.epoch, item.claim_id, item.op_id):
            continue  # over already, or not this agent's: a stale reading is dropped
        ctl.observed.report_progress(ctl.model, item.claim_id, item.op_id, item.bytes, item.total_bytes, item.rate, now)
        taken += 1
    return JSONResponse(progress_json(taken))


@router.post("/v1/agents/{agent}/capabilities", response_model=schemas.CapabilitiesOut)
async def report_capabilities(agent: AgentName, body: schemas.CapabilitiesRequest, request: Request, ctl: Ctl,
                              actor: User = Depends(agent_identity)):
    """What each class's provider can do (its ``capabilities`` op): a fact per change, not per report."""
    speaks_for_agent(actor, agent)
    reports = [(c.class_name, c.provider, c.capabilities) for c in body.classes]

    def decide(model: Model):
        facts, refused = agents.capabilities(model, ctl.config, agent, body.epoch, reports, time.time())
        return facts, capabilities_json(len(facts), refused)

    return JSONResponse(await mutate(request, actor, f"agent/{agent}", decide))


@router.post("/v1/agents/{agent}/inventory", response_model=schemas.InventoryOut)
async def take_inventory(agent: AgentName, body: schemas.InventoryRequest, request: Request, ctl: Ctl,
                         actor: User = Depends(agent_identity)):
    speaks_for_agent(actor, agent)
    objects = [o.model_dump() for o in body.objects]

    def decide(model: Model):
        facts = agents.inventory(model, agent, body.epoch, body.class_name, body.provider, objects, time.time())
        return facts, inventory_json(sum(isinstance(f, OrphanSeen) for f in facts))

    out = await mutate(request, actor, f"agent/{agent}", decide)
    if agents.takes_readings(ctl.config, agent, body.class_name, body.provider):
        # readings, not facts (controller/observed.py says why): kept on the leader once its facts are durable
        now = time.time()
        ctl.observed.report_used(ctl.model, body.class_name, objects, now)
        ctl.observed.report_capacity(body.class_name, body.capacity_bytes, body.available_bytes, now)
    return JSONResponse(out)
