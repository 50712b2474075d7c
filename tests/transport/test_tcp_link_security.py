"""tcp:// with a group secret, attacked: a stranger (no secret, a wrong one, or a raw
socket claiming a member's id) is refused at the handshake with one log line naming its
address, and never displaces the member's own link; a man in the middle that forges,
replays or alters a frame gets each one rejected with one log line, while every genuine
frame still arrives, once, in order. Without the secret a listener refuses nothing new.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct

import pytest
from transport_harness import TEST_SECRET, Inbox, Nodes, numbered, run

from abcast.security.handshake import Challenge, Confirm, encode
from abcast.testing.mitm import MitmProxy
from abcast.transport import Transport, TransportOptions
from abcast.transport._hello import Hello, encode_hello
from abcast.transport.tcp import TcpTransport

pytestmark = pytest.mark.timeout(60)

SECRET = TransportOptions(secret=TEST_SECRET)
#: a stranger that tries once during a test (its reconnect backoff is longer than it)
ONCE = TransportOptions(reconnect_initial_s=60.0, reconnect_max_s=60.0)
LOGGER = "abcast.transport.tcp"


def _prefixed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


def _warnings(caplog: pytest.LogCaptureFixture, fragment: str, node: str = "b") -> list[str]:
    """The warnings `node`'s transport logged that contain `fragment`."""
    return [m for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING
            and (m := r.getMessage()).startswith(f"tcp {node}:") and fragment in m]


async def _send_and_check(a: TcpTransport, inbox: Inbox, start: int, count: int) -> None:
    for seq in range(start, start + count):
        a.send("b", numbered(seq))
    await inbox.wait_until(lambda: len(inbox.got("a")) >= start + count, "a's frames")
    assert inbox.got("a") == list(range(start + count))
    assert inbox.corrupt == 0


async def _members(nodes: Nodes, inbox: Inbox, count: int) -> tuple[TcpTransport, Transport]:
    """Members a and b (b's frames go to `inbox`), a's first `count` frames delivered."""
    a = await nodes.start("tcp", "a", Inbox(), SECRET)
    b = await nodes.start("tcp", "b", inbox, SECRET)
    a.add_peer("b", b.address)
    assert isinstance(a, TcpTransport)
    await _send_and_check(a, inbox, 0, count)
    return a, b


@pytest.mark.parametrize("stranger", ["no-secret", "wrong-secret"])
def test_a_stranger_is_refused_at_the_handshake_with_one_log_line(
    stranger: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, b = await _members(nodes, inbox, 50)
            secret = None if stranger == "no-secret" else b"some-other-secret"
            x = await nodes.start(
                "tcp", "a", Inbox(), TransportOptions(secret=secret, reconnect_initial_s=60.0,
                                                      reconnect_max_s=60.0))
            x.add_peer("b", b.address)  # x claims to be a
            x.send("b", numbered(10_000))
            await inbox.wait_until(lambda: b.stats.dropped_connections >= 1, "the refusal")
            await _send_and_check(a, inbox, 50, 50)  # a's link was never displaced
            assert 10_000 not in inbox.got("a")
            refused = _warnings(caplog, "link handshake failed")
            assert len(refused) == 1, refused
            assert "127.0.0.1:" in refused[0]  # the stranger's address
            assert b.stats.rejected_frames == 0

    run(main)


def test_a_raw_socket_claiming_a_member_cannot_finish_the_handshake(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, b = await _members(nodes, inbox, 20)
            port = int(b.address.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_prefixed(encode_hello(Hello("a", 99, 1)))
                         + _prefixed(encode(Challenge(os.urandom(32), "mac"))))
            head = await reader.readexactly(4)
            await reader.readexactly(struct.unpack(">I", head)[0])  # b's Response
            writer.write(_prefixed(encode(Confirm(os.urandom(32))))  # a guess
                         + _prefixed(b"\x00" * 40))
            assert await reader.read() == b""  # closed by b
            writer.close()
            await _send_and_check(a, inbox, 20, 20)
            refused = _warnings(caplog, "initiator does not hold the group secret")
            assert len(refused) == 1 and "127.0.0.1:" in refused[0], refused

    run(main)


def _flip(frame: bytes, at: int) -> bytes:
    out = bytearray(frame)
    out[at % len(out)] ^= 0x10
    return bytes(out)


@pytest.mark.parametrize("aead", [0, 1])
def test_forged_replayed_and_tampered_frames_are_each_rejected_with_one_log_line(
    aead: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    options = TransportOptions(secret=TEST_SECRET, aead=aead)

    def attack(index: int, frame: bytes, seen: list[bytes]) -> list[bytes]:
        if index == 10:  # a replay of an earlier genuine frame
            return [frame, seen[3]]
        if index == 20:  # the genuine frame, altered in its body, then the genuine one
            return [_flip(frame, 12), frame]
        if index == 30:  # a forgery: a fresh counter far ahead, made-up body and tag
            return [frame, struct.pack(">Q", 1 << 40) + os.urandom(len(frame) - 8)]
        if index == 40:  # a counter rewritten far ahead (the MAC covers it)
            return [_flip(frame, 2), frame]
        return [frame]

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("tcp", "a", Inbox(), options)
            b = await nodes.start("tcp", "b", inbox, options)
            proxy = MitmProxy(int(b.address.rsplit(":", 1)[1]), attack=attack)
            port = await proxy.start()
            try:
                a.add_peer("b", f"tcp://127.0.0.1:{port}")
                assert isinstance(a, TcpTransport)
                count = 60
                for seq in range(count):
                    a.send("b", numbered(seq))
                    await asyncio.sleep(0)  # one frame per write: the proxy sees each
                    await a.drain()
                await inbox.wait_until(lambda: len(inbox.got("a")) >= count, "every frame")
                await inbox.wait_until(lambda: b.stats.rejected_frames >= 4, "the rejections")
                assert inbox.got("a") == list(range(count))  # every genuine one, once, in order
                assert inbox.corrupt == 0
                assert b.stats.rejected_frames == 4
                assert b.stats.dropped_connections == 0 and a.stats.reconnects == 0
                rejected = _warnings(caplog, "rejected a frame")
                assert len(rejected) == 4, rejected
                assert sum("replayed" in line for line in rejected) == 1
            finally:
                await proxy.close()

    run(main)

