"""The names claim agents go by: ``provisioner`` for shared-scope ops, ``node:HOST`` for a worker's.

The controller's model hands ops to an agent by this name, the API checks who may speak for it,
and the provisioner and each worker call themselves by it.  The daemons must not load the model
to learn a string (import-linter forbids them ``xce.model``), so the names live here, below
everyone: stdlib only, nothing of XCE.
"""

from __future__ import annotations

__all__ = ["NODE_PREFIX", "SHARED_AGENT", "node_agent", "node_host"]

SHARED_AGENT = "provisioner"
NODE_PREFIX = "node:"


def node_agent(host: str) -> str:
    """The node agent of worker ``host``: it prepares that host's node-scope claims."""
    return f"{NODE_PREFIX}{host}"


def node_host(agent: str) -> str | None:
    """The host whose node agent ``agent`` is (None: the provisioner, or not an agent's name)."""
    return agent[len(NODE_PREFIX):] if agent.startswith(NODE_PREFIX) else None
