"""Causal holdback: release messages once everything that happened before them is released.

Rules: a message (origin, seq) with dependency vector `deps` ({node: k} = "the origin had
delivered node's messages 1..k") is released when this holdback has released origin's
1..seq−1 and, for each entry, node's 1..k. Per-origin FIFO holdback is the special case
of an empty `deps`. Released messages come out in an order that respects those
dependencies, and each origin's releases are contiguous 1, 2, 3, … so the released
counts double as this node's vector clock.

A held message waits on exactly one missing dependency (the first it lacks) in a dict
keyed by that dependency, and is looked at again only when that one is released: no
scan of the held messages per arrival. What it does not know: wire formats, views,
payloads (the caller's `item` rides along untouched) or time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId

T = TypeVar("T")

#: (node, k): "node's message k has been released here"
Needed = tuple[NodeId, int]


@dataclass(slots=True)
class Held(Generic[T]):
    origin: NodeId
    seq: int
    deps: Mapping[NodeId, int]
    item: T


class CausalHoldback(Generic[T]):
    __slots__ = ("_held", "_released", "_waiting")

    def __init__(self) -> None:
        self._released: dict[NodeId, int] = {}
        self._waiting: dict[Needed, list[Held[T]]] = {}
        self._held: dict[Needed, None] = {}  # ids currently held, to refuse duplicates

    # -- introspection -------------------------------------------------------------------
    def held(self) -> int:
        """Messages waiting for a dependency."""
        return len(self._held)

    def released(self, origin: NodeId) -> int:
        """How many of origin's messages (1..k) have been released."""
        return self._released.get(origin, 0)

    def vector(self, exclude: NodeId | None = None) -> dict[NodeId, int]:
        """The released counts as a dependency vector (zero entries left out)."""
        return {o: k for o, k in self._released.items() if k and o != exclude}

    def knows(self, origin: NodeId, seq: int) -> bool:
        """True when (origin, seq) has been released or is held here."""
        return seq <= self._released.get(origin, 0) or (origin, seq) in self._held

    def waiting(self) -> list[tuple[Needed, Held[T]]]:
        """Every held message with the dependency it waits for, oldest need first."""
        return [(need, msg) for need, msgs in self._waiting.items() for msg in msgs]

    def forget_held(self) -> None:
        """Drop every held message (a view change settled what could be released)."""
        self._waiting.clear()
        self._held.clear()

    def seed(self, released: Mapping[NodeId, int]) -> None:
        """Start from these released counts (a new sequencer after a view change)."""
        for node, k in released.items():
            if k > self._released.get(node, 0):
                self._released[node] = k

    # -- the core ------------------------------------------------------------------------
    def offer(
        self, origin: NodeId, seq: int, deps: Mapping[NodeId, int], item: T
    ) -> list[Held[T]]:
        """Add one message; return every message this releases, in a causal order.
        A message offered twice is the peer's fault: RemoteProtocolError."""
        if self.knows(origin, seq):
            raise RemoteProtocolError(f"message {origin}#{seq} offered twice")
        out: list[Held[T]] = []
        ready = [Held(origin, seq, deps, item)]
        while ready:
            msg = ready.pop()
            missing = self._missing(msg)
            if missing is not None:
                self._held[(msg.origin, msg.seq)] = None
                self._waiting.setdefault(missing, []).append(msg)
                continue
            self._held.pop((msg.origin, msg.seq), None)
            self._released[msg.origin] = msg.seq
            out.append(msg)
            woken = self._waiting.pop((msg.origin, msg.seq), None)
            if woken:
                ready.extend(reversed(woken))
        return out

    def _missing(self, msg: Held[T]) -> Needed | None:
        """The first dependency of `msg` not yet released, or None when it may go."""
        released = self._released
        if released.get(msg.origin, 0) < msg.seq - 1:
            return (msg.origin, msg.seq - 1)
        for node, k in msg.deps.items():
            if released.get(node, 0) < k:
                return (node, k)
        return None
