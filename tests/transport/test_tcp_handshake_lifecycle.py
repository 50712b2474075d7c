"""tcp:// with a group secret: an outbound connection still in its link handshake
belongs to its channel. remove_peer, close and add_peer again (a fresh connection)
close it at once, as they close an established one; it does not hang on until
io_timeout_s (then log a failed handshake, after close too) because the peer never
answers its Challenge.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from transport_harness import TEST_SECRET, Inbox, Nodes, run

from abcast.transport import TransportOptions

pytestmark = pytest.mark.timeout(60)

#: the handshake would time out long after the test's bounded waits
SILENT = TransportOptions(secret=TEST_SECRET, io_timeout_s=60.0)


class _Mute:
    """A listener that accepts connections, reads what they send and never answers."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue[asyncio.StreamReader] = asyncio.Queue()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self.accepted.put(reader)

        self.server = await asyncio.start_server(accept, "127.0.0.1", 0)
        return f"tcp://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def next_connection(self) -> asyncio.StreamReader:
        async with asyncio.timeout(10):
            return await self.accepted.get()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def _closed_by_the_dialler(reader: asyncio.StreamReader) -> bool:
    """Whether the dialler closes the connection (EOF) within a bounded wait."""
    try:
        async with asyncio.timeout(5):
            while await reader.read(65536):
                pass  # its hello and Challenge
    except TimeoutError:
        return False
    except ConnectionError:
        pass  # aborted: a reset
    return True


@pytest.mark.parametrize("how", ["remove_peer", "close", "readdress"])
def test_a_connection_in_its_handshake_is_closed_with_its_channel(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "abcast.transport.tcp")

    async def main() -> None:
        mute = _Mute()
        address = await mute.start()
        try:
            async with Nodes() as nodes:
                a = await nodes.start("tcp", "a", Inbox(), SILENT)
                a.add_peer("b", address)
                first = await mute.next_connection()
                if how == "remove_peer":
                    a.remove_peer("b")
                elif how == "close":
                    await a.close()
                else:
                    a.add_peer("b", address)
                    await mute.next_connection()  # the fresh one
                assert await _closed_by_the_dialler(first), (
                    f"{how} left the connection in its handshake open")
        finally:
            mute.close()
        assert not [r for r in caplog.records if "handshake" in r.getMessage()]

    run(main)
