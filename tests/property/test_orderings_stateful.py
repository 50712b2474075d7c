"""Hypothesis state machines for the orderings: 3–4 stacks wired through a packet pool.

Rules: broadcast from a random node, deliver / drop / duplicate a random in-flight packet
(or deliver a burst of them), fire an armed timer, let time pass. After every step the
safety parts of what the ordering claims hold on the deliveries so far (no duplicate or
unknown delivery, FIFO, causal, total order as prefix consistency). At teardown the pool
is flushed (every packet delivered, timers fired until quiet) and then every node has
every message (agreement, validity) and the official checks find nothing. Each planted
bug (one mechanism removed) must be found by the same machine.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from abcast.effects import Deliver, Effect
from abcast.events import Event, Received
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_numbering
from abcast.ordering.causal import Causal
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import CTData
from abcast.ordering.skeen import Skeen
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.stack import Layer, Stack
from abcast.testing.pool import PacketPool

MAX_BROADCASTS = 12
TICKING = OrderingOptions(channel=ChannelConfig(piggyback_acks=True, tick_us=1_000))
SETTINGS = settings(
    max_examples=100, stateful_step_count=80, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
#: the default run's share of SETTINGS' examples per machine (2-4 s; the full 100, 5-9 s,
#: run under `slow`, once more per case)
DEFAULT_EXAMPLES = 40


class OrderingMachine(RuleBasedStateMachine):
    ordering: ClassVar[str]
    options: ClassVar[OrderingOptions] = OrderingOptions()
    #: a replacement core for the ordering slot (planted bugs); None: the real one
    core: ClassVar[type[Layer] | None] = None

    def __init__(self) -> None:
        super().__init__()
        self.pool: PacketPool | None = None

    def _pool(self) -> PacketPool:
        assert self.pool is not None
        return self.pool

    @initialize(nodes=st.integers(3, 4))
    def start(self, nodes: int) -> None:
        if self.core is None:
            self.pool = PacketPool.of(self.ordering, nodes, options=self.options)
            return
        core = self.core
        view = View(1, tuple(f"n{i}" for i in range(1, nodes + 1)))
        stacks = [Stack(n, "g", [ReliableChannel(n), core(n)], view) for n in view.members]
        self.pool = PacketPool(stacks, get_ordering(self.ordering).guarantees)

    @precondition(lambda self: self.pool is not None and len(self.pool.sent) < MAX_BROADCASTS)
    @rule(which=st.integers(0, 3), payload=st.binary(max_size=4))
    def broadcast(self, which: int, payload: bytes) -> None:
        pool = self._pool()
        pool.broadcast(pool.nodes[which % len(pool.nodes)], payload)

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(pick=st.integers(0, 1_000))
    def deliver(self, pick: int) -> None:
        pool = self._pool()
        pool.deliver(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(picks=st.lists(st.integers(0, 1_000), min_size=2, max_size=12))
    def deliver_burst(self, picks: list[int]) -> None:
        """Several arrivals in a row, so that runs get far without many steps."""
        pool = self._pool()
        for pick in picks:
            if not pool.in_flight:
                return
            pool.deliver(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(pick=st.integers(0, 1_000))
    def drop(self, pick: int) -> None:
        pool = self._pool()
        pool.drop(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(pick=st.integers(0, 1_000))
    def duplicate(self, pick: int) -> None:
        pool = self._pool()
        pool.duplicate(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.timers()))
    @rule(pick=st.integers(0, 1_000))
    def fire_timer(self, pick: int) -> None:
        pool = self._pool()
        armed = pool.timers()
        pool.fire(armed[pick % len(armed)])

    @rule(us=st.integers(0, 100_000))
    def let_time_pass(self, us: int) -> None:
        """Always possible, so a run never has no rule to take."""
        if self.pool is not None:
            self.pool.advance(us)

    @invariant()
    def safety_so_far(self) -> None:
        if self.pool is not None:
            assert not self.pool.problems, "safety: " + "; ".join(self.pool.problems)

    def teardown(self) -> None:
        pool = self.pool
        if pool is None:
            return
        pool.flush()
        assert not pool.problems, "safety: " + "; ".join(pool.problems)
        assert pool.missing() == []
        assert pool.violations() == []
        spec = get_ordering(self.ordering)
        if "total" in spec.guarantees:
            first, *rest = pool.deliveries.values()
            assert all(seq == first for seq in rest)


def _machine(
    ordering: str, options: OrderingOptions | None = None, core: type[Layer] | None = None
) -> type[OrderingMachine]:
    attrs: dict[str, object] = {"ordering": ordering, "core": core}
    if options is not None:
        attrs["options"] = options
    batch = "" if options is None or options.batch is None else f"Batch{options.batch}"
    if options is not None and options.channel.tick_us is not None:
        batch += "Tick"
    name = ordering.title().replace("-", "") + batch + (core.__name__ if core else "") + "Machine"
    return type(name, (OrderingMachine,), attrs)


CASES = {
    "causal": _machine("causal"),
    "sequencer": _machine("sequencer"),
    "sequencer-batch1": _machine("sequencer", OrderingOptions(batch=1)),
    "skeen": _machine("skeen"),
    "causal-total": _machine("causal-total"),
    # the channel shaped as over real transports (STREAM_CHANNEL), in this pool's time
    # scale: acks carried, one tick for all links
    "sequencer-tick": _machine("sequencer", TICKING),
    "causal-tick": _machine("causal", TICKING),
}


@pytest.mark.parametrize("examples", [
    pytest.param(DEFAULT_EXAMPLES, id="default"),
    pytest.param(SETTINGS.max_examples, id="full", marks=pytest.mark.slow)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_ordering_state_machine(case: str, examples: int) -> None:
    machine = CASES[case]
    machine.TestCase.settings = settings(SETTINGS, max_examples=examples)
    machine.TestCase().runTest()


# -- planted bugs: the machine must find each one ---------------------------------------


class CausalWithoutHoldback(Causal):
    def on_message(
        self, origin: NodeId, seq: int, deps: dict[NodeId, int], payload: bytes
    ) -> list[Effect]:
        return [Deliver(origin, seq, payload)]


class SequencerDeliveringOnReceipt(Sequencer):
    def handle(self, event: Event, now: int) -> list[Effect]:
        effects = super().handle(event, now)
        held = self.st.bodies
        effects += [Deliver(mid.origin, mid.seq, body) for mid, body in held.items()]
        held.clear()
        return effects


class SkeenWithoutHeadCheck(Skeen):
    def deliver_ready(self) -> list[Effect]:
        final = [mid for mid, p in self._pending.items() if p.final]
        return [Deliver(mid.origin, mid.seq, self._pending.pop(mid).payload) for mid in final]


class CausalTotalNumberingOnArrival(Sequencer):
    """The sequencer numbers each message as it arrives, skipping causal admission."""

    def __init__(self, node: NodeId) -> None:
        super().__init__(node, causal=True)

    def handle(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        if (type(event) is Received and type(event.header) is CTData
                and self.is_sequencer):
            seq = event.header.seq
            mid = MsgId(event.sender, seq)
            if seq <= st.delivered.get(event.sender, 0) or mid in st.bodies:
                return []  # sent again, as the real core drops it
            st.bodies[mid] = event.inner.payload
            return sequencer_numbering.number(st, [(event.sender, seq)])
        return super().handle(event, now)


PLANTED = {  # name: (machine, the safety property whose breach must be reported)
    "causal-without-holdback": (_machine("causal", core=CausalWithoutHoldback), "causal"),
    "sequencer-delivering-on-receipt": (
        _machine("sequencer", core=SequencerDeliveringOnReceipt), "total order"),
    "skeen-without-head-check": (_machine("skeen", core=SkeenWithoutHeadCheck), "total order"),
    "causal-total-numbering-on-arrival": (
        _machine("causal-total", core=CausalTotalNumberingOnArrival), "causal"),
}
HUNT = settings(
    max_examples=500, stateful_step_count=60, deadline=None, database=None,
    phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_the_state_machine_finds_a_planted_bug(case: str) -> None:
    machine, breach = PLANTED[case]
    machine.TestCase.settings = HUNT
    with pytest.raises(AssertionError, match=rf"safety: .*\({breach}\)"):
        machine.TestCase().runTest()
