"""The HTTP transport: HTTP/1.1 with keep-alive on plain sockets, stdlib only, following the leader.

``http.client`` costs ~45 ms of imports, a third of the CLI's start-up; this
speaks just the HTTP the controller does (Content-Length or chunked bodies).
Each thread keeps its own connection to each controller open, so the worker's threads never
share a socket.  With several controllers (``Transport``'s docstring) calls go to the leader.  Every failure becomes a ``ClientError`` (``xce.client._errors``)
with a one-line message; callers never see sockets or raw HTTP.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from typing import Any, Sequence
from urllib.parse import quote, urlsplit

import xce
from xce.client._errors import ApiError, BadResponse, ClientError, InvalidToken, InvalidURL, Unreachable

DEFAULT_TIMEOUT = 30.0
# a response's status line and headers together, and its body: more is refused (``BadResponse``), not
# read on; the native front (native/xce.c MAX_HEAD) bounds the head alike
MAX_HEAD = 64 << 10
MAX_BODY = 256 << 20

# query parameters: a mapping, or pairs when a name repeats (state=RUN&state=PEND); None values are left out
Params = dict[str, Any] | list[tuple[str, Any]] | None


def _control(text: str) -> bool:
    """Does ``text`` hold a control character (C0 or DEL), which no HTTP request line or header may carry?
    (The native front, ``native/xce.c`` ``clean``, refuses the same.)"""
    return any(c < " " or c == "\x7f" for c in text)


def check_token(token: str) -> str:
    """``token`` as it goes into the ``Authorization`` header, or ``InvalidToken``: empty, or holding a
    control character (``XCE_TOKEN=$'tok\\r\\nX-Injected: 1'`` would add a header of its own)."""
    if not token or _control(token):
        raise InvalidToken("the token is empty or holds a control character (a CR, LF, tab...): refused, "
                           "nothing was sent")
    return token


def parse_url(url: str) -> tuple[str, str, int | None, str]:
    """``(scheme, host, port, path prefix)``; a bare ``host:port`` means http.  Control characters and
    spaces are refused (``urlsplit`` would drop some and keep others, which would reach the request)."""
    raw = url.strip()
    if _control(raw) or " " in raw:
        raise InvalidURL(f"invalid controller URL {url!r}: it holds a control character or a space")
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


FAILOVER_WAIT = 30.0  # seconds a call keeps looking for a leader among several controllers
BACKOFF_FIRST = 0.1  # seconds after the first round of controllers that all failed; doubles, with jitter
BACKOFF_MAX = 2.0
MAX_HINTS = 4  # leaders named in a row before a round counts as failed (two standbys naming each other)



def _log(level: str, message: str, *args: Any) -> None:
    """Logger ``xce.client``, imported on first use (the CLI's start-up does not pay for logging)."""
    import logging

    logger = logging.getLogger("xce.client")
    if not logger.handlers:  # a library: say nothing unless the program configured logging
        logger.addHandler(logging.NullHandler())
    getattr(logger, level)(message, *args)


def _jitter() -> float:
    """Uniform in [0, 1): without importing random."""
    return int.from_bytes(os.urandom(4), "big") / 2**32


def split_urls(urls: str | Sequence[str]) -> list[str]:
    """``"URL1,URL2"`` or a list of URLs: each stripped, without a trailing slash, checked; no repeats."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out: list[str] = []
    for raw in items:
        if not raw.strip():
            continue
        parse_url(raw)
        url = raw.strip().rstrip("/")
        if url not in out:
            out.append(url)
    if not out:
        raise InvalidURL(f"no controller URL in {urls!r}")
    return out


class _Failed(Exception):
    """One controller did not serve a call; ``safe``: nothing was done there, so another may be asked."""

    def __init__(self, error: ClientError, safe: bool, leader: str | None = None) -> None:
        super().__init__(error.message)
        self.error, self.safe, self.leader = error, safe, leader


class Transport:
    """Controllers (one URL, or several that share a store), one bearer token; ``request`` sends
    one call to the leader and returns the decoded JSON body.

    Leader following: a standby answers 503 naming the leader's URL, and the call goes there at
    once; a controller that cannot be reached, or a 503 that names nobody, sends it to the next URL,
    and when every URL failed it waits (exponential backoff with jitter) and tries them again, for
    up to ``failover`` seconds.  With a single URL only the leader a standby names is followed;
    anything else fails at once, as it always did.  The controller that answered is remembered for
    every thread's next call.

    A call that may have been acted on before its answer was lost (sent, then no answer; or a 503
    from a leader whose store refused the commit) is tried again only if it is idempotent: GETs,
    calls passed ``idempotent=True`` (a submission with a request id), and every call of a
    transport made with ``retry_mutations=True`` (the daemons', whose reports carry op ids and run
    numbers the controller deduplicates).  Changes of controller are logged once each (logger
    ``xce.client``), not once a call.
    """

    def __init__(self, url: str | Sequence[str], token: str, timeout: float = DEFAULT_TIMEOUT, *,
                 failover: float = FAILOVER_WAIT, retry_mutations: bool = False) -> None:
        self.urls = split_urls(url)
        self._targets = {u: _target(u) for u in self.urls}
        self.token = check_token(token)
        self.timeout = timeout
        self.failover = failover
        self.retry_mutations = retry_mutations
        self._current = self.urls[0]
        self._lock = threading.Lock()
        self._down: set[str] = set()  # controllers whose failure was logged and not yet their recovery
        self._local = threading.local()

    @property
    def url(self) -> str:
        """The controller calls go to now (the last one that answered)."""
        return self._current

    def request(self, method: str, path: str, *, params: Params = None, body: Any = None,
                idempotent: bool | None = None, timeout: float | None = None) -> Any:
        status, reason, _, data = self._call(method, path, params, body, idempotent, timeout)
        return _decode(status, reason, data)

    def get_page(self, path: str, params: Params = None) -> tuple[Any, str | None]:
        """One page of a paged listing: the decoded body and the cursor of the next page (None: the last)."""
        status, reason, headers, data = self._call("GET", path, params, None, True, None)
        return _decode(status, reason, data), headers.get("x-next-cursor")

    # ------------------------------------------------------------ leader following

    def _call(self, method: str, path: str, params: Params, body: Any, idempotent: bool | None,
              timeout: float | None) -> tuple[int, str, dict[str, str], bytes]:
        if idempotent is None:
            idempotent = method == "GET" or self.retry_mutations
        deadline = time.monotonic() + self.failover
        url = self._current
        tried: list[str] = []
        hints = 0
        delay = BACKOFF_FIRST
        while True:
            try:
                answer = self._exchange(url, method, path, params, body, timeout)
                self._answered(url)
                return answer
            except _Failed as f:
                if not (f.safe or idempotent):
                    raise f.error from None
                failure = f
            self._failed(url, failure)
            if failure.leader and failure.leader != url and hints < MAX_HINTS:
                hints += 1
                url = self._learn(failure.leader)
                continue
            if len(self.urls) == 1 and not failure.leader:
                raise failure.error from None  # one controller, and nobody else named: nothing to fail over to
            tried.append(url)
            untried = [u for u in self.urls if u not in tried]
            now = time.monotonic()
            if now >= deadline:
                raise _gave_up(failure.error, tried, self.failover) from None
            if untried:
                url = untried[0]
                continue
            # every controller failed this round: wait, then start again from the one others last used
            pause = min(delay / 2 + _jitter() * delay / 2, deadline - now)
            time.sleep(max(0.0, pause))
            delay = min(delay * 2, BACKOFF_MAX)
            tried, hints = [], 0
            url = self._current

    def _learn(self, leader: str) -> str:
        """A leader a controller named: a URL from that controller's own configuration."""
        url = leader.strip().rstrip("/")
        with self._lock:
            if url not in self._targets:
                try:
                    self._targets[url] = _target(leader)
                except InvalidURL:
                    return self._current
                self.urls.append(url)
        return url

    def _answered(self, url: str) -> None:
        if url == self._current and not self._down:
            return
        with self._lock:
            if url != self._current:
                _log("warning", "controller %s answers: following it (was %s)", url, self._current)
                self._current = url
            if url in self._down:
                self._down.discard(url)
                _log("info", "controller %s answers again", url)

    def _failed(self, url: str, failure: _Failed) -> None:
        with self._lock:
            if url in self._down:
                return
            self._down.add(url)
        others = [u for u in self.urls if u != url]
        if failure.leader:
            _log("warning", "controller %s is not the leader; going to %s", url, failure.leader)
        elif others:
            _log("warning", "controller %s failed (%s); trying %s", url, failure.error.message, ", ".join(others))
        else:
            _log("warning", "controller %s failed: %s", url, failure.error.message)

    # ------------------------------------------------------------ one exchange with one controller

    def _exchange(self, url: str, method: str, path: str, params: Params, body: Any,
                  timeout: float | None) -> tuple[int, str, dict[str, str], bytes]:
        scheme, host, port, prefix = self._targets[url]
        target = prefix + path
        query = _query(params)
        if query:
            target += "?" + query
        payload = b"" if body is None else json.dumps(body).encode()
        head = (f"{method} {target} HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Authorization: Bearer {self.token}\r\nAccept: application/json\r\n"
                f"User-Agent: xce/{xce.__version__}\r\nContent-Length: {len(payload)}\r\n"
                + ("Content-Type: application/json\r\n" if body is not None else "") + "\r\n").encode()
        wait = self.timeout if timeout is None else timeout
        # a kept-alive connection the server closed meanwhile fails before any answer: retry once, fresh
        for attempt in (1, 2):
            reused = sent = False
            try:
                conn = self._connection(url)
                conn.sock.settimeout(wait)
                reused = conn.used
                conn.send(head + payload)
                sent = True
                status, reason, headers, data = conn.response()
                break
            except (socket.timeout, TimeoutError):
                self._drop(url)
                raise _Failed(Unreachable(f"no answer from the controller at {url} within {wait:g}s"),
                              safe=not sent) from None
            except _Closed:
                self._drop(url)
                if reused and attempt == 1:
                    continue
                raise _Failed(Unreachable(f"the controller at {url} closed the connection"), safe=False) from None
            except Unreachable as e:  # TLS
                self._drop(url)
                raise _Failed(e, safe=not sent) from None
            except BadResponse as e:  # not an HTTP answer we read on (too large, malformed)
                self._drop(url)
                raise _Failed(e, safe=False) from None
            except UnicodeError:  # the host name cannot be encoded (a label longer than 63...): nothing sent
                self._drop(url)
                raise _Failed(Unreachable(f"cannot reach the controller at {url}: {host[:80]!r} is not a valid "
                                          "host name"), safe=True) from None
            except OSError as e:
                self._drop(url)
                if reused and attempt == 1 and isinstance(e, (ConnectionResetError, BrokenPipeError)):
                    continue
                raise _Failed(Unreachable(f"cannot reach the controller at {url}: {_reason(e)}"),
                              safe=not sent) from None
        if status == 503:
            err = _error_of(data)
            if err is not None and "leader" in err:  # not the leader: nothing was done here
                leader = err.get("leader") if isinstance(err.get("leader"), str) else None
                raise _Failed(ApiError(503, str(err.get("code", "unavailable")), str(err.get("message"))),
                              safe=True, leader=leader)
            try:
                _decode(status, reason, data)
            except ApiError as e:  # the leader could not commit: it may or may not have
                raise _Failed(e, safe=False) from None
        return status, reason, headers, data

    def close(self) -> None:
        for url in list(getattr(self._local, "conns", {})):
            self._drop(url)

    def _connection(self, url: str) -> _Connection:
        conns = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        conn = conns.get(url)
        if conn is None or conn.sock.fileno() < 0:  # none yet, or its last answer said Connection: close
            scheme, host, port, _ = self._targets[url]
            conn = conns[url] = _Connection(scheme, host, port, self.timeout)
        return conn

    def _drop(self, url: str) -> None:
        conns = getattr(self._local, "conns", {})
        conn = conns.pop(url, None)
        if conn is not None:
            conn.close()


def _target(url: str) -> tuple[str, str, int, str]:
    scheme, host, port, prefix = parse_url(url)
    return scheme, host, port if port is not None else (443 if scheme == "https" else 80), prefix


def _error_of(data: bytes) -> dict[str, Any] | None:
    try:
        doc = json.loads(data) if data else None
    except (ValueError, RecursionError):
        return None
    err = doc.get("error") if isinstance(doc, dict) else None
    return err if isinstance(err, dict) else None


def _gave_up(error: ClientError, tried: list[str], wait: float) -> ClientError:
    """The last failure, saying that every controller was tried for ``wait`` seconds."""
    message = f"{error.message} (no leader among {', '.join(tried)} for {wait:g}s)"
    if isinstance(error, ApiError):
        return ApiError(error.status, error.code, message)
    return type(error)(message)


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
            if len(self.buf) > MAX_HEAD:
                raise BadResponse(f"the controller sent a chunk header larger than {MAX_HEAD} bytes")
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n: int) -> bytes:
        parts, have = [self.buf], len(self.buf)
        while have < n:  # (in parts, joined once: appending to one bytes object copies it every time)
            chunk = self.sock.recv(min(max(n - have, 65536), 1 << 20))
            if not chunk:
                raise _Closed()
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts) if len(parts) > 1 else self.buf
        out, self.buf = data[:n], data[n:]
        return out

    def response(self) -> tuple[int, str, dict[str, str], bytes]:
        self.used = True
        while (end := self.buf.find(b"\r\n\r\n")) < 0 and len(self.buf) <= MAX_HEAD:
            self._fill()
        if end < 0 or end > MAX_HEAD:
            raise BadResponse(f"the controller sent a response header larger than {MAX_HEAD} bytes")
        head, self.buf = self.buf[:end], self.buf[end + 4:]
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
            chunks, total = [], 0
            while True:
                size = _length(self._line().split(b";")[0], 16, total)
                if size == 0:
                    self._line()
                    break
                chunks.append(self._exactly(size))
                total += size
                self._line()
            body = b"".join(chunks)
        else:
            body = self._exactly(_length(headers.get("content-length", "0"), 10, 0))
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, reason[0] if reason else "", headers, body

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _length(text: str | bytes, base: int, before: int) -> int:
    """A body's length (``Content-Length``, or a chunk's size after ``before`` bytes of body), checked."""
    try:
        n = int(text, base)
    except ValueError:
        raise BadResponse(f"the controller sent a malformed body length {text[:40]!r}") from None
    if n < 0 or before + n > MAX_BODY:
        raise BadResponse(f"the controller sent a body length of {n} bytes (at most {MAX_BODY} are read)")
    return n


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
    deep = False
    try:
        doc = json.loads(data) if data else None
        is_json = True
    except ValueError:
        doc, is_json = None, False
    except RecursionError:  # nested deeper than Python parses: no answer of a controller's
        doc, is_json, deep = None, False, True
    if 200 <= status < 300:
        if not is_json:
            raise BadResponse(f"the controller sent a response that is not JSON (HTTP {status})" if not deep else
                              f"the controller sent a response nested deeper than xce reads (HTTP {status})")
        return doc
    err = doc.get("error") if isinstance(doc, dict) else None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        raise ApiError(status, str(err.get("code", "error")), err["message"])
    raise ApiError(status, "http_error", f"HTTP {status} {reason}".strip())
