"""Causal broadcast: vector clocks and a holdback queue.

Rules: the origin delivers its own message at once and multicasts it with its vector
clock — how many of each other node's messages it had delivered when it sent (exactly
the `deps` the trace records on the send row). A receiver holds a message back until it
has delivered every message the vector names and the origin's earlier ones, then
delivers it and whatever that unblocks (abcast.ordering._holdback). One multicast per
message: n−1 packets. Guarantees: integrity, validity, agreement, fifo, causal.

Views come from the membership layer (abcast.membership): joins, leaves and crashes are
flushes. At a flush each member reports its vector and the messages it delivered in the
view or holds back, with their vectors; the outcome is every reported message whose
predecessors are all in it or delivered by everyone (causally closed, in a causal
order) — so it holds everything any survivor delivered — and each member releases it
through its holdback, in the old view. What is left held (a departed origin's message
whose predecessor nobody got) is given up. A joiner is seeded with the vector at the
cut; every message of the new view follows it.

Flow control (abcast.ordering._credit): the origin is backpressured while
`max_unstable` of its own messages are not yet delivered by every member (the
membership layer's stable point, and each flush); a receiver refuses a message of an
origin that already has `max_held` waiting here (RemoteProtocolError).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

import msgspec

from abcast.codec import Count, Header, NodeField, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View
from abcast.layer import Layer
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering._credit import MAX_HELD, MAX_UNSTABLE, HeldCap, OriginCredit
from abcast.ordering._delivered import above_base, common_base, forget_stable
from abcast.ordering._holdback import CausalHoldback, Held
from abcast.ordering.unordered import _by_origin
from abcast.snapshot import HeldMessage, LayerSnapshot

#: a dependency vector on the wire: {node: k}, zero entries and the origin left out
DepsField = Annotated[dict[NodeField, Count], msgspec.Meta(max_length=1024)]
NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]


class CData(Header, frozen=True):
    """A broadcast message and its origin's vector clock when it was sent."""

    seq: Seq
    deps: DepsField = {}


class Causal(Layer):
    name = "causal"
    header_type = CData

    def __init__(self, node: NodeId, max_unstable: int = MAX_UNSTABLE,
                 max_held: int = MAX_HELD) -> None:
        super().__init__(node)
        self.credit = OriginCredit(max_unstable)
        self._cap = HeldCap(max_held)
        self.view: View | None = None
        self._others: tuple[NodeId, ...] = ()
        self._holdback: CausalHoldback[bytes] = CausalHoldback()
        #: messages delivered in the current view, with their vectors, for its flush
        self._log: dict[MsgId, tuple[Mapping[NodeId, int], bytes]] = {}
        #: a joiner's cut: per origin, how many of its messages the state it was given holds
        self.cut: dict[NodeId, int] = {}

    def waiting(self) -> int:
        """Messages received but waiting for a causal predecessor (the flow-control tests
        watch it)."""
        return self._holdback.held()

    def backpressured(self) -> bool:
        """`max_unstable` of our own messages are not yet delivered everywhere."""
        return self.credit.exhausted()

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload)
            case Received(sender, CData(seq, deps), inner):
                if sender == self.node:
                    raise RemoteProtocolError(f"{self.node} received its own packet")
                if self._holdback.knows(sender, seq):
                    return []  # settled by a view change, or in a joiner's state
                return self.on_message(sender, seq, deps, inner.payload)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case ViewInstalled(view):
                self.view, self._others = view, view.others(self.node)
                return []
            case _:
                return []

    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        self.credit.sent = seq
        deps = self._holdback.vector(exclude=self.node)
        # Our own message depends only on what we delivered: it is released at once.
        effects = self._release(self._holdback.offer(self.node, seq, deps, payload))
        effects.append(Multicast(self._others, CData(seq, deps), Packet((), payload)))
        return effects

    def on_message(
        self, origin: NodeId, seq: int, deps: dict[NodeId, int], payload: bytes
    ) -> list[Effect]:
        self._cap.admit(origin, f"#{seq}")
        return self._release(self._holdback.offer(origin, seq, deps, payload))

    def _release(self, released: list[Held[bytes]]) -> list[Effect]:
        effects: list[Effect] = []
        node, cap = self.node, self._cap
        for h in released:
            if h.origin != node:
                cap.release(h.origin)
            self._log[MsgId(h.origin, h.seq)] = (h.deps, h.item)
            effects.append(Deliver(h.origin, h.seq, h.item))
        return effects

    # -- under the membership layer (abcast.membership.api) ------------------------------
    def report(self) -> ViewReport:
        messages = [FlushMessage(m.origin, m.seq, body, dict(deps), delivered=True)
                    for m, (deps, body) in self._log.items()]
        messages += [FlushMessage(h.origin, h.seq, h.item, dict(h.deps))
                     for _, h in self._holdback.waiting()]
        vector = self._holdback.vector()
        return ViewReport(vector, messages, vector)

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        """The reported messages whose predecessors are all in the outcome or delivered
        by every survivor, in a causal order."""
        base = common_base(reports)
        union: dict[MsgId, FlushMessage] = {}
        for m in above_base(reports, base):
            union.setdefault(MsgId(m.origin, m.seq), m)
        have = dict(base)
        outcome: list[FlushMessage] = []
        waiting = sorted(union, key=_by_origin)
        while waiting:
            ready = [k for k in waiting if _closed(union[k], have)]
            if not ready:
                break  # the rest depends on a message nobody holds
            for k in ready:
                outcome.append(union[k])
                have[k.origin] = k.seq
            taken = set(ready)
            waiting = [k for k in waiting if k not in taken]
        return outcome

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        effects: list[Effect] = []
        for m in outcome:
            if not self._holdback.knows(m.origin, m.seq):
                effects += self._release(self._holdback.offer(m.origin, m.seq, m.deps, m.body))
        self._holdback.forget_held()
        self._cap.clear()
        self.credit.settle()
        self._log.clear()
        return effects

    def stable_point(self) -> dict[NodeId, int]:
        return self._holdback.vector()

    def forget(self, stable: Mapping[NodeId, int]) -> None:
        forget_stable(self._log, stable)
        self.credit.learn(self.node, stable)

    def join_cut(self) -> JoinCut:
        vector = self._holdback.vector()
        return JoinCut(vector, vector)

    def start_from(self, cut: JoinCut) -> None:
        self.cut = dict(cut.delivered)
        self._holdback = CausalHoldback()
        self._holdback.seed(cut.delivered)
        self._cap.clear()
        self.credit.learn(self.node, cut.delivered)
        self.credit.settle()
        self._log.clear()

    def inspect(self) -> LayerSnapshot:
        holdback = [HeldMessage(origin=h.origin, seq=h.seq,
                                waiting_for=f"{node}'s #{k} (causal predecessor)")
                    for (node, k), h in self._holdback.waiting()]
        return LayerSnapshot(layer=self.name, phase="steady",
                             clock={"vector": self._holdback.vector(),
                                    "credit": self.credit.snapshot()}, holdback=holdback,
                             counters={"logged_this_view": len(self._log),
                                       "refused_far": self._cap.refused})


def _closed(m: FlushMessage, have: Mapping[NodeId, int]) -> bool:
    """Every predecessor of `m` (its origin's earlier ones, its vector) is in `have`."""
    if have.get(m.origin, 0) != m.seq - 1:
        return False
    return all(have.get(node, 0) >= k for node, k in m.deps.items())
