"""The NAK channel's gaps, driven by hand: a packet is handed up the moment it is whole,
above any gap; a cancel that lands in the middle of a fragmented packet loses that packet
alone (its other fragments are `orphaned`), never raises, never stalls the stream and
never loses a packet already received; a cancel far above the stream is ignored; a
fragment claiming more than max_fragments is refused."""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send, SetTimer, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.reliability.nak import UNICAST, NakChannel, NakConfig, NCancel, NData, NNak

V1 = View(1, ("a", "b", "c"))
SMALL = NakConfig(frag_bytes=100)


def _pair() -> tuple[NakChannel, NakChannel]:
    a, b = NakChannel("a", SMALL, open_group=True), NakChannel("b", SMALL, open_group=True)
    for layer in (a, b):
        layer.handle(ViewInstalled(V1), 0)
    return a, b


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _payloads(effects: list[Effect]) -> list[bytes]:
    return [e.packet.payload for e in effects if isinstance(e, Up)]


def _cancel_round(a: NakChannel, b: NakChannel, expected: list[int]) -> list[Effect]:
    """b out of a's view for a while (a frees its stream to b: the open-group rule), then
    back; b NAKs its gaps and a answers with a cancel, which b receives."""
    a.handle(ViewInstalled(View(2, ("a", "c"))), 20)
    a.handle(ViewInstalled(View(3, ("a", "b", "c"))), 30)
    (nak,) = _sends(b.handle(TimerFired("nak"), 3_000))
    (cancel,) = _sends(a.handle(Received("b", nak.header, Packet()), 3_100))
    assert cancel.header == NCancel(UNICAST, expected)
    return b.handle(Received("a", cancel.header, Packet()), 3_200)


def test_a_cancel_of_a_first_fragment_loses_that_packet_and_the_stream_flows_on() -> None:
    a, b = _pair()
    out = _sends(a.handle(SendRequested("b", Packet((), b"F" * 250)), 0))  # seqs 1..3
    out += _sends(a.handle(SendRequested("b", Packet((), b"p4")), 0))
    out += _sends(a.handle(SendRequested("b", Packet((), b"p5")), 0))
    assert [s.header.seq for s in out] == [1, 2, 3, 4, 5]
    ups: list[Effect] = []
    for s in out[2:4]:  # b loses 1 and 2, gets 3 (fragment 2 of 3) and 4
        ups += b.handle(Received("a", s.header, s.inner), 10)
    ups += _cancel_round(a, b, [1, 2])
    ups += b.handle(Received("a", out[4].header, out[4].inner), 3_300)
    for s in _sends(a.handle(SendRequested("b", Packet((), b"p6")), 4_000)):
        ups += b.handle(Received("a", s.header, s.inner), 4_100)
    assert _payloads(ups) == [b"p4", b"p5", b"p6"]
    assert b.inspect().clock["next"] == {"a/u": 7}
    assert b.skipped == 2 and b.orphaned == 1
    assert not _sends(b.handle(TimerFired("nak"), 30_000))


def test_a_cancel_in_the_middle_of_a_packet_loses_no_packet_received_before_it() -> None:
    a, b = _pair()
    out = _sends(a.handle(SendRequested("b", Packet((), b"p1")), 0))        # seq 1
    out += _sends(a.handle(SendRequested("b", Packet((), b"p2")), 0))       # seq 2
    out += _sends(a.handle(SendRequested("b", Packet((), b"Q" * 150)), 0))  # seqs 3, 4
    out += _sends(a.handle(SendRequested("b", Packet((), b"p5")), 0))       # seq 5
    ups: list[Effect] = []
    for s in (out[1], out[3], out[4]):  # b gets 2, 4 and 5; loses 1 and 3
        ups += b.handle(Received("a", s.header, s.inner), 10)
    ups += _cancel_round(a, b, [1, 3])
    assert _payloads(ups) == [b"p2", b"p5"]  # each once; the packet of 3 and 4 is lost
    assert b.inspect().clock["next"] == {"a/u": 6}
    assert b.inspect().counters["held_above_gaps"] == 0
    assert not _sends(b.handle(TimerFired("nak"), 30_000))


