"""Which messages a node delivered, per origin: a contiguous prefix and what lies above it.

Rules: orderings that do not deliver each origin's messages in sequence order (unordered,
skeen) still need to know, at a view change, what they delivered — to report it, to
deliver the flush's outcome exactly once, and to drop a late copy of a settled message.
`prefix(o)` is how many of o's messages, 1..k, were delivered; the rest sit in a set
until the gap below them fills or a view change gives it up (`give_up_gaps`: their
origin is gone — a member's own messages are all in its report).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TypeVar

from abcast.ids import MsgId, NodeId
from abcast.membership.wire import FlushMessage, ViewReport

T = TypeVar("T")


def common_base(reports: Sequence[ViewReport]) -> dict[NodeId, int]:
    """Per origin, how many of its messages (1..k) every reporting member delivered: what
    a flush need not carry."""
    origins = {o for r in reports for o in r.delivered}
    return {o: min(r.delivered.get(o, 0) for r in reports) for o in origins}


def above_base(
    reports: Sequence[ViewReport], base: Mapping[NodeId, int]
) -> Iterator[FlushMessage]:
    """Every reported message above the common base (a message reported by several
    members comes once per report)."""
    for report in reports:
        for m in report.messages:
            if m.seq > base.get(m.origin, 0):
                yield m


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
