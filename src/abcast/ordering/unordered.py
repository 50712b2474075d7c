"""Unordered reliable broadcast: deliver every message once, as soon as it arrives.

Rules: the origin delivers its own message at once and multicasts it to the rest of the
view; a receiver delivers on receipt. Exactly-once comes from the reliable channel
below; this layer adds no ordering at all. Guarantees: integrity, validity, agreement
(among correct nodes, in failure-free runs: nothing relays a crashed origin's message).
"""

from __future__ import annotations

from abcast.codec import Header, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import NodeId, View
from abcast.layer import Layer


class UData(Header, frozen=True):
    """A broadcast message; its origin is the sender of the packet."""

    seq: Seq


class Unordered(Layer):
    name = "unordered"
    header_type = UData

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.view: View | None = None

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                view = self._require_view()
                return [
                    Deliver(self.node, seq, payload),
                    Multicast(view.others(self.node), UData(seq), Packet((), payload)),
                ]
            case Received(sender, UData(seq), inner):
                return self.on_message(sender, seq, inner.payload)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case ViewInstalled(view):
                self.view = view
                return []
            case _:
                return []

    def on_message(self, origin: NodeId, seq: int, payload: bytes) -> list[Effect]:
        return [Deliver(origin, seq, payload)]

    def _require_view(self) -> View:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        return self.view
