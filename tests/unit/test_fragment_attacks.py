"""Reassembly against a peer that sends what no honest sender does, and against packets
that can never complete: the bytes stored stay within the bounds docs/orderings.md
states ("Packets larger than a frame", Bounds). Each of these held more on the first
version of the bounds: a stranger passing its own packets' numbers (the lowest opened
again and again), an empty first fragment (reserving nothing), a packet whose lost
fragment the basic channel gave up (its reservation kept for ever). A fragment refused
for room still carries its piggybacked ack."""

from __future__ import annotations

import contextlib

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, ViewInstalled
from abcast.ids import View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.basic_channel import BasicChannel, BData
from abcast.reliability.channel import ChannelConfig, RData, ReliableChannel
from abcast.reliability.fragments import Reassembly, RFrag

ABOVE = [SData | SOrder]
CONFIG = ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192)
CHUNK = 1_024  # frame_bytes − HEADROOM


def _stored(reassembly: Reassembly) -> int:
    """Bytes of fragments actually held, read from the table itself."""
    return sum(len(b) for state in reassembly._senders.values()
               for part in state.partial.values() for b in part.parts.values())


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _ups(effects: list[Effect]) -> list[Up]:
    return [e for e in effects if isinstance(e, Up)]


def _open(config: ChannelConfig = CONFIG) -> OpenChannel:
    a = OpenChannel("a", config)
    a.decode_above(ABOVE)
    a.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    return a


@pytest.mark.parametrize("sender", ["x", "b"])  # a stranger (guest_bytes), a member
def test_passing_its_own_packets_numbers_grows_nothing(sender: str) -> None:
    """Fragment 0 of 2 at the number the link waits for (the lowest: it opens whatever
    the room), then a packet on the number of fragment 1: the packet can never complete.
    It used to stay reserved, and the next lowest opened on top: 200 rounds held
    409,600 bytes against a bound of 8,192."""
    a = _open()
    seq = 1
    for _ in range(200):
        a.handle(Received(sender, RFrag(seq, 0, 0, 2), Packet((), bytes(CHUNK))), seq)
        a.handle(Received(sender, RData(seq + 1), Packet((), b"")), seq)
        seq += 2
        assert _stored(a._reassembly) <= a._reassembly.held() <= CHUNK * 2
    assert a._reassembly.abandoned == 199


def test_an_empty_first_fragment_reserves_as_much_as_a_full_one() -> None:
    """200 packets of 4 fragments, each sending an empty fragment 0 and a full fragment
    3: the reservation used to be count × the opening fragment's size, 0 here, and the
    last fragment was taken unaccounted (204,800 bytes stored, 0 held)."""
    a = _open(ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192, window=4_096))
    for k in range(200):
        first = 4 * k + 1
        for index, size in ((0, 0), (3, CHUNK)):
            with contextlib.suppress(RemoteProtocolError):  # refused: not the chunk's size
                a.handle(Received("b", RFrag(first + index, 0, index, 4),
                                  Packet((), bytes(size))), k)
        assert _stored(a._reassembly) <= a._reassembly.held()
    assert a._reassembly.held() <= 2 * CONFIG.reassembly_bytes


def test_a_fragment_across_another_packet_of_its_sender_is_refused() -> None:
    reassembly = Reassembly(8 * CHUNK, 4, chunk=CHUNK)
    reassembly.add("b", 10, 0, 4, bytes(CHUNK), low=1)
    with pytest.raises(RemoteProtocolError, match="across"):
        reassembly.add("b", 12, 1, 4, bytes(CHUNK), low=1)  # 11..14 overlaps 10..13
    assert reassembly.partial("b") == 1


def _basic(node: str, members: tuple[str, ...], open_group: bool = False) -> BasicChannel:
    channel = BasicChannel(node, open_group=open_group, window=64, frame_bytes=2_048,
                           reassembly_bytes=8_192)
    channel.decode_above(ABOVE)
    channel.handle(ViewInstalled(View(1, members)), 0)
    return channel


def _big(size: int, tag: int = 1) -> Packet:
    bodies = [bytes([(i + tag) % 251]) * 1_000 for i in range(size // 1_000)]
    return Packet((SOrder(tag, [("a", i + 1) for i in range(len(bodies))], bodies),), b"p")


def test_a_packet_the_basic_channel_gave_up_frees_its_room() -> None:
    """Stranger x loses fragment 0 of a 5 KB packet and goes on with small packets: the
    mark gives the hole up, and the partial packet with it. Its 6 KiB reservation used
    to stay for ever: stranger y's 4 KB packets then found no room (0 of 20)."""
    a = _basic("a", ("a", "b"), open_group=True)
    x, y = _basic("x", ("x", "a")), _basic("y", ("y", "a"))
    for s in _sends(x.handle(SendRequested("a", _big(5_000)), 0))[1:]:  # fragment 0 lost
        a.handle(Received("x", s.header, s.inner), 1)
    assert a._reassembly.held("x") > 0
    for n in range(70):  # more than the window above the hole: it is given up
        a.handle(Received("x", BData(7 + n), Packet((), b"")), 2)
    got = [u.packet for n in range(20) for s in _sends(y.handle(
        SendRequested("a", _big(4_000, n + 1)), 3)) for u in _ups(
        a.handle(Received("y", s.header, s.inner), 3))]
    assert got == [_big(4_000, n + 1) for n in range(20)]
    assert a._reassembly.held() == 0 and a._reassembly.abandoned == 1


def test_a_fragment_refused_for_room_still_takes_its_piggybacked_ack() -> None:
    config = ChannelConfig(frame_bytes=2_048, reassembly_bytes=4_096, piggyback_acks=True)
    a = ReliableChannel("a", config)
    a.decode_above(ABOVE)
    a.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    a.handle(SendRequested("b", Packet((SData(1),), b"to b")), 0)
    assert a.in_flight() == 1
    # b's lowest packet (4 fragments: all of the bound), then another that finds no room
    a.handle(Received("b", RFrag(1, 0, 0, 4), Packet((), bytes(CHUNK))), 1)
    refused = a._reassembly.refused
    effects = a.handle(Received("b", RFrag(10, 1, 0, 2), Packet((), bytes(CHUNK))), 2)
    assert not _ups(effects) and not _sends(effects)
    assert a._reassembly.refused == refused + 1
    assert a.in_flight() == 0  # its ack was taken all the same
