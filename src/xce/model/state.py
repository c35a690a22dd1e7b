"""The model's state: every entity map and derived index, and the snapshot of it.  The bottom of
the model: it imports only the entities (``xce.model.entities``) it holds.

Every decision and fold takes a ``State``: they read and change these maps.  What folds a fact
into it, ``xce.model.fold.Model``, is this class with the fold table, which needs every concept
above: kept apart, so that no module of the model imports one that imports it back, not even for
a type hint.

``to_snapshot`` / ``from_snapshot`` carry every field: loading the snapshot
taken at position N and applying the facts after N gives exactly the live
model (``tests/model/test_snapshot_property.py`` proves it).

The audit trail is not model state: folds hand their records to the
transient ``audit_outbox`` and the controller writes them to the store
(``xce.model.audit``).  Snapshot format 2 has no audit; format 1 (which
carried the whole trail) is still read, its records moved into the outbox
under position 0 so the controller can migrate them to the store once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Self

import orjson

from xce.model.entities.audit import AuditOutbox
from xce.model.entities.capabilities import ClassCapabilities
from xce.model.entities.catalog import Project, Queue
from xce.model.entities.claims import Claim, ClaimForm, ClaimState, name_key
from xce.model.entities.hosts import Host
from xce.model.entities.identity import Token, User
from xce.model.entities.jobs import Job, JobState
from xce.model.entities.orphans import Orphan
from xce.model.entities.snapshots import Snapshot, SnapshotState
from xce.records import AuditRecord

SNAPSHOT_FORMAT = 2
#: formats ``from_snapshot`` still reads: 1 carried the audit trail (moved into the outbox on load)
LEGACY_SNAPSHOT_FORMATS = (1,)

# entity collections in the snapshot: attribute -> (entity class, key attribute)
_COLLECTIONS: dict[str, tuple[type, str]] = {
    "users": (User, "name"),
    "tokens": (Token, "token_id"),
    "queues": (Queue, "name"),
    "projects": (Project, "name"),
    "jobs": (Job, "id"),
    "hosts": (Host, "name"),
    "claims": (Claim, "id"),
    "orphans": (Orphan, "handle"),
    "class_capabilities": (ClassCapabilities, "class_name"),
    "snapshots": (Snapshot, "id"),
}
# what the catalog's decisions read and fold: users, their tokens, queues and projects
CATALOG = frozenset({"users", "tokens", "queues", "projects"})
# entities per orjson call in a snapshot (``State.snapshot_json``): about 1.3 ms of encoding each
# (finished jobs with their history: 5.4 ms per 1,000); the event loop waits at most that long
SNAPSHOT_CHUNK = 250
# collections added after snapshot format 2 shipped: a snapshot written before has none of them
_ADDED_COLLECTIONS = frozenset({"class_capabilities", "snapshots"})


def _fields_dict(entity: Any) -> dict[str, Any]:
    """An entity's own fields, as a dict: ``vars`` of most, the slots of Job and Claim (they have more
    fields than CPython shares one key table for, so a ``__dict__`` of each would be a table of its own).
    Off the hot path: the controller's snapshots and archive rows are encoded by orjson directly."""
    if hasattr(entity, "__dict__"):
        return dict(vars(entity))
    return {f.name: getattr(entity, f.name) for f in fields(entity)}


def plain(entity: Any) -> dict[str, Any]:
    """An entity's fields as JSON-ready data.  Shallow (``dataclasses.asdict`` deep-copies and is ~10x
    slower): entity fields hold only JSON values, enums and, on claims, nested op/attachment records."""
    out = _fields_dict(entity)
    if isinstance(entity, Claim):
        out["op"] = dict(vars(entity.op)) if entity.op is not None else None
        out["attachments"] = [dict(vars(a), op=dict(vars(a.op)) if a.op is not None else None)
                              for a in entity.attachments]
        out["resize"] = dict(vars(entity.resize)) if entity.resize is not None else None
        out["replicas"] = [dict(vars(r), op=dict(vars(r.op)) if r.op is not None else None)
                           for r in entity.replicas]
    elif isinstance(entity, Snapshot):
        out["op"] = dict(vars(entity.op)) if entity.op is not None else None
    return out


