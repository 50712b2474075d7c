"""Causal broadcast: vector clocks and a holdback queue.

Rules: the origin delivers its own message at once and multicasts it with its vector
clock — how many of each other node's messages it had delivered when it sent (exactly
the `deps` the trace records on the send row). A receiver holds a message back until it
has delivered every message the vector names and the origin's earlier ones, then
delivers it and whatever that unblocks (abcast.ordering._holdback). One multicast per
message: n−1 packets. Guarantees: integrity, validity, agreement, fifo, causal.

What it does not do: order concurrent messages (that is `causal_total`), or relay a
crashed origin's message (agreement under crashes belongs to the membership work).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from abcast.codec import Count, Header, NodeField, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import NodeId, View
from abcast.ordering._holdback import CausalHoldback
from abcast.stack import Layer

#: a dependency vector on the wire: {node: k}, zero entries and the origin left out
DepsField = Annotated[dict[NodeField, Count], msgspec.Meta(max_length=1024)]


class CData(Header, frozen=True):
    """A broadcast message and its origin's vector clock when it was sent."""

    seq: Seq
    deps: DepsField = {}


class Causal(Layer):
    name = "causal"
    header_type = CData

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.view: View | None = None
        self._others: tuple[NodeId, ...] = ()
        self._holdback: CausalHoldback[bytes] = CausalHoldback()

    def held(self) -> int:
        """Messages received but waiting for a causal predecessor."""
        return self._holdback.held()

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload)
            case Received(sender, CData(seq, deps), inner):
                if sender == self.node:
                    raise RemoteProtocolError(f"{self.node} received its own message {seq}")
                return self.on_message(sender, seq, deps, inner.payload)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case ViewInstalled(view):
                self.view = view
                self._others = view.others(self.node)
                return []
            case _:
                return []

    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        deps = self._holdback.vector(exclude=self.node)
        # Our own message depends only on what we delivered: it is released at once.
        released = self._holdback.offer(self.node, seq, {}, payload)
        effects: list[Effect] = [Deliver(h.origin, h.seq, h.item) for h in released]
        effects.append(Multicast(self._others, CData(seq, deps), Packet((), payload)))
        return effects

    def on_message(
        self, origin: NodeId, seq: int, deps: dict[NodeId, int], payload: bytes
    ) -> list[Effect]:
        released = self._holdback.offer(origin, seq, deps, payload)
        return [Deliver(h.origin, h.seq, h.item) for h in released]
