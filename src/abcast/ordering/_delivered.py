"""Which messages a node delivered, per origin: a contiguous prefix and what lies above it.

Rules: orderings that do not deliver each origin's messages in sequence order (unordered,
skeen) still need to know, at a view change, what they delivered — to report it, to
deliver the flush's outcome exactly once, and to drop a late copy of a settled message.
`prefix(o)` is how many of o's messages, 1..k, were delivered; the rest sit in a set
until the gap below them fills or a view change gives it up (`give_up_gaps`: their
origin is gone — a member's own messages are all in its report).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from abcast.ids import MsgId, NodeId

T = TypeVar("T")


def forget_stable(log: dict[MsgId, T], stable: Mapping[NodeId, int]) -> None:
    """Drop from a view's log what every member delivered (the membership layer's
    stability point): no flush can need it."""
    for mid in [m for m in log if m.seq <= stable.get(m.origin, 0)]:
        del log[mid]


class DeliveredIds:
    def __init__(self) -> None:
        self._prefix: dict[NodeId, int] = {}
        self._above: dict[NodeId, set[int]] = {}

    def has(self, origin: NodeId, seq: int) -> bool:
        return seq <= self._prefix.get(origin, 0) or seq in self._above.get(origin, ())

    def prefix(self, origin: NodeId) -> int:
        return self._prefix.get(origin, 0)

    def prefixes(self) -> dict[NodeId, int]:
        return dict(self._prefix)

    def add(self, origin: NodeId, seq: int) -> None:
        prefix = self._prefix.get(origin, 0)
        if seq != prefix + 1:
            self._above.setdefault(origin, set()).add(seq)
            return
        above = self._above.get(origin)
        prefix = seq
        while above and prefix + 1 in above:
            prefix += 1
            above.discard(prefix)
        self._prefix[origin] = prefix

    def give_up_gaps(self) -> None:
        for origin, above in self._above.items():
            if above:
                self._prefix[origin] = max(above)
        self._above.clear()

    def reset(self, prefixes: Mapping[NodeId, int]) -> None:
        self._prefix = dict(prefixes)
        self._above.clear()
