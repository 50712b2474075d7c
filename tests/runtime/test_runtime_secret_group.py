"""A secret group at work (sequencer, tcp, three members in one process): a stranger
can join neither at the registry nor on a link — its forged `NotMember` and far-ahead
data frames, sent under a member's id, never reach a stack (one log line per refused
connection) — and a man in the middle on a member's link gets its replayed, altered
and forged frames rejected one log line each; every member still delivers every
message, all in one order.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import struct

import pytest
from test_runtime_group import _collect

from abcast import ConfigError, Group, Node, RegistryServer
from abcast.codec import Packet, encode_frame
from abcast.group.failure_detector import NotMember
from abcast.ordering.registry import ORDERINGS
from abcast.testing.mitm import MitmProxy
from abcast.testing.polling import until
from abcast.transport import TransportOptions, transport_from_url

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif("sequencer" not in ORDERINGS, reason="no sequencer")]

SECRET = b"secret-group-secret"
MESSAGES = 20  # per member


_until = functools.partial(until, timeout_s=20.0)


async def _traffic(groups: list[Group]) -> list[list[tuple[str, int, bytes]]]:
    """Every member's deliveries: (origin, seq, payload) each."""
    for k in range(MESSAGES):
        for g in groups:
            await g.broadcast(_sent(g.node, k + 1))
    got = await asyncio.gather(*(_collect(g, MESSAGES * len(groups)) for g in groups))
    return [[(d.origin, d.seq, d.payload) for d in delivered] for delivered in got]


def _sent(origin: str, seq: int) -> bytes:
    """The payload `origin` broadcast as its `seq`th message."""
    return f"{origin}:{seq - 1}".encode()


def _assert_one_complete_order(orders: list[list[tuple[str, int, bytes]]], members: int) -> None:
    """One order on every member, every message in it once, each with the payload its
    origin sent (a forged or altered payload delivered would fail here)."""
    assert all(order == orders[0] for order in orders)
    assert sorted(orders[0]) == sorted(
        (f"n{i}", s, _sent(f"n{i}", s)) for i in range(1, members + 1)
        for s in range(1, MESSAGES + 1))


def _warnings(caplog: pytest.LogCaptureFixture, fragment: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and fragment in r.getMessage()]


def test_a_stranger_neither_joins_nor_gets_a_forged_frame_in(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "abcast")

    async def main() -> list[list[tuple[str, int]]]:
        async with RegistryServer(sizes={"bank": 3}) as server:
            groups = list(await asyncio.gather(*(
                Group("bank", ordering="sequencer", registry=server.url, secret=SECRET).open()
                for _ in range(3))))
            try:
                with pytest.raises(ConfigError, match="refused"):
                    await Group("bank", ordering="sequencer", registry=server.url).open()
                # The attacks, under n1's and n2's names, from a node without the
                # secret: a NotMember to n3, data frames far ahead to the sequencer n1.
                stranger = transport_from_url(
                    "tcp://127.0.0.1:0",
                    TransportOptions(reconnect_initial_s=60.0, reconnect_max_s=60.0))
                await stranger.start("n1", lambda _link, _frame: None)
                n1, n3 = (g.host for g in (groups[0], groups[2]))
                stranger.add_peer("n3", n3.address)
                stranger.send("n3", encode_frame("bank", "n1", Packet((NotMember(1),))))
                await _until(lambda: n3.transport.stats.dropped_connections == 1)
                await stranger.close()
                stranger = transport_from_url(
                    "tcp://127.0.0.1:0",
                    TransportOptions(reconnect_initial_s=60.0, reconnect_max_s=60.0))
                await stranger.start("n2", lambda _link, _frame: None)
                stranger.add_peer("n1", n1.address)
                for _ in range(50):
                    stranger.send("n1", encode_frame("bank", "n2", Packet(payload=b"forged")))
                await _until(lambda: n1.transport.stats.dropped_connections == 1)
                await stranger.close()
                orders = await _traffic(groups)
                assert all(g.host.stats.bad_frames == 0 for g in groups)
                return orders
            finally:
                for g in groups:
                    await g.close()

    orders = asyncio.run(main())
    _assert_one_complete_order(orders, 3)
    assert all(b"forged" not in payload for order in orders for _, _, payload in order)
    refused = _warnings(caplog, "link handshake failed")
    assert len(refused) == 2, refused
    assert all("127.0.0.1:" in line for line in refused)
    # the stranger's Join, and the Leave of its clean-up
    assert len(_warnings(caplog, "registry refused Join")) == 1


@pytest.mark.parametrize("aead", [0, 1])
def test_replayed_altered_and_forged_frames_on_a_members_link_are_rejected(
    aead: int, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "abcast")

    def attack(index: int, frame: bytes, seen: list[bytes]) -> list[bytes]:
        if index == 5:
            return [frame, seen[2]]  # a replay
        if index == 10:
            altered = bytearray(frame)
            altered[len(altered) // 2] ^= 0x01
            return [bytes(altered), frame]  # altered, then the genuine one
        if index == 15:  # a forgery with a counter far ahead
            return [frame, struct.pack(">Q", 1 << 40) + os.urandom(max(40, len(frame) - 8))]
        return [frame]

    async def main() -> tuple[list[list[tuple[str, int]]], int, MitmProxy]:
        options = TransportOptions(secret=SECRET, aead=aead)
        nodes = [Node(transport_from_url("tcp://127.0.0.1:0", options), node=f"n{i}",
                      secret=SECRET) for i in (1, 2, 3)]
        for node in nodes:
            await node.start()
        n1, n2, _n3 = nodes
        proxy = MitmProxy(int(n2.address.rsplit(":", 1)[1]), attack=attack)
        port = await proxy.start()
        groups: list[Group] = []
        try:
            for node in nodes:
                peers = {o.id: o.address for o in nodes if o is not node}
                if node is n1:
                    peers["n2"] = f"tcp://127.0.0.1:{port}"  # n1 -> n2 goes through it
                groups.append(await Group("g", ordering="sequencer", host=node,
                                          peers=peers).open())
            orders = await _traffic(groups)
            await _until(lambda: n2.transport.stats.rejected_frames >= 3)
            return orders, n2.transport.stats.rejected_frames, proxy
        finally:
            for g in groups:
                await g.close()
            for node in nodes:
                await node.close()
            await proxy.close()

    orders, rejected, proxy = asyncio.run(main())
    _assert_one_complete_order(orders, 3)
    assert len(proxy.data_frames) > 15
    assert rejected == 3
    lines = _warnings(caplog, "rejected a frame")
    assert len(lines) == 3, lines
    assert sum("replayed" in line for line in lines) == 1
    assert not _warnings(caplog, "dropped connection")
