"""XCE: an LSF-style batch workload manager with resource claims.

General layout (one home per concept), from the top of the house down; each layer imports only
the ones below it (import-linter's contracts in ``pyproject.toml``):

- ``xce.cli``        the ``xce`` command, which speaks only REST (through ``xce.client``)
- ``xce.demo``, ``xce.localcluster``   ``make demo``; ``xce up`` / ``xce down``
- ``xce.worker``     the worker daemon: runs jobs under a shepherd, publishes claims, its node agent
- ``xce.agents``     the claim-agent loop and ``xce provisioner``
- ``xce.api``        the REST API (authentication, audit, error shapes; routes for users, workers,
                     claims and claim agents) and ``api.server``, the controller process
- ``xce.controller`` the process that owns state: group commit, leadership, snapshots, the plan
                     applier, the scheduling loop, host liveness, long-poll wake-ups
- ``xce.scheduler``  ``plan = schedule(view)``: pure, from a ``ClusterView`` the controller builds
- ``xce.model``      facts (typed, versioned records) and the model they fold into: jobs, hosts,
                     claims (``claims``: the one place a claim changes state), claims in jobs
- ``xce.config``, ``xce.resreq``   the controller's config; resource requirement strings
- ``xce.store``      the durable log, snapshots and the leader lease (SQLite, PostgreSQL)
- ``xce.providers``  the storage provider contract, its runner, and ``simfs``
- ``xce.client``     the Python API: a typed REST client with its own errors (stdlib only)
- ``xce.names``, ``xce.units``, ``xce.errors``   names, sizes and amounts, the exception tree
"""

__version__ = "0.1.0"
