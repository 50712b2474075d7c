"""The reliable channel's fragmentation, driven synchronously: a packet larger than a
frame leaves in fragments that are retransmitted one by one and handed up once, whole;
a packet that fits costs no measuring; the bound refuses without recording, so the
fragment comes again; a sender that leaves is forgotten."""

from __future__ import annotations

import pytest
from stack_harness import fields_of

from abcast.codec import Packet, encode_frame
from abcast.effects import Effect, Send, Up
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import MulticastRequested, Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel
from abcast.reliability.fragments import RFrag

VIEW = View(1, ("a", "b", "c"))
CFG = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, frame_bytes=2_048,
                    reassembly_bytes=64 * 1024, window=64)
ABOVE = [SData | SOrder]


def _channel(node: str, config: ChannelConfig = CFG) -> ReliableChannel:
    channel = ReliableChannel(node, config)
    channel.decode_above(ABOVE)
    channel.handle(ViewInstalled(VIEW), 0)
    return channel


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _ups(effects: list[Effect]) -> list[Up]:
    return [e for e in effects if isinstance(e, Up)]


def _frame(send: Send) -> int:
    return len(encode_frame("g", "a", send.inner.push(send.header)))


def _big(size: int = 20_000) -> Packet:
    bodies = [bytes([i % 251]) * 1_000 for i in range(size // 1_000)]
    return Packet((SOrder(1, [("a", i + 1) for i in range(len(bodies))], bodies),), b"p")


def test_a_large_packet_crosses_in_fragments_each_retransmitted_alone() -> None:
    a, b = _channel("a"), _channel("b")
    big = _big()
    sends = _sends(a.handle(SendRequested("b", big), 0))
    assert len(sends) > 10 and all(isinstance(s.header, RFrag) for s in sends)
    assert all(_frame(s) <= CFG.frame_bytes for s in sends)
    assert [s.header.seq for s in sends] == list(range(1, len(sends) + 1))
    lost = {2, 5, len(sends)}
    ups: list[Up] = []
    for s in sends:
        if s.header.seq not in lost:
            ups += _ups(b.handle(Received("a", s.header, s.inner), 10))
    assert ups == []  # incomplete: nothing handed up
    ack = _sends(b.handle(TimerFired(("ack", "a")), 200))[0]
    a.handle(Received("b", ack.header, ack.inner), 210)
    again = _sends(a.handle(TimerFired(("rto", "b")), 2_000))
    assert sorted(s.header.seq for s in again) == sorted(lost)  # only the lost ones
    assert all(isinstance(s.header, RFrag) and s.control for s in again)
    for s in again + again:  # duplicated on the way, too
        ups += _ups(b.handle(Received("a", s.header, s.inner), 2_010))
    assert [u.packet for u in ups] == [big]
    assert b.inspect().counters["reassembled"] == 1 and b.duplicates == len(lost)


def test_a_multicast_is_split_once_and_every_destination_gets_it_whole() -> None:
    a, b, c = _channel("a"), _channel("b"), _channel("c")
    big = _big(8_000)
    sends = _sends(a.handle(MulticastRequested(("b", "c"), big), 0))
    assert a.fragmented == 2 and a.inspect().counters["measured"] == 1  # encoded once
    for peer, channel in (("b", b), ("c", c)):
        got = [u.packet for s in sends if s.to == peer
               for u in _ups(channel.handle(Received("a", s.header, s.inner), 5))]
        assert got == [big]


def test_a_packet_that_fits_goes_whole_and_is_never_encoded_to_know_it() -> None:
    a, b = _channel("a"), _channel("b")
    for seq in range(1, 20):
        for header in (SData(seq), SOrder(seq, [("a", seq)], [b"y" * 300])):
            sends = _sends(a.handle(SendRequested("b", Packet((header,), b"x" * 500)), 0))
            assert [type(s.header) for s in sends] == [RData]
            assert _ups(b.handle(Received("a", sends[0].header, sends[0].inner), 1))
    # SData's size is bounded by its type; SOrder's header alone is encoded to size it
    assert a.inspect().counters["measured"] == 0
    assert a.fragmented == 0


def test_fragments_wait_for_the_window_like_any_packet() -> None:
    small_window = ChannelConfig(frame_bytes=2_048, window=4, reassembly_bytes=64 * 1024)
    a, b = _channel("a", small_window), _channel("b", small_window)
    big = _big(6_000)
    first = _sends(a.handle(SendRequested("b", big), 0))
    assert len(first) == 4 and a.backlog() > 0
    ups: list[Up] = []
    pending = first
    t = 0
    while pending:
        t += 10
        for s in pending:
            ups += _ups(b.handle(Received("a", s.header, s.inner), t))
        ack = _sends(b.handle(TimerFired(("ack", "a")), t))[0]
        pending = _sends(a.handle(Received("b", ack.header, ack.inner), t))
        assert all(isinstance(s.header, RFrag) for s in pending)
    assert [u.packet for u in ups] == [big] and a.backlog() == 0


def _deliver(channel: ReliableChannel, sends: list[Send], now: int) -> tuple[list[Up], list[Send]]:
    """Hand each send from a to `channel`; what went up, and what was refused for room
    (dropped quietly: no raise, which would make the runtime drop the connection)."""
    ups: list[Up] = []
    refused: list[Send] = []
    for s in sends:
        before = channel._reassembly.refused
        ups += _ups(channel.handle(Received("a", s.header, s.inner), now))
        if channel._reassembly.refused > before:
            refused.append(s)
    return ups, refused


def _until_acked(a: ReliableChannel, b: ReliableChannel, lost: set[int]) -> list[Up]:
    """Run a → b until a has nothing in flight; the sends numbered in `lost` are lost
    the first time; refused ones are dropped (as the runtime does). What went up at b."""
    ups: list[Up] = []
    pending: list[Send] = []
    now = 0
    for _ in range(50):
        if not pending and not a.in_flight():
            break
        got, _ = _deliver(b, [s for s in pending if s.header.seq not in lost], now)
        lost = set()
        ups += got
        now += 500
        pending = []
        for effects in (b.handle(TimerFired(("ack", "a")), now), ):
            for ack in _sends(effects):
                pending += _sends(a.handle(Received("b", ack.header, ack.inner), now))
        now += 5_000
        pending += _sends(a.handle(TimerFired(("rto", "b")), now))
    assert a.in_flight() == 0, "the link is blocked"
    return ups


def test_a_fragment_beyond_the_bound_is_refused_unrecorded_and_taken_when_resent() -> None:
    tight = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, frame_bytes=2_048,
                          reassembly_bytes=8_192, window=64)
    a, b = _channel("a", tight), _channel("b", tight)
    one, two = _big(5_000), _big(5_000)
    sends = _sends(a.handle(SendRequested("b", one), 0)) + _sends(
        a.handle(SendRequested("b", two), 0))
    assert len(sends) == 10  # 5 fragments each: 5 KiB reserved each
    # the first packet's fragment 0 is lost; the second's then finds no room
    ups, refused = _deliver(b, sends[1:], 1)
    assert ups == [] and [s.header.seq for s in refused] == list(range(6, 11))
    assert b._reassembly.held("a") <= tight.reassembly_bytes
    # The refused fragments were not recorded: the ack names only the first packet's.
    ack = _sends(b.handle(TimerFired(("ack", "a")), 200))[0]
    assert isinstance(ack.header, RAck) and ack.header.high == 0
    assert ack.header.sacks == [2, 3, 4, 5]
    a.handle(Received("b", ack.header, ack.inner), 210)
    again = _sends(a.handle(TimerFired(("rto", "b")), 2_000))
    assert [s.header.seq for s in again] == [1, *range(6, 11)]
    ups, refused = _deliver(b, again, 2_010)  # resent: taken, both packets go up
    assert refused == [] and [u.packet for u in ups] == [one, two]


def test_a_lost_first_fragment_does_not_block_the_link_for_ever() -> None:
    """The review's case: 4 KiB frames, 16 KiB of reassembly, two ~11 KB packets of four
    fragments, seq 1 lost: the second packet's fragments fill the room; the first's,
    resent, must still be taken (before the fix: refused for ever, 0 packets up)."""
    cfg = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, frame_bytes=4_096,
                        reassembly_bytes=16_384, window=64)
    a, b = _channel("a", cfg), _channel("b", cfg)
    one, two = _big(11_000), _big(11_000)
    first = _sends(a.handle(SendRequested("b", one), 0))
    second = _sends(a.handle(SendRequested("b", two), 0))
    assert len(first) == len(second) == 4
    # the first's fragments but seq 1, then the second's: they fill the room
    ups, refused = _deliver(b, first[1:] + second, 1)
    assert ups == [] and refused
    ups += _until_acked(a, b, set())
    assert [u.packet for u in ups] == [two, one] or [u.packet for u in ups] == [one, two]
    assert b._reassembly.held() == 0


