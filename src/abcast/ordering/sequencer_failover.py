"""Sequencer fail-over and SAFE delivery: the sequencer family under crashes.

Rules. A view change is a flush run by its coordinator — the lowest member of the
current view that the coordinator itself does not suspect:

1. `VcPrepare(target, attempt, members)` goes to the proposed members (the view minus
   the suspects). Each one *freezes* — delivers nothing more, numbers nothing more,
   queues its own broadcasts — and answers `VcState`: what it delivered (and the
   delivered-but-unstable log), the numbers it knows, the bodies it holds.
2. With every proposed member's state in hand, the coordinator fixes the outcome: the
   known numbers, contiguous from the lowest delivery point, as far as some member
   holds the body (at least as far as anyone delivered — those were in someone's log);
   then every message still unnumbered, in each origin's order (and causal order, for
   causal-total), numbered after them. `VcInstall` carries the numbers and the bodies.
3. Each member delivers through those numbers *in the old view* (so members moving on
   together delivered the same set in it: virtual synchrony), installs the new view,
   and sends the broadcasts it queued. The new view's lowest member numbers from there.

Only a majority of the current view may install the next one (primary partition): a
coordinator that can reach fewer gives its flush up until a suspicion is taken back, so
the two sides of a partition never both go on (unless `partitionable`: extended virtual
synchrony, whose hooks — quorum, view ids, outcome — are
abcast.ordering.sequencer_merge's). The outcome is abcast.ordering._flush_outcome's. A
member's state reporting a view at or past the target restarts the attempt with a higher
target; a proposed member suspected mid-flush restarts it without that member; a member
that already answered another coordinator's attempt says so (`VcBusy`) and the attempt
restarts above it. Views follow each other closely under churn, so packets of
neighbouring flushes cross: a member whose state is older than the coordinator's view is
sent the `VcInstall` that made that view (it installs it, frozen, and answers again); a
coordinator that asks for a view a member already has is sent that view's `VcInstall`;
an install for an attempt a member answered is taken even after it answered a later one;
orders, safe points and acks that reach a frozen member are kept for the view being
installed, and so is a prepare from a coordinator of a view beyond the next (a joiner
that leads it), answered once the view in between is installed; the install fixes the
safe point for everyone.
So each message is delivered in one view everywhere. A member the new view leaves out
learns it from the failure detector (`Excluded`) and stops
(abcast.ordering.sequencer_membership adds joins, leaves and coming back). Delivered
messages stay in a log until every member reports having delivered them (control
traffic: `SStable` reports up, the stable point back down), so the flush can always hand
a lagging survivor what a faster one delivered.

SAFE (`safe=True`, Spread's SAFE): a number is delivered only once a majority of the
view holds it and its body — members ack (`SAck`) what they hold, the sequencer
announces the safe point (`SSafe`) — so anything any node delivers survives any
minority of crashes: uniform agreement. It costs 4(n−1) packets per broadcast unbatched
instead of 2(n−1). Without SAFE the group gives agreement among correct nodes: a
sequencer that delivered and crashed before its order reached anyone may have delivered
a message the survivors never will.

What it does not handle: the coordinator of a flush crashing after some members
installed its outcome *and* one of those members crashing too, in non-SAFE mode (the
next flush may number the crashed member's last deliveries differently).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.effects import Effect, InstallView, Multicast, Send, SetTimer
from abcast.errors import RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    Received,
    Restored,
    Suspected,
    TimerFired,
)
from abcast.ids import MsgId, NodeId, View
from abcast.ordering._flush_outcome import admission_order, settle
from abcast.ordering.causal import DepsField
from abcast.ordering.sequencer import SData, Sequencer, SOrder

NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]
_MANY = 10_000_000


class VcPrepare(Header, frozen=True):
    target: Seq
    attempt: Count
    members: NodeList


class VcState(Header, frozen=True):
    target: Seq
    attempt: Count
    view_id: Count
    delivered: Count  # highest number delivered
    per_origin: dict[NodeField, Count]  # highest seq delivered per origin
    numbers: Annotated[list[tuple[Seq, NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    held: Annotated[list[tuple[NodeField, Seq, DepsField, bytes]], msgspec.Meta(max_length=_MANY)]
    #: the highest target this member answered *another* coordinator for before: that
    #: coordinator may have installed it (alone, cut off right after concluding)
    prior: Count = 0
    #: SAFE: the highest safe point this member heard announced
    safe: Count = 0


class VcInstall(Header, frozen=True):
    view_id: Seq
    attempt: Count  # only members that answered this attempt install it
    members: NodeList
    first: Seq  # ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    safe: Count  # numbers up to here may be delivered at once (SAFE mode)
    #: the new view's first number when above the outcome's last + 1 (evs: numbers the
    #: old sequencer gave beyond the outcome are never reused)
    next_number: Count = 0


class SStable(Header, frozen=True):
    """Up: I delivered through `upto`. Down: every member did (collect the log)."""

    upto: Count


class SAck(Header, frozen=True):
    """SAFE: I hold every number through `upto` and its body."""

    upto: Count


class SSafe(Header, frozen=True):
    """SAFE: a majority holds every number through `upto`; deliver it."""

    upto: Count


class VcBusy(Header, frozen=True):
    """To a coordinator whose `VcPrepare` came too late: I answered (target, attempt)
    of another coordinator (attempt numbers are chosen independently and may tie)."""

    target: Seq
    attempt: Count


FAILOVER_HEADERS = VcPrepare | VcState | VcInstall | SStable | SAck | SSafe | VcBusy
STABLE_TIMER = "stable"


@dataclass(slots=True)
class _Flush:
    """The coordinator's side of a view change."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, VcState] = field(default_factory=dict)
    #: members still waiting for their first state (joiners): nothing to report
    fresh: set[NodeId] = field(default_factory=set)

    def complete(self) -> bool:
        return set(self.states) | self.fresh == set(self.members)


