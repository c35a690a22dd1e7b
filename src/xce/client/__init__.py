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

from xce.client._client import Claim, Client, Job, Snapshot
from xce.client._errors import ApiError, BadResponse, ClientError, InvalidToken, InvalidURL, Unreachable, WaitTimeout
from xce.client._http import DEFAULT_TIMEOUT
from xce.wire import ClaimDoc, JobDoc, SnapshotDoc, Submission

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
