"""Skeen's atomic broadcast with Lamport clocks (the thesis's decentralised total order).

Rules: the origin stamps its message with its Lamport clock and multicasts it (n−1
packets). Each receiver advances its clock past that stamp, keeps the message pending
under its new clock value (its proposal) and sends the proposal back (n−1 packets). The
origin takes the maximum of all proposals, its own included, as the final timestamp and
multicasts it (n−1 packets): 3(n−1) per broadcast. A message goes into the delivery order
at its final timestamp, ties broken by origin (node order) and then by the origin's
sequence number, and the head of the pending queue is delivered only once it is final:
a pending message with a smaller key — even a proposal still waiting for its final —
holds everything behind it back. Guarantees: integrity, validity, agreement, total.

Why it is safe: a receiver's clock passes every final timestamp it has seen, so any
message it has not yet received will get a larger proposal, hence a larger final
timestamp, than anything it has delivered. The pending queue is a heap with lazy
deletion: no scan per message.

Crashes. The origin waits for every member's proposal, so one crashed member blocks
it until the membership layer (abcast.membership) removes that member. Its flush settles
the pending timestamps: each member reports what it delivered in the view and what is
pending (with its proposal, or the final stamp); the outcome is first every message any
survivor delivered, in final-stamp order (each member delivered a prefix of that
order), then every other reported message by its best known stamp (origin, seq
breaking ties). Each member delivers what it lacks of it, in that order, in the old
view, and starts the next view with nothing pending.

Flow control (abcast.ordering._credit): the origin is backpressured while
`max_unstable` of its own messages are not yet delivered by every member (the
membership layer's stable point, and each flush); a receiver refuses a message of an
origin that already has `max_held` pending here (RemoteProtocolError).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from abcast.codec import Header, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast, Send
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View, node_sort_key
from abcast.layer import Layer
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering._credit import MAX_HELD, MAX_UNSTABLE, HeldCap, OriginCredit
from abcast.ordering._delivered import DeliveredIds, above_base, common_base, forget_stable
from abcast.snapshot import HeldMessage, LayerSnapshot

LAMPORT = "lamport"  # the key of the Lamport clock in reports and cuts


class KData(Header, frozen=True):
    """A broadcast message and its origin's Lamport clock (its own proposal)."""

    seq: Seq
    ts: Seq


class KPropose(Header, frozen=True):
    """A receiver's proposal for the origin's message `seq`."""

    seq: Seq
    ts: Seq


class KFinal(Header, frozen=True):
    """The origin's final timestamp for its message `seq`."""

    seq: Seq
    ts: Seq


@dataclass(slots=True)
class _Pending:
    payload: bytes
    ts: int
    final: bool = False


@dataclass(slots=True)
class _Collecting:
    """The origin's tally of proposals for one of its messages."""

    waiting: dict[NodeId, None]
    best: int


#: a delivery-queue entry: (timestamp, origin's node-order key, seq, message id)
_Entry = tuple[int, Any, int, MsgId]


