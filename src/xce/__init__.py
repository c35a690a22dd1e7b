"""XCE: an LSF-style batch workload manager with resource claims.

General layout (one home per concept):

- ``xce.model``      facts (typed, versioned records) and the model they fold into
- ``xce.store``      the durable log, snapshots and the leader lease (SQLite, PostgreSQL)
- ``xce.controller`` the process that owns state: group commit, leadership, snapshots
- ``xce.api``        the REST API (authentication, audit, error shapes)
- ``xce.cli``        the ``xce`` command, which speaks only REST
"""

__version__ = "0.1.0"
