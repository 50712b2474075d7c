"""Flow control of causal, skeen and matrix (abcast.ordering._credit, issue #21): with a
slow link, what every member holds back stays within the origins' credit, and every
message is still delivered everywhere.

The slow link is n2 → n3 (150–200 ms, a channel window of 32): n2's own sends wait for
the channel's credit, while n1, whose links are fast, would run ahead. Causal: n3 holds
n1's messages back until n2's, on which they depend, arrive. Skeen: everyone holds
messages stamped after n2's until n3's proposal and n2's final cross the slow link.
Matrix: n3 cannot execute n1's writes until n2's stamps reach it. n1 and n2 offer 2,000
broadcasts a second between them and their broadcasts wait while the stack is
backpressured, as the runtime's `broadcast()` does (`SimConfig.await_credit`). Each
member's holdback is watched after every event. A planted run without the bound
(max_unstable at the default of 65,536) must hold far more: the property has teeth.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId, View
from abcast.membership import Membership
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.channel import ChannelConfig
from abcast.sim import SimConfig, run_simulation
from abcast.sim.network import LinkModel
from abcast.stack import Stack

SLOW = LinkModel(150_000, 200_000)
BOUND = 64
WINDOW = 32
MESSAGES = 2_400
ORDERINGS = ("causal", "skeen", "matrix")


@dataclass
class Peaks:
    waiting: dict[NodeId, int] = field(default_factory=dict)
    unstable_own: int = 0


def _watched(node: NodeId, view: View, ordering: str, options: OrderingOptions,
             peaks: Peaks) -> Stack:
    stack = build_stack(node, "g", ordering, view, options)
    slot = next(layer for layer in stack.layers if isinstance(layer, Membership))
    core = slot.ordering
    base = type(slot)

    def handled(self: Membership, event: Event, now: int) -> list[Effect]:
        effects: list[Effect] = base.handle(self, event, now)
        peaks.waiting[node] = max(peaks.waiting.get(node, 0), core.waiting())
        peaks.unstable_own = max(peaks.unstable_own, core.credit.outstanding())
        return effects

    # its handle followed by a look at the peaks: the layer's class swapped for a subclass
    # of the same layout (the layers are slotted: no attribute of their own)
    slot.__class__ = type(base.__name__, (base,), {"__slots__": (), "handle": handled})
    return stack


def _run(ordering: str, max_unstable: int, seed: int = 1) -> tuple[Peaks, Any]:
    options = OrderingOptions(max_unstable=max_unstable,
                              channel=ChannelConfig(window=WINDOW, max_waiting=WINDOW))
    peaks = Peaks()
    config = SimConfig(ordering, 3, MESSAGES, seed, rate=2_000.0, options=options,
                       senders=("n1", "n2"), await_credit=True,
                       links=(("n2", "n3", SLOW),))
    result = run_simulation(
        config, stack_factory=lambda node, view: _watched(node, view, ordering, options,
                                                          peaks))
    return peaks, result


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_a_slow_link_keeps_every_holdback_within_the_origins_credit(ordering: str) -> None:
    peaks, result = _run(ordering, BOUND)
    assert result.violations == []
    assert result.delivered == 3 * MESSAGES  # nothing lost to the bound
    assert peaks.unstable_own <= BOUND
    # Two origins, each with at most BOUND undelivered somewhere; matrix also holds
    # stream packets out of order (at most a window per link).
    assert max(peaks.waiting.values()) <= 2 * BOUND + 2 * WINDOW, peaks


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_without_the_bound_the_holdback_grows(ordering: str) -> None:
    peaks, result = _run(ordering, 65_536)
    assert result.delivered == 3 * MESSAGES
    assert max(peaks.waiting.values()) > 4 * BOUND, peaks


CHURN = "drop=0.03,dup=0.02,delay=1-15ms,crash=n5@150ms,join=n6@200ms,leave=n4@350ms"


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_a_small_credit_under_churn_delivers_everything_in_order(ordering: str) -> None:
    # Credit spent across a crash, a join and a leave: every flush settles it (an origin
    # stalled for good would leave its broadcasts unsent).
    options = OrderingOptions(max_unstable=4)
    result = run_simulation(SimConfig(ordering, 5, 400, 3, rate=1_000.0, faults=CHURN,
                                      options=options, await_credit=True))
    assert result.violations == []
    # n1–n3's shares all go out (with a credit of 4 a stability round apart: slowly);
    # n4 and n5 stop sending when they leave and crash.
    assert result.broadcasts >= 3 * 400 // 5, result.broadcasts
