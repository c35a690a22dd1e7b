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
one op discipline of ``xce.model.ops``); these routes translate HTTP and JSON.

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
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from xce.api.responses import JSONResponse

from xce.agentnames import NODE_PREFIX, SHARED_AGENT, node_host
from xce.api import schemas as S
from xce.api.auth import agent_identity, recheck
from xce.api.commands import mutate
from xce.api.workers import dispatch_json
from xce.controller.longpoll import Waker
from xce.controller.core import Controller
from xce.model import Model
from xce.model import agents as A
from xce.model import claims as C
from xce.model import facts as F
from xce.model import ops
from xce.model.claims import Attachment, Claim, Op, OpKind, Replica
from xce.model.facts import Fact
from xce.model.identity import User, speaks_for_agent
from xce.model.orphans import Orphan
from xce.model.snapshots import Snapshot

AgentName = Annotated[str, Path(pattern=rf"^({SHARED_AGENT}|{NODE_PREFIX}[a-z0-9][a-z0-9\-_.]{{0,62}})$",
                                max_length=80)]

_rng = random.SystemRandom()


def speaks_for(actor: User, agent: str) -> None:
    speaks_for_agent(actor, agent)


def op_json(ctl: Controller, claim: Claim, op: Op, attachment: Attachment | Replica | None) -> dict[str, Any]:
    """One op as an agent runs it: what the provider (or the agent itself) needs, owner tags included.
    A replica's op is its host's: its handle and path are the replica's (its op id says which)."""
    cls = ctl.config.claim_class(claim.class_name)
    handle, path = (attachment.handle, attachment.path) if isinstance(attachment, Replica) else (claim.handle,
                                                                                                  claim.path)
    out = {"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts + 1, "claim_id": claim.id,
           "claim_name": claim.name, "class_name": claim.class_name, "scope": claim.scope,
           "provider": cls.provider if cls else None,
           # an expand asks for the resize's size: the claim keeps its old one until the provider grew it
           "size_bytes": claim.resize.size_bytes if op.kind is OpKind.EXPAND and claim.resize else claim.size_bytes,
           "access_mode": claim.access_mode.value, "params": claim.params,
           "handle": handle if op.kind is not OpKind.CREATE else None,
           "host": attachment.host if attachment is not None else claim.host, "path": path,
           "tags": {"xce.cluster": ctl.model.cluster_id, "xce.claim": str(claim.id), "xce.op": op.op_id,
                    "xce.reclaim": claim.reclaim_policy.value, "xce.project": claim.project,
                    "xce.owner": claim.owner}}
    if op.kind is OpKind.CREATE and claim.source is not None:  # a clone: the provider copies its source
        out["source_handle"] = claim.source["handle"]
    if op.kind in (OpKind.STAGE_IN, OpKind.STAGE_OUT):  # done by the node agent itself, as the job's user
        job = ctl.model.jobs.get(claim.job_id) if claim.job_id is not None else None
        out["user"] = job.user if job is not None else claim.owner
        out["items"] = claim.stage_in if op.kind is OpKind.STAGE_IN else claim.stage_out
    if op.kind is OpKind.POPULATE:  # the provisioner copies the source into the claim's volume
        out["source"] = claim.populate_from
    return out


def orphan_json(o: Orphan) -> dict[str, Any]:
    """An orphan due for release, as the provisioner releases it (by its handle, tagged op id)."""
    return {"handle": o.handle, "class_name": o.class_name, "provider": o.provider, "claim_id": o.claim_id,
            "op_id": f"orphan.{o.handle}", "tags": o.tags}


def snapshot_op_json(ctl: Controller, snap: Snapshot, op: Op) -> dict[str, Any]:
    """A snapshot's op as the provisioner runs it.  ``claim_id`` is the claim it is (or was) of:
    providers derive the snapshot's handle from it and the op_id.  ``create_snapshot`` names the
    claim's volume; ``delete_snapshot`` the snapshot."""
    cls = ctl.config.claim_class(snap.class_name)
    claim = ctl.model.claims.get(snap.claim_id)
    handle = (claim.handle if claim is not None else None) if op.kind is OpKind.CREATE_SNAPSHOT else snap.handle
    return {"op_id": op.op_id, "op": op.kind.value, "attempt": op.attempts + 1, "claim_id": snap.claim_id,
            "snapshot_id": snap.id, "claim_name": snap.claim_name, "class_name": snap.class_name,
            "scope": "shared", "provider": cls.provider if cls else None, "size_bytes": snap.size_bytes,
            "access_mode": snap.access_mode, "params": claim.params if claim is not None else {},
            "handle": handle, "host": None, "path": None,
            "tags": {"xce.cluster": ctl.model.cluster_id, "xce.claim": str(snap.claim_id),
                     "xce.snapshot": str(snap.id), "xce.op": op.op_id, "xce.project": snap.project,
                     "xce.owner": snap.owner}}


