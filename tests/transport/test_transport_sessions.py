"""Hellos and the supersede rule: one live inbound connection per sending node. A newer
connection (higher conn_seq, or another incarnation) retires the older one, whose later
frames are never delivered, so a reconnect can leave a gap but never reorders; an older
connection arriving late is refused. None of this is bad input. Checked on the Sessions
table and end to end over raw TCP sockets, where the timing is ours to choose.
"""

from __future__ import annotations

import asyncio
import struct

import pytest
from transport_harness import WAIT_S, Inbox, Nodes, numbered, run

from abcast.errors import DecodeError
from abcast.transport import Link
from abcast.transport._common import Backoff
from abcast.transport._hello import Hello, Sessions, decode_hello, encode_hello

pytestmark = pytest.mark.timeout(60)


def link(peer: str) -> Link:
    return Link(peer, "test", lambda link, reason: None)


def test_hello_round_trips_and_refuses_other_bytes() -> None:
    hello = Hello("n3", 12345, 7)
    assert decode_hello(encode_hello(hello)) == hello
    for bad in [b"", b"hello", encode_hello(hello)[:-1], encode_hello(Hello("n3", 1, 1))[:16]]:
        with pytest.raises(DecodeError):
            decode_hello(bad)


def test_sessions_keep_the_newest_connection_per_node() -> None:
    sessions = Sessions()
    first, second, late, reborn = link("x"), link("x"), link("x"), link("x")
    assert sessions.admit(Hello("x", 1, 1), first) == (True, None)
    assert sessions.admit(Hello("x", 1, 2), second) == (True, first)
    assert not first.alive and second.alive
    assert sessions.admit(Hello("x", 1, 1), late) == (False, None)  # older, arriving late
    assert second.alive
    assert sessions.admit(Hello("x", 2, 1), reborn) == (True, second)  # a new incarnation
    other = link("y")
    assert sessions.admit(Hello("y", 1, 1), other) == (True, None)
    assert set(sessions.links()) == {reborn, other}
    sessions.forget(second)  # not current: nothing happens
    assert reborn in sessions.links()
    sessions.forget(reborn)
    assert sessions.links() == [other]


def test_backoff_grows_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.1, 1.0)
    delays = [backoff.next() for _ in range(8)]
    assert 0.075 <= delays[0] <= 0.125
    assert all(d <= 1.0 for d in delays) and delays[-1] >= 0.75
    backoff.reset()
    assert backoff.next() <= 0.125


def test_a_connection_that_ends_at_once_does_not_reset_the_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue #21: a peer that refuses our hello (a name it cannot accept) closes each
    connection at once; the backoff reset on every connect made that a tight loop."""
    import abcast.transport._common as common

    clock = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: clock[0])
    backoff = Backoff(0.1, 1.0)
    delays = []
    for _ in range(6):
        backoff.connected()
        clock[0] += 0.01  # refused at once
        delays.append(backoff.next())
    assert delays[-1] >= 0.75  # still growing to the cap
    backoff.connected()
    clock[0] += 1.0  # a connection that lasted the cap: a success
    assert backoff.next() <= 0.125


def prefixed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


async def raw_connection(
    port: int, hello: Hello, seqs: range
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(prefixed(encode_hello(hello)) + b"".join(prefixed(numbered(s)) for s in seqs))
    await writer.drain()
    return reader, writer


async def is_closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(), WAIT_S) == b""
    except ConnectionResetError:
        return True


def test_a_newer_connection_retires_the_older_one_over_tcp() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            receiver = await nodes.start("tcp", "r", inbox)
            port = int(receiver.address.rsplit(":", 1)[1])
            r1, w1 = await raw_connection(port, Hello("x", 5, 1), range(0, 10))
            await inbox.wait_until(lambda: len(inbox.got("x")) == 10, "connection 1")
            r2, w2 = await raw_connection(port, Hello("x", 5, 2), range(100, 110))
            await inbox.wait_until(lambda: len(inbox.got("x")) == 20, "connection 2")
            assert await is_closed(r1), "the superseded connection stayed open"
            r3, w3 = await raw_connection(port, Hello("x", 5, 1), range(10, 20))  # stale
            assert await is_closed(r3), "a stale connection was accepted"
            w2.write(b"".join(prefixed(numbered(s)) for s in range(110, 120)))
            await w2.drain()
            await inbox.wait_until(lambda: len(inbox.got("x")) == 30, "connection 2 again")
            _r4, w4 = await raw_connection(port, Hello("x", 6, 1), range(200, 205))  # reborn
            await inbox.wait_until(lambda: len(inbox.got("x")) == 35, "the new incarnation")
            assert await is_closed(r2)
            expected = [*range(10), *range(100, 120), *range(200, 205)]
            assert inbox.got("x") == expected
            assert receiver.stats.bad_frames == 0 and receiver.stats.dropped_connections == 0
            for writer in (w1, w2, w3, w4):
                writer.close()

    run(main)
