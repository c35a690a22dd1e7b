"""XCE's exception hierarchy.

    XceError                       base of everything XCE raises on purpose
    ├── InvalidRequest             the caller asked for something malformed (HTTP 400)
    ├── Unauthenticated            no token, or a token nobody holds (HTTP 401)
    ├── Forbidden                  a known identity asked for what its role forbids (HTTP 403)
    ├── NotFound                   the named object does not exist *for this caller* (HTTP 404)
    ├── Conflict                   the request contradicts current state (HTTP 409)
    └── Unavailable                this controller cannot serve now (not leader, store down) (HTTP 503)
        └── NotLeader              it does not hold the lease: nothing was done; names the leader's URL

Store-level errors live in ``xce.store.errors`` and are translated to
``Unavailable`` at the controller boundary.  Every subclass carries a stable
machine-readable ``code`` used in the API's ``{"error": {"code", "message"}}``.
"""

from __future__ import annotations


class XceError(Exception):
    """Base class; ``status`` is the HTTP status the API answers with."""

    status = 500
    code = "internal"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class InvalidRequest(XceError):
    """Raised for malformed input: bad names, sizes, unknown fields. Nothing is changed."""

    status = 400
    code = "invalid_request"


class Unauthenticated(XceError):
    """Raised when a request carries no bearer token or one that matches no identity."""

    status = 401
    code = "unauthenticated"


class Forbidden(XceError):
    """Raised when an authenticated identity asks for something its role does not allow."""

    status = 403
    code = "forbidden"


class NotFound(XceError):
    """Raised when an object does not exist, or exists but is not visible to the caller."""

    status = 404
    code = "not_found"


class Conflict(XceError):
    """Raised when a request is well-formed but contradicts state (duplicate name, wrong state)."""

    status = 409
    code = "conflict"


class Unavailable(XceError):
    """Raised when this controller is not the leader or its store refused a commit."""

    status = 503
    code = "unavailable"


class NotLeader(Unavailable):
    """Raised by a controller that does not hold the leader lease (a standby, or a leader whose lease
    ran out): the request was not acted on, so a client may send it to ``leader`` (the leader's
    advertised URL, from that controller's own configuration; None while nobody is known to lead)."""

    def __init__(self, message: str, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader
