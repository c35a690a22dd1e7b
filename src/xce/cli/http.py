"""A small REST client on ``http.client`` (stdlib only, so ``xce`` starts fast).

Every failure becomes a ``CliError`` carrying the exit code and a one-line
message; commands never see sockets or raw HTTP.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
from typing import Any
from urllib.parse import urlencode, urlsplit

import xce

DEFAULT_TIMEOUT = 30.0

EXIT_OK = 0
EXIT_REFUSED = 1  # the server said no, or could not be reached
EXIT_USAGE = 2


class CliError(Exception):
    """A failure to report as ``xce: <message>`` on stderr and exit with ``exit_code``."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    """Bad usage found after argument parsing (exit 2)."""

    exit_code = EXIT_USAGE


class ApiError(CliError):
    """The server refused the request: ``{"error": {"code", "message"}}`` with a 4xx/5xx status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class Unreachable(CliError):
    """No HTTP answer at all: connection refused, DNS failure, timeout, TLS failure."""


def parse_url(url: str) -> tuple[str, str, int | None, str]:
    """``(scheme, host, port, path prefix)``; a bare ``host:port`` means http."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as e:
        raise UsageError(f"invalid controller URL {url!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"invalid controller URL {url!r}: expected http[s]://HOST[:PORT]")
    if parts.query or parts.fragment:
        raise UsageError(f"invalid controller URL {url!r}: no query or fragment allowed")
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


class Client:
    """One controller, one bearer token.  ``get``/``post`` return the decoded JSON body."""

    def __init__(self, url: str, token: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.strip().rstrip("/")
        self.scheme, self.host, self.port, self.prefix = parse_url(url)
        self.token = token
        self.timeout = timeout

    def get(self, path: str, params: dict[str, Any] | list[tuple[str, Any]] | None = None) -> Any:
        return self.request("GET", path, params=params)

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, body=body)

    def request(self, method: str, path: str, *, params: dict[str, Any] | list[tuple[str, Any]] | None = None,
                body: Any = None) -> Any:
        target = self.prefix + path
        query = _query(params)
        if query:
            target += "?" + query
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json",
                   "User-Agent": f"xce/{xce.__version__}"}
        payload = None
        if body is not None:
            payload = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn = self._connection()
        try:
            conn.request(method, target, body=payload, headers=headers)
            resp = conn.getresponse()
            status, reason, data = resp.status, resp.reason, resp.read()
        except (socket.timeout, TimeoutError):
            raise Unreachable(f"no answer from the controller at {self.url} within {self.timeout:g}s") from None
        except ssl.SSLError as e:
            raise Unreachable(f"TLS failure talking to the controller at {self.url}: {e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable(f"cannot reach the controller at {self.url}: {_reason(e)}") from None
        finally:
            conn.close()
        return _decode(status, reason, data)

    def _connection(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)


def _query(params: dict[str, Any] | list[tuple[str, Any]] | None) -> str:
    if not params:
        return ""
    items = params.items() if isinstance(params, dict) else params
    pairs = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        pairs.append((k, v))
    return urlencode(pairs)


def _reason(e: BaseException) -> str:
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, socket.gaierror):
        return f"cannot resolve host ({e.strerror or e})"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return str(e) or type(e).__name__


def _decode(status: int, reason: str, data: bytes) -> Any:
    try:
        doc = json.loads(data) if data else None
        is_json = True
    except ValueError:
        doc, is_json = None, False
    if 200 <= status < 300:
        if not is_json:
            raise CliError(f"the controller sent a response that is not JSON (HTTP {status})")
        return doc
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        raise ApiError(status, str(err.get("code", "error")), err["message"])
    raise ApiError(status, "http_error", f"HTTP {status} {reason}".strip())
