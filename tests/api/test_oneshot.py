"""The controller's HTTP transport sends a response's head and body as one TCP segment (api/oneshot.py).

Over real loopback TCP under uvloop, as the controller runs: the kernel's count of segments the
server's socket sent (``tcpi_segs_out`` of ``TCP_INFO``) tells one send from two.
"""

from __future__ import annotations

import asyncio
import socket
import struct

import uvloop

from xce.api.oneshot import HOLD_BYTES, JoiningTransport

HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"
BODY = b"hello"
SEGS_OUT = 136  # offset of tcpi_segs_out in struct tcp_info (linux/tcp.h)


def segments_sent(transport: asyncio.Transport) -> int:
    info = transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return struct.unpack_from("I", info, SEGS_OUT)[0]


def exchange(act) -> tuple[bytes, int]:
    """Serve one connection on loopback; ``act(transport)`` writes to it in one loop turn; answers
    (every byte the client read until EOF, the server socket's data segments sent by then)."""
    async def main() -> tuple[bytes, int]:
        made: asyncio.Future = asyncio.get_running_loop().create_future()

        class Server(asyncio.Protocol):
            def connection_made(self, transport):
                made.set_result(transport)

        server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        transport = await made
        before = segments_sent(transport)
        act(transport)
        got = await asyncio.wait_for(reader.read(), 10)  # until the server closes
        sent = segments_sent(transport) if not transport.is_closing() else None
        writer.close()
        server.close()
        return got, (sent - before) if sent is not None else -1

    loop = uvloop.new_event_loop()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


def test_head_and_body_written_in_one_turn_leave_as_one_segment():
    def joined(transport):
        t = JoiningTransport(transport, asyncio.get_running_loop())
        t.write(HEAD)
        t.write(BODY)
        asyncio.get_running_loop().call_later(0.05, transport.write_eof)

    def plain(transport):
        transport.write(HEAD)
        transport.write(BODY)
        asyncio.get_running_loop().call_later(0.05, transport.write_eof)

    got, segments = exchange(joined)
    assert got == HEAD + BODY
    # the FIN of write_eof is one more segment: 1 data + 1 FIN joined, 2 data + 1 FIN without
    got_plain, segments_plain = exchange(plain)
    assert got_plain == HEAD + BODY
    assert (segments, segments_plain) == (2, 3)


def test_close_sends_what_is_held_and_abort_drops_it():
    def close(transport):
        t = JoiningTransport(transport, asyncio.get_running_loop())
        t.write(HEAD)
        t.write(BODY)
        t.close()  # before the turn ends: what is held goes first

    def abort(transport):
        t = JoiningTransport(transport, asyncio.get_running_loop())
        t.write(HEAD)
        t.abort()

    assert exchange(close)[0] == HEAD + BODY
    try:
        assert exchange(abort)[0] == b""
    except ConnectionResetError:
        pass  # an abort resets the connection: nothing held was sent either way


def test_a_large_answer_is_sent_without_waiting_for_the_turn():
    big = b"x" * (HOLD_BYTES + 1)

    def large(transport):
        t = JoiningTransport(transport, asyncio.get_running_loop())
        before = segments_sent(transport)
        t.write(HEAD)
        assert segments_sent(transport) == before  # held for the turn's end
        t.write(big)
        assert segments_sent(transport) > before  # sent at once, without waiting for the turn
        t.close()

    assert exchange(large)[0] == HEAD + big
