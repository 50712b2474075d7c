"""`Layer`: the one interface every protocol core implements, `handle(event, now) -> effects`.

Rules: a layer is a sans-IO state machine. It sees `abcast.events` and answers with
`abcast.effects`; time comes in as `now` (µs), timers go out as effects, and it never
touches sockets, clocks or the loop. It lives below `abcast.stack` (which composes
layers) so that the cores in `ordering/`, `reliability/`, `group/` and `consensus/`
import their base class without importing the composition (docs/design.md, "Layers").
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId
from abcast.snapshot import LayerSnapshot

__all__ = ["Layer"]


class Layer(ABC):
    """A protocol core in one slot of a stack: `handle(event, now) -> effects`."""

    #: short name, used in logs and errors
    name: ClassVar[str]
    #: the msgspec type (usually a Union of `Header` subclasses) this layer puts on the wire
    header_type: ClassVar[Any]

    def __init__(self, node: NodeId) -> None:
        self.node = node

    @abstractmethod
    def handle(self, event: Event, now: int) -> list[Effect]:
        """Consume one event at time `now` (µs) and return the effects it causes."""

    def inspect(self) -> LayerSnapshot:
        """A read-only snapshot of this layer's state (see `abcast.snapshot`); layers with
        something to show (holdback queues, clocks, counters) override it."""
        return LayerSnapshot(layer=self.name)

    def backpressured(self) -> bool:
        """True while this layer's send queue is past its bound, so that the driver's
        waiting broadcast waits and its non-waiting one raises `Backpressure`; only
        layers that queue for credit (the channels) override it."""
        return False

    def snapshots(self) -> list[LayerSnapshot]:
        """The snapshots this slot shows, bottom first: its own, or those of the cores it
        wraps too (the membership layer and the ordering it drives)."""
        return [self.inspect()]
