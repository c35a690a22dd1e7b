"""What each claim class's provider can do, as its claim agent found out (the ``capabilities`` op).

The controller knows a class's provider by name only; the agent that runs the class's ops (the
provisioner for shared classes) asks the provider and reports the answer, per class.  The answer
is a fact (``ClassCapabilities``), recorded only when it changes: requests that depend on it (resize,
snapshot, clone) are refused or accepted the same way after a restart or a failover, and the log
grows by one fact per class per provider change, not per report.

A class with no report yet can do none of the optional things: the requests say so, and that the
agent has not reported yet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from xce.agentnames import SHARED_AGENT
from xce.errors import Conflict, InvalidRequest, XceError
from xce.model.entities.capabilities import ClassCapabilities
from xce.model.facts import ClassCapabilitiesReported, Fact
from xce.model.state import State

if TYPE_CHECKING:
    from xce.config import ClaimClassConfig, Config

#: the contract's capability flags (docs/providers.md); anything else a provider says is ignored
FLAGS = ("create_snapshot", "clone", "expand", "online_expand")


def normalized(raw: dict[str, Any] | None) -> tuple[dict[str, bool], list[str]]:
    """A provider's ``capabilities`` object as flags (missing: False) and access modes; None (the
    provider answered UNSUPPORTED: it predates the op) can do none of them."""
    raw = raw or {}
    flags = {k: raw.get(k) is True for k in FLAGS}
    modes = [m for m in raw.get("access_modes") or [] if isinstance(m, str)][:8]
    return flags, modes


def report(model: State, config: Config, agent: str, shared_agent: str, class_name: str, provider: str,
           raw: dict[str, Any] | None, now: float) -> list[Fact]:
    """An agent's report of a class's capabilities: a fact when it differs from what is known.

    Only the agent that runs the class's ops may report it: the shared agent for shared classes, a
    node agent for node-scope ones; and only for the provider the class names."""
    cls = config.claim_class(class_name)
    if cls is None:
        raise InvalidRequest(f"claim class {class_name!r} does not exist")
    if cls.provider != provider:
        raise Conflict(f"claim class {class_name} is provided by {cls.provider}, not {provider}",
                       code="wrong_provider")
    if (cls.scope == "shared") != (agent == shared_agent):
        raise Conflict(f"claim class {class_name} ({cls.scope} scope) is not {agent}'s to report",
                       code="not_your_class")
    flags, modes = normalized(raw)
    known = model.class_capabilities.get(class_name)
    if known is not None and (known.provider, known.flags, known.access_modes) == (provider, flags, modes):
        return []
    return [ClassCapabilitiesReported(time=now, class_name=class_name, provider=provider, agent=agent,
                                      capabilities={**flags, "access_modes": modes})]


#: one class's report: (class name, provider, what the provider's ``capabilities`` op answered)
ClassReport = tuple[str, str, dict[str, Any] | None]


def report_classes(model: State, config: Config, agent: str, reports: list[ClassReport],
                   now: float) -> tuple[list[Fact], dict[str, str]]:
    """An agent's report of several classes, (class, provider, capabilities) each: the facts of those
    that changed, and why any was refused (one refused class does not refuse the others)."""
    facts: list[Fact] = []
    refused: dict[str, str] = {}
    for class_name, provider, raw in reports:
        try:
            facts += report(model, config, agent, SHARED_AGENT, class_name, provider, raw, now)
        except XceError as e:
            refused[class_name] = e.message
    return facts, refused


def can(model: State, class_name: str, flag: str) -> bool | None:
    """Whether the class's provider can do ``flag`` (None: no agent has reported it yet)."""
    known = model.class_capabilities.get(class_name)
    return None if known is None else known.flags.get(flag, False)


#: the flags as the words refusals use
WORDS = {"create_snapshot": "take snapshots", "clone": "make claims from a snapshot or a claim (clone)",
         "expand": "expand claims", "online_expand": "expand claims in use"}


def require(model: State, cls: ClaimClassConfig, flag: str) -> None:
    """Refuse, naming the class, what its provider cannot do (or has not said it can yet)."""
    words = WORDS.get(flag, flag)
    if cls.scope != "shared":
        raise Conflict(f"claim class {cls.name!r} cannot {words}: it is node-local (scope {cls.scope})",
                       code="unsupported")
    answer = can(model, cls.name, flag)
    if answer is None:
        raise Conflict(f"claim class {cls.name!r} cannot {words} yet: its provider {cls.provider!r} has not "
                       f"reported what it can do (is the provisioner running with it?)", code="unsupported")
    if not answer:
        raise Conflict(f"claim class {cls.name!r} cannot {words}: its provider {cls.provider!r} says "
                       f"{flag}: false", code="unsupported")


def apply_class_capabilities(model: State, f: ClassCapabilitiesReported) -> None:
    flags, modes = normalized(f.capabilities)
    model.class_capabilities[f.class_name] = ClassCapabilities(class_name=f.class_name, provider=f.provider,
                                                              agent=f.agent, time=f.time, flags=flags,
                                                              access_modes=modes)
