"""A raw HTTP "controller" on loopback for attack tests: it keeps every request it is sent and answers
with whatever bytes the test chose (a hostile or foreign server), so what a client sends and how it
takes an answer no XCE controller gives are seen for real, over a real socket."""

from __future__ import annotations

import socket
import threading
from typing import Callable

UNAUTHENTICATED = b'{"error":{"code":"unauthenticated","message":"invalid or revoked token"}}'


def response(body: bytes, status: bytes = b"200 OK", headers: bytes = b"") -> bytes:
    """A well-formed HTTP/1.1 response (``headers``: more header lines, each ending in CR LF)."""
    return (b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nConnection: close\r\n" + headers
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


class RawServer:
    """Listens on 127.0.0.1; ``answer`` (bytes, or a function of the request's bytes) is sent back to
    each request, then the connection is closed; ``received`` holds every request's bytes."""

    def __init__(self, answer: bytes | Callable[[bytes], bytes] = response(UNAUTHENTICATED, b"401 Unauthorized")):
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.received: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True, name="raw-server").start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(60)  # (a slow reader of a large answer is still sent all of it)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                    self.received.append(data)
                    conn.sendall(self.answer(data) if callable(self.answer) else self.answer)
                except OSError:
                    pass

    def close(self) -> None:
        self.sock.close()
