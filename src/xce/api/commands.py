"""How a request becomes facts: ``mutate`` commits a decision with its audit record.

A refusal commits its audit record alone; ``audit_refusal`` records requests
refused before they reached a decision (bad token, bad body, unknown route).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fastapi import Request

from xce.controller.core import Controller, Outcome
from xce.errors import XceError
from xce.model import Model
from xce.model.facts import AuditRecorded, Fact
from xce.model.identity import User, redact


def _action(request: Request) -> str:
    route = request.scope.get("route")
    path = route.path if route is not None else request.url.path  # (building request.url is not free)
    return f"{request.method} {path}"


async def audit_refusal(request: Request, code: str, message: str) -> None:
    """Record a refused request; best effort when this controller cannot commit."""
    ctl: Controller = request.app.state.controller
    actor: User | None = getattr(request.state, "actor", None)
    fact = AuditRecorded(time=time.time(), user=actor.name if actor else "-",
                         action=_action(request), target=redact(request.url.path[:256]),
                         result=code, detail=redact(message[:512]))
    try:
        await ctl.execute(lambda m: Outcome([fact]))
    except XceError:
        pass


async def mutate(request: Request, actor: User, target: str,
                 decide: Callable[[Model], tuple[list[Fact], Any]],
                 target_of: Callable[[Any], str] | None = None) -> Any:
    """Commit ``decide``'s facts with their audit record; a refusal commits its audit record alone.

    ``target_of`` names the target from the result when only the decision knows it (a new job's id).
    """
    ctl: Controller = request.app.state.controller
    action = _action(request)

    def run(model: Model) -> Outcome:
        now = time.time()
        try:
            facts, result = decide(model)
        except XceError as e:
            e.audited = True  # type: ignore[attr-defined]
            return Outcome([AuditRecorded(time=now, user=actor.name, action=action, target=target,
                                          result=e.code, detail=e.message[:512])], error=e)
        done = target_of(result) if target_of is not None else target
        facts.append(AuditRecorded(time=now, user=actor.name, action=action, target=done, result="ok"))
        return Outcome(facts, result=result)

    return await ctl.execute(run)
