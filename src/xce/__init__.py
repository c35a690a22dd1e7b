"""XCE: an LSF-style batch workload manager with resource claims.

General layout (one home per concept):

- ``xce.model``      facts (typed, versioned records) and the model they fold into: jobs, hosts,
                     claims (``claims``: the one place a claim changes state), claims in jobs
- ``xce.store``      the durable log, snapshots and the leader lease (SQLite, PostgreSQL)
- ``xce.scheduler``  ``plan = schedule(snapshot)``: pure; resource requirement strings
- ``xce.controller`` the process that owns state: group commit, leadership, snapshots, the plan
                     applier, the scheduling loop, host liveness, long-poll wake-ups
- ``xce.api``        the REST API (authentication, audit, error shapes; routes for users, workers,
                     claims and claim agents)
- ``xce.worker``     the worker daemon: runs jobs under a shepherd, publishes claims, its node agent
- ``xce.agents``     the claim-agent loop and ``xce provisioner``
- ``xce.providers``  the storage provider contract, its runner, and ``simfs``
- ``xce.cli``        the ``xce`` command, which speaks only REST
- ``xce.localcluster`` ``xce up`` / ``xce down``
"""

__version__ = "0.1.0"
