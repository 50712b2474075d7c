"""Unordered reliable broadcast: deliver every message once, as soon as it arrives.

Rules: the origin delivers its own message at once and multicasts it to the rest of the
view; a receiver delivers on receipt. Exactly-once comes from the reliable channel
below; this layer adds no ordering at all. Guarantees: integrity, validity, agreement.

Under the membership layer (abcast.membership: the registry's stack) it also keeps what
it delivered in the current view, so that a view change settles it: each member reports
those messages, every survivor delivers, in the old view, whatever any of them delivered
(a crashed origin's message included: agreement among survivors), and the origin's
messages at or below the settled point are never delivered again. A joiner starts from
the cut it is given (per origin, how many messages its state holds).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from abcast.codec import Header, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View, node_sort_key
from abcast.layer import Layer
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering._delivered import DeliveredIds, above_base, common_base, forget_stable
from abcast.snapshot import LayerSnapshot


class UData(Header, frozen=True):
    """A broadcast message; its origin is the sender of the packet."""

    seq: Seq


class Unordered(Layer):
    name = "unordered"
    header_type = UData

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.view: View | None = None
        #: what was delivered here, per origin (unordered: gaps happen)
        self._done = DeliveredIds()
        #: messages delivered in the current view, for the flush that ends it
        self._log: dict[MsgId, bytes] = {}
        #: per origin, the point up to which a view change settled its messages
        self._settled: dict[NodeId, int] = {}

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                view = self._require_view()
                self._note(self.node, seq, payload)
                return [
                    Deliver(self.node, seq, payload),
                    Multicast(view.others(self.node), UData(seq), Packet((), payload)),
                ]
            case Received(sender, UData(seq), inner):
                if seq <= self._settled.get(sender, 0):
                    return []  # a view change delivered it already (or gave it up)
                return self.on_message(sender, seq, inner.payload)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case ViewInstalled(view):
                self.view = view
                return []
            case _:
                return []

    def on_message(self, origin: NodeId, seq: int, payload: bytes) -> list[Effect]:
        if self._delivered(origin, seq):
            raise RemoteProtocolError(f"{origin} sent message {seq} twice")
        self._note(origin, seq, payload)
        return [Deliver(origin, seq, payload)]

    def _delivered(self, origin: NodeId, seq: int) -> bool:
        return self._done.has(origin, seq)

    def _note(self, origin: NodeId, seq: int, payload: bytes) -> None:
        """Record a delivery: what was delivered, the log of this view."""
        self._log[MsgId(origin, seq)] = payload
        self._done.add(origin, seq)

    def _require_view(self) -> View:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        return self.view

    # -- under the membership layer (abcast.membership.api) ------------------------------
    def report(self) -> ViewReport:
        messages = [FlushMessage(m.origin, m.seq, body, delivered=True)
                    for m, body in self._log.items()]
        return ViewReport(self._done.prefixes(), messages)

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        """Everything any survivor delivered in the view and not every one did."""
        union: dict[MsgId, FlushMessage] = {}
        for m in above_base(reports, common_base(reports)):
            union.setdefault(MsgId(m.origin, m.seq), m)
        return [union[k] for k in sorted(union, key=_by_origin)]

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        effects: list[Effect] = []
        for m in outcome:
            if not self._delivered(m.origin, m.seq):
                self._note(m.origin, m.seq, m.body)
                effects.append(Deliver(m.origin, m.seq, m.body))
        self._settle_here()
        return effects

    def _settle_here(self) -> None:
        """After a flush: a gap left in an origin's messages is given up (its origin is
        gone: a member's own messages are all in its report), the view's log is done."""
        self._done.give_up_gaps()
        self._log.clear()
        self._settled = self._done.prefixes()

    def stable_point(self) -> dict[NodeId, int]:
        return self._done.prefixes()

    def forget(self, stable: Mapping[NodeId, int]) -> None:
        forget_stable(self._log, stable)

    def join_cut(self) -> JoinCut:
        return JoinCut(self._done.prefixes())

    def start_from(self, cut: JoinCut) -> None:
        self._done.reset(cut.delivered)
        self._log.clear()
        self._settled = dict(cut.delivered)

    def inspect(self) -> LayerSnapshot:
        return LayerSnapshot(layer=self.name, phase="steady",
                             clock={"delivered": self._done.prefixes()},
                             counters={"logged_this_view": len(self._log)})


def _by_origin(mid: MsgId) -> tuple[object, int]:
    return (node_sort_key(mid.origin), mid.seq)