class FailoverSequencer(Sequencer):
    """The fixed sequencer with views, fail-over and optional SAFE delivery."""

    name = "sequencer"
    header_type = Sequencer.header_type | FAILOVER_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, safe: bool = False,
        stable_period_us: int = 50_000, relay: bool = False,
    ) -> None:
        super().__init__(node, batch, relay=relay)
        self.safe = safe
        self.stable_period_us = stable_period_us
        self._suspects: set[NodeId] = set()
        self._log: dict[int, tuple[MsgId, bytes]] = {}  # delivered, not yet stable
        self._deps_of: dict[MsgId, Mapping[NodeId, int]] = {}
        self._frozen = False
        self._queued: list[tuple[int, bytes]] = []
        self._early: list[Received] = []
        self._answered: tuple[int, int] = (0, 0)  # (target, attempt) last answered
        # target → the attempts answered for it: a flush may conclude after this member
        # answered a later one (its VcInstall overtaken by the next VcPrepare, or its
        # coordinator crashed and the VcInstall comes from a member that has it)
        self._answered_for: dict[int, set[int]] = {}
        self._answered_to: NodeId = node  # the coordinator of that attempt
        self._last_install: VcInstall | None = None  # the one that made our view
        self._flush: _Flush | None = None
        self._attempts = 0
        self.stopped = False
        # stability: the sequencer's view of who delivered what; everyone's stable point
        self._reports: dict[NodeId, int] = {}
        self._reported = 0
        self._stable = 0
        self._timer_armed = False
        self._now = 0
        # SAFE: what each member holds (sequencer), and the announced safe point
        self._holds: dict[NodeId, int] = {}
        self._acked = 0
        self._safe_upto = 0

    # -- hooks into the base sequencer ---------------------------------------------------
    def may_deliver(self, number: int) -> bool:
        return not self._frozen and (not self.safe or number <= self._safe_upto)

    def on_delivered(self, number: int, mid: MsgId, body: bytes) -> None:
        self._log[number] = (mid, body)
        self._deps_of.pop(mid, None)

    def may_number(self) -> bool:
        return not self._frozen

    def remember_deps(self, mid: MsgId, deps: Mapping[NodeId, int]) -> None:
        if deps:
            self._deps_of[mid] = deps

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self._now = now
        if self.stopped:
            return []
        leader = self.view.leader if self.view is not None else None
        members = self.view.members if self.view is not None else ()
        # Steady state, by exact type: a member's data or the sequencer's order while not
        # frozen takes no case of the match below but the last one.
        if type(event) is Received and not self._frozen:
            header_type = type(event.header)
            sender = event.sender
            if ((header_type is SData and sender in members)
                    or (header_type is SOrder and sender == leader)):
                return super().handle(event, now) + self._after_event()
        match event:
            case BroadcastRequested(seq, payload) if self._frozen:
                self._queued.append((seq, payload))
                return []
            case Received(sender, SOrder() | SSafe(), _) if sender != leader or self._frozen:
                # From the next view's sequencer, overtaking its VcInstall (the channel does
                # not order packets), maybe the same node: keep it for when that view is
                # installed, so what it numbers is delivered in that view, not this one.
                self._early.append(event)
                return []
            case Received(_, SAck(), _) if self._frozen:
                # Maybe for us as the next view's sequencer, from a member that installed
                # it first (it acks once): count it once we are.
                self._early.append(event)
                return []
            case Received(sender, VcPrepare(target), _) if (
                    sender not in members and self.view is not None
                    and target > self.view.view_id + 1):
                # The coordinator is a member of a view we have not installed yet (a
                # joiner it admitted leads it): its VcInstall is on its way. The channel
                # delivers this prepare once, so dropping it would leave that flush
                # waiting for our state for ever; answer it once that view is ours.
                self._early.append(event)
                return []
            case Received(sender, header, _) if isinstance(header, FAILOVER_HEADERS):
                effects = self._failover_message(sender, header)
            case Received(sender, _, _) if sender not in members:
                if self._frozen:
                    # Maybe a joiner the next view admits, already sending in it.
                    self._early.append(event)
                return []  # else from a node this view left out: it learns from `Excluded`
            case Suspected(node):
                self._suspects.add(node)
                effects = self._on_suspect(node)
            case Restored(node):
                self._suspects.discard(node)
                effects = self._on_restored()
            case Excluded(by, view_id) if self.view is not None and by in self.view.members:
                if view_id <= self.view.view_id:
                    return []  # a member that has not installed our view yet
                return self.excluded(by, view_id)
            case TimerFired(key) if key == STABLE_TIMER:
                self._timer_armed = False
                effects = self._report_stable()
            case _:
                effects = super().handle(event, now)
        return effects + self._after_event()

    def excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        """`by` has installed view `view_id`, which leaves this node out: stop."""
        assert self.view is not None
        self.stopped = True
        return [InstallView(View(view_id, self.view.others(self.node)))]

    def _after_event(self) -> list[Effect]:
        """Batched per event: SAFE acks and the stability timer."""
        effects: list[Effect] = []
        if self.safe and not self._frozen and self.view is not None:
            effects += self._ack_holdings()
        if not self._timer_armed and self._delivered_number() > self._reported:
            self._timer_armed = True
            effects.append(SetTimer(STABLE_TIMER, self._now + self.stable_period_us))
        return effects

    def _delivered_number(self) -> int:
        return self.delivered_through()

    # -- stability (garbage collection of the log) ---------------------------------------
    def _report_stable(self) -> list[Effect]:
        view = self.view
        if view is None:
            return []
        upto = self._delivered_number()
        self._reported = upto
        if view.leader == self.node:
            self._reports[self.node] = upto
            return self._announce_stable()
        return [Send(view.leader, SStable(upto), control=True)]

    def _announce_stable(self) -> list[Effect]:
        view = self.view
        assert view is not None
        stable = min(self._reports.get(m, 0) for m in view.members)
        if stable <= self._stable:
            return []
        self._collect(stable)
        return [Send(m, SStable(stable), control=True) for m in self._others]

    def _collect(self, stable: int) -> None:
        for number in range(self._stable + 1, stable + 1):
            self._log.pop(number, None)
        self._stable = max(self._stable, stable)

    # -- SAFE ------------------------------------------------------------------------------
    def _held_through(self) -> int:
        """Every number up to this one is known here with its body (or delivered)."""
        number = self.delivered_through()
        while (mid := self._numbers.get(number + 1)) is not None and mid in self._bodies:
            number += 1
        return number

    def _ack_holdings(self) -> list[Effect]:
        view = self.view
        assert view is not None
        held = self._held_through()
        if held <= self._acked:
            return []
        self._acked = held
        if view.leader != self.node:
            return [Send(view.leader, SAck(held))]
        self._holds[self.node] = held
        return self._announce_safe()

    def _announce_safe(self) -> list[Effect]:
        view = self.view
        assert view is not None
        holds = sorted((self._holds.get(m, 0) for m in view.members), reverse=True)
        safe = holds[self.safe_quorum(view) - 1]
        if safe <= self._safe_upto:
            return []
        self._safe_upto = safe
        effects: list[Effect] = [Multicast(self._others, SSafe(safe))] if self._others else []
        return effects + self._deliver_ready()

    # -- fail-over messages --------------------------------------------------------------
    def _failover_message(self, sender: NodeId, header: Any) -> list[Effect]:
        view = self.view
        if view is None:
            return []
        match header:
            case SStable(upto) if view.leader == self.node:
                self._reports[sender] = max(self._reports.get(sender, 0), upto)
                return self._announce_stable()
            case SStable(upto):
                self._collect(min(upto, self.delivered_through()))
                return []
            case SAck(upto) if view.leader == self.node:
                self._holds[sender] = max(self._holds.get(sender, 0), upto)
                return self._announce_safe()
            case SSafe(upto):
                self._safe_upto = max(self._safe_upto, upto)
                return self._deliver_ready()
            case SAck():
                return []  # to a former sequencer: the flush settles what it was for
            case VcPrepare(target, attempt, members):
                return self._on_prepare(sender, target, attempt, tuple(members))
            case VcState():
                return self._on_state(sender, header)
            case VcBusy(target, attempt):
                return self._on_busy(target, attempt)
            case VcInstall():
                return self._on_install(header)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    # -- starting and restarting a view change --------------------------------------------
    def _on_suspect(self, node: NodeId) -> list[Effect]:
        view = self.view
        if view is None or node not in view.members:
            return []
        flush = self._flush
        if flush is not None and node not in flush.members:
            return []  # already leaving it out
        return self._maybe_coordinate(view.view_id + 1)

    def _on_restored(self) -> list[Effect]:
        """A suspicion was wrong. A flush given up for want of a majority, or one still
        waiting for a member suspected meanwhile, may go on now."""
        view = self.view
        if view is None or not self._frozen:
            return []
        flush = self._flush
        if flush is not None and not self._suspects & set(flush.members):
            return []
        return self._maybe_coordinate(view.view_id + 1)

    def _maybe_coordinate(self, target: int) -> list[Effect]:
        view = self.view
        assert view is not None
        alive = [m for m in view.members if m not in self._suspects]
        if not alive or alive[0] != self.node:
            return []  # someone lower will coordinate (or I will, once I suspect them)
        if len(alive) < view.majority and not self.partitionable:
            # Primary partition: a minority never installs a view of its own. Give the
            # flush up (it waits for members we cannot hear); `Restored` brings it back.
            self._flush = None
            return []
        # Attempts only grow, across coordinators too, so members tell a newer one apart.
        self._attempts = max(self._attempts, self._answered[1]) + 1
        target = self.next_view_id(max(target, self._flush.target if self._flush else 0))
        flush = _Flush(target, self._attempts, tuple(alive))
        self._flush = flush
        others = tuple(m for m in flush.members if m != self.node)
        prepare = VcPrepare(flush.target, flush.attempt, list(flush.members))
        effects: list[Effect] = [Multicast(others, prepare)] if others else []
        prior = self._prior_for(self.node)
        self._answered_to = self.node
        state = self._state(flush.target, flush.attempt, prior)
        return effects + self._on_state(self.node, state)

    def _prior_for(self, coordinator: NodeId) -> int:
        """The target we last answered, when that was for another coordinator."""
        return self._answered[0] if self._answered_to != coordinator else 0

    def _state(self, target: int, attempt: int, prior: int = 0) -> VcState:
        view = self.view
        assert view is not None
        self._frozen = True
        self._answered = (target, attempt)
        self._answered_for.setdefault(target, set()).add(attempt)
        numbers = [(g, mid.origin, mid.seq) for g, (mid, _) in sorted(self._log.items())]
        numbers += [(g, mid.origin, mid.seq) for g, mid in sorted(self._numbers.items())]
        held = [(mid.origin, mid.seq, dict(self._deps_of.get(mid, {})), body)
                for mid, body in self._bodies.items()]
        held += [(mid.origin, mid.seq, {}, body) for mid, body in self._log.values()]
        return VcState(target, attempt, view.view_id, self.delivered_through(),
                       dict(self._delivered), numbers, held, prior, self._safe_upto)

    def _on_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.view
        if self.node not in members or view is None or sender not in view.members:
            return []  # not ours, or from a node our view left out (cut off, stale)
        if target <= view.view_id:
            # It has not installed our view: its coordinator crashed before the VcInstall
            # reached it. Hand it over; it installs it and starts again from there.
            last = self._last_install
            return [Send(sender, last)] if last is not None else []
        if (target, attempt) <= self._answered:
            if sender == self._answered_to:
                return []  # an older attempt of the coordinator we answered
            return [Send(sender, VcBusy(*self._answered))]
        prior = self._prior_for(sender)
        self._answered_to = sender
        return [Send(sender, self._state(target, attempt, prior))]

    def _on_busy(self, target: int, attempt: int) -> list[Effect]:
        """A proposed member answered another coordinator: try again, above it."""
        flush = self._flush
        if flush is None or (target, attempt) < (flush.target, flush.attempt):
            return []
        self._attempts = max(self._attempts, attempt)
        return self._maybe_coordinate(max(flush.target, target))

    def _on_state(self, sender: NodeId, state: VcState) -> list[Effect]:
        flush = self._flush
        if flush is None or (state.target, state.attempt) != (flush.target, flush.attempt):
            return []
        if state.view_id >= flush.target:  # someone is ahead of us: aim past it
            return self._maybe_coordinate(state.view_id + 1)
        if state.prior >= flush.target:
            # It answered another coordinator for this view first, which may have
            # concluded and installed it before it was cut off: one view id must name
            # one membership, so this flush takes the next id.
            return self._maybe_coordinate(state.prior + 1)
        view = self.view
        last = self._last_install
        if view is not None and state.view_id < view.view_id:
            # It answered before our view's VcInstall reached it: hand that over; it
            # installs it and answers again, so nothing of our view is delivered in its
            # older one. (View ids may skip — see `VcState.prior` — so "older" is any
            # lower id. Without that install here — we were welcomed into our view —
            # its own copy is on its way, and it answers again once installed.)
            return [Send(sender, last)] if last is not None else []
        flush.states[sender] = state
        return self._conclude(flush) if flush.complete() else []

    def note_fresh(self, sender: NodeId, target: int, attempt: int) -> list[Effect]:
        """A proposed member answered that it is still joining: it gives no state and
        is welcomed (again) into the outcome."""
        flush = self._flush
        if flush is None or (target, attempt) != (flush.target, flush.attempt):
            return []
        if sender not in flush.members or sender == self.node:
            return []
        flush.fresh.add(sender)
        return self._conclude(flush) if flush.complete() else []

    def next_members(self, flush: _Flush) -> tuple[NodeId, ...]:
        """The members of the view this flush installs (membership adds joiners and
        takes leavers out)."""
        return flush.members

    def concluding(self, flush: _Flush, install: VcInstall) -> None:
        """Called on the coordinator just before it installs the outcome itself."""

    # -- hooks for extended virtual synchrony (abcast.ordering.sequencer_merge) -----------
    #: every partition may install views of its own (no majority needed)
    partitionable = False

    def safe_quorum(self, view: View) -> int:
        """SAFE: how many members must hold a number before it is delivered."""
        return view.majority

    def next_view_id(self, target: int) -> int:
        """The id a flush aiming at `target` installs (at least `target`)."""
        return target

    def outcome(
        self, states: list[VcState], members: tuple[NodeId, ...]
    ) -> tuple[int, list[MsgId], dict[MsgId, bytes], int]:
        """What the members whose `states` these are deliver before leaving their view:
        (first number, ids in number order, their bodies, safe point)."""
        low, ids, bodies, high = settle(states, _admission_order)
        return low + 1, ids, bodies, self._possibly_safe(states, high)

    def fresh_number(self, states: list[VcState], last: int) -> int:
        """The next view's first number, after an outcome ending at `last`."""
        return last + 1

    # -- concluding: one outcome for everyone ---------------------------------------------
    def _conclude(self, flush: _Flush) -> list[Effect]:
        states = [flush.states[m] for m in flush.members if m in flush.states]
        first, ids, bodies, safe = self.outcome(states, flush.members)
        install = VcInstall(
            flush.target, flush.attempt, list(self.next_members(flush)), first,
            [(m.origin, m.seq) for m in ids],
            [(m.origin, m.seq, bodies[m]) for m in ids if m in bodies], safe,
            self.fresh_number(states, first + len(ids) - 1),
        )
        self._flush = None
        others = tuple(m for m in flush.members if m != self.node and m not in flush.fresh)
        effects: list[Effect] = [Multicast(others, install)] if others else []
        self.concluding(flush, install)
        return effects + self._on_install(install)

    def _possibly_safe(self, states: list[VcState], high: int) -> int:
        """SAFE: the highest number the old sequencer may have announced safe. It did
        once a majority of the old view held everything up to it, so at least that
        majority less the members left out of this flush still hold it here; whoever
        delivered such a number did so in the old view, and so must everyone now."""
        view = self.view
        assert view is not None
        need = max(1, view.majority - (len(view.members) - len(states)))
        holds = sorted((_held_through(st) for st in states), reverse=True)
        return max(high, holds[need - 1]) if len(holds) >= need else high

    def _on_install(self, install: VcInstall) -> list[Effect]:
        view = self.view
        if view is None or install.view_id <= view.view_id:
            return []
        if install.attempt not in self._answered_for.get(install.view_id, ()):
            return []  # a flush this member left for a newer one
        # Answered a later flush already: install this view, deliver nothing in it yet.
        still_frozen = self._answered[0] > install.view_id
        self._answered_for = {t: a for t, a in self._answered_for.items() if t > install.view_id}
        for origin, seq, body in install.bodies:
            mid = MsgId(origin, seq)
            if seq > self._delivered.get(origin, 0):
                self._bodies.setdefault(mid, body)
        for offset, (origin, seq) in enumerate(install.ids):
            number = install.first + offset
            if number > self.delivered_through():
                self._numbers[number] = MsgId(origin, seq)
        last = install.first + len(install.ids) - 1
        self._frozen = False
        # Exactly the flush's safe point, not what this node heard before freezing: every
        # member delivers the same numbers in the old view (virtual synchrony).
        self._safe_upto = install.safe if self.safe else last
        effects = self._deliver_ready()  # the old view's messages, in the old view
        if install.next_number > last + 1 and self.delivered_through() == last:
            last = install.next_number - 1
            self._next_delivery = install.next_number
            self._safe_upto = max(self._safe_upto, last)
        new_view = View(install.view_id, tuple(install.members))
        if self.node not in new_view.members:
            return effects + self.left_out(view, new_view, last)
        effects.append(InstallView(new_view))
        self._frozen = still_frozen
        # A node new to the view is a fresh peer for the failure detector, which will not
        # take back a suspicion of it we may still hold from before it was removed.
        self._suspects -= set(new_view.members) - set(view.members)
        effects += self.view_installed(view, new_view, last)
        effects += self.adopt_view(new_view, last)
        early, self._early = self._early, []
        for event in early:
            ordering = isinstance(event.header, SOrder | SSafe)
            if event.sender == new_view.leader if ordering else event.sender in new_view.members:
                effects += self.handle(event, self._now)
        self._last_install = install
        if still_frozen:
            if self._answered_to != self.node:  # what we told it came from an older view
                effects.append(Send(self._answered_to, self._state(*self._answered)))
            return effects
        queued, self._queued = self._queued, []
        for seq, payload in queued:
            effects += self._broadcast(seq, payload)
        if self._suspects & set(new_view.members):  # suspected before: remove them now
            effects += self._maybe_coordinate(new_view.view_id + 1)
        return effects

    def left_out(self, old: View, new: View, last_number: int) -> list[Effect]:
        """The flush's outcome does not hold this node: stop (membership lets a leaver
        first make sure the others have the new view)."""
        self.stopped = True
        return [InstallView(new)]

    def view_installed(self, old: View, new: View, last_number: int) -> list[Effect]:
        """Right after `InstallView(new)`, before anything is delivered in it (the place
        for a snapshot at the cut)."""
        return []

    def adopt_view(self, view: View, last_number: int) -> list[Effect]:
        """Switch to `view`; its sequencer numbers on from `last_number`."""
        self.view = view
        self._others = view.others(self.node)
        self._reports = {m: r for m, r in self._reports.items() if m in view.members}
        self._holds = {}
        self._acked = 0
        self._flush = None
        if view.leader != self.node:
            return []
        return self.take_over(last_number, self._deps_of)


def _held_through(state: VcState) -> int:
    """The highest number up to which the member of `state` held every number and body."""
    known = {number: MsgId(origin, seq) for number, origin, seq in state.numbers}
    bodies = {MsgId(origin, seq) for origin, seq, _, _ in state.held}
    number = state.delivered
    while (mid := known.get(number + 1)) is not None and mid in bodies:
        number += 1
    return number


#: how unnumbered messages are ordered in a flush (a module name, so tests can plant a
#: forgetful variant)
_admission_order = admission_order
