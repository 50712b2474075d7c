"""Reassembly bounds across senders, driven synchronously: the basic channel drops a
duplicate before it makes room (a duplicate never evicts a live partial), forgets the
members that leave an open group's view, and gates, encodes and splits a multicast once;
strangers share one guest budget, in the basic channel and in the open group's
reliable channel alike."""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send, Up
from abcast.events import MulticastRequested, Received, SendRequested, ViewInstalled
from abcast.ids import View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.basic_channel import BasicChannel
from abcast.reliability.channel import ChannelConfig, ReliableChannel

ABOVE = [SData | SOrder]


def _basic(node: str, members: tuple[str, ...], open_group: bool = False,
           window: int = 64, reassembly_bytes: int = 64 * 1024) -> BasicChannel:
    channel = BasicChannel(node, open_group=open_group, window=window, frame_bytes=2_048,
                           reassembly_bytes=reassembly_bytes)
    channel.decode_above(ABOVE)
    channel.handle(ViewInstalled(View(1, members)), 0)
    return channel


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _ups(effects: list[Effect]) -> list[Up]:
    return [e for e in effects if isinstance(e, Up)]


def _big(size: int, tag: int = 1) -> Packet:
    bodies = [bytes([(i + tag) % 251]) * 1_000 for i in range(size // 1_000)]
    return Packet((SOrder(tag, [("a", i + 1) for i in range(len(bodies))], bodies),), b"p")


def test_a_duplicate_fragment_never_evicts_a_live_partial_packet() -> None:
    members = ("a", "b")
    a, b = _basic("a", members, window=2), _basic("b", members, window=2)
    one, two, three = _big(5_000, 1), _big(5_000, 2), _big(2_500, 3)
    first, second, third = (_sends(a.handle(SendRequested("b", p), 0)) for p in (one, two, three))
    got = [u.packet for s in first + second[:-1] + third[:1]
           for u in _ups(b.handle(Received("a", s.header, s.inner), 1))]
    assert got == [one] and b._reassembly.partial("a") == 2  # max_partial (window 2)
    # the network duplicates one of the first packet's fragments: dropped, nothing else
    assert b.handle(Received("a", first[0].header, first[0].inner), 2) == []
    assert b.evicted == 0 and b.duplicates == 1
    last = second[-1]
    assert [u.packet for u in _ups(b.handle(Received("a", last.header, last.inner), 3))] == [two]


def test_an_open_groups_basic_channel_forgets_members_that_leave() -> None:
    a = _basic("a", ("a", "b", "c"), open_group=True)
    b = _basic("b", ("a", "b", "c"), open_group=True)
    for s in _sends(b.handle(SendRequested("a", _big(8_000)), 0))[:-1]:
        a.handle(Received("b", s.header, s.inner), 1)
    assert a._reassembly.held("b") > 0
    a.handle(ViewInstalled(View(2, ("a", "c"))), 2)
    assert a._reassembly.held() == 0


def test_strangers_to_an_open_basic_channel_share_one_guest_budget() -> None:
    a = _basic("a", ("a", "b"), open_group=True, reassembly_bytes=8_192)
    held = 0
    for stranger in ("x", "y"):
        sender = _basic(stranger, (stranger, "a"))
        s = _sends(sender.handle(SendRequested("a", _big(5_000)), 0))[0]
        before = a._reassembly.refused
        assert a.handle(Received(stranger, s.header, s.inner), 1) == []
        if a._reassembly.refused > before:  # refused for room: lost, quietly
            assert stranger == "y"
            continue
        held = a._reassembly.held()
    assert a._reassembly.held("y") == 0  # 1,024 strangers cannot each park a member's share
    assert a._reassembly.held() == held <= a._reassembly.guest_bytes


def test_strangers_to_an_open_reliable_channel_share_one_guest_budget() -> None:
    config = ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192)
    a = OpenChannel("a", config)
    a.decode_above(ABOVE)
    a.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    refused = []
    for stranger in ("x", "y"):
        sender = ReliableChannel(stranger, config)
        sender.decode_above(ABOVE)
        sender.handle(ViewInstalled(View(1, (stranger, "a"))), 0)
        s = _sends(sender.handle(SendRequested("a", _big(5_000)), 0))[0]
        before = a._reassembly.refused
        a.handle(Received(stranger, s.header, s.inner), 1)  # no raise: dropped, resent later
        if a._reassembly.refused > before:
            refused.append(stranger)
    assert refused == ["y"] and a._reassembly.guests_held() <= config.reassembly_bytes
    # once x is a member, it has a member's budget and y's packet finds room again
    a.handle(ViewInstalled(View(2, ("a", "b", "x"))), 2)
    assert a._reassembly.guests_held() == 0


def test_the_basic_channel_splits_a_multicast_once() -> None:
    a = _basic("a", ("a", "b", "c"))
    sends = _sends(a.handle(MulticastRequested(("b", "c"), _big(8_000)), 0))
    assert {s.to for s in sends} == {"b", "c"} and a.fragmented == 2
    assert a._gate.measured == 1 and a._gated is None


@pytest.mark.parametrize("size", [0, 500])
def test_a_packet_that_fits_goes_whole_on_the_basic_channel(size: int) -> None:
    a, b = _basic("a", ("a", "b")), _basic("b", ("a", "b"))
    packet = Packet((SOrder(1, [("a", 1)], [b"y" * size]),), b"x")
    sends = _sends(a.handle(MulticastRequested(("b",), packet), 0))
    assert len(sends) == 1 and a._gate.measured == 0
    assert [u.packet for u in _ups(b.handle(Received("a", sends[0].header, sends[0].inner), 1))
            ] == [packet]


def test_a_packet_the_gate_clears_is_never_measured_on_the_basic_channel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The size gate is inlined on the per-packet path (as the reliable channel's):
    `measure` runs only for a packet the gate cannot clear."""
    import abcast.reliability.basic_channel as module

    calls: list[Packet] = []
    monkeypatch.setattr(module, "measure", lambda gate, codec, packet, bound: calls.append(
        packet))
    a = _basic("a", ("a", "b"))
    a.handle(SendRequested("b", Packet((SData(1),), b"x")), 0)
    assert calls == []
    a.handle(SendRequested("b", _big(8_000)), 0)
    assert len(calls) == 1