@dataclass
class State:
    """The entities by key, the counters that number new ones, and indexes derived from them."""

    position: int = 0
    cluster_id: str = ""
    next_job_id: int = 1
    users: dict[str, User] = field(default_factory=dict)
    tokens: dict[str, Token] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    projects: dict[str, Project] = field(default_factory=dict)
    # in increasing id order: ids only grow (``next_job_id``), a dict keeps insertion order, and a
    # snapshot keeps it; readers rely on it for newest-first pages (``history.live_history``)
    jobs: dict[int, Job] = field(default_factory=dict)
    hosts: dict[str, Host] = field(default_factory=dict)
    next_claim_id: int = 1
    next_attachment_id: int = 1
    claims: dict[int, Claim] = field(default_factory=dict)
    orphans: dict[str, Orphan] = field(default_factory=dict)
    agent_epochs: dict[str, int] = field(default_factory=dict)
    class_capabilities: dict[str, ClassCapabilities] = field(default_factory=dict)  # class -> its provider's
    next_snapshot_id: int = 1
    snapshots: dict[int, Snapshot] = field(default_factory=dict)
    # derived indexes, kept by the claim folds and rebuilt from ``claims`` on load (not snapshotted)
    claim_names: dict[str, int] = field(default_factory=dict)  # "project/name" of a live standalone claim -> id
    released_names: dict[str, int] = field(default_factory=dict)  # "project/name" released -> newest id
    open_ops: set[int] = field(default_factory=set)  # claims with an open provider op
    open_replica_ops: set[int] = field(default_factory=set)  # claims with a replica whose op is open
    snapshot_names: dict[str, int] = field(default_factory=dict)  # "project/name" of a live snapshot -> id
    open_snapshot_ops: set[int] = field(default_factory=set)  # snapshots with an open provider op
    pending_jobs: set[int] = field(default_factory=set)  # PEND with nothing allocated: what the scheduler plans
    begin_waiting: dict[int, float] = field(default_factory=dict)  # pending_jobs with a begin time (-b): when
    pending_priorities: dict[int, int] = field(default_factory=dict)  # -sp -> how many of pending_jobs have it
    cluster_held: dict[int, dict[str, float]] = field(default_factory=dict)  # job -> cluster counters it holds
    waiting_jobs: set[int] = field(default_factory=set)  # PEND or PSUSP: what max_pending_jobs_per_user counts
    waiting_by_user: dict[str, int] = field(default_factory=dict)  # user -> how many of waiting_jobs are theirs
    job_requests: dict[str, int] = field(default_factory=dict)  # "user/request id" -> the job it made
    # DONE or EXIT jobs, in the order they ended (an ordered set): what retirement scans (``xce.model.history``)
    finished_jobs: dict[int, None] = field(default_factory=dict)
    # dependencies of jobs that wait (``xce.model.dependencies``): job -> the waiting jobs that name it,
    # a waiting job -> the jobs it names, and the waiting jobs whose condition does not hold now
    # ("waits" or "never"): the scheduler's view leaves those out
    dependents: dict[int, set[int]] = field(default_factory=dict)
    watching: dict[int, list[int]] = field(default_factory=dict)
    dependency_blocked: dict[int, str] = field(default_factory=dict)
    # transient: how many waiting jobs' dependencies came to hold (the scheduling loop plans when it grows)
    dependency_releases: int = field(default=0, compare=False, repr=False)
    # elements of arrays with a limit (NAME[1-100]%5) that hold hosts now: array -> their ids
    array_busy: dict[int, set[int]] = field(default_factory=dict)
    # transient: audit records folded but not yet handed to the store (``xce.model.audit``); None records nothing
    audit_outbox: AuditOutbox | None = field(default=None, compare=False, repr=False)

    # ------------------------------------------------------------ queries

    def default_queue(self) -> str | None:
        if "default" in self.queues:
            return "default"
        if not self.queues:
            return None
        return max(self.queues.values(), key=lambda q: (q.priority, q.name)).name

    def token_for_hash(self, token_hash: str) -> Token | None:
        """The token with this hash, revoked or expired or not (``identity.authenticate`` decides)."""
        return self._token_index().get(token_hash)

    def _token_index(self) -> dict[str, Token]:
        # derived, never snapshotted; rebuilt when the token set changes
        idx = self.__dict__.get("_tok_idx")
        if idx is None or self.__dict__.get("_tok_n") != len(self.tokens):
            idx = {t.token_hash: t for t in self.tokens.values()}
            self.__dict__["_tok_idx"] = idx
            self.__dict__["_tok_n"] = len(self.tokens)
        return idx

    def cluster_used(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for held in self.cluster_held.values():
            for name, amount in held.items():
                used[name] = used.get(name, 0.0) + amount
        return used

    # ------------------------------------------------------------ snapshots

    def _snapshot_head(self) -> dict[str, Any]:
        return {"format": SNAPSHOT_FORMAT, "position": self.position, "cluster_id": self.cluster_id,
                "next_job_id": self.next_job_id, "next_claim_id": self.next_claim_id,
                "next_attachment_id": self.next_attachment_id, "agent_epochs": dict(self.agent_epochs),
                "next_snapshot_id": self.next_snapshot_id}

    def to_snapshot(self, only: frozenset[str] | None = None) -> dict[str, Any]:
        """The model as JSON-ready data; with ``only``, the other collections are left empty (a part
        of the model that ``from_snapshot`` reads back as a model of its own)."""
        out = self._snapshot_head()
        for attr in _COLLECTIONS:
            out[attr] = [plain(e) for e in getattr(self, attr).values()] if only is None or attr in only else []
        return out

    def snapshot_json(self, chunk: int = SNAPSHOT_CHUNK) -> bytes:
        """``to_snapshot()`` as JSON, without building it: orjson writes the entities (dataclasses)
        itself.  The same document (the snapshot property test checks), in 40% of the time (24 ms
        against 62 for 10,000 pending jobs) and without a second copy of every live record as
        dicts: the snapshot is the controller's peak of memory, and the commit loop waits for it.

        Encoded ``chunk`` entities per orjson call: a call holds the GIL until it returns, and the
        event loop, which serves reads while the writer thread snapshots, waits for it.  The whole
        model in one call stopped every request for as long as the encoding took: 134 ms for 25,000
        finished jobs (22.6 MB) on an idle machine, longer under load."""
        head = orjson.dumps(self._snapshot_head(), option=orjson.OPT_NON_STR_KEYS)
        parts = [head[:-1]]  # without its closing brace: the collections follow
        for attr in _COLLECTIONS:
            values = list(getattr(self, attr).values())
            parts.append(b',"%s":[' % attr.encode())
            for i in range(0, len(values), chunk):
                # OBSERVATION: between two calls the loop may take the GIL; the model cannot change
                # meanwhile (the commit loop waits for this snapshot), reads only read it
                parts.append((b"," if i else b"") + orjson.dumps(values[i:i + chunk],
                                                               option=orjson.OPT_NON_STR_KEYS)[1:-1])
            parts.append(b"]")
        parts.append(b"}")
        return b"".join(parts)

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> Self:
        fmt = data.get("format")
        if fmt != SNAPSHOT_FORMAT and fmt not in LEGACY_SNAPSHOT_FORMATS:
            raise ValueError(f"unsupported snapshot format {fmt!r}")
        m = cls(position=data["position"], cluster_id=data["cluster_id"],
                next_job_id=data["next_job_id"], next_claim_id=data["next_claim_id"],
                next_attachment_id=data["next_attachment_id"], agent_epochs=dict(data["agent_epochs"]))
        m.next_snapshot_id = data.get("next_snapshot_id", 1)  # snapshots came later: older ones have none
        if fmt == 1:
            m.audit_outbox = AuditOutbox(records=[_legacy_record(r) for r in data.get("audit", [])])
        for attr, (entity, key) in _COLLECTIONS.items():
            rows = data.get(attr, []) if attr in _ADDED_COLLECTIONS else data[attr]
            setattr(m, attr, {d[key]: entity(**d) for d in rows})
        m._rebuild_indexes()
        return m

    def take_audit(self) -> list[AuditRecord]:
        """The audit records folded since the last call (none when the model keeps no outbox)."""
        return self.audit_outbox.take() if self.audit_outbox is not None else []

    def _rebuild_indexes(self) -> None:
        self.pending_jobs = {j.id for j in self.jobs.values() if j.state is JobState.PEND and not j.alloc_slots}
        self.begin_waiting = {i: self.jobs[i].begin_time for i in self.pending_jobs  # type: ignore[misc]
                              if self.jobs[i].begin_time is not None}
        self.pending_priorities = {}
        for i in self.pending_jobs:
            p = self.jobs[i].user_priority
            self.pending_priorities[p] = self.pending_priorities.get(p, 0) + 1
        self.cluster_held = {j.id: j.alloc_cluster for j in self.jobs.values() if j.alloc_cluster}
        self.waiting_jobs = {j.id for j in self.jobs.values() if j.state in (JobState.PEND, JobState.PSUSP)}
        self.waiting_by_user = {}
        self.job_requests = {f"{j.user}/{j.request_id}": j.id for j in self.jobs.values() if j.request_id is not None}
        finished = sorted((j for j in self.jobs.values() if j.finished), key=lambda j: (j.end_time or 0.0, j.id))
        self.finished_jobs = dict.fromkeys(j.id for j in finished)
        self.array_busy = {}
        for j in self.jobs.values():
            if j.array_busy and j.array_parent is not None:
                self.array_busy.setdefault(j.array_parent, set()).add(j.id)
        for job_id in self.waiting_jobs:
            user = self.jobs[job_id].user
            self.waiting_by_user[user] = self.waiting_by_user.get(user, 0) + 1
        for c in self.claims.values():
            if c.form is ClaimForm.STANDALONE:  # template claims have no name anyone can look up
                key = name_key(c.project, c.name)
                if c.state is ClaimState.RELEASED:
                    self.released_names[key] = max(c.id, self.released_names.get(key, 0))
                else:
                    self.claim_names[key] = c.id
            if c.open_ops():  # its own op, or an attachment's
                self.open_ops.add(c.id)
            if any(r.op is not None for r in c.replicas):
                self.open_replica_ops.add(c.id)
        for s in self.snapshots.values():
            if s.state is not SnapshotState.RELEASED:
                self.snapshot_names[name_key(s.project, s.name)] = s.id
            if s.op is not None:
                self.open_snapshot_ops.add(s.id)


def _legacy_record(r: dict[str, Any]) -> AuditRecord:
    """A format-1 snapshot's record.  Its fact's position was not kept: position 0, and its old
    ``seq`` (1.. in trail order) as the index, which keeps the migration's key unique and its order."""
    return AuditRecord(time=r["time"], user=r["user"], action=r["action"], target=r["target"], result=r["result"],
                       detail=r.get("detail", ""), position=0, index=r["seq"])
