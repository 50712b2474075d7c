"""The sequencer's flow control (abcast.ordering.sequencer_numbering, issue #21): with a
slow member, the sequencer's queue to it and every member's log stay within
`max_unstable`, and every message is still delivered everywhere; the origin's
`outstanding` backpressures it past the same bound.

The slow member is n3: every link into it has 150–200 ms of latency and the channel's
window is 32, so it takes at most ~180 packets a second per link while n2 offers 800
broadcasts a second (the simulator's workload ignores backpressure: n2's own queue to n3
is the sender's, which the runtime's `broadcast()` bounds; judged here is the sequencer
n1's queue, which holds its orders for n2's traffic). Each layer is watched after every
event it handles. Followers learn the stable point one stability round after the
sequencer, so their logs may reach twice the bound. A planted sequencer without the
bound (max_unstable at the default of 65,536) must grow the queue far past it: the
property has teeth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId, View
from abcast.membership import Membership
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer import Sequencer
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.sim.network import LinkModel
from abcast.stack import Stack

SLOW = LinkModel(150_000, 200_000)
BOUND = 64


@dataclass
class Peaks:
    queue_to_slow: int = 0  # the sequencer's channel: packets unacked or waiting, to n3
    log: dict[NodeId, int] = field(default_factory=dict)  # delivered, not yet stable
    unstable: int = 0  # numbers announced past the stable point the sequencer knows


def _watched(node: NodeId, view: View, options: OrderingOptions, peaks: Peaks) -> Stack:
    stack = build_stack(node, "g", "sequencer", view, options)
    channel = next(layer for layer in stack.layers if isinstance(layer, ReliableChannel))
    membership = next(layer for layer in stack.layers if isinstance(layer, Membership))
    core = membership.ordering
    assert isinstance(core, Sequencer)

    def watch(layer: Any) -> None:
        """`layer`'s handle followed by a look at the peaks: its class swapped for a
        subclass of the same layout (the layers are slotted: no attribute of their own)."""
        base = type(layer)

        def handled(self: Any, event: Event, now: int) -> list[Effect]:
            effects: list[Effect] = base.handle(self, event, now)
            st = core.st
            peaks.log[node] = max(peaks.log.get(node, 0), len(st.log))
            if st.view is not None and st.view.leader == node:
                peaks.unstable = max(peaks.unstable, st.next_number - 1 - st.stable)
                link = channel._out.get("n3")
                if link is not None:
                    peaks.queue_to_slow = max(peaks.queue_to_slow,
                                              len(link.unacked) + len(link.waiting))
            return effects

        layer.__class__ = type(base.__name__, (base,), {"__slots__": (), "handle": handled})

    watch(channel)
    watch(core)
    return stack


def _run(max_unstable: int, seed: int = 1, relay: bool = False) -> tuple[Peaks, Any]:
    options = OrderingOptions(max_unstable=max_unstable, relay=relay,
                              channel=ChannelConfig(window=32, max_waiting=32))
    peaks = Peaks()
    config = SimConfig("sequencer", 3, 2_400, seed, rate=800.0, options=options,
                       senders=("n2",),
                       links=tuple((src, "n3", SLOW) for src in ("n1", "n2")))
    result = run_simulation(
        config, stack_factory=lambda node, view: _watched(node, view, options, peaks))
    return peaks, result


@pytest.mark.parametrize(("seed", "relay"), [(1, False), (2, True)])
def test_a_slow_member_keeps_the_sequencers_queue_and_every_log_within_the_bound(
        seed: int, relay: bool) -> None:
    peaks, result = _run(BOUND, seed, relay)
    assert result.violations == []
    assert result.delivered == 3 * 2_400  # nothing lost to the bound
    assert peaks.unstable <= BOUND
    assert peaks.log["n1"] <= BOUND
    assert max(peaks.log.values()) <= 2 * BOUND
    # The queue holds order packets (each numbers at least one id) and a few acks.
    assert peaks.queue_to_slow <= BOUND + 8, peaks


def test_without_the_bound_the_queue_to_the_slow_member_grows() -> None:
    peaks, result = _run(65_536)
    assert result.delivered == 3 * 2_400
    assert peaks.queue_to_slow > 4 * BOUND, peaks
    assert peaks.unstable > 4 * BOUND


def test_own_broadcasts_undelivered_past_the_bound_backpressure_the_origin() -> None:
    view = View(1, ("n1", "n2"))
    core = Sequencer("n2", max_unstable=3)
    st = core.st
    st.view, st.others = view, ("n1",)
    for seq in (1, 2):
        st.now = 0
        numbering.broadcast(st, seq, b"x")
    assert numbering.outstanding(st) == 2 and not core.backpressured()
    numbering.broadcast(st, 3, b"x")
    assert core.backpressured()
    numbering.on_order(st, "n1", 1, [("n2", 1)], [])
    assert numbering.outstanding(st) == 2 and not core.backpressured()


def test_the_membership_layer_passes_the_sequencers_backpressure_to_the_stack() -> None:
    # the registry wraps the sequencer in the membership layer: the stack asks the layer
    stack = build_stack("n2", "g", "sequencer", View(1, ("n1", "n2")),
                        OrderingOptions(max_unstable=2))
    membership = next(layer for layer in stack.layers if isinstance(layer, Membership))
    core = membership.ordering
    assert isinstance(core, Sequencer)
    core.st.view, core.st.others = View(1, ("n1", "n2")), ("n1",)
    for seq in (1, 2):
        core.st.now = 0
        assert not stack.backpressured()
        numbering.broadcast(core.st, seq, b"x")
    assert stack.backpressured()
