"""grpc://'s receiver drops a Push call that sends no hello within io_timeout_s, as
tcp:// drops a connection that does not (one log line, counted): otherwise each such
call held a handler task and its link for ever, as many as a stranger cared to open.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
import grpc.aio
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.grpc_transport import METHOD_PATH

pytestmark = pytest.mark.timeout(60)


def test_a_call_that_never_says_hello_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "abcast.transport.grpc_transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("grpc", "b", inbox, TransportOptions(io_timeout_s=0.3))
            target = b.address.removeprefix("grpc://")
            async with grpc.aio.insecure_channel(target) as channel:
                call = channel.stream_unary(METHOD_PATH)()
                with pytest.raises(grpc.aio.AioRpcError) as ended:
                    async with asyncio.timeout(10):
                        await call
                assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "no hello" in (ended.value.details() or "")
            assert (b.stats.bad_frames, b.stats.dropped_connections) == (1, 1)
            dropped = [r for r in caplog.records if "no hello within" in r.getMessage()]
            assert len(dropped) == 1, dropped
            # and the node keeps serving everyone else
            a = await nodes.start("grpc", "a", Inbox())
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: inbox.got("a") == [0], "a's frame")

    run(main)