def test_a_cancel_of_a_later_fragment_drops_the_waiting_first_one() -> None:
    a, b = _pair()
    out = _sends(a.handle(SendRequested("b", Packet((), b"F" * 250)), 0))  # seqs 1..3
    out += _sends(a.handle(SendRequested("b", Packet((), b"p4")), 0))
    ups = b.handle(Received("a", out[0].header, out[0].inner), 10)  # fragment 0 waits
    ups += b.handle(Received("a", out[3].header, out[3].inner), 10)
    ups += _cancel_round(a, b, [2, 3])
    assert _payloads(ups) == [b"p4"]
    assert b.inspect().clock["next"] == {"a/u": 5} and b.orphaned == 1


def test_fragments_arriving_in_any_order_make_the_packet_once() -> None:
    a, b = _pair()
    out = _sends(a.handle(SendRequested("b", Packet((), bytes(range(250)))), 0))
    ups: list[Effect] = []
    for s in (out[2], out[0], out[2], out[1], out[0]):
        ups += b.handle(Received("a", s.header, s.inner), 10)
    assert _payloads(ups) == [bytes(range(250))]
    assert b.duplicates == 2 and b.inspect().clock["next"] == {"a/u": 4}


def test_a_cancel_far_above_the_stream_is_ignored() -> None:
    _, b = _pair()
    b.handle(Received("a", NData(UNICAST, 1), Packet((), b"p1")), 10)
    far = SMALL.max_holdback + 10
    b.handle(Received("a", NCancel(UNICAST, [far]), Packet()), 20)
    assert b.inspect().counters["held_above_gaps"] == 0


def test_a_fragment_claiming_more_than_max_fragments_is_refused() -> None:
    _, b = _pair()
    header = NData(UNICAST, 1, 0, SMALL.max_fragments + 1)
    with pytest.raises(RemoteProtocolError):
        b.handle(Received("a", header, Packet((), b"x")), 10)
    assert b.inspect().clock["next"] == {}


def test_a_packet_above_a_gap_is_handed_up_at_once_and_the_gap_naked() -> None:
    a, b = _pair()
    out = [s for k in (1, 2, 3)
           for s in _sends(a.handle(SendRequested("b", Packet((), b"p%d" % k)), 0))]
    assert _payloads(b.handle(Received("a", out[2].header, out[2].inner), 10)) == [b"p3"]
    (nak,) = _sends(b.handle(TimerFired("nak"), 3_000))
    assert nak.header == NNak(UNICAST, [1, 2])


def _timers(effects: list[Effect], key: str) -> list[SetTimer]:
    return [e for e in effects if isinstance(e, SetTimer) and e.key == key]


@pytest.mark.parametrize("key", ["nak", "stable"])
def test_a_timer_whose_set_timer_was_lost_is_set_again_once_overdue(key: str) -> None:
    """The stack drops a frame's outputs when a layer above refuses the packet, the
    channel's SetTimer among them: the next event past the timer's due time sets it
    again, due at once (tests/sim/test_nak_churn_stall.py is the run that showed it)."""
    a, b = _pair()
    out = [s for k in range(4)
           for s in _sends(a.handle(SendRequested("b", Packet((), b"p%d" % k)), 0))]
    (lost,) = _timers(b.handle(Received("a", out[1].header, out[1].inner), 10), key)
    # ... that output was dropped; before it is due, another packet does not set it again
    assert _timers(b.handle(Received("a", out[2].header, out[2].inner), 11), key) == []
    late = lost.at + 1
    (again,) = _timers(b.handle(Received("a", out[3].header, out[3].inner), late), key)
    assert again.at == late
    if key == "nak":  # and it NAKs the gap, which it never did again before
        (nak,) = _sends(b.handle(TimerFired("nak"), late))
        assert nak.header == NNak(UNICAST, [1])
