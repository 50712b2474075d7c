"""udp:// and datagrams naming the receiving node as their sender.

Loopback multicast means a node hears its own multicasts: those (our node id and our
incarnation) are ignored quietly, as before — nothing counted, nothing logged, nothing
handed over. A datagram naming our node id with another incarnation (another node
configured with our id, an earlier process of ours, a forgery) used to start a source
for our own id and hand its frame to the stack, which refused it as a frame naming this
node as sender (tests/unit/test_stack_self_sender.py). Now it is bad input like a
datagram that does not decode: dropped before it touches the source table, counted in
`bad_datagrams` and `bad_frames`, one log line each — WARNING when the claimed
incarnation is not the one the last such datagram claimed, DEBUG when it is (a node
with our id sends for as long as it runs). Proved on the receive path with crafted
datagrams (the style of test_udp_sources) and end to end: two transports with one id in
one loopback multicast group each drop the other's multicasts and unicasts, and count
none of their own.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from transport_harness import Inbox, Nodes, numbered, run
from udp_group import fresh_group, require_multicast

from abcast.transport.base import Link
from abcast.transport.udp import UdpTransport
from abcast.transport.udp_wire import PacketType, encode

pytestmark = pytest.mark.timeout(60)
ADDR = ("127.0.0.1", 9)  # where the crafted datagrams claim to come from
CLAIM = "names this node, rx, as its sender"


def _datagram(sender: str, seq: int, incarnation: int, kind: int = PacketType.DATA) -> bytes:
    body = b"%s-%d" % (sender.encode(), seq)
    return encode(kind, 0, 1, 0, incarnation, 1, seq, 0, len(body), sender.encode(), body)


def _claims(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == level and CLAIM in r.getMessage()]


def test_a_datagram_claiming_our_id_is_dropped_and_counted_ours_ignored_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="abcast.transport.udp")

    async def main() -> None:
        got: list[tuple[str | None, bytes]] = []

        def on_frame(link: Link, frame: bytes) -> None:
            got.append((link.peer, frame))

        rx = UdpTransport("udp://127.0.0.1:0")
        await rx.start("rx", on_frame)
        try:
            ours = rx.incarnation
            rx._on_datagram(_datagram("rx", 1, ours), ADDR, 0)  # our own, looped back
            assert rx.udp_stats.bad_datagrams == 0 and rx.stats.bad_frames == 0
            assert _claims(caplog, logging.WARNING) == _claims(caplog, logging.DEBUG) == []
            for seq, incarnation in enumerate((ours + 1, ours + 1, ours - 1, 0), start=2):
                rx._on_datagram(_datagram("rx", seq, incarnation), ADDR, 0)
                assert rx.udp_stats.bad_datagrams == seq - 1 == rx.stats.bad_frames
            rx._on_datagram(_datagram("rx", 9, ours + 1, PacketType.RESET), ADDR, 0)
            assert rx.udp_stats.bad_datagrams == 5 and rx._session == 1  # no new session
            rx._on_datagram(_datagram("a", 1, 7), ADDR, 0)  # everyone else: as before
            assert got == [("a", b"a-1")]
            assert "rx" not in rx._sources and "rx" not in rx._table.forgotten
            stats = rx.udp_stats
            assert stats.stale_datagrams == stats.foreign_datagrams == 0
            # one line each: WARNING when the claimed incarnation changes, else DEBUG
            warned = _claims(caplog, logging.WARNING)
            assert len(warned) == 4, warned  # ours + 1, ours - 1, 0, and the RESET's
            assert f"incarnation {ours + 1}, ours is {ours}" in warned[0]
            assert len(_claims(caplog, logging.DEBUG)) == 1  # the second ours + 1
        finally:
            await rx.close()

    asyncio.run(main())


@pytest.mark.parametrize("scheme", ["udp", "udp-secret"])  # with a secret: checked once opened
def test_two_nodes_with_one_id_drop_each_others_datagrams(scheme: str) -> None:
    require_multicast()
    group = fresh_group()

    async def main() -> None:
        inboxes = {name: Inbox() for name in ("rx", "twin", "a", "c")}
        async with Nodes() as nodes:
            url = f"udp://{group}?ttl=0"
            started = {}
            for name, inbox in inboxes.items():  # twin: a second node with rx's id
                node = "rx" if name == "twin" else name
                transport = await nodes.start(scheme, node, inbox, url=url)
                assert isinstance(transport, UdpTransport)
                started[name] = transport
            rx, twin = started["rx"], started["twin"]
            for transport in (rx, twin):
                transport.add_peer("a", started["a"].address)
                transport.add_peer("c", started["c"].address)
            twin.add_peer("rx", rx.address)  # its own id: a unicast to rx
            for seq in range(5):
                rx.multicast(("a", "c"), numbered(seq))  # one group datagram: heard by all
                twin.multicast(("a", "c"), numbered(100 + seq))
                twin.send("rx", numbered(200 + seq))
            assert rx.udp_stats.multicast_frames_out == twin.udp_stats.multicast_frames_out == 5
            # rx: its own 5 (looped back), twin's 5 multicasts and 5 unicasts; twin: its
            # own 5 and rx's 5
            await inboxes["a"].wait_until(
                lambda: rx.udp_stats.datagrams_in >= 15 and twin.udp_stats.datagrams_in >= 10,
                "every datagram read")
            assert rx.udp_stats.bad_datagrams == rx.stats.bad_frames == 10
            assert twin.udp_stats.bad_datagrams == twin.stats.bad_frames == 5
            assert inboxes["rx"].seqs == {} and inboxes["twin"].seqs == {}
            assert rx.stats.frames_in == twin.stats.frames_in == 0
            assert "rx" not in rx._sources and "rx" not in twin._sources

    run(main)
