"""grpc://'s receiver bounds what a stranger's Push call holds, as tcp:// does with its
connections: the hello comes in the call's metadata and is checked before any message
of the call is read, so a call without one is dropped at once (one log line, counted)
having cost no more than grpc's metadata bound and the stream's HTTP/2 window (not a
message of up to max_receive_message_length); one that carries nothing for
idle_timeout_s after it is ended quietly.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import msgspec
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.testing.relay import Relay
from abcast.transport import Transport, TransportOptions
from abcast.transport._hello import HELLO_MAGIC, Hello
from abcast.transport.grpc_transport import HELLO_KEY, METHOD_PATH

pytestmark = pytest.mark.timeout(60)


async def refused_call(b: Transport, hello: bytes | None, reason: str,
                       caplog: pytest.LogCaptureFixture, first: bytes | None = None,
                       via: str | None = None) -> None:
    """A raw Push call to `b` (through `via`, host:port, if given) with `hello` in its
    metadata (None: none) that writes `first` (None: nothing) is ended by `b` with
    INVALID_ARGUMENT for `reason`: one log line, counted as a bad frame and a drop."""
    metadata = ((HELLO_KEY, hello),) if hello is not None else None
    async with grpc.aio.insecure_channel(
        via or b.address.removeprefix("grpc://"),
        options=[("grpc.max_send_message_length", -1)],
    ) as channel:
        call = channel.stream_unary(METHOD_PATH)(metadata=metadata)
        writing = asyncio.create_task(call.write(first)) if first is not None else None
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            async with asyncio.timeout(10):
                await call
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert reason in (ended.value.details() or "")
        if writing is not None:
            await asyncio.wait({writing}, timeout=10)  # written, or failed with the call
            writing.cancel()
    assert (b.stats.bad_frames, b.stats.dropped_connections) == (1, 1)
    dropped = [r for r in caplog.records if reason in r.getMessage()]
    assert len(dropped) == 1, dropped


def test_a_call_without_a_hello_is_dropped_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """Refused on its metadata alone, at once: on main the receiver waited for the
    call's first message (up to io_timeout_s, made long here) to read the hello in it."""
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox, TransportOptions(io_timeout_s=60))
            await refused_call(b, None, "no hello", caplog)
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


def test_a_strangers_first_message_is_refused_unread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call without a hello in its metadata that writes a 16 MiB message is refused
    without the receiver asking for any of it: it takes in only what arrived before the
    refusal (grpc reads ahead of the application, within its flow-control window: 1-2 MB
    here), dropped with the call. On main the hello was the call's first message, so
    the receiver waited for the whole message (up to max_receive_message_length, 17 MiB
    by default, for up to io_timeout_s) before it looked at it: 8 such calls cost it
    220 MB of RSS, against 1 MB now (/tmp/opsfix/grpc_mem.py)."""
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox)
            proxy = Relay(b.address.removeprefix("grpc://"))
            via = await proxy.start()
            message = HELLO_MAGIC + bytes(16 << 20)
            await refused_call(b, None, "no hello", caplog, first=message, via=via)
            assert proxy.forwarded < len(message), proxy.forwarded
            await proxy.close()

    run(main)


def test_a_hello_larger_than_any_hello_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A call's hello over HELLO_MAX_BYTES is refused (one log line, counted, the call
    aborted), even when it decodes as a Hello with a padding field msgspec would skip."""
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox)
            padded = HELLO_MAGIC + msgspec.msgpack.encode(
                ["stranger", 1, 1, b.options.max_frame_bytes, bytes(2048)])
            # msgspec alone takes it for a hello: only the bound refuses it
            assert msgspec.msgpack.decode(padded[len(HELLO_MAGIC):], type=Hello).node == (
                "stranger")
            await refused_call(b, padded, "exceeds the hello bound", caplog)

    run(main)
