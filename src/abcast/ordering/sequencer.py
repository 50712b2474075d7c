"""The sequencer family — fixed sequencer, relay, SAFE, causal-total, optimistic, evs — as
one core, under the membership layer.

Rules. The view's leader (the sequencer) numbers every message and announces the numbers;
everyone delivers in number order (sequencer_numbering). Views are the membership layer's
(abcast.membership wraps this core, the registry builds `Membership(node, Sequencer(…))`):
at a view change the layer freezes the core (it is fed nothing), the core reports its
numbers and bodies, the coordinator settles them, and the new view's leader numbers on
after the outcome (sequencer_view: the `ViewOrdering` methods, and under evs the
`MergingOrdering` ones the layer's merge of partitions calls). The core has no phases of
its own: the layer's phase table (abcast.membership.layer) is the family's.

    option   what changes                                        packets per broadcast
    (none)   data to all, ids numbered by the sequencer          2(n−1)
    relay    data to the sequencer only, orders carry bodies     n
    safe     delivery waits for a majority's acks (uniform)      4(n−1) unbatched
    causal   data carries a vector; admission in causal order    as above
    evs      SAFE over the whole view; each side settles its own as safe
    interval one order packet per order interval (ROMIOP)        (n−1)(1 + 1/ids a packet)

Theory, guarantees and what it does not handle: docs/orderings.md ("The sequencer
family"). Wire structs: sequencer_wire.

The core only routes: its own broadcast, a member's data packet and its sequencer's order
go straight to the steady state (the hot path, guarded by
tests/unit/test_hotpath_sequencer.py); every other event goes to `_route`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from abcast.effects import Effect
from abcast.errors import ConfigError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Received,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import MsgId, NodeId, View
from abcast.layer import Layer
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering import sequencer_optimistic as optimistic
from abcast.ordering import sequencer_view
from abcast.ordering._credit import MAX_UNSTABLE
from abcast.ordering.sequencer_state import (
    OptimisticConfig,
    OptimisticState,
    SequencerState,
)
from abcast.ordering.sequencer_wire import (
    SEQUENCER_HEADERS,
    CTData,
    OData,
    SAck,
    SData,
    SOrder,
    SSafe,
    check_batch,
)
from abcast.snapshot import HeldMessage, LayerSnapshot


class Sequencer(Layer):
    """One node of the sequencer family; the options pick the variant (see the rules)."""

    __slots__ = ("_data_type", "st")

    name = "sequencer"
    header_type = SEQUENCER_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, relay: bool = False,
        safe: bool = False, causal: bool = False, evs: bool = False,
        stable_period_us: int = 50_000, order_interval_us: int = 0,
        optimistic: OptimisticConfig | None = None, max_unstable: int = MAX_UNSTABLE,
    ) -> None:
        super().__init__(node)
        if optimistic is not None and (relay or causal or evs):
            raise ConfigError("optimistic delivery needs every data packet at every member: "
                              "not with relay, causal or evs")
        # Under evs delivery waits for the whole view to hold a number.
        self.st = SequencerState(
            node, batch=check_batch(batch), relay=relay, safe=safe or evs, evs=evs,
            causal=causal, stable_period_us=stable_period_us,
            order_interval_us=order_interval_us,
            optimistic=OptimisticState(optimistic) if optimistic is not None else None,
            max_unstable=max_unstable,
        )
        self._data_type: type[SData] | type[CTData] | type[OData] = (
            CTData if causal else OData if optimistic is not None else SData)

    # -- introspection -----------------------------------------------------------------
    def backpressured(self) -> bool:
        """Our own broadcasts not yet delivered reach `max_unstable` (sequencer_numbering's
        flow control): the runtime's broadcast waits."""
        st = self.st
        return numbering.outstanding(st) >= st.max_unstable

    @property
    def view(self) -> View | None:
        return self.st.view

    @property
    def evs(self) -> bool:
        """Built for `partitions="evs"` (SAFE over the whole view, each side settled)."""
        return self.st.evs

    @property
    def is_sequencer(self) -> bool:
        view = self.st.view
        return view is not None and view.leader == self.node

    def waiting(self) -> int:
        """Messages (bodies) held here, not yet delivered."""
        return len(self.st.bodies)

    def delivered_through(self) -> int:
        """The highest global number delivered here."""
        return self.st.delivered_through()

    def inspect(self) -> LayerSnapshot:
        st = self.st
        held: list[HeldMessage] = []
        numbered = {mid: at for at, mid in st.numbers.items()}
        for mid in st.bodies:
            at = numbered.get(mid)
            if at is None:
                held.append(HeldMessage(origin=mid.origin, seq=mid.seq, waiting_for="the order"))
            else:
                held.append(HeldMessage(origin=mid.origin, seq=mid.seq,
                                        waiting_for=self._why_not_delivered(at)))
        for at, mid in sorted(st.numbers.items()):
            if mid not in st.bodies:
                held.append(HeldMessage(origin=mid.origin, seq=mid.seq,
                                        waiting_for=f"its body (global #{at})"))
        clock: dict[str, Any] = {
            "view": st.view.view_id if st.view is not None else None,
            "sequencer": st.view.leader if st.view is not None else None,
            "next_number": st.next_number,
            "delivered_through": st.delivered_through(),
            "safe_upto": st.safe_upto,
            "stable": st.stable,
            "delivered": dict(st.delivered),
        }
        if st.optimistic is not None:
            clock["optimistic"] = optimistic.snapshot(st.optimistic)
        return LayerSnapshot(
            layer=self.name, phase="steady", clock=clock, holdback=held,
            counters={"order_packets": st.order_packets, "log": len(st.log),
                      "interval_ids": len(st.interval_ids)},
        )

    def _why_not_delivered(self, at: int) -> str:
        st = self.st
        if st.safe and at > st.safe_upto:
            return f"the safe point (global #{at}, safe through #{st.safe_upto})"
        return f"global #{st.next_delivery} first (this is #{at})"

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        if st.optimistic is not None:
            return self._handle_optimistic(st.optimistic, event, now)
        return self._handle_plain(event, now)

    def _handle_plain(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        # The hot path, by exact type: our own broadcast, a member's data, the sequencer's
        # order (the membership layer feeds the core only in a steady view, only from its
        # members). None of the cases in `_route` would take it first.
        if type(event) is BroadcastRequested:
            st.now = now
            return numbering.broadcast(st, event.seq, event.payload) + self._after()
        view = st.view
        if type(event) is Received and view is not None:
            header = event.header
            header_type = type(header)
            sender = event.sender
            if header_type is SOrder and sender == view.leader and sender != self.node:
                st.now = now
                return (numbering.on_order(st, sender, header.first, header.ids,
                                           header.bodies)
                        + self._after())
            if header_type is self._data_type and sender in view.members:
                st.now = now
                return self._on_data(event) + self._after()
        return self._route(event, now)

    def _after(self) -> list[Effect]:
        """Batched per event: SAFE acks."""
        st = self.st
        return sequencer_view.ack_holdings(st) if st.safe else []

    def _handle_optimistic(self, opt: OptimisticState, event: Event, now: int
                           ) -> list[Effect]:
        """The optimistic option around the plain core (sequencer_optimistic's rules):
        register receipts, hold the sequencer's own messages, put each opt-delivery
        before its final one."""
        st = self.st
        view = st.view
        mid: MsgId | None = None
        payload = b""
        pre: list[Effect] = []
        effects: list[Effect]
        opt.depth += 1
        try:
            match event:
                case TimerFired(key) if key == optimistic.OPT_TIMER:
                    effects = optimistic.on_timer(opt, now)
                case TimerFired(key) if key == optimistic.OWN_TIMER:
                    st.now = now
                    effects = self._number_own(opt, now) + self._after()
                case BroadcastRequested(seq, body):
                    mid, payload = MsgId(self.node, seq), body
                    wait = optimistic.own_delay(st, opt)
                    if wait > 0 and view is not None and view.leader == self.node:
                        st.now = now
                        effects = (numbering.broadcast(st, seq, body, hold=True)
                                   + optimistic.hold_own(opt, seq, now, wait))
                    else:
                        effects = self._handle_plain(event, now)
                case Received(sender, OData(seq, suggest), inner) if (
                        view is not None and sender in view.members
                        and sender != self.node):
                    optimistic.check_suggest(sender, suggest)
                    opt.requests[sender] = suggest
                    candidate = MsgId(sender, seq)
                    if optimistic.is_fresh(st, opt, candidate):
                        mid, payload = candidate, inner.payload
                    effects = self._handle_plain(event, now)
                case _:
                    effects = self._handle_plain(event, now)
            if mid is not None and (mid in st.bodies
                                    or st.delivered.get(mid.origin, 0) >= mid.seq):
                pre = optimistic.receive(opt, mid, payload, now)
        finally:
            opt.depth -= 1
        if opt.depth:
            return pre + effects
        return optimistic.scan(opt, pre + effects, now)

    def _number_own(self, opt: OptimisticState, now: int) -> list[Effect]:
        st = self.st
        ready, effects = optimistic.due_own(opt, now)
        view = st.view
        if view is None or view.leader != self.node:
            return effects  # a view change numbers them (its new sequencer takes over)
        for seq in ready:
            if MsgId(self.node, seq) in st.bodies and not st.admission.knows(self.node, seq):
                effects += numbering.admit(st, self.node, seq, numbering.NO_DEPS)
        return effects

    def _on_data(self, event: Received) -> list[Effect]:
        header = event.header
        if type(header) is not self._data_type:
            raise RemoteProtocolError(f"{event.sender} sent unexpected header {header!r}")
        if event.sender == self.node:
            raise RemoteProtocolError(f"{self.node} received its own message")
        deps = header.deps if type(header) is CTData else numbering.NO_DEPS
        return numbering.on_data(self.st, event.sender, header.seq, deps, event.inner.payload)

    def _route(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        st.now = now
        return self._route_other(event) + self._after()

    def _route_other(self, event: Event) -> list[Effect]:
        st = self.st
        view = st.view
        leader = view.leader if view is not None else None
        match event:
            case BroadcastRequested(seq, payload):
                return numbering.broadcast(st, seq, payload)
            case Received(sender, SOrder(first, ids, bodies), _):
                if sender != leader or sender == self.node:
                    return []  # a former view's sequencer: its flush settled its numbers
                return numbering.on_order(st, sender, first, ids, bodies)
            case Received(sender, SSafe(), _) if sender != leader:
                return []  # a former view's sequencer
            case Received(sender, SAck() | SSafe() as header, _):
                return sequencer_view.on_safe_message(st, sender, header)
            case Received():
                return self._on_data(event)
            case ViewInstalled(new):
                # The view's leader is its sequencer: it numbers on after the flush.
                effects = sequencer_view.adopt_view(st, new) + numbering.deliver_ready(st)
                resend, st.resend = st.resend, []
                for seq, body in resend:  # evs: ours a merge left undelivered
                    effects += numbering.broadcast(st, seq, body)
                return effects
            case TimerFired(key) if key == numbering.ORDER_TIMER:
                return numbering.on_order_timer(st)
            case _:
                return []

    # -- under the membership layer (abcast.membership.api; sequencer_view's rules) ------
    def report(self) -> ViewReport:
        return sequencer_view.report(self.st)

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        return sequencer_view.settle(self.st, reports)

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        st = self.st
        effects = sequencer_view.conclude(st, outcome)
        if st.optimistic is not None:
            effects = optimistic.scan(st.optimistic, effects, st.now)
        return effects

    def join_cut(self) -> JoinCut:
        return sequencer_view.join_cut(self.st)

    # -- under evs (abcast.membership.api.MergingOrdering) ---------------------------------
    def settle_side(
        self, reports: Sequence[ViewReport], members: tuple[NodeId, ...], old: View
    ) -> tuple[list[FlushMessage], int]:
        return sequencer_view.settle_side(self.st, reports, members, old)

    def conclude_side(self, outcome: Sequence[FlushMessage], spent: int) -> list[Effect]:
        st = self.st
        effects = sequencer_view.conclude_side(st, outcome, spent)
        if st.optimistic is not None:
            effects = optimistic.scan(st.optimistic, effects, st.now)
        return effects

    def merge_cut(
        self, reports: Sequence[ViewReport], outcomes: Sequence[Sequence[FlushMessage]],
        spent: int,
    ) -> JoinCut:
        return sequencer_view.merge_cut(reports, outcomes, spent)

    def start_merged(self, cut: JoinCut) -> None:
        sequencer_view.start_merged(self.st, cut)

    def start_from(self, cut: JoinCut) -> None:
        sequencer_view.start_from(self.st, cut)

    def owes_own(self) -> bool:
        """SAFE: own broadcasts not delivered yet (a flush may leave them to the next
        view, which a leaver never installs)."""
        st = self.st
        return st.safe and any(mid.origin == self.node for mid in st.bodies)

    def stable_point(self) -> dict[NodeId, int]:
        return sequencer_view.stable_point(self.st)

    def forget(self, stable: Mapping[NodeId, int]) -> None:
        sequencer_view.forget(self.st, stable)


__all__ = ["OptimisticConfig", "Sequencer"]
