"""tcp:// against hostile bytes: a raw socket sends garbage, a bad hello, an oversize
length prefix, a frame truncated at EOF, or well-framed bytes that are not an abcast
frame. Each time exactly that connection is dropped, with one warning line,
`bad_frames` and `dropped_connections` go up by one, and a well-behaved peer's traffic
goes on in order on its own connection. The handler decodes envelopes like the runtime
will, so a DecodeError raised inside it is the transport's to handle.
"""

from __future__ import annotations

import asyncio
import logging
import random
import struct

import pytest
from transport_harness import WAIT_S, Nodes, number_of, numbered, run

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.transport import Link, Transport, TransportOptions
from abcast.transport._hello import Hello, encode_hello
from abcast.transport.tcp import TcpTransport

pytestmark = pytest.mark.timeout(60)

SMALL_LIMIT = 64 * 1024


def prefixed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def hello_from(node: str) -> bytes:
    return prefixed(encode_hello(Hello(node, 1, 1)))


# name -> (bytes the raw socket sends, fragment of the logged reason, max_frame_bytes)
CASES: dict[str, tuple[bytes, str, int | None]] = {
    "random-bytes": (random.Random(7).randbytes(4096), "", None),
    "http-request": (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "exceeds the hello bound", None),
    "bad-hello": (prefixed(b"hello, I am a node"), "expected a hello", None),
    "oversize-prefix": (hello_from("raw") + struct.pack(">I", 2**31), "exceeds", None),
    "just-over-a-small-limit": (
        hello_from("raw") + struct.pack(">I", SMALL_LIMIT + 1) + bytes(100),
        f"exceeds max_frame_bytes {SMALL_LIMIT}",
        SMALL_LIMIT,
    ),
    "truncated-at-eof": (
        hello_from("raw") + struct.pack(">I", 1000) + bytes(10),
        "closed inside a frame (14 of 1004 bytes",
        None,
    ),
    "not-an-abcast-frame": (hello_from("raw") + prefixed(b"\xc1" * 40), "DecodeError", None),
}


class EnvelopeInbox:
    """Decodes every frame as the runtime does; records payload numbers per sender."""

    def __init__(self) -> None:
        self.seqs: dict[str | None, list[int]] = {}

    def __call__(self, link: Link, frame: bytes) -> None:
        env = decode_envelope(frame)  # DecodeError → the transport drops this link
        self.seqs.setdefault(link.peer, []).append(number_of(env.payload))

    def got(self, peer: str) -> list[int]:
        return self.seqs.get(peer, [])


def envelope(seq: int) -> bytes:
    return encode_frame("g1", "good", Packet(payload=numbered(seq)))


async def wait_for(predicate: object, what: str) -> None:
    assert callable(predicate)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT_S
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


async def send_block(good: Transport, inbox: EnvelopeInbox, seqs: range) -> None:
    for seq in seqs:
        good.send("r", envelope(seq))
    await wait_for(lambda: inbox.got("good")[-1:] == [seqs[-1]], f"frames {seqs}")


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        rest = await asyncio.wait_for(reader.read(), WAIT_S)
    except ConnectionResetError:
        return True
    return rest == b""


async def started(
    nodes: Nodes, name: str, options: TransportOptions | None, handler: object
) -> tuple[TcpTransport, str]:
    """A tcp transport started as `name` on a free port, closed with `nodes`."""
    transport = TcpTransport("tcp://127.0.0.1:0", options)
    nodes.started.append(transport)
    return transport, await transport.start(name, handler)  # type: ignore[arg-type]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_connection_is_dropped_and_others_keep_going(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    payload, reason, limit = CASES[case]
    caplog.set_level(logging.WARNING, logger="abcast.transport")
    options = TransportOptions(max_frame_bytes=limit) if limit else None

    async def main() -> None:
        inbox = EnvelopeInbox()
        async with Nodes() as nodes:
            receiver, address = await started(nodes, "r", options, inbox)
            good, _ = await started(nodes, "good", options, lambda link, frame: None)
            good.add_peer("r", address)
            await send_block(good, inbox, range(100))

            port = int(address.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(payload)
            await writer.drain()
            if case in ("random-bytes", "truncated-at-eof"):
                writer.write_eof()
            assert await closed_by_peer(reader), "the bad connection was left open"
            writer.close()

            await send_block(good, inbox, range(100, 200))
            assert inbox.got("good") == list(range(200))
            assert receiver.stats.bad_frames == 1
            assert receiver.stats.dropped_connections == 1
            assert good.stats.lost_connections == 0
            handed_over = 200 + (case == "not-an-abcast-frame")  # the handler saw that one
            assert receiver.stats.frames_in == handed_over

    run(main)
    drops = [r for r in caplog.records if "dropped connection" in r.getMessage()]
    assert len(drops) == 1, [r.getMessage() for r in caplog.records]
    assert drops[0].levelno == logging.WARNING and drops[0].name == "abcast.transport.tcp"
    assert reason in drops[0].getMessage()


def test_a_connection_that_never_says_hello_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="abcast.transport")

    async def main() -> None:
        async with Nodes() as nodes:
            receiver = TcpTransport("tcp://127.0.0.1:0", TransportOptions(io_timeout_s=0.1))
            nodes.started.append(receiver)
            address = await receiver.start("r", EnvelopeInbox())
            reader, writer = await asyncio.open_connection("127.0.0.1", int(address.split(":")[-1]))
            assert await closed_by_peer(reader)
            writer.close()
            assert receiver.stats.bad_frames == 1

    run(main)
    assert any("no hello within 0.1s" in r.getMessage() for r in caplog.records)


