"""Flow control for the orderings the membership layer drives (causal, skeen, matrix).

Rules (issue #21): a receiver cannot refuse an honest message the channel below has
already acknowledged without losing it, and an honest origin's messages may wait in a
holdback for as long as a third member's link is slow. So the bound is the origin's:

- `OriginCredit`: an origin may have at most `max_unstable` of its own broadcasts not yet
  known delivered by every member. It learns that from the stable point the membership
  layer hands down (`forget(stable)`, every stability round) and, at a view change, from
  the flush (every survivor delivers all of a survivor's messages). Past the bound the
  layer is `backpressured()`: the runtime's `broadcast()` waits, `broadcast_nowait()`
  raises `Backpressure`.
- `HeldCap`: what one origin has waiting here (held back, queued, out of stream order)
  is then at most `max_unstable` plus the channel's window; a peer past `max_held` (far
  above that: `hard_cap`) is hostile or broken. Its message is refused with
  RemoteProtocolError (the driver logs one line and drops it) and counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId
from abcast.reliability.channel import ChannelConfig

#: own broadcasts not yet delivered everywhere before the origin waits (the default of
#: OrderingOptions.max_unstable, which the registry passes); for the sequencer family
#: also the numbers the sequencer may announce past the group's stable point
MAX_UNSTABLE: Final = 65_536
#: how far above an honest origin's bound (credit + window) a receiver still holds
HARD_CAP_FACTOR: Final = 4


def hard_cap(max_unstable: int, window: int) -> int:
    """The receiver's cap per origin: far above what an honest origin can have waiting."""
    return HARD_CAP_FACTOR * (max_unstable + window)


MAX_HELD: Final = hard_cap(MAX_UNSTABLE, ChannelConfig().window)


class OriginCredit:
    """This node's own broadcasts not yet known delivered everywhere."""

    __slots__ = ("limit", "sent", "stable")

    def __init__(self, limit: int = MAX_UNSTABLE) -> None:
        self.limit = limit
        self.sent = 0  # our highest broadcast seq
        self.stable = 0  # our broadcasts 1..stable are delivered by every member

    def outstanding(self) -> int:
        return self.sent - self.stable

    def exhausted(self) -> bool:
        return self.sent - self.stable >= self.limit

    def snapshot(self) -> dict[str, int]:
        """For `inspect()`'s clock: our last broadcast, how many are stable, the bound."""
        return {"sent": self.sent, "stable": self.stable, "limit": self.limit}

    def learn(self, node: NodeId, stable: Mapping[NodeId, int]) -> None:
        """The group's stable point (the membership layer's `forget`)."""
        k = stable.get(node, 0)
        self.stable = max(self.stable, k)

    def settle(self) -> None:
        """A view change concluded (every survivor delivered all of ours), or we start
        from a joiner's cut."""
        self.stable = self.sent = max(self.sent, self.stable)


class HeldCap:
    """Per origin, how many of its messages wait here; refuses one past `cap`."""

    __slots__ = ("cap", "count", "refused")

    def __init__(self, cap: int = MAX_HELD) -> None:
        self.cap = cap
        self.count: dict[NodeId, int] = {}
        self.refused = 0  # messages refused past the cap (`refused_far` in `inspect()`)

    def admit(self, origin: NodeId, what: str) -> None:
        k = self.count.get(origin, 0)
        if k >= self.cap:
            self.refused += 1
            raise RemoteProtocolError(
                f"{origin} has {k} messages waiting here, the cap: {what} refused")
        self.count[origin] = k + 1

    def release(self, origin: NodeId) -> None:
        k = self.count.get(origin, 0) - 1
        if k > 0:
            self.count[origin] = k
        else:
            self.count.pop(origin, None)

    def clear(self) -> None:
        self.count = {}