class Skeen(Layer):
    name = "skeen"
    header_type: ClassVar[Any] = KData | KPropose | KFinal

    def __init__(self, node: NodeId, max_unstable: int = MAX_UNSTABLE,
                 max_held: int = MAX_HELD) -> None:
        super().__init__(node)
        self.credit = OriginCredit(max_unstable)
        self._cap = HeldCap(max_held)
        self.view: View | None = None
        self._others: tuple[NodeId, ...] = ()
        self.clock = 0
        self._pending: dict[MsgId, _Pending] = {}
        self._queue: list[_Entry] = []
        self._collecting: dict[int, _Collecting] = {}
        self._order_keys: dict[NodeId, Any] = {}
        self._done = DeliveredIds()  # what was delivered, per origin
        #: messages delivered in the current view (final stamp, body), for its flush
        self._log: dict[MsgId, tuple[int, bytes]] = {}

    # -- introspection -------------------------------------------------------------------
    def waiting(self) -> int:
        """Messages here not yet delivered, our own included."""
        return len(self._pending)

    def backpressured(self) -> bool:
        """`max_unstable` of our own messages are not yet delivered everywhere."""
        return self.credit.exhausted()

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload)
            case Received(sender, KData(seq, ts), inner):
                return self._on_data(sender, seq, ts, inner.payload)
            case Received(sender, KPropose(seq, ts), _):
                return self._on_proposal(sender, seq, ts)
            case Received(sender, KFinal(seq, ts), _):
                return self._on_final(sender, seq, ts)
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
        others = self._others
        self.credit.sent = seq
        self.clock += 1
        ts = self.clock
        mid = MsgId(self.node, seq)
        self._hold(mid, payload, ts)
        effects: list[Effect] = [Multicast(others, KData(seq, ts), Packet((), payload))]
        if others:
            self._collecting[seq] = _Collecting(dict.fromkeys(others), ts)
        else:
            effects.extend(self._finalise(mid, ts))
        return effects

    def _on_data(self, origin: NodeId, seq: int, ts: int, payload: bytes) -> list[Effect]:
        mid = MsgId(origin, seq)
        if self._done.has(origin, seq):
            return []  # a view change settled it
        if origin == self.node or mid in self._pending:
            raise RemoteProtocolError(f"{origin} sent message {seq} twice (or to itself)")
        self._cap.admit(origin, f"#{seq}")
        self.clock = max(self.clock, ts) + 1
        self._hold(mid, payload, self.clock)
        return [Send(origin, KPropose(seq, self.clock))]

    def _on_proposal(self, sender: NodeId, seq: int, ts: int) -> list[Effect]:
        tally = self._collecting.get(seq)
        if tally is None and self._done.has(self.node, seq):
            return []  # a view change settled it
        if tally is None or sender not in tally.waiting:
            raise RemoteProtocolError(f"{sender} proposed for {self.node}#{seq} unasked")
        del tally.waiting[sender]
        tally.best = max(tally.best, ts)
        self.clock = max(self.clock, ts)
        if tally.waiting:
            return []
        del self._collecting[seq]
        final = tally.best
        effects: list[Effect] = [Multicast(self._others, KFinal(seq, final))]
        effects.extend(self._finalise(MsgId(self.node, seq), final))
        return effects

    def _on_final(self, origin: NodeId, seq: int, ts: int) -> list[Effect]:
        if self._done.has(origin, seq):
            return []  # a view change settled it
        return self._finalise(MsgId(origin, seq), ts)

    def _finalise(self, mid: MsgId, final: int) -> list[Effect]:
        pending = self._pending.get(mid)
        if pending is None or pending.final:
            raise RemoteProtocolError(f"final timestamp for unknown message {mid}")
        if final < pending.ts:
            raise RemoteProtocolError(f"final timestamp {final} of {mid} below its proposal")
        self.clock = max(self.clock, final)
        pending.final = True
        if final != pending.ts:
            pending.ts = final
            self._push(mid, final)  # the old entry goes stale
        return self.deliver_ready()

    def _hold(self, mid: MsgId, payload: bytes, ts: int) -> None:
        self._pending[mid] = _Pending(payload, ts)
        self._push(mid, ts)

    def _push(self, mid: MsgId, ts: int) -> None:
        key = self._order_keys.get(mid.origin)
        if key is None:
            key = self._order_keys[mid.origin] = (node_sort_key(mid.origin), mid.origin)
        heapq.heappush(self._queue, (ts, key, mid.seq, mid))

    def deliver_ready(self) -> list[Effect]:
        """Deliver from the head of the queue while the head is final."""
        effects: list[Effect] = []
        queue, pending, node = self._queue, self._pending, self.node
        while queue:
            ts, _, _, mid = queue[0]
            entry = pending.get(mid)
            if entry is None or entry.ts != ts:
                heapq.heappop(queue)  # stale: delivered, or re-queued at its final stamp
                continue
            if not entry.final:
                break
            heapq.heappop(queue)
            del pending[mid]
            if mid.origin != node:
                self._cap.release(mid.origin)
            self._done.add(mid.origin, mid.seq)
            self._log[mid] = (ts, entry.payload)
            effects.append(Deliver(mid.origin, mid.seq, entry.payload))
        return effects

    # -- under the membership layer (abcast.membership.api) ------------------------------
    def report(self) -> ViewReport:
        messages = [FlushMessage(m.origin, m.seq, body, stamp=ts, final=True, delivered=True)
                    for m, (ts, body) in self._log.items()]
        messages += [FlushMessage(m.origin, m.seq, p.payload, stamp=p.ts, final=p.final)
                     for m, p in self._pending.items()]
        return ViewReport(self._done.prefixes(), messages, {LAMPORT: self.clock})

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        """What any survivor delivered, in final-stamp order; then the rest by their best
        known stamp."""
        best: dict[MsgId, FlushMessage] = {}
        delivered: set[MsgId] = set()
        for m in above_base(reports, common_base(reports)):
            mid = MsgId(m.origin, m.seq)
            if m.delivered:
                delivered.add(mid)
            known = best.get(mid)
            if known is None or (m.final, m.stamp) > (known.final, known.stamp):
                best[mid] = m

        def key(mid: MsgId) -> tuple[bool, int, Any, int]:
            return (mid not in delivered, best[mid].stamp, node_sort_key(mid.origin), mid.seq)

        return [best[mid] for mid in sorted(best, key=key)]

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        effects: list[Effect] = []
        for m in outcome:
            self.clock = max(self.clock, m.stamp)
            if not self._done.has(m.origin, m.seq):
                self._done.add(m.origin, m.seq)
                effects.append(Deliver(m.origin, m.seq, m.body))
        self._done.give_up_gaps()
        self._pending.clear()
        self._queue.clear()
        self._collecting.clear()
        self._log.clear()
        self._cap.clear()
        self.credit.settle()
        return effects

    def stable_point(self) -> dict[NodeId, int]:
        return self._done.prefixes()

    def forget(self, stable: Mapping[NodeId, int]) -> None:
        forget_stable(self._log, stable)
        self.credit.learn(self.node, stable)

    def join_cut(self) -> JoinCut:
        return JoinCut(self._done.prefixes(), {LAMPORT: self.clock})

    def start_from(self, cut: JoinCut) -> None:
        self._done.reset(cut.delivered)
        self.clock = max(self.clock, cut.clock.get(LAMPORT, 0))
        self._pending.clear()
        self._queue.clear()
        self._collecting.clear()
        self._log.clear()
        self._cap.clear()
        self.credit.learn(self.node, cut.delivered)
        self.credit.settle()

    def inspect(self) -> LayerSnapshot:
        pending = sorted(self._pending.items(), key=lambda kv: (kv[1].ts, kv[0].seq))
        holdback = [HeldMessage(origin=m.origin, seq=m.seq,
                                waiting_for=f"final timestamp (proposed {p.ts})"
                                if not p.final else f"earlier timestamps (final {p.ts})")
                    for m, p in pending]
        return LayerSnapshot(
            layer=self.name, phase="steady",
            clock={LAMPORT: self.clock, "credit": self.credit.snapshot(),
                   "pending": {f"{m.origin}#{m.seq}": p.ts for m, p in pending},
                   "collecting": {str(seq): sorted(t.waiting)
                                  for seq, t in self._collecting.items()}},
            holdback=holdback,
            counters={"logged_this_view": len(self._log),
                      "refused_far": self._cap.refused})
