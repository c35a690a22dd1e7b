"""One send per response: uvicorn's HTTP protocol with a transport that joins the writes of one loop turn.

uvicorn (``httptools_impl``) writes a response's head and its body with two ``transport.write``
calls, and uvloop sends each at once: two ``send`` system calls, two TCP segments and, on the
client's side, two wake-ups, where the second often finds its thread waiting for the GIL.  On
loopback the sender's ``send`` also delivers the segment and wakes the reader, with the
controller's GIL held (uvloop does not release it): a quarter of the controller's time under
``bench/claims_jobs.py`` was in those calls.  Starlette's responses send their head and their body
in one turn of the event loop, so holding the writes until the turn ends and sending them joined
halves the calls without delaying anything.

Writes are held only within a turn and up to ``HOLD_BYTES``; ``close`` sends what is held first, and
``abort`` drops it (as an abort drops the transport's own buffer).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HOLD_BYTES = 256 * 1024  # more than this is sent at once: a large answer is not copied again to be joined


class JoiningTransport:
    """A transport whose writes in one loop turn go out as one ``write``; everything else is the
    wrapped transport's."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._held_bytes = 0

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)  # the end of this turn
        self._held.append(data)
        self._held_bytes += len(data)
        if self._held_bytes > HOLD_BYTES:
            self.flush()

    def flush(self) -> None:
        if not self._held:
            return  # OBSERVATION: sent already (close, or the size bound), or nothing was written
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_bytes = [], 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held, self._held_bytes = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class OneSendHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``JoiningTransport``: pass it as ``uvicorn.Config(http=...)``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(JoiningTransport(transport, self.loop))  # type: ignore[arg-type]
