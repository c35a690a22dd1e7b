"""Facts and the model they fold into.  Pure: no I/O, no clocks (times come in facts).

General layout, bottom up (no module imports one above it, not even for a type hint)::

    facts, transitions   the log's records; every state machine's shared check
    entities/            what each thing is: enums and records, plain data
    state                ``State``: the entities by key and the indexes over them; its snapshot
    ops                  the one discipline of every provider op (intent, fencing, retries)
    the concepts         each one's decisions (requests -> facts) and folds (facts -> state):
                         identity, catalog, hosts, capabilities, claims/, snapshots/, jobs,
                         job_claims (jobs meet claims), orphans, pools, history, audit
    agents, dispatch     what claim agents and workers are handed, and what their reports mean
    status               a job's status in words (the sentences the decisions above only imply)
    fold                 ``Model``: the state with the table that folds each fact
"""

from xce.model.facts import Fact, decode, encode
from xce.model.fold import Model

__all__ = ["Fact", "Model", "decode", "encode"]