def test_a_resent_duplicate_of_a_completed_fragment_is_acked_not_refused() -> None:
    tight = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, frame_bytes=2_048,
                          reassembly_bytes=5_500, window=64)
    a, b = _channel("a", tight), _channel("b", tight)
    one, two, three = _big(5_000), _big(5_000), _big(2_500)
    first, second, third = (_sends(a.handle(SendRequested("b", p), 0)) for p in (one, two, three))
    ups, _ = _deliver(b, first + second[:-1] + third[:1], 1)
    assert [u.packet for u in ups] == [one]
    # b is full; our ack was lost, so a resends the first packet: duplicates, acked
    high = b.inspect().clock["in"]["a"]["high"]
    effects = b.handle(Received("a", first[0].header, first[0].inner), 5)
    assert b.duplicates == 1 and _ups(effects) == []
    ack = _sends(b.handle(TimerFired(("ack", "a")), 200))[0]
    assert ack.header.high == high


def test_a_multicast_measures_an_unbounded_header_once_and_keeps_nothing_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import abcast.reliability.channel as channel_module
    import abcast.reliability.fragments as fragments_module

    calls = [0]
    real = fragments_module.encode_header

    def counting(header: object) -> bytes:
        calls[0] += 1
        return real(header)

    monkeypatch.setattr(fragments_module, "encode_header", counting)
    monkeypatch.setattr(channel_module, "encode_header", counting)
    a = _channel("a")
    order = Packet((SOrder(1, [("a", 1)], [b"y" * 300]),), b"")
    a.handle(MulticastRequested(("b", "c"), order), 0)
    assert calls[0] == 1  # once per multicast, not once per destination
    big = _big(8_000)
    a.handle(MulticastRequested(("b", "c"), big), 0)
    for peer in ("b", "c"):  # everything acked
        a.handle(Received(peer, RAck(a._out[peer].next_seq - 1), Packet((), b"")), 10)
    assert a.in_flight() == 0
    assert not any(v is big or (isinstance(v, tuple) and big in v)
                   for v in fields_of(a).values())  # the split packet is not retained


