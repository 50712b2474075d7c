"""grpc://'s receiver bounds what a silent Push call holds (a handler task and its link,
as many calls as a stranger cares to open), as tcp:// does with its connections: a
call that sends no hello within io_timeout_s is dropped (one log line, counted), and
one that carries nothing for idle_timeout_s after it is ended quietly.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import msgspec
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import Transport, TransportOptions
from abcast.transport._common import HELLO_MAGIC, Hello
from abcast.transport.grpc_transport import METHOD_PATH

pytestmark = pytest.mark.timeout(60)


async def refused_call(b: Transport, first: bytes | None, reason: str,
                       caplog: pytest.LogCaptureFixture) -> None:
    """A raw Push call to `b` that writes `first` (None: nothing) is ended by `b` with
    INVALID_ARGUMENT for `reason`: one log line, counted as a bad frame and a drop."""
    async with grpc.aio.insecure_channel(b.address.removeprefix("grpc://")) as channel:
        call = channel.stream_unary(METHOD_PATH)()
        if first is not None:
            await call.write(first)
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(10):
                await call
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason in (ended.value.details() or "")
    assert (b.stats.bad_frames, b.stats.dropped_connections) == (1, 1)
    dropped = [r for r in caplog.records if reason in r.getMessage()]
    assert len(dropped) == 1, dropped


def test_a_call_that_never_says_hello_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox, TransportOptions(io_timeout_s=0.3))
            await refused_call(b, None, "no hello within", caplog)
            # and the node keeps serving everyone else
            a = await nodes.start("grpc", "a", Inbox())
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: inbox.got("a") == [0], "a's frame")

    run(main)


def test_a_call_silent_after_its_hello_is_closed_and_its_sender_comes_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Push call that carries nothing for idle_timeout_s is ended quietly (INFO,
    idle_closed), as tcp:// closes an idle connection; a sender opens a new call when
    it has something to say."""
    caplog.set_level(logging.INFO, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox, TransportOptions(idle_timeout_s=0.3))
            a = await nodes.start("grpc", "a", Inbox(), TransportOptions(
                reconnect_initial_s=0.01, reconnect_max_s=0.05))
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: inbox.got("a") == [0], "a's first frame")
            await inbox.wait_until(lambda: b.stats.idle_closed == 1, "the idle call closed")
            await inbox.wait_until(lambda: a.stats.lost_connections >= 1, "a to notice")
            a.send("b", numbered(1))
            await inbox.wait_until(lambda: inbox.got("a") == [0, 1], "a's frame after it")
            assert b.stats.bad_frames == 0
        assert any("idle for" in r.getMessage() for r in caplog.records)

    run(main)


def test_a_first_message_larger_than_any_hello_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Push call's first message over HELLO_MAX_BYTES is refused (one log line,
    counted, the call aborted), even when it decodes as a Hello with a padding field
    msgspec would skip. grpc has read the whole message by then (up to
    max_receive_message_length: grpc has no per-call or first-message bound)."""
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox)
            padded = HELLO_MAGIC + msgspec.msgpack.encode(
                ["stranger", 1, 1, b.options.max_frame_bytes, bytes(1 << 20)])
            # msgspec alone takes it for a hello: only the bound refuses it
            assert msgspec.msgpack.decode(padded[len(HELLO_MAGIC):], type=Hello).node == (
                "stranger")
            await refused_call(b, padded, "exceeds the hello bound", caplog)

    run(main)
