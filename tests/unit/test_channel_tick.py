"""The reliable channel's tick (`ChannelConfig.tick_us`): one timer for every link in
place of a delayed-ack and a retransmission timer per link.

Rules: driven by hand, as in test_channel.py; the last tests run the seeded faulty
network of test_channel_piggyback.py (drop, duplication, reordering; timers fired when
due) with ticking channels on one or both sides and judge what the layer above sees:
every packet up exactly once, nothing left in flight. A planted ticking channel that
never retransmits must be caught by the same judgement.
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from test_channel import _sends, _ups
from test_channel_piggyback import run_faulty_pair

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, SetTimer
from abcast.errors import ConfigError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.reliability.channel import TICK, ChannelConfig, RAck, RData, ReliableChannel

VIEW = View(1, ("a", "b"))
TICKING = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000,
                        piggyback_acks=True, tick_us=50)
PER_LINK = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000,
                         piggyback_acks=True)


def _pair(cfg: ChannelConfig = TICKING) -> tuple[ReliableChannel, ReliableChannel]:
    a, b = ReliableChannel("a", cfg), ReliableChannel("b", cfg)
    a.handle(ViewInstalled(VIEW), 0)
    b.handle(ViewInstalled(VIEW), 0)
    return a, b


def _timers(effects: list[Effect]) -> list[Effect]:
    return [e for e in effects if isinstance(e, SetTimer | CancelTimer)]


def test_only_the_first_packet_sets_the_tick_and_no_packet_sets_a_link_timer() -> None:
    a, b = _pair()
    first = a.handle(SendRequested("b", Packet((), b"0")), 0)
    # nothing owed, one packet unacked: the tick is wanted by its deadline (an RTO floor)
    assert _timers(first) == [SetTimer(TICK, 1_000)]
    for i in range(1, 5):
        effects = a.handle(SendRequested("b", Packet((), bytes([i]))), i)
        assert _timers(effects) == []
    # the receiver: its first packet makes an ack due, which wants the tick one tick on;
    # later ones nothing, and a packet sent back carries the ack and cancels nothing
    got = b.handle(Received("a", RData(1), Packet((), b"0")), 5)
    assert _timers(got) == [SetTimer(TICK, 55)] and _ups(got)
    assert _timers(b.handle(Received("a", RData(2), Packet((), b"1")), 6)) == []
    reply = b.handle(SendRequested("a", Packet((), b"r")), 7)
    assert _timers(reply) == [] and _sends(reply)[0].header == RData(1, ack=2)
    # the carried ack frees a's first two packets; b's packet makes an ack due at a,
    # which moves a's tick (set for its deadline) to one tick on
    assert _timers(a.handle(Received("b", RData(1, ack=2), Packet((), b"r")), 8)) == [
        SetTimer(TICK, 58)]
    assert a.in_flight() == 3


def _follow_ticks(channel: ReliableChannel, first: list[Effect], until: int) -> list[int]:
    """Fire the tick whenever the channel sets it, until `until`: the firing times."""
    fired: list[int] = []
    due = [e.at for e in first if isinstance(e, SetTimer) and e.key == TICK]
    while due and due[-1] <= until:
        now = due[-1]
        fired.append(now)
        due = [e.at for e in channel.handle(TimerFired(TICK), now)
               if isinstance(e, SetTimer) and e.key == TICK]
    return fired


def test_a_dead_peers_packet_does_not_keep_the_tick_firing_every_tick() -> None:
    """One packet to a peer that never answers: the tick fires when a retransmission can
    fall due (at most an RTO floor apart), not every tick: 60 ms of 50 µs ticks would
    be 1,200 fires."""
    a, _ = _pair()
    fired = _follow_ticks(a, a.handle(SendRequested("b", Packet((), b"x")), 0), 60_000)
    assert a.retransmissions >= 10 and len(fired) <= 60_000 // 1_000 + 1, fired[:10]
    assert all(later - earlier <= 1_000 for earlier, later in pairwise(fired))


def test_an_ack_falling_due_moves_a_later_tick_to_one_tick_on() -> None:
    a, _ = _pair()
    a.handle(SendRequested("b", Packet((), b"x")), 0)  # tick wanted by 1000
    got = a.handle(Received("b", RData(1), Packet((), b"y")), 100)
    assert _timers(got) == [SetTimer(TICK, 150)] and _ups(got)
    # past it, the ack leaves at the second tick, as always
    assert not _sends(a.handle(TimerFired(TICK), 150))
    assert [s.header for s in _sends(a.handle(TimerFired(TICK), 200))] == [RAck(1, [])]


def test_an_owed_ack_leaves_at_the_second_tick_unless_a_packet_carried_it() -> None:
    _, b = _pair()
    b.handle(Received("a", RData(1), Packet((), b"x")), 0)
    first = b.handle(TimerFired(TICK), 50)
    assert _sends(first) == [] and _timers(first) == [SetTimer(TICK, 100)]
    second = b.handle(TimerFired(TICK), 100)
    assert [s.header for s in _sends(second)] == [RAck(1, [])] and _sends(second)[0].control
    # nothing owed and nothing unacked any more: the tick stops
    assert _timers(second) == []
    # an ack carried before the second tick replaces the standalone one
    b.handle(Received("a", RData(2), Packet((), b"y")), 200)
    reply = _sends(b.handle(SendRequested("a", Packet((), b"r")), 210))
    assert reply[0].header == RData(1, ack=2)
    for now in (250, 300):
        assert not any(isinstance(s.header, RAck) for s in _sends(b.handle(TimerFired(TICK), now)))


def test_a_lost_packet_is_retransmitted_at_the_first_tick_past_its_deadline() -> None:
    a, _ = _pair()
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    now = 0
    resent: list[int] = []
    while now < 8_000:
        now += 50
        for send in _sends(a.handle(TimerFired(TICK), now)):
            assert send.control and send.header == RData(1)
            resent.append(now)
    # deadline 1000, then backed off: 1000 + 2000, then + 4000 (max_rto)
    assert resent == [1_000, 3_000, 7_000]
    assert a.retransmissions == 3 and a.in_flight() == 1


def test_an_ack_stops_the_tick_once_nothing_is_left() -> None:
    a, b = _pair()
    send = _sends(a.handle(SendRequested("b", Packet((), b"x")), 0))[0]
    b.handle(Received("a", send.header, send.inner), 10)
    b.handle(TimerFired(TICK), 60)
    ack = _sends(b.handle(TimerFired(TICK), 110))[0]
    a.handle(Received("b", ack.header, ack.inner), 120)
    assert a.in_flight() == 0
    assert _timers(a.handle(TimerFired(TICK), 50)) == []  # nothing to do: not set again


def test_leaving_members_cancel_no_link_timer_with_a_tick() -> None:
    a, _ = _pair()
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    effects = a.handle(ViewInstalled(View(2, ("a",))), 10)
    assert a.in_flight() == 0 and _timers(effects) == []
    assert _timers(a.handle(TimerFired(TICK), 50)) == []


def test_a_tick_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        ChannelConfig(tick_us=0)


# -- under faults ---------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("a_cfg", "b_cfg"), [(TICKING, TICKING), (TICKING, PER_LINK)],
                         ids=["both-tick", "mixed"])
def test_ticking_channels_deliver_exactly_once_under_loss_dup_and_reordering(
    seed: int, a_cfg: ChannelConfig, b_cfg: ChannelConfig,
) -> None:
    outcome = run_faulty_pair(seed, OpenChannel("a", a_cfg), ReliableChannel("b", b_cfg))
    assert outcome.problems() == [], f"seed {seed}"
    assert all(len(p) == 150 for p in outcome.got.values())


class NeverResending(ReliableChannel):
    """Planted: a ticking channel whose tick acks but never retransmits."""

    def _resend_due(self, peer: NodeId, link: object, now: int) -> tuple[list[Effect], int]:
        return [], now


@pytest.mark.parametrize("seed", range(3))
def test_the_harness_catches_a_tick_that_never_retransmits(seed: int) -> None:
    outcome = run_faulty_pair(seed, NeverResending("a", TICKING), ReliableChannel("b", TICKING))
    assert any("lost for good" in p or "in flight" in p for p in outcome.problems()), seed
