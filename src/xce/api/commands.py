"""How a request becomes facts: ``mutate`` commits a decision with its audit record.

A refusal commits its audit record alone; ``audit_refusal`` records requests
refused before they reached a decision (bad token, bad body, unknown route).
Both go through the refusal limiter (``xce.api.refusals``): per source, a
burst is recorded one by one and repeats beyond it are summed into one fact.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fastapi import Request

from xce.api.refusals import RefusalLimiter
from xce.controller.core import Controller, Outcome
from xce.errors import XceError
from xce.model import Model
from xce.model.facts import AuditRecorded, Fact
from xce.model.identity import User, redact


def _action(request: Request) -> str:
    route = request.scope.get("route")
    path = route.path if route is not None else request.url.path  # (building request.url is not free)
    return f"{request.method} {path}"


def _source(request: Request, actor: User | None) -> str:
    """Who a refusal is counted against: the user once known, else the client's address."""
    if actor is not None:
        return f"user {actor.name}"
    client = request.client
    return f"addr {client.host if client is not None else '-'}"


async def audit_refusal(request: Request, code: str, message: str) -> None:
    """Record a refused request, rate-limited per source (``xce.api.refusals``); best effort when
    this controller cannot commit."""
    ctl: Controller = request.app.state.controller
    actor: User | None = getattr(request.state, "actor", None)
    limiter: RefusalLimiter = request.app.state.refusals
    facts = limiter.admit(_source(request, actor), actor.name if actor else "-", _action(request),
                          redact(request.url.path[:256]), code, redact(message[:512]))
    if not facts:
        return
    try:
        await ctl.execute(lambda m: Outcome(facts))
    except XceError:
        pass


async def mutate(request: Request, actor: User, target: str,
                 decide: Callable[[Model], tuple[list[Fact], Any]],
                 target_of: Callable[[Any], str] | None = None, quiet_if_empty: bool = False) -> Any:
    """Commit ``decide``'s facts with their audit record; a refusal commits its audit record alone.

    ``target_of`` names the target from the result when only the decision knows it (a new job's id).
    ``quiet_if_empty``: a decision that changes nothing commits nothing, not even its audit record
    (a claim agent's poll that found its ops taken: it would fill the trail with nothing).
    """
    ctl: Controller = request.app.state.controller
    limiter: RefusalLimiter = request.app.state.refusals
    action = _action(request)

    def run(model: Model) -> Outcome:
        now = time.time()
        try:
            facts, result = decide(model)
        except XceError as e:
            e.audited = True  # type: ignore[attr-defined]
            # bounded per user like every refusal: a loop of bad submissions cannot grow the log at will
            return Outcome(limiter.admit(f"user {actor.name}", actor.name, action, redact(target), e.code,
                                         redact(e.message)), error=e)
        if quiet_if_empty and not facts:
            return Outcome([], result=result)
        done = target_of(result) if target_of is not None else target
        facts.append(AuditRecorded(time=now, user=actor.name, action=action, target=done, result="ok"))
        return Outcome(facts, result=result)

    return await ctl.execute(run)
