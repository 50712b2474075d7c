"""The reliable channel's adaptive timeout, over a small simulated link a ⇄ b.

Properties: the RTO converges to the round trip plus its variance, Karn's rule (a
retransmitted packet's ack gives no sample), backoff doubles, caps and carries over to
new packets until a valid sample, a queue that only grows does not set off
retransmissions while acks keep coming, and exactly-once delivery under drop, duplication
and reordering.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections.abc import Callable, Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import ConfigError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel
from abcast.reliability.rto import GRANULARITY_US

VIEW = View(1, ("a", "b"))
INF = 2**62


class Link:
    """Two channels on a simulated link: `delay(now)` gives each frame's one-way latency;
    frames may be dropped or duplicated; `fifo` keeps arrivals in sending order."""

    def __init__(
        self,
        config: ChannelConfig,
        delay: Callable[[int], int],
        rng: random.Random | None = None,
        drop: float = 0.0,
        dup: float = 0.0,
        fifo: bool = False,
        drop_first: frozenset[int] = frozenset(),
    ) -> None:
        self.nodes = {"a": ReliableChannel("a", config), "b": ReliableChannel("b", config)}
        for channel in self.nodes.values():
            channel.handle(ViewInstalled(VIEW), 0)
        self.delay, self.rng, self.drop, self.dup, self.fifo = delay, rng, drop, dup, fifo
        self.drop_first = set(drop_first)  # data seqs whose first transmission is lost
        self.now = 0
        self.wire: list[tuple[int, int, str, Send]] = []
        self.timers: dict[tuple[str, Hashable], int] = {}
        self.last_arrival = {"a": 0, "b": 0}
        self.delivered: list[bytes] = []
        self._tiebreak = itertools.count()

    @property
    def a(self) -> ReliableChannel:
        return self.nodes["a"]

    def send(self, payload: bytes) -> None:
        self._apply("a", self.a.handle(SendRequested("b", Packet((), payload)), self.now))

    def _apply(self, node: str, effects: list[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                self._transmit(effect)
            elif isinstance(effect, SetTimer):
                self.timers[(node, effect.key)] = effect.at
            elif isinstance(effect, CancelTimer):
                self.timers.pop((node, effect.key), None)
            elif isinstance(effect, Up):
                self.delivered.append(effect.packet.payload)

    def _transmit(self, send: Send) -> None:
        header = send.header
        if isinstance(header, RData) and header.seq in self.drop_first:
            self.drop_first.discard(header.seq)
            return
        copies = 1
        if self.rng is not None:
            if self.rng.random() < self.drop:
                return
            copies += self.rng.random() < self.dup
        for _ in range(copies):
            at = self.now + self.delay(self.now)
            if self.fifo:
                at = max(at, self.last_arrival[send.to])
                self.last_arrival[send.to] = at
            heapq.heappush(self.wire, (at, next(self._tiebreak), send.to, send))

    def run_until(self, until: int) -> None:
        while True:
            arrival = self.wire[0][0] if self.wire else INF
            timer_key, timer_at = min(self.timers.items(), key=lambda kv: kv[1],
                                      default=(None, INF))
            if min(arrival, timer_at) > until:
                break
            if arrival <= timer_at:
                self.now, _, dst, send = heapq.heappop(self.wire)
                src = "b" if dst == "a" else "a"
                received = Received(src, send.header, send.inner)
                self._apply(dst, self.nodes[dst].handle(received, self.now))
            else:
                assert timer_key is not None
                node, key = timer_key
                del self.timers[timer_key]
                self.now = timer_at
                self._apply(node, self.nodes[node].handle(TimerFired(key), self.now))
        self.now = max(self.now, until)

    def run_traffic(self, packets: int, every_us: int, first: int = 0) -> None:
        for i in range(first, first + packets):
            self.send(i.to_bytes(4, "big"))
            self.run_until(self.now + every_us)


# -- convergence ---------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(one_way=st.integers(500, 150_000), jitter=st.integers(0, 20_000))
def test_rto_converges_to_the_round_trip_plus_its_variance(one_way: int, jitter: int) -> None:
    rng = random.Random(one_way * 7919 + jitter)
    ack_delay = 200
    config = ChannelConfig(ack_delay_us=ack_delay, rto_us=60_000, min_rto_us=100)
    link = Link(config, lambda _: one_way + rng.randint(0, jitter), fifo=True)
    link.run_traffic(200, every_us=3_000)
    warm = link.a.retransmissions
    link.run_traffic(200, every_us=3_000, first=200)
    link.run_until(link.now + 10_000_000)
    est = link.a.rto_estimate("b")
    assert est is not None and est.srtt is not None and link.a.in_flight() == 0
    low, high = 2 * one_way, 2 * (one_way + jitter) + ack_delay
    assert low <= est.srtt <= high
    assert est.srtt < est.rto <= high + max(GRANULARITY_US, 4 * (high - low))
    # Once warm, a fixed delay sends nothing twice; under jitter the timeout sits
    # above the round trip's usual spread, so at most the odd outlier goes twice.
    assert link.a.retransmissions - warm <= (0 if jitter == 0 else 200 // 50)
    assert sorted(link.delivered) == [i.to_bytes(4, "big") for i in range(400)]


def test_a_wan_round_trip_above_the_initial_timeout_is_learned() -> None:
    # 200 ms round trips against a 60 ms initial timeout: the first packets time out,
    # backoff carries over to the next ones until one comes back unretransmitted.
    link = Link(ChannelConfig(), lambda _: 100_000, fifo=True)
    link.run_traffic(300, every_us=10_000)
    link.run_until(link.now + 5_000_000)
    est = link.a.rto_estimate("b")
    assert est is not None and est.srtt is not None
    assert 200_000 <= est.srtt <= 202_000 and est.rto < 220_000
    assert 0 < link.a.retransmissions <= 30  # the start-up only, not a packet in ten
    assert len(link.delivered) == 300 and link.a.in_flight() == 0


# -- Karn's rule and backoff ---------------------------------------------------------------


def _timers(effects: list[Effect]) -> list[SetTimer]:
    return [e for e in effects if isinstance(e, SetTimer)]


def test_karns_rule_an_ack_of_a_retransmitted_packet_gives_no_sample() -> None:
    a = ReliableChannel("a", ChannelConfig(rto_us=1_000, max_rto_us=64_000))
    a.handle(ViewInstalled(VIEW), 0)
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    a.handle(TimerFired(("rto", "b")), 1_000)  # retransmitted: its ack is ambiguous
    a.handle(Received("b", RAck(1), Packet()), 1_200)
    est = a.rto_estimate("b")
    assert est is not None and est.samples == 0 and est.rto == 2_000  # still backed off
    # An ack covering the retransmitted packet 2 and the fresh packet 3 times packet 3 only.
    a.handle(SendRequested("b", Packet((), b"y")), 2_000)
    a.handle(TimerFired(("rto", "b")), 4_000)
    a.handle(SendRequested("b", Packet((), b"z")), 4_500)
    a.handle(Received("b", RAck(3), Packet()), 5_000)
    assert est.samples == 1 and est.srtt == 500 and est.backoff == 0


def test_a_sacked_packet_is_timed_when_the_cumulative_part_was_retransmitted() -> None:
    a = ReliableChannel("a", ChannelConfig(rto_us=1_000, max_rto_us=64_000))
    a.handle(ViewInstalled(VIEW), 0)
    a.handle(SendRequested("b", Packet((), b"x")), 0)
    a.handle(SendRequested("b", Packet((), b"y")), 100)
    a.handle(Received("b", RAck(0, [2]), Packet()), 700)
    est = a.rto_estimate("b")
    assert est is not None and est.srtt == 600 and a.in_flight() == 1


def test_backoff_doubles_caps_and_applies_to_new_packets_until_a_sample() -> None:
    a = ReliableChannel("a", ChannelConfig(rto_us=1_000, max_rto_us=8_000))
    a.handle(ViewInstalled(VIEW), 0)
    at = _timers(a.handle(SendRequested("b", Packet((), b"x")), 0))[0].at
    waits = []
    for _ in range(6):
        fired = a.handle(TimerFired(("rto", "b")), at)
        assert [s.header for s in fired if isinstance(s, Send)] == [RData(1)]
        waits.append(_timers(fired)[0].at - at)
        at = _timers(fired)[0].at
    assert waits == [2_000, 4_000, 8_000, 8_000, 8_000, 8_000]
    assert a.retransmissions == 6
    # A packet sent into the backed-off link waits the backed-off timeout too.
    a.handle(SendRequested("b", Packet((), b"y")), at + 10)
    a.handle(Received("b", RAck(1), Packet()), at + 20)  # packet 1: retransmitted, no sample
    est = a.rto_estimate("b")
    assert est is not None and est.rto == 8_000
    a.handle(Received("b", RAck(2), Packet()), at + 110)  # packet 2: a valid 100 µs sample
    assert est.backoff == 0 and est.rto == 100 + GRANULARITY_US  # the estimate, no backoff


def test_packets_timing_out_together_back_off_once() -> None:
    a = ReliableChannel("a", ChannelConfig(rto_us=1_000, max_rto_us=64_000))
    a.handle(ViewInstalled(VIEW), 0)
    for i in range(10):
        a.handle(SendRequested("b", Packet((), bytes([i]))), i)
    fired = a.handle(TimerFired(("rto", "b")), 1_000)  # packet 1 due; 2..10 not yet
    assert len([e for e in fired if isinstance(e, Send)]) == 1
    fired = a.handle(TimerFired(("rto", "b")), 1_009)
    assert len([e for e in fired if isinstance(e, Send)]) == 9
    est = a.rto_estimate("b")
    assert est is not None and est.rto == 2_000  # one level, not ten


# -- queueing and loss ---------------------------------------------------------------------


def _ramp(now: int, per_ms: int = 60) -> int:
    """A queue that keeps growing: 1 ms at first, +`per_ms` µs of delay per ms of traffic."""
    return 1_000 + now * per_ms // 1_000


def test_a_growing_queue_sets_off_no_retransmission_while_acks_flow() -> None:
    # The delay climbs to ~300 ms, five times the 60 ms floor, steadily (the TCP runtime
    # under load): the fixed timeout this replaces retransmitted everything here.
    link = Link(ChannelConfig(), _ramp, fifo=True)
    link.run_traffic(5_000, every_us=1_000)
    link.run_until(link.now + 5_000_000)
    assert _ramp(5_000_000) > 5 * 60_000
    assert link.a.retransmissions == 0
    assert len(link.delivered) == 5_000 and link.a.in_flight() == 0


def test_a_real_loss_in_a_growing_queue_is_still_repaired() -> None:
    # While a hole stalls the cumulative ack, packets above it rely on the estimate
    # alone, which trails a ramp by about one round trip's growth: at 60 µs/ms that
    # exceeds 4·RTTVAR and a few packets go twice; at 20 µs/ms none do. And slow enough
    # that what arrives above a hole while it is repaired fits one ack's selective acks.
    lost = frozenset({200, 700, 701})
    link = Link(ChannelConfig(), lambda now: _ramp(now, per_ms=20), fifo=True, drop_first=lost)
    link.run_traffic(1_000, every_us=3_000)
    link.run_until(link.now + 5_000_000)
    assert link.a.retransmissions == len(lost)  # each lost packet once, nothing else
    assert sorted(link.delivered) == [i.to_bytes(4, "big") for i in range(1_000)]
    assert link.a.in_flight() == 0


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    drop=st.floats(0.0, 0.4),
    dup=st.floats(0.0, 0.3),
    low=st.integers(100, 20_000),
    spread=st.integers(0, 100_000),
)
def test_exactly_once_under_drop_duplication_and_reordering(
    seed: int, drop: float, dup: float, low: int, spread: int
) -> None:
    rng = random.Random(seed)
    config = ChannelConfig(ack_delay_us=500, rto_us=20_000, min_rto_us=1_000, max_rto_us=400_000)
    link = Link(config, lambda _: low + rng.randint(0, spread), rng=rng, drop=drop, dup=dup)
    payloads = [i.to_bytes(4, "big") for i in range(150)]
    for payload in payloads:
        link.send(payload)
        link.run_until(link.now + rng.randint(0, 3_000))
    link.run_until(link.now + 600_000_000)
    assert sorted(link.delivered) == payloads  # every packet, each exactly once
    assert link.a.in_flight() == 0 and link.nodes["b"].held_above() == 0
    assert not link.timers.get(("a", ("rto", "b")))


# -- configuration -------------------------------------------------------------------------


def test_the_floor_defaults_to_the_initial_timeout() -> None:
    assert ChannelConfig().rto_floor_us == 60_000
    assert ChannelConfig(rto_us=1_000_000).rto_floor_us == 1_000_000  # a stream transport
    assert ChannelConfig(rto_us=300_000, min_rto_us=5_000).rto_floor_us == 5_000


@pytest.mark.parametrize(
    "bad",
    [
        {"rto_us": 0},
        {"min_rto_us": 0},
        {"rto_us": 10_000, "min_rto_us": 20_000},
        {"rto_us": 2_000_000, "max_rto_us": 1_000_000},
        {"max_sacks": 2_000},
    ],
)
def test_inconsistent_timeouts_are_refused(bad: dict[str, int]) -> None:
    with pytest.raises(ConfigError):
        ChannelConfig(**bad)
