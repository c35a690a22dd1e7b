"""``xce.wire``: the words XCE's parts say to each other over HTTP, as typed Python.

One definition of every request and document that crosses the wire, shared by the client, the
API and the model's entry points (the daemons' ops, reports and dispatches are here for them too),
so that a field is added in one place:

- ``Submission`` (``_submission``): a job as submitted (``POST /v1/jobs``).  An immutable class;
  its fields' ``Limit`` marks are what the API accepts (``xce.api.schemas`` makes the request schema
  from them) and ``to_body``/``from_body`` are its JSON.  ``xce.jobspec`` builds it from a command
  line; ``xce.client.Client.submit`` is the one place it becomes a request body.
- documents (``_documents``): what the controller answers, as ``TypedDict``s: ``JobDoc`` (a job,
  ``GET /v1/jobs/{id}``), ``JobRow`` (a listing's row), ``HistoryRow``, ``ClaimDoc`` (and its ``ReplicaDoc``s),
  ``SnapshotDoc``,
  and the daemons' ``AgentOp`` (an op a claim agent runs), ``OpReport`` (its result), ``Dispatch``
  (a run a worker starts).  A ``TypedDict`` is the decoded JSON itself: no copy, no import cost,
  ``doc["key"]`` as before, and a type checker knows each key.

Stdlib only, and it imports nothing of XCE: it sits below every other module (``xce.client``'s
stand-alone contract allows it; ``pyproject.toml``), so users' notebooks get it with the client.
"""

from typing import TYPE_CHECKING, Any

from xce.wire._submission import (JOB_NAME_PATTERN, JOB_SECRET_PREFIX, MAX_SCRIPT, NAME_PATTERN, TOKEN_SECRET, Limit,
                                  Submission, never_sent)

if TYPE_CHECKING:
    from xce.wire._documents import (AgentOp, ClaimDoc, Dispatch, HistoryRow, JobClaimDoc, JobDoc, JobRow, OpReport,
                                     ReplicaDoc, RunUsage, SnapshotDoc, TaskDispatch)

_DOCUMENTS = ("AgentOp", "ClaimDoc", "Dispatch", "HistoryRow", "JobClaimDoc", "JobDoc", "JobRow", "OpReport",
              "ReplicaDoc", "RunUsage", "SnapshotDoc", "TaskDispatch")


def __getattr__(name: str) -> Any:
    """The documents are loaded when first named: building a dozen ``TypedDict``s costs a command
    that only prints what it is sent (every one-shot ``xce`` call) some 10 ms of its start-up."""
    if name in _DOCUMENTS:
        from xce.wire import _documents

        return getattr(_documents, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "JOB_NAME_PATTERN",
    "MAX_SCRIPT",
    "NAME_PATTERN",
    "AgentOp",
    "ClaimDoc",
    "Dispatch",
    "HistoryRow",
    "JobClaimDoc",
    "JobDoc",
    "JobRow",
    "Limit",
    "OpReport",
    "ReplicaDoc",
    "RunUsage",
    "SnapshotDoc",
    "Submission",
    "TaskDispatch",
    "TOKEN_SECRET",
    "never_sent",
]
