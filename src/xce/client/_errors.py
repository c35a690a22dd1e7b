"""What ``xce.client`` raises.

    ClientError                   base: every failure of a call, with a one-line ``message``
    ├── ApiError                  the controller answered and refused: ``status``, ``code``, ``message``
    ├── Unreachable               no usable HTTP answer: refused, DNS, timeout, TLS, connection closed
    ├── BadResponse               not an answer the client reads: a success whose body is not JSON, a
    │                             malformed or oversized response (not an XCE controller?)
    ├── InvalidURL (ValueError)   the controller URL is not ``http[s]://HOST[:PORT][/PREFIX]``
    ├── InvalidToken (ValueError) the token holds a character no HTTP header may carry
    └── WaitTimeout (TimeoutError) ``wait_job``/``wait_claim`` gave up before the state was reached

No exit codes here: the ``xce`` command maps these to its own (``xce.cli.errors``), and the
daemons decide for themselves which failures to retry.
"""

from __future__ import annotations


class ClientError(Exception):
    """Base of everything a ``Client`` call raises on purpose; ``message`` is one line for people."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApiError(ClientError):
    """The controller refused the request: its ``{"error": {"code", "message"}}`` with a 4xx/5xx status.

    ``status`` is the HTTP status (401 unknown token, 403 forbidden, 404 not found, 409 conflict,
    503 not the leader or store down, ...) and ``code`` the stable machine-readable word.  Not raised
    for network failures (``Unreachable``).
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Unreachable(ClientError):
    """No HTTP answer at all: connection refused, DNS failure, timeout, TLS failure, or a closed connection.

    The request may or may not have reached the controller (a timeout after sending): callers that
    retry mutations should make them idempotent or check state first.
    """


class BadResponse(ClientError):
    """The controller answered, but not with an answer the client reads: a success status whose body
    is not JSON (or is nested deeper than Python parses), or a response that is malformed or larger
    than the client reads (``MAX_HEAD`` of status line and headers, ``MAX_BODY`` of body)."""


class InvalidURL(ClientError, ValueError):
    """Raised by ``Client(url, ...)`` when the URL is malformed; nothing was sent."""


class InvalidToken(ClientError, ValueError):
    """Raised by ``Client(url, token)`` when the token holds a control character (a CR or LF would end
    the ``Authorization`` header and start one of the caller's choosing) or is empty; nothing was sent."""


class WaitTimeout(ClientError, TimeoutError):
    """Raised by the ``wait_*`` helpers when the object did not reach a wanted state in time."""