def test_a_packet_above_a_receivers_smaller_bound_is_refused_visibly() -> None:
    a = _channel("a", CFG)
    b = _channel("b", ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192))
    sends = _sends(a.handle(SendRequested("b", _big(20_000)), 0))
    with pytest.raises(RemoteProtocolError, match="every member must use the same"):
        b.handle(Received("a", sends[1].header, sends[1].inner), 1)
    assert b.inspect().counters["refused_oversize"] == 1


def test_a_packet_no_peer_could_reassemble_is_refused_at_its_sender() -> None:
    a = _channel("a", ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192))
    with pytest.raises(LocalProtocolError, match="reassembly_bytes"):
        a.handle(SendRequested("b", _big(20_000)), 0)


def test_a_sender_that_leaves_is_forgotten() -> None:
    a, b = _channel("a"), _channel("b")
    sends = _sends(a.handle(SendRequested("b", _big()), 0))
    for s in sends[:-1]:
        b.handle(Received("a", s.header, s.inner), 1)
    assert b.inspect().counters["reassembled"] == 0 and b._reassembly.held("a") > 0
    b.handle(ViewInstalled(View(2, ("b", "c"))), 2)
    assert b._reassembly.held() == 0


def test_a_forged_count_is_refused() -> None:
    a, b = _channel("a"), _channel("b")
    sends = _sends(a.handle(SendRequested("b", _big()), 0))
    s = sends[0]
    b.handle(Received("a", s.header, s.inner), 1)
    forged = RFrag(2, 0, 1, s.header.count + 1)
    with pytest.raises(RemoteProtocolError, match="of a packet of"):
        b.handle(Received("a", forged, sends[1].inner), 2)


def test_without_the_types_above_the_channel_never_splits() -> None:
    plain = ReliableChannel("a", CFG)  # nobody called decode_above
    plain.handle(ViewInstalled(VIEW), 0)
    sends = _sends(plain.handle(SendRequested("b", _big()), 0))
    assert [type(s.header) for s in sends] == [RData]
