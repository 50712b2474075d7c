"""What a layer shows about itself: one read-only, typed snapshot per layer.

Rules: `Layer.inspect()` never changes the layer and never fails; it returns plain data
(strings, ints, lists, dicts of those) so that the simulator can print it, the runtime
can serve it (`abcast probe`, the chat demo's debug panel, metrics) and tests can assert
on it. A layer that has nothing to show returns `LayerSnapshot(layer=name)`.
"""

from __future__ import annotations

from typing import Any

import msgspec


class HeldMessage(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A message a layer holds back instead of delivering, and why."""

    origin: str
    seq: int
    #: what it waits for, in words a person reads: "n2's #3 (causal predecessor)",
    #: "the order (global #17)", "n1's #4 (fifo gap)"
    waiting_for: str


class LayerSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """One layer's state at one instant."""

    #: `Layer.name`
    layer: str
    #: the core's phase where it has one ("steady", "flushing", "joining", …)
    phase: str = ""
    #: the ordering's clock, JSON-able: a vector clock, next expected per sender, the next
    #: global number, pending timestamps, a matrix clock…
    clock: dict[str, Any] = {}
    #: what waits in the holdback queue(s), oldest first
    holdback: list[HeldMessage] = []
    #: monotonic counters (packets, retransmissions, suspicions, …)
    counters: dict[str, int] = {}


def to_builtins(snapshots: list[LayerSnapshot]) -> list[dict[str, Any]]:
    """Snapshots as JSON-ready dicts (for `--json`, websockets and logs)."""
    return [msgspec.to_builtins(s) for s in snapshots]