def test_a_peer_that_writes_back_on_our_connection_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="abcast.transport")

    async def main() -> None:
        connections = 0

        async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            writer.write(b"unsolicited bytes")
            await writer.drain()
            await reader.read()  # until the transport hangs up on us
            writer.close()

        server = await asyncio.start_server(chatty, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with Nodes() as nodes:
                sender = TcpTransport("tcp://127.0.0.1:0")
                nodes.started.append(sender)
                await sender.start("s", lambda link, frame: None)
                sender.add_peer("x", f"tcp://127.0.0.1:{port}")
                sender.send("x", b"frame")
                await wait_for(lambda: connections >= 2, "a reconnect after the refusal")
                assert sender.stats.bad_frames >= 1
                assert sender.stats.lost_connections >= 1
        finally:
            server.close()
            await server.wait_closed()

    run(main)
    assert any("unexpected bytes" in r.getMessage() for r in caplog.records)


def test_a_slowloris_after_the_hello_is_dropped_and_an_idle_connection_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue #21: a connection that had said hello was never timed out (a truncated
    frame, or one byte a second, held it open for ever). Now one that stays inside an
    unfinished frame is dropped with one warning, one that sends nothing is closed
    quietly, and a peer that keeps sending whole frames is left alone."""
    caplog.set_level(logging.INFO, logger="abcast.transport")
    options = TransportOptions(io_timeout_s=0.1, idle_timeout_s=0.5)

    async def main() -> None:
        inbox = EnvelopeInbox()
        async with Nodes() as nodes:
            receiver, address = await started(nodes, "r", options, inbox)
            port = int(address.rsplit(":", 1)[1])
            slow_r, slow_w = await asyncio.open_connection("127.0.0.1", port)
            slow_w.write(hello_from("slow") + struct.pack(">I", 1000) + b"x")
            idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
            idle_w.write(hello_from("idle"))

            async def drip() -> None:  # a byte every 50 ms: never a whole frame
                for _ in range(40):
                    await asyncio.sleep(0.05)
                    if slow_w.is_closing():
                        return
                    slow_w.write(b"x")

            dripping = asyncio.create_task(drip())
            good, _ = await started(nodes, "good", options, lambda link, frame: None)
            good.add_peer("r", address)

            async def talk() -> None:  # whole frames, 40 ms apart, outlive the timeouts
                for k in range(0, 60, 4):
                    await send_block(good, inbox, range(k, k + 4))
                    await asyncio.sleep(0.04)

            talking = asyncio.create_task(talk())
            assert await closed_by_peer(slow_r), "the slowloris was left open"
            assert await closed_by_peer(idle_r), "the idle connection was left open"
            dripping.cancel()
            for writer in (slow_w, idle_w):
                writer.close()
            await talking
            assert inbox.got("good") == list(range(60))
            assert receiver.stats.dropped_connections == 1
            assert receiver.stats.idle_closed == 1
            assert good.stats.lost_connections == 0

    run(main)
    drops = [r.getMessage() for r in caplog.records if "dropped connection" in r.getMessage()]
    assert len(drops) == 1 and "a frame unfinished for over 0.1s" in drops[0], drops
    assert any("idle for" in r.getMessage() and r.levelno == logging.INFO
               for r in caplog.records)
