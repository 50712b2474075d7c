"""Piggybacked acks in the simulator: every ordering over the reliable channel stays
clean under loss, duplication and reordering delays (and a crash, where the ordering
tolerates one), and the feature pays: the same seeded run sends fewer standalone acks.
The same runs with the runtime's channel shape — acks carried and one tick for all links
(`ChannelConfig.tick_us`) — are clean too.

Rules: runs go through `run_simulation` with `OrderingOptions(channel=...)`; only the
channel config differs between the runs compared. Standalone acks are counted where the
channel makes them (`ReliableChannel._flush_ack`, wrapped for the test's duration):
`SimResult.control_packets` lumps them with retransmissions and failure-detector
heartbeats, so it is compared too, but it alone would not say where a saving came from.
A planted channel that acks, on its data, a packet it never got must be caught by the
simulator's checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.registry import ORDERINGS, OrderingOptions, build_stack, get_ordering
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.harness import StackFactory
from abcast.stack import Stack

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"
MESSAGES = 200
SEEDS = (1, 2)
#: broadcasts per second, faster than the network settles: many packets in flight per
#: link, so holes and piggybacking opportunities meet (a closed loop rarely has a hole)
OPEN_LOOP = 2_000.0
PIGGYBACK = OrderingOptions(channel=ChannelConfig(piggyback_acks=True))
STANDALONE = OrderingOptions(channel=ChannelConfig(piggyback_acks=False))
#: the runtime's stream channel in the simulator's time scale: acks carried, and one
#: tick for all links in place of per-link timers (ChannelConfig.tick_us)
TICKING = OrderingOptions(channel=ChannelConfig(piggyback_acks=True, tick_us=1_000))
#: every ordering whose stack the registry builds over the reliable channel (and so
#: hands `OrderingOptions.channel`): all of them, with the default multicast
OVER_THE_CHANNEL = tuple(sorted(ORDERINGS))
CRASH_TOLERANT = tuple(name for name, spec in sorted(ORDERINGS.items())
                       if "crash" in spec.tolerates)


@dataclass
class AckCount:
    standalone: int = 0  # RAck packets the channels made
    carried: int = 0  # data packets that carried an ack


@pytest.fixture
def acks(monkeypatch: pytest.MonkeyPatch) -> Iterator[AckCount]:
    """Count standalone and carried acks in every channel (OpenChannel inherits both)."""
    count = AckCount()
    flush, send = ReliableChannel._flush_ack, ReliableChannel._send

    def counting_flush(self: ReliableChannel, peer: NodeId) -> list[Effect]:
        effects = flush(self, peer)
        count.standalone += sum(isinstance(e, Send) and isinstance(e.header, RAck)
                                for e in effects)
        return effects

    def counting_send(
        self: ReliableChannel, to: NodeId, packet: Packet, now: int, control: bool = False,
    ) -> list[Effect]:
        effects = send(self, to, packet, now, control)
        count.carried += sum(isinstance(e, Send) and isinstance(e.header, RData)
                             and e.header.ack > 0 for e in effects)
        return effects

    monkeypatch.setattr(ReliableChannel, "_flush_ack", counting_flush)
    monkeypatch.setattr(ReliableChannel, "_send", counting_send)
    yield count


def clean(result: SimResult, where: str) -> None:
    cfg = result.config
    assert result.violations == [], (where, result.counts)
    assert result.delivered == cfg.messages * cfg.nodes, where
    assert result.quiescent, where


@pytest.mark.parametrize("rate", [None, OPEN_LOOP], ids=["closed-loop", "open-loop"])
@pytest.mark.parametrize("nodes", [4, 5])
@pytest.mark.parametrize("ordering", OVER_THE_CHANNEL)
def test_piggybacked_acks_under_network_faults_are_clean(
    ordering: str, nodes: int, rate: float | None, acks: AckCount,
) -> None:
    for seed in SEEDS:
        result = run_simulation(SimConfig(ordering, nodes=nodes, messages=MESSAGES, seed=seed,
                                          faults=FAULTS, rate=rate, options=PIGGYBACK))
        clean(result, f"abcast sim --ordering {ordering} --nodes {nodes} --seed {seed} "
                      f"--rate {rate}")
    assert acks.carried > 0, "no ack was ever piggybacked"


def survivors_got_everything(result: SimResult) -> None:
    rows = result.recorder.rows()
    crashed = {r.node for r in rows if r.kind == "crash"}
    alive = sorted({r.node for r in rows} - crashed)
    assert crashed and alive
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in alive}
    for node in alive:
        got = {(r.origin, r.seq) for r in result.recorder.rows_of(node) if r.kind == "deliver"}
        assert sent <= got, f"{node} misses {sorted(sent - got)[:5]}"


@pytest.mark.parametrize("rate", [None, OPEN_LOOP], ids=["closed-loop", "open-loop"])
@pytest.mark.parametrize("ordering", OVER_THE_CHANNEL)
def test_a_ticking_channel_under_network_faults_is_clean(
    ordering: str, rate: float | None,
) -> None:
    seed = SEEDS[0]  # (the faults sweep runs more: bench/sweep_churn.py --stream-channel)
    result = run_simulation(SimConfig(ordering, nodes=4, messages=MESSAGES, seed=seed,
                                      faults=FAULTS, rate=rate, options=TICKING))
    clean(result, f"{ordering} seed {seed} rate {rate} with a tick")


@pytest.mark.parametrize("options", [PIGGYBACK, TICKING], ids=["per-link", "tick"])
@pytest.mark.parametrize("crash", ["n1@300ms", "n3@1200ms"])
@pytest.mark.parametrize("ordering", CRASH_TOLERANT)
def test_piggybacked_acks_with_a_crash_are_clean(
    ordering: str, crash: str, options: OrderingOptions,
) -> None:
    """n1 is the sequencer (and the first coordinator): its crash means a fail-over."""
    result = run_simulation(SimConfig(ordering, nodes=5, messages=MESSAGES, seed=1,
                                      faults=f"{FAULTS},crash={crash}", options=options))
    assert result.violations == [], result.counts
    assert result.quiescent
    survivors_got_everything(result)


@pytest.mark.parametrize("ordering", OVER_THE_CHANNEL)
def test_piggybacking_sends_fewer_standalone_acks(ordering: str, acks: AckCount) -> None:
    """The same seeded runs (faults included) with and without piggybacking: fewer RAck
    packets, and fewer control packets in all (the simulator's count)."""
    control: dict[bool, int] = {}
    standalone: dict[bool, int] = {}
    for options in (STANDALONE, PIGGYBACK):
        on = options.channel.piggyback_acks
        acks.standalone = 0
        control[on] = 0
        for seed in SEEDS:
            result = run_simulation(SimConfig(ordering, nodes=4, messages=MESSAGES,
                                              seed=seed, faults=FAULTS, options=options))
            clean(result, f"{ordering} seed {seed} piggyback={on}")
            control[on] += result.control_packets
        standalone[on] = acks.standalone
    assert standalone[True] < standalone[False] * 0.9, standalone
    assert control[True] < control[False], control


# -- a planted bug the simulator must catch ------------------------------------------------
class OverAckingAtHoles(ReliableChannel):
    """Planted bug: with a hole, the carried ack claims the first missing packet too. It
    was sent (something above it arrived), so the peer believes it and forgets a packet
    this side never got: lost for good, and nobody is told."""

    def _send(self, to: NodeId, packet: Packet, now: int, control: bool = False) -> list[Effect]:
        inbound = self._in.get(to)
        effects = super()._send(to, packet, now, control)
        if inbound is None or not inbound.above:
            return effects
        return [Send(e.to, RData(e.header.seq, e.header.ack + 1), e.inner, e.control)
                if isinstance(e, Send) and isinstance(e.header, RData) and e.header.ack
                else e for e in effects]


class OverAckingOpenChannel(OverAckingAtHoles, OpenChannel):
    """The same bug in the open channel (the stack of orderings under the membership
    layer)."""


def _over_acking_stack(ordering: str) -> StackFactory:
    def make(node: NodeId, view: View) -> Stack:
        honest = build_stack(node, "g", ordering, view, PIGGYBACK)
        layers = list(honest.layers)
        layers[-2] = OverAckingOpenChannel(node, PIGGYBACK.channel)  # the channel slot
        return Stack(node, "g", layers, view)

    return make


@pytest.mark.parametrize("ordering", ["fifo", "skeen"])
def test_a_channel_acking_what_it_never_got_is_caught(ordering: str) -> None:
    assert get_ordering(ordering).channel is OpenChannel  # the layer replaced below
    found: dict[str, int] = {}
    short = 0
    for seed in SEEDS:
        result = run_simulation(
            SimConfig(ordering, nodes=4, messages=MESSAGES, seed=seed, faults=FAULTS,
                      rate=OPEN_LOOP),
            stack_factory=_over_acking_stack(ordering))
        short += result.delivered < MESSAGES * 4
        for code, count in result.counts.items():
            found[code] = found.get(code, 0) + count
    assert short == len(SEEDS), "every run should lose a packet for good"
    assert found.get("VALIDITY", 0) + found.get("AGREEMENT", 0) > 0, found
