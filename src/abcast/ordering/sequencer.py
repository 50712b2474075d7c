"""The sequencer family — fixed sequencer, relay, SAFE, causal-total, optimistic, evs — as
one core.

Rules. The view's leader (the sequencer) numbers every message and announces the numbers;
everyone delivers in number order (sequencer_numbering). Views are the membership layer's
(abcast.membership wraps this core, the registry builds `Membership(node, Sequencer(…))`):
at a view change the core reports its numbers and bodies, the coordinator settles them,
and the new view's leader numbers on after the outcome (sequencer_view: the seven
`ViewOrdering` methods). Only under `evs` does the core still keep its own views — its
flush (sequencer_flush), joins and leaves (sequencer_join) and the merge of partitions
on heal (sequencer_merge), with phases and transitions in sequencer_state's tables.

    option   what changes                                        packets per broadcast
    (none)   data to all, ids numbered by the sequencer          2(n−1)
    relay    data to the sequencer only, orders carry bodies     n
    safe     delivery waits for a majority's acks (uniform)      4(n−1) unbatched
    causal   data carries a vector; admission in causal order    as above
    evs      no majority needed; SAFE over the whole view        as safe
    interval one order packet per order interval (ROMIOP)        (n−1)(1 + 1/ids a packet)

Theory, guarantees and what it does not handle: docs/orderings.md ("The sequencer
family"). Wire structs: sequencer_wire.

The core only routes: one event goes to the steady state when the node is a member in a
steady view and the event is its own broadcast, a data packet or its sequencer's order
(the hot path, guarded by tests/unit/test_hotpath_sequencer.py); under the membership
layer every other event goes to `_route_managed`, under evs in turn to the merge, the
joins, the flush and the steady state, the first that takes it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from abcast.effects import Effect
from abcast.errors import ConfigError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    JoinRequested,
    LeaveRequested,
    Received,
    Restored,
    SnapshotTaken,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import MsgId, NodeId, View
from abcast.layer import Layer
from abcast.membership.state import MembershipConfig
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering import sequencer_flush as flush
from abcast.ordering import sequencer_join as joins
from abcast.ordering import sequencer_merge as merge
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering import sequencer_optimistic as optimistic
from abcast.ordering import sequencer_view
from abcast.ordering._credit import MAX_UNSTABLE
from abcast.ordering.sequencer_state import (
    Flow,
    MergeConfig,
    OptimisticConfig,
    OptimisticState,
    Role,
    SequencerState,
)
from abcast.ordering.sequencer_wire import (
    FLUSH_HEADERS,
    MANAGED_HEADERS,
    SEQUENCER_HEADERS,
    CTData,
    OData,
    SAck,
    SData,
    SFarewell,
    SJoin,
    SJoinFwd,
    SLeave,
    SNotYet,
    SOrder,
    SSafe,
    SStable,
    SWelcome,
    VcPrepare,
    check_batch,
)
from abcast.snapshot import HeldMessage, LayerSnapshot


class Sequencer(Layer):
    """One node of the sequencer family; the options pick the variant (see the rules)."""

    name = "sequencer"
    header_type = SEQUENCER_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, relay: bool = False,
        safe: bool = False, causal: bool = False, evs: bool = False,
        stable_period_us: int = 50_000, membership: MembershipConfig | None = None,
        merge: MergeConfig | None = None, order_interval_us: int = 0,
        optimistic: OptimisticConfig | None = None, max_unstable: int = MAX_UNSTABLE,
    ) -> None:
        super().__init__(node)
        if optimistic is not None and (relay or causal or evs):
            raise ConfigError("optimistic delivery needs every data packet at every member: "
                              "not with relay, causal or evs")
        config = membership or MembershipConfig()
        # Under evs delivery waits for the whole view to hold a number.
        self.st = SequencerState(
            node, self, batch=check_batch(batch), relay=relay, safe=safe or evs, evs=evs,
            causal=causal, stable_period_us=stable_period_us, membership=config,
            merge=merge or MergeConfig(), order_interval_us=order_interval_us,
            optimistic=OptimisticState(optimistic) if optimistic is not None else None,
            max_unstable=max_unstable,
        )
        self._data_type: type[SData] | type[CTData] | type[OData] = (
            CTData if causal else OData if optimistic is not None else SData)
        #: views kept by the membership layer (abcast.membership) around this core; only
        #: evs still runs its own flush, joins and merges (sequencer_flush/_join/_merge)
        self.managed = not evs
        if self.managed:
            self.header_type = MANAGED_HEADERS  # type: ignore[misc]
            self.st.timer_armed = True  # stability is the membership layer's (`forget`)

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
    def status(self) -> str:
        """The role: joining, member, leaving, departing or stopped."""
        return self.st.role.value

    @property
    def phase(self) -> str:
        """The role, or the view's flow for a member: steady, flushing or merging."""
        st = self.st
        if st.role is Role.MEMBER:
            return st.flow.value
        if st.role is Role.LEAVING and st.flow is not Flow.STEADY:
            return f"leaving/{st.flow.value}"
        return st.role.value

    @property
    def stopped(self) -> bool:
        return self.st.stopped

    @property
    def is_member(self) -> bool:
        return self.st.role in (Role.MEMBER, Role.LEAVING)

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
        if st.flush is not None:
            clock["flush"] = {"target": st.flush.target, "attempt": st.flush.attempt,
                              "members": list(st.flush.members),
                              "answered": sorted(st.flush.states),
                              "fresh": sorted(st.flush.fresh)}
        if st.flow is not Flow.STEADY:
            clock["answered"] = {"target": st.answered[0], "attempt": st.answered[1],
                                 "coordinator": st.answered_to}
        if st.merging is not None:
            clock["merging"] = {"target": st.merging[0], "attempt": st.merging[1],
                                "coordinator": st.merging[2]}
        if st.optimistic is not None:
            clock["optimistic"] = optimistic.snapshot(st.optimistic)
        return LayerSnapshot(
            layer=self.name, phase=self.phase, clock=clock, holdback=held,
            counters={
                "order_packets": st.order_packets, "log": len(st.log),
                "queued": len(st.queued), "early": len(st.early),
                "suspects": len(st.suspects), "welcomes_sent": st.welcomes_sent,
                "merges": st.merges,
                "interval_ids": len(st.interval_ids),
            },
        )

    def _why_not_delivered(self, at: int) -> str:
        st = self.st
        if st.flow is not Flow.STEADY:
            return f"the {st.flow.value} to end (global #{at})"
        if st.safe and at > st.safe_upto:
            return f"the safe point (global #{at}, safe through #{st.safe_upto})"
        return f"global #{st.next_delivery} first (this is #{at})"

    # -- the hub: what the helper modules call back -------------------------------------
    def view_installed(self, old: View, new: View, last_number: int) -> list[Effect]:
        effects = joins.view_installed(self.st, old, new, last_number)
        if self.st.evs:
            effects += merge.view_installed(self.st, old, new)
        return effects

    def left_out(self, old: View, new: View, last_number: int) -> list[Effect]:
        return joins.left_out(self.st, old, new, last_number)

    def excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        if self.st.evs and self.st.role is Role.MEMBER:
            return merge.partitioned(self.st, by)
        return joins.excluded(self.st, by, view_id)

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        if st.optimistic is not None:
            return self._handle_optimistic(st.optimistic, event, now)
        return self._handle_plain(event, now)

    def _handle_plain(self, event: Event, now: int) -> list[Effect]:
        st = self.st
        # The hot path, by exact type: a member's data, the sequencer's order or our own
        # broadcast, in a steady view. None of the cases below would take it before the
        # steady state.
        if st.steady_member:
            if type(event) is BroadcastRequested:
                st.now = now
                return (numbering.broadcast(st, event.seq, event.payload)
                        + joins.after_event(st))
            view = st.view
            if type(event) is Received and view is not None:
                header = event.header
                header_type = type(header)
                sender = event.sender
                if header_type is SOrder and sender == view.leader:
                    st.now = now
                    return (numbering.on_order(st, sender, header.first, header.ids,
                                               header.bodies)
                            + joins.after_event(st))
                if header_type is self._data_type and sender in view.members:
                    st.now = now
                    return self._on_data(event) + joins.after_event(st)
        return self._route(event, now)

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
                    effects = self._number_own(opt, now) + joins.after_event(st)
                case BroadcastRequested(seq, body) if st.role is Role.MEMBER:
                    mid, payload = MsgId(self.node, seq), body
                    wait = optimistic.own_delay(st, opt)
                    if (wait > 0 and view is not None and view.leader == self.node
                            and st.flow is Flow.STEADY):
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
                    if st.role in (Role.MEMBER, Role.LEAVING) and optimistic.is_fresh(
                            st, opt, candidate):
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
        if view is None or view.leader != self.node or st.flow is not Flow.STEADY:
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
        if self.managed:
            return self._route_managed(event) + joins.after_event(st)
        if st.role is Role.STOPPED:
            return []
        if st.evs:
            taken = merge.dispatch(st, event, now)
            if taken is not None:
                return taken
        match event:
            case JoinRequested(contacts):
                return joins.join(st, contacts, now)
            case LeaveRequested():
                return joins.leave(st, now)
            case SnapshotTaken(token, state):
                return joins.send_welcome(st, token, state)
            case TimerFired(key) if key == joins.JOIN_RETRY:
                return joins.retry_join(st, now)
            case TimerFired(key) if key == joins.LEAVE_RETRY:
                return joins.retry_leave(st, now)
            case TimerFired(key) if key == joins.FAREWELL_WAIT:
                return joins.farewell_timeout(st)
            case _:
                pass
        if st.role is Role.JOINING:
            return joins.while_joining(st, event, now)
        if st.role is Role.DEPARTING:
            return joins.while_departing(st, event)
        view = st.view
        members = view.members if view is not None else ()
        effects: list[Effect]
        match event:
            case Received(sender, SJoin(), _):
                effects = joins.on_join_ask(st, sender)
            case Received(sender, SJoinFwd(joiner), _) if sender in members:
                effects = joins.on_join_ask(st, joiner)
            case Received(sender, SLeave(), _) if sender in members:
                effects = joins.on_leave_ask(st, sender)
            case Received(sender, SNotYet(target, attempt), _):
                effects = flush.note_fresh(st, sender, target, attempt)
            case Received(sender, SFarewell(view_id), _):
                if view is None or sender not in members or view_id <= view.view_id:
                    return []
                effects = self.excluded(sender, view_id)
            case Received(_, SJoinFwd() | SLeave() | SWelcome(), _):
                return []  # from a former member, or a welcome sent twice
            case _:
                return self._route_flush(event)
        return effects + joins.after_event(st)

    def _route_flush(self, event: Event) -> list[Effect]:
        st = self.st
        view = st.view
        leader = view.leader if view is not None else None
        members = view.members if view is not None else ()
        frozen = not st.steady
        effects: list[Effect]
        match event:
            case BroadcastRequested(seq, payload) if frozen:
                st.queued.append((seq, payload))
                return []
            case Received(sender, SOrder() | SSafe(), _) if sender != leader or frozen:
                # From the next view's sequencer, overtaking its VcInstall (the channel does
                # not order packets), maybe the same node: keep it for when that view is
                # installed, so what it numbers is delivered in that view, not this one.
                st.early.append(event)
                return []
            case Received(_, SAck(), _) if frozen:
                # Maybe for us as the next view's sequencer, from a member that installed
                # it first (it acks once): count it once we are.
                st.early.append(event)
                return []
            case Received(sender, VcPrepare(target), _) if (
                    sender not in members and view is not None
                    and target > view.view_id + 1):
                # The coordinator is a member of a view we have not installed yet (a
                # joiner it admitted leads it): its VcInstall is on its way. The channel
                # delivers this prepare once, so dropping it would leave that flush
                # waiting for our state for ever; answer it once that view is ours.
                st.early.append(event)
                return []
            case Received(sender, header, _) if isinstance(header, FLUSH_HEADERS):
                effects = flush.on_message(st, sender, header)
            case Received(sender, _, _) if sender not in members:
                if frozen:
                    # Maybe a joiner the next view admits, already sending in it.
                    st.early.append(event)
                return []  # else from a node this view left out: it learns from `Excluded`
            case Suspected(node):
                st.suspects.add(node)
                effects = flush.on_suspect(st, node)
            case Restored(node):
                st.suspects.discard(node)
                effects = flush.on_restored(st)
            case Excluded(by, view_id) if view is not None and by in view.members:
                if view_id <= view.view_id:
                    return []  # a member that has not installed our view yet
                return self.excluded(by, view_id)
            case TimerFired(key) if key == flush.STABLE_TIMER:
                effects = flush.report_stable(st)
            case TimerFired(key) if key == numbering.ORDER_TIMER:
                effects = numbering.on_order_timer(st)
            case _:
                effects = self._route_steady(event)
        return effects + joins.after_event(st)

    def _route_managed(self, event: Event) -> list[Effect]:
        """Under the membership layer, which feeds this core only its own events in a
        steady view of which the sender is a member."""
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
            case Received(_, SStable(), _):
                return []  # stability is the membership layer's
            case Received(sender, SSafe(), _) if sender != leader:
                return []  # a former view's sequencer
            case Received(sender, SAck() | SSafe() as header, _):
                return flush.on_message(st, sender, header)
            case Received():
                return self._on_data(event)
            case ViewInstalled(new):
                # The view's leader is its sequencer: it numbers on after the flush.
                return (flush.adopt_view(st, new, st.settled_through)
                        + numbering.deliver_ready(st))
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

    def _route_steady(self, event: Event) -> list[Effect]:
        st = self.st
        match event:
            case BroadcastRequested(seq, payload):
                return numbering.broadcast(st, seq, payload)
            case Received(sender, SOrder(first, ids, bodies), _):
                return numbering.on_order(st, sender, first, ids, bodies)
            case Received():
                return self._on_data(event)
            case ViewInstalled(view):
                st.view = view
                st.others = view.others(self.node)
                return []
            case _:
                return []


__all__ = ["MembershipConfig", "MergeConfig", "OptimisticConfig", "Sequencer"]
