"""The HTTP transport: HTTP/1.1 with keep-alive on plain sockets, stdlib only.

``http.client`` costs ~45 ms of imports, a third of the CLI's start-up; this
speaks just the HTTP the controller does (Content-Length or chunked bodies).
Each thread keeps its own connection open, so the worker's threads never
share a socket.  Every failure becomes a ``ClientError`` (``xce.client._errors``)
with a one-line message; callers never see sockets or raw HTTP.
"""

from __future__ import annotations

import json
import socket
import threading
from typing import Any
from urllib.parse import quote, urlsplit

import xce
from xce.client._errors import ApiError, BadResponse, InvalidURL, Unreachable

DEFAULT_TIMEOUT = 30.0

# query parameters: a mapping, or pairs when a name repeats (state=RUN&state=PEND); None values are left out
Params = dict[str, Any] | list[tuple[str, Any]] | None


def parse_url(url: str) -> tuple[str, str, int | None, str]:
    """``(scheme, host, port, path prefix)``; a bare ``host:port`` means http."""
    raw = url.strip()
    if "://" not in raw:
        raw = "http://" + raw
    try:
        parts = urlsplit(raw)
        port = parts.port
    except ValueError as e:
        raise InvalidURL(f"invalid controller URL {url!r}: {e}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidURL(f"invalid controller URL {url!r}: expected http[s]://HOST[:PORT]")
    if parts.query or parts.fragment:
        raise InvalidURL(f"invalid controller URL {url!r}: no query or fragment allowed")
    return parts.scheme, parts.hostname, port, parts.path.rstrip("/")


class Transport:
    """One controller, one bearer token; ``request`` sends one call and returns the decoded JSON body."""

    def __init__(self, url: str, token: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.url = url.strip().rstrip("/")
        self.scheme, self.host, self.port, self.prefix = parse_url(url)
        if self.port is None:
            self.port = 443 if self.scheme == "https" else 80
        self.token = token
        self.timeout = timeout
        self._local = threading.local()

    def request(self, method: str, path: str, *, params: Params = None, body: Any = None) -> Any:
        status, reason, _, data = self._exchange(method, path, params, body)
        return _decode(status, reason, data)

    def get_page(self, path: str, params: Params = None) -> tuple[Any, str | None]:
        """One page of a paged listing: the decoded body and the cursor of the next page (None: the last)."""
        status, reason, headers, data = self._exchange("GET", path, params, None)
        return _decode(status, reason, data), headers.get("x-next-cursor")

    def _exchange(self, method: str, path: str, params: Params, body: Any) -> tuple[int, str, dict[str, str], bytes]:
        target = self.prefix + path
        query = _query(params)
        if query:
            target += "?" + query
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {target} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Authorization: Bearer {self.token}\r\nAccept: application/json\r\n"
                f"User-Agent: xce/{xce.__version__}\r\nContent-Length: {len(payload)}\r\n"
                + ("Content-Type: application/json\r\n" if body is not None else "") + "\r\n").encode()
        # a kept-alive connection the server closed meanwhile fails before any answer: retry once, fresh
        for attempt in (1, 2):
            reused = False
            try:
                conn = self._connection()
                reused = conn.used
                conn.send(head + payload)
                status, reason, headers, data = conn.response()
                break
            except (socket.timeout, TimeoutError):
                self._drop()
                raise Unreachable(f"no answer from the controller at {self.url} within {self.timeout:g}s") from None
            except _Closed:
                self._drop()
                if reused and attempt == 1:
                    continue
                raise Unreachable(f"the controller at {self.url} closed the connection") from None
            except OSError as e:
                self._drop()
                if reused and attempt == 1 and isinstance(e, (ConnectionResetError, BrokenPipeError)):
                    continue
                raise Unreachable(f"cannot reach the controller at {self.url}: {_reason(e)}") from None
        return status, reason, headers, data

    def close(self) -> None:
        self._drop()

    def _connection(self) -> _Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = _Connection(self.scheme, self.host, self.port, self.timeout)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            conn.close()


class _Closed(Exception):
    """The server closed the connection before a whole response arrived."""


class _Connection:
    def __init__(self, scheme: str, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            import ssl

            try:
                self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=host)
            except ssl.SSLError as e:
                self.sock.close()
                raise Unreachable(f"TLS failure talking to {host}:{port}: {e}") from None
        self.buf = b""
        self.used = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Closed()
        self.buf += chunk

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self) -> tuple[int, str, dict[str, str], bytes]:
        self.used = True
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        try:
            _, code, *reason = status_line.split(" ", 2)
            status = int(code)
        except ValueError:
            raise Unreachable(f"the controller sent a malformed status line {status_line[:80]!r}") from None
        headers = {}
        for line in header_lines:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    self._line()
                    break
                body += self._exactly(size)
                self._line()
        else:
            body = self._exactly(int(headers.get("content-length", "0")))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, reason[0] if reason else "", headers, body

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _query(params: Params) -> str:
    if not params:
        return ""
    items = params.items() if isinstance(params, dict) else params
    pairs = []
    for k, v in items:
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        pairs.append(f"{quote(str(k), safe='')}={quote(str(v), safe='')}")
    return "&".join(pairs)


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
            raise BadResponse(f"the controller sent a response that is not JSON (HTTP {status})")
        return doc
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        raise ApiError(status, str(err.get("code", "error")), err["message"])
    raise ApiError(status, "http_error", f"HTTP {status} {reason}".strip())
