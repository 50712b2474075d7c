"""The reliable channel core, driven synchronously: exactly once, any order, bounded state."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel

VIEW = View(1, ("a", "b"))
CFG = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000)


def _pair() -> tuple[ReliableChannel, ReliableChannel]:
    a, b = ReliableChannel("a", CFG), ReliableChannel("b", CFG)
    a.handle(ViewInstalled(VIEW), 0)
    b.handle(ViewInstalled(VIEW), 0)
    return a, b


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _ups(effects: list[Effect]) -> list[Up]:
    return [e for e in effects if isinstance(e, Up)]


def test_each_packet_goes_up_exactly_once_in_arrival_order() -> None:
    a, b = _pair()
    sends = [_sends(a.handle(SendRequested("b", Packet((), bytes([i]))), 0))[0] for i in range(5)]
    arrival = [sends[i] for i in (3, 0, 4, 1, 2)] + [sends[0], sends[3]]  # reordered, duplicated
    ups: list[Up] = []
    for s in arrival:
        ups += _ups(b.handle(Received("a", s.header, s.inner), 10))
    assert [u.packet.payload for u in ups] == [bytes([i]) for i in (3, 0, 4, 1, 2)]
    assert b.duplicates == 2 and b.held_above() == 0


def test_ack_frees_sender_state_and_cancels_retransmission() -> None:
    a, b = _pair()
    for i in range(3):
        a.handle(SendRequested("b", Packet((), bytes([i]))), 0)
    assert a.in_flight() == 3
    b.handle(Received("a", RData(1), Packet()), 5)
    b.handle(Received("a", RData(3), Packet()), 5)
    ack = _sends(b.handle(TimerFired(("ack", "a")), 105))[0]
    assert ack.header == RAck(1, [3]) and ack.control
    effects = a.handle(Received("b", ack.header, ack.inner), 110)
    assert a.in_flight() == 1  # seq 2 still missing
    b.handle(Received("a", RData(2), Packet()), 120)
    ack = _sends(b.handle(TimerFired(("ack", "a")), 220))[0]
    effects = a.handle(Received("b", ack.header, ack.inner), 230)
    assert a.in_flight() == 0
    assert CancelTimer(("rto", "b")) in effects


def test_lost_packets_are_retransmitted_with_backoff_as_control_traffic() -> None:
    a, _ = _pair()
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    first = a.handle(TimerFired(("rto", "b")), 1_000)
    assert [s.header for s in _sends(first)] == [RData(1)] and _sends(first)[0].control
    again = a.handle(TimerFired(("rto", "b")), 3_000)  # deadline was 1000 + 2000
    assert _sends(again) and a.retransmissions == 2
    timers = [e for e in again if isinstance(e, SetTimer)]
    assert timers and timers[0].at == 3_000 + 4_000  # doubled, capped at max_rto


def test_leaving_members_free_their_link_state() -> None:
    a, _ = _pair()
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    effects = a.handle(ViewInstalled(View(2, ("a",))), 10)
    assert a.in_flight() == 0 and CancelTimer(("rto", "b")) in effects
    assert a.handle(SendRequested("b", Packet((), b"y")), 20) == []


def test_memory_stays_bounded_over_a_long_exchange() -> None:
    a, b = _pair()
    now = 0
    for i in range(5_000):
        now += 10
        for s in _sends(a.handle(SendRequested("b", Packet((), b"m")), now)):
            if i % 7:  # drop every seventh first transmission
                b.handle(Received("a", s.header, s.inner), now)
        if i % 50 == 0:
            for s in _sends(b.handle(TimerFired(("ack", "a")), now)):
                a.handle(Received("b", s.header, s.inner), now)
            for s in _sends(a.handle(TimerFired(("rto", "b")), now + 10_000)):
                b.handle(Received("a", s.header, s.inner), now)
    for _ in range(10):
        now += 20_000
        for s in _sends(a.handle(TimerFired(("rto", "b")), now)):
            b.handle(Received("a", s.header, s.inner), now)
        for s in _sends(b.handle(TimerFired(("ack", "a")), now)):
            a.handle(Received("b", s.header, s.inner), now)
    assert a.in_flight() == 0 and b.held_above() == 0


# -- flow control: a window per link (issue #21) ----------------------------------------


def test_a_full_window_queues_packets_and_acks_release_them_in_order() -> None:
    cfg = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, window=4,
                        max_waiting=3)
    a, b = ReliableChannel("a", cfg), ReliableChannel("b", cfg)
    a.handle(ViewInstalled(VIEW), 0)
    b.handle(ViewInstalled(VIEW), 0)
    sent = []
    for i in range(10):
        sent += _sends(a.handle(SendRequested("b", Packet((), bytes([i]))), 0))
    assert [s.header.seq for s in sent] == [1, 2, 3, 4]  # the window: 4 in flight
    assert a.backlog() == 6 and a.backpressured() and a.in_flight() == 4
    released: list[Send] = []
    while sent:
        for s in sent:
            b.handle(Received("a", s.header, s.inner), 10)
        ack = _sends(b.handle(TimerFired(("ack", "a")), 10))[0]
        sent = _sends(a.handle(Received("b", ack.header, ack.inner), 20))
        released += sent
    assert [s.inner.payload for s in released] == [bytes([i]) for i in range(4, 10)]
    assert a.backlog() == 0 and not a.backpressured() and a.in_flight() == 0
    assert a.inspect().counters["window_waits"] == 6


def test_a_packet_beyond_the_window_is_refused_not_handed_up() -> None:
    a, b = _pair()
    send = _sends(a.handle(SendRequested("b", Packet((), b"1")), 0))[0]
    b.handle(Received("a", send.header, send.inner), 1)
    far = RData(1 + CFG.window + 1)
    try:
        b.handle(Received("a", far, Packet((), b"forged")), 2)
    except RemoteProtocolError as exc:
        assert "beyond the window" in str(exc)
    else:
        raise AssertionError("a far-ahead packet was accepted")
    assert b.held_above() == 0 and b.inspect().counters["refused_far"] == 1
    # the edge of the window is still accepted (an honest sender may be that far ahead)
    assert _ups(b.handle(Received("a", RData(1 + CFG.window), Packet((), b"edge")), 3))
