"""``xce.client``: the Python API of XCE, a typed client of the controller's REST API.

For notebooks, pipelines and XCE's own parts alike: the ``xce`` command, the worker, the
provisioner and ``xce up`` all speak to the controller through it::

    from xce.client import Client, ApiError

    with Client("http://127.0.0.1:7600", token) as xce:
        job = xce.submit(["python", "train.py"], name="train", slots=4, claims=["ckpt:rw"])
        job = xce.wait_job(job["id"])                   # DONE or EXIT
        claim = xce.create_claim("ckpt", claim_class="simfs", size="10Gi", access_mode="RWO")
        claim = xce.wait_claim(claim["id"])             # READY (or FAILED)

General layout: ``_client`` (``Client``: raw ``get``/``post``/``request`` and the typed
helpers), ``_http`` (the transport: HTTP/1.1 keep-alive on plain sockets), ``_errors`` (the
exception tree).  It is stdlib-only and imports nothing of XCE but the version, so the CLI starts
fast and the daemons do not load the server.  Requests and results are typed by ``xce.wire``
(``Submission``; ``JobDoc``, ``ClaimDoc``, ``SnapshotDoc``: the API's JSON documents as ``TypedDict``s),
re-exported here.
"""

from typing import TYPE_CHECKING, Any

from xce.client._client import Client
from xce.client._errors import ApiError, BadResponse, ClientError, InvalidToken, InvalidURL, Unreachable, WaitTimeout
from xce.client._http import DEFAULT_TIMEOUT
from xce.wire import Submission

if TYPE_CHECKING:
    from xce.wire import ClaimDoc, JobDoc, SnapshotDoc

    Job = JobDoc
    Claim = ClaimDoc
    Snapshot = SnapshotDoc

# the documents' types, and the names they had before xce.wire typed them (users' code imports them),
# loaded when first named (as xce.wire's documents are)
_DOCUMENTS = {"JobDoc": "JobDoc", "ClaimDoc": "ClaimDoc", "SnapshotDoc": "SnapshotDoc", "Job": "JobDoc",
              "Claim": "ClaimDoc", "Snapshot": "SnapshotDoc"}


def __getattr__(name: str) -> Any:
    if name in _DOCUMENTS:
        import xce.wire

        return getattr(xce.wire, _DOCUMENTS[name])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "DEFAULT_TIMEOUT",
    "ApiError",
    "BadResponse",
    "Claim",
    "ClaimDoc",
    "Client",
    "ClientError",
    "InvalidToken",
    "InvalidURL",
    "Job",
    "JobDoc",
    "Snapshot",
    "SnapshotDoc",
    "Submission",
    "Unreachable",
    "WaitTimeout",
]
