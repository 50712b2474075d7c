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

from abcast.codec import Packet
from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId
from abcast.snapshot import LayerSnapshot

__all__ = ["Layer"]


class Layer(ABC):
    """A protocol core in one slot of a stack: `handle(event, now) -> effects`."""

    # Slotted, as are the layers of the runtime's sequencer stack (the native lane reads
    # their attributes at their offsets: docs/performance.md §5); a subclass without
    # `__slots__` gets a `__dict__` as before.
    __slots__ = ("node",)

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

    def pass_up(self, sender: NodeId, header: object, now: int) -> bool:
        """A shortcut for a lower layer's commonest packet (the stack asks the bottom
        layer's, and the second's for a packet the bottom passed): True when
        `handle(Received(sender, header, inner), now)` would return exactly
        `[Up(sender, inner)]`, whatever `inner` is — the layer has then made the state
        change `handle` would have made, and the stack hands `inner` to the layer above
        without building either event. False: nothing changed, `handle` decides."""
        return False

    def pass_down(self, to: tuple[NodeId, ...], now: int) -> object | None:
        """The same going down (the bottom layer's only): the header that `handle` of a
        `SendRequested` to the one node of `to`, or of a `MulticastRequested` to `to`,
        would push onto the packet when that is all it would do (one `Send`/`Multicast`
        with the same destinations, packet and control flag); the layer has then made
        the state change `handle` would have made. None: nothing changed, `handle`
        decides."""
        return None

    def pass_down_each(
        self, to: tuple[NodeId, ...], packet: Packet, now: int
    ) -> list[object] | None:
        """The second layer's shortcut going down, for a layer that numbers each
        destination's copy apart (a reliable channel): the headers, one per node of `to`
        in order, that `handle` of a `SendRequested` of `packet` to the one node of `to`,
        or of a non-control `MulticastRequested` to `to`, would push when all it would
        return is one `Send` per destination with that packet (and the request's control
        flag, for a send); the layer has then made that state change. None: nothing
        changed, `handle` decides."""
        return None

    def snapshots(self) -> list[LayerSnapshot]:
        """The snapshots this slot shows, bottom first: its own, or those of the cores it
        wraps too (the membership layer and the ordering it drives)."""
        return [self.inspect()]
