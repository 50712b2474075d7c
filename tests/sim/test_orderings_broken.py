"""Planted bugs: each ordering with its key mechanism removed must be caught in the simulator.

Each broken variant is the real core minus one idea (the causal holdback, the sequencer's
numbering, Skeen's head-of-queue check, causal admission before numbering). It runs under
the same faults as the sweep, claiming the real ordering's guarantees, and the checks
must report the specific code that mechanism exists for; the real core, same seeds, must
report nothing.
"""

from __future__ import annotations

import pytest

from abcast.effects import Deliver, Effect
from abcast.events import Event, Received
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_numbering
from abcast.ordering.causal import Causal
from abcast.ordering.registry import get_ordering
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import CTData
from abcast.ordering.skeen import Skeen
from abcast.reliability.channel import ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.stack import Layer, Stack
from abcast.testing import CAUSAL_ORDER, TOTAL_ORDER

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"


class CausalWithoutHoldback(Causal):
    """Delivers every message on receipt, predecessors or not."""

    def on_message(
        self, origin: NodeId, seq: int, deps: dict[NodeId, int], payload: bytes
    ) -> list[Effect]:
        return [Deliver(origin, seq, payload)]


class SequencerDeliveringOnReceipt(Sequencer):
    """Delivers each body as soon as it holds it, ignoring the sequencer's numbers."""

    def handle(self, event: Event, now: int) -> list[Effect]:
        effects = super().handle(event, now)
        held = self.st.bodies
        effects += [Deliver(mid.origin, mid.seq, body) for mid, body in held.items()]
        held.clear()
        return effects


class SkeenWithoutHeadCheck(Skeen):
    """Delivers a message once its final timestamp is known, even if a pending message
    with a smaller timestamp is still waiting for its own."""

    def deliver_ready(self) -> list[Effect]:
        final = [mid for mid, p in self._pending.items() if p.final]
        return [self._take(mid) for mid in final]

    def _take(self, mid: MsgId) -> Effect:
        return Deliver(mid.origin, mid.seq, self._pending.pop(mid).payload)


class CausalTotalNumberingOnArrival(Sequencer):
    """The sequencer numbers each message as it arrives, skipping causal admission."""

    def __init__(self, node: NodeId) -> None:
        super().__init__(node, causal=True)

    def handle(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        if (type(event) is Received and type(event.header) is CTData
                and self.is_sequencer):
            # The real core drops a body whose seq is below what it delivered from that
            # origin (it delivers each origin in order); this one does not either.
            seq = event.header.seq
            st.bodies[MsgId(event.sender, seq)] = event.inner.payload
            return sequencer_numbering.number(st, [(event.sender, seq)])
        return super().handle(event, now)


BROKEN: dict[str, tuple[str, type[Layer], str, float | None]] = {
    # name: (ordering whose guarantees it claims, core, code that must appear, rate)
    "causal-without-holdback": ("causal", CausalWithoutHoldback, CAUSAL_ORDER, None),
    "sequencer-delivering-on-receipt": (
        "sequencer", SequencerDeliveringOnReceipt, TOTAL_ORDER, None),
    "skeen-without-head-check": ("skeen", SkeenWithoutHeadCheck, TOTAL_ORDER, None),
    # Numbering on arrival breaks causality only when an origin has several messages in
    # flight, so this one runs open-loop, faster than the network settles.
    "causal-total-numbering-on-arrival": (
        "causal-total", CausalTotalNumberingOnArrival, CAUSAL_ORDER, 2_000.0),
}


def _config(ordering: str, seed: int, rate: float | None) -> SimConfig:
    return SimConfig(ordering, nodes=4, messages=300, seed=seed, faults=FAULTS, rate=rate)


@pytest.mark.parametrize("name", sorted(BROKEN))
@pytest.mark.parametrize("seed", [1, 2])
def test_the_checks_catch_a_broken_variant(name: str, seed: int) -> None:
    ordering, core, code, rate = BROKEN[name]
    config = _config(ordering, seed, rate)

    def make(node: NodeId, view: View) -> Stack:
        return Stack(node, config.group, [ReliableChannel(node), core(node)], view)

    result = run_simulation(config, stack_factory=make,
                            guarantees=get_ordering(ordering).guarantees)
    assert result.counts.get(code, 0) > 0, result.counts


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_real_core_passes_the_same_run(name: str) -> None:
    ordering, _, _, rate = BROKEN[name]
    result = run_simulation(_config(ordering, 1, rate))
    assert result.violations == []
    assert result.delivered == 300 * 4