def work_json(ctl: Controller, model: Model, agent: str, work: A.Work, held: bool = False) -> dict[str, Any]:
    """An agent's work as it runs it.  ``held``: ops under way, each with the attempt its intent
    counted already (a new intent counts the next)."""
    ops_ = [(op_json(ctl, o.owner, o.op, o.part), o.op) for o in work.claim_ops + work.replica_ops]
    ops_ += [(snapshot_op_json(ctl, o.owner, o.op), o.op) for o in work.snapshot_ops]
    out: dict[str, Any] = {"ops": [dict(j, attempt=op.attempts) if held else j for j, op in ops_],
                           "orphans": [orphan_json(o) for o in work.orphans]}
    host = node_host(agent)
    if work.dispatch is not None and host is not None:
        out["dispatch"] = [dispatch_json(model, job, host) for job in work.dispatch]
    return out


def add_agent_routes(app: FastAPI, ctl: Controller, channel: Waker) -> None:
    def grace() -> float:
        return ctl.config.claims.orphan_grace

    @app.post("/v1/agents/{agent}/lease", tags=["agents"])
    async def take_lease(agent: AgentName, body: S.LeaseRequest, request: Request,
                         actor: User = Depends(agent_identity)):
        speaks_for(actor, agent)
        epoch = await mutate(request, actor, f"agent/{agent}",
                             lambda model: ops.lease(model, agent, body.holder, time.time()))
        return JSONResponse({"agent": agent, "epoch": epoch, "cluster_id": ctl.model.cluster_id,
                             "orphan_scan_interval": ctl.config.claims.orphan_scan_interval})

    async def wait_for_work(agent: str, epoch: int, wait: float) -> None:
        """Until the agent has work, ``wait`` seconds pass, or the server stops.  A waking fact may bring
        no work for this agent (another agent's op, the report of an op it still runs): the poll waits
        on rather than answering empty, or every busy agent would poll in a loop of empty answers."""
        deadline = time.monotonic() + wait
        while not A.has_work(ctl.model, agent, time.time(), grace()) and not channel.closing:
            left = deadline - time.monotonic()
            due_at = A.next_due(ctl.model, agent)
            if left <= 0 or (due_at is not None and due_at <= time.time()):
                return  # the time is up, or a retry fell due yet is not work: answer, the agent polls again
            await channel.wait(left, due_at)
            await ctl.read_barrier()
            ops.check_epoch(ctl.model, agent, epoch)

    def take(model: Model, agent: str, epoch: int, limit: int, dispatch: bool = False) -> tuple[list[Fact], dict]:
        facts, work = A.take(model, agent, epoch, limit, time.time(), grace(), dispatch)
        return facts, work_json(ctl, model, agent, work)

    @app.get("/v1/agents/{agent}/work", tags=["agents"])
    async def work(agent: AgentName, request: Request, epoch: int = Query(..., ge=1),
                   actor: User = Depends(agent_identity),
                   wait: float = Query(0, ge=0, le=60), limit: int = Query(256, ge=1, le=10_000),
                   held: bool = Query(False)):
        """The ops due to the agent (long-polled).  ``held``: instead, the open ops whose intents its
        current epoch holds, for an agent that lost the answer of a call that handed some out (it runs
        those it is not running: op ids tell)."""
        speaks_for(actor, agent)
        await ctl.read_barrier()
        ops.check_epoch(ctl.model, agent, epoch)
        if held:
            return JSONResponse(work_json(ctl, ctl.model, agent, A.held(ctl.model, agent, limit), held=True))
        out = work_json(ctl, ctl.model, agent, A.work(ctl.model, agent, time.time(), limit, grace()))
        if not out["ops"] and not out["orphans"] and wait > 0:
            await wait_for_work(agent, epoch, wait)
            speaks_for(recheck(request), agent)  # its token may have been revoked while it waited
            out = work_json(ctl, ctl.model, agent, A.work(ctl.model, agent, time.time(), limit, grace()))
        return JSONResponse(out)

    @app.post("/v1/agents/{agent}/work", tags=["agents"])
    async def take_work(agent: AgentName, body: S.TakeWorkRequest, request: Request,
                        actor: User = Depends(agent_identity), wait: float = Query(0, ge=0, le=60),
                        limit: int = Query(256, ge=1, le=10_000)):
        """``GET .../work`` and ``POST .../intents`` in one call: the ops due now, each with its intent
        committed before this answers (so the agent acts at once), long-polled like ``GET .../work``
        until some are due.  A poll that finds nothing commits nothing."""
        speaks_for(actor, agent)
        await ctl.read_barrier()
        ops.check_epoch(ctl.model, agent, body.epoch)
        if not A.has_work(ctl.model, agent, time.time(), grace()) and wait > 0:
            await wait_for_work(agent, body.epoch, wait)
            speaks_for(recheck(request), agent)  # its token may have been revoked while it waited
            if not A.has_work(ctl.model, agent, time.time(), grace()):
                return JSONResponse({"ops": [], "orphans": []})
        return JSONResponse(await mutate(request, actor, f"agent/{agent}",
                                         lambda m: take(m, agent, body.epoch, limit), quiet_if_empty=True))

    @app.post("/v1/agents/{agent}/intents", tags=["agents"])
    async def intents(agent: AgentName, body: S.IntentsRequest, request: Request,
                      actor: User = Depends(agent_identity)):
        speaks_for(actor, agent)
        refs = [A.IntentRef(r.op_id, r.claim_id, r.snapshot_id) for r in body.ops]

        def decide(model: Model):
            facts, accepted, refused = A.intents(model, agent, body.epoch, refs, time.time())
            return facts, {"accepted": accepted, "refused": refused}

        return JSONResponse(await mutate(request, actor, f"agent/{agent}", decide))

    @app.post("/v1/agents/{agent}/reports", tags=["agents"])
    async def reports(agent: AgentName, body: S.ReportsRequest, request: Request,
                      actor: User = Depends(agent_identity)):
        speaks_for(actor, agent)
        results = [C.OpResult(**r.model_dump()) for r in body.results]

        def decide(model: Model):
            reported = A.report(model, ctl.config.claims, agent, body.epoch, results, body.orphans_released,
                                time.time(), _rng)
            return reported.facts, reported

        # with ``take``, the take is queued right behind the report, so it decides on the model the report
        # changed (and both usually share one commit); each answers only once its facts are durable
        answers = await asyncio.gather(
            mutate(request, actor, f"agent/{agent}", decide),
            *([mutate(request, actor, f"agent/{agent}", lambda m: take(m, agent, body.epoch, body.take, dispatch=True),
                      quiet_if_empty=True)] if body.take > 0 else []), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        reported: A.Reported = answers[0]
        now = time.time()
        for claim_id, nbytes in reported.used:  # readings (controller/observed.py), kept once facts are durable
            ctl.observed.note_used(ctl.model, claim_id, nbytes, now)
        out: dict[str, Any] = {"refused": reported.refused}
        return JSONResponse(dict(out, work=answers[1]) if body.take > 0 else out)

    @app.post("/v1/agents/{agent}/progress", tags=["agents"])
    async def report_progress(agent: AgentName, body: S.ProgressRequest, actor: User = Depends(agent_identity)):
        """How far transfers in flight have copied: readings in the leader's memory (``controller/observed.py``
        says why they are not facts), taken only for ops whose intent this agent holds in this epoch."""
        speaks_for(actor, agent)
        await ctl.read_barrier()
        ops.check_epoch(ctl.model, agent, body.epoch)
        now = time.time()
        taken = 0
        for item in body.items:
            if not C.holds(ctl.model, agent, body.epoch, item.claim_id, item.op_id):
                continue  # over already, or not this agent's: a stale reading is dropped
            ctl.observed.report_progress(ctl.model, item.claim_id, item.op_id, item.bytes, item.total_bytes,
                                         item.rate, now)
            taken += 1
        return JSONResponse({"taken": taken})

    @app.post("/v1/agents/{agent}/capabilities", tags=["agents"])
    async def report_capabilities(agent: AgentName, body: S.CapabilitiesRequest, request: Request,
                                  actor: User = Depends(agent_identity)):
        """What each class's provider can do (its ``capabilities`` op): a fact per change, not per report."""
        speaks_for(actor, agent)
        reports = [(c.class_name, c.provider, c.capabilities) for c in body.classes]

        def decide(model: Model):
            facts, refused = A.capabilities(model, ctl.config, agent, body.epoch, reports, time.time())
            return facts, {"changed": len(facts), "refused": refused}

        return JSONResponse(await mutate(request, actor, f"agent/{agent}", decide))

    @app.post("/v1/agents/{agent}/inventory", tags=["agents"])
    async def take_inventory(agent: AgentName, body: S.InventoryRequest, request: Request,
                             actor: User = Depends(agent_identity)):
        speaks_for(actor, agent)
        objects = [o.model_dump() for o in body.objects]

        def decide(model: Model):
            facts = A.inventory(model, agent, body.epoch, body.class_name, body.provider, objects, time.time())
            return facts, {"new_orphans": sum(isinstance(f, F.OrphanSeen) for f in facts)}

        out = await mutate(request, actor, f"agent/{agent}", decide)
        if A.takes_readings(ctl.config, agent, body.class_name, body.provider):
            # readings, not facts (controller/observed.py says why): kept on the leader once its facts are durable
            now = time.time()
            ctl.observed.report_used(ctl.model, body.class_name, objects, now)
            ctl.observed.report_capacity(body.class_name, body.capacity_bytes, body.available_bytes, now)
        return JSONResponse(out)
