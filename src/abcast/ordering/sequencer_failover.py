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
coordinator that can reach fewer waits, so the two sides of a partition never both go
on. A member's state reporting a view at or past the target restarts the attempt with a
higher target; a proposed member suspected mid-flush restarts it without that member.
A member the new view leaves out learns it from the failure detector (`Excluded`) and
stops. Delivered messages stay in a log until every member reports having delivered
them (control traffic: `SStable` reports up, the stable point back down), so the flush
can always hand a lagging survivor what a faster one delivered.

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
from abcast.ordering.causal import DepsField
from abcast.ordering.sequencer import Sequencer, SOrder

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


class VcInstall(Header, frozen=True):
    view_id: Seq
    attempt: Count  # only members that answered this attempt install it
    members: NodeList
    first: Seq  # ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    safe: Count  # numbers up to here may be delivered at once (SAFE mode)


class SStable(Header, frozen=True):
    """Up: I delivered through `upto`. Down: every member did (collect the log)."""

    upto: Count


class SAck(Header, frozen=True):
    """SAFE: I hold every number through `upto` and its body."""

    upto: Count


class SSafe(Header, frozen=True):
    """SAFE: a majority holds every number through `upto`; deliver it."""

    upto: Count


FAILOVER_HEADERS = VcPrepare | VcState | VcInstall | SStable | SAck | SSafe
STABLE_TIMER = "stable"


@dataclass(slots=True)
class _Flush:
    """The coordinator's side of a view change."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, VcState] = field(default_factory=dict)


class FailoverSequencer(Sequencer):
    """The fixed sequencer with views, fail-over and optional SAFE delivery."""

    name = "sequencer"
    header_type = Sequencer.header_type | FAILOVER_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, safe: bool = False,
        stable_period_us: int = 50_000,
    ) -> None:
        super().__init__(node, batch)
        self.safe = safe
        self.stable_period_us = stable_period_us
        self._suspects: set[NodeId] = set()
        self._log: dict[int, tuple[MsgId, bytes]] = {}  # delivered, not yet stable
        self._deps_of: dict[MsgId, Mapping[NodeId, int]] = {}
        self._frozen = False
        self._queued: list[tuple[int, bytes]] = []
        self._early: list[Received] = []
        self._answered: tuple[int, int] = (0, 0)  # (target, attempt) last answered
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
        match event:
            case BroadcastRequested(seq, payload) if self._frozen:
                self._queued.append((seq, payload))
                return []
            case Received(sender, SOrder() | SSafe(), _) if sender != leader:
                # From the next view's sequencer, overtaking its VcInstall (the channel does
                # not order packets): keep it for when that view is installed.
                self._early.append(event)
                return []
            case Received(sender, header, _) if isinstance(header, FAILOVER_HEADERS):
                effects = self._failover_message(sender, header)
            case Received(sender, _, _) if sender not in members:
                return []  # from a node this view left out: it will learn from `Excluded`
            case Suspected(node):
                self._suspects.add(node)
                effects = self._on_suspect(node)
            case Restored(node):
                self._suspects.discard(node)
                return []
            case Excluded(by) if self.view is not None and by in self.view.members:
                self.stopped = True
                return [InstallView(View(self.view.view_id + 1, self.view.others(self.node)))]
            case TimerFired(key) if key == STABLE_TIMER:
                self._timer_armed = False
                effects = self._report_stable()
            case _:
                effects = super().handle(event, now)
        return effects + self._after_event()

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
        safe = holds[view.majority - 1]
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

    def _maybe_coordinate(self, target: int) -> list[Effect]:
        view = self.view
        assert view is not None
        alive = [m for m in view.members if m not in self._suspects]
        if not alive or alive[0] != self.node:
            return []  # someone lower will coordinate (or I will, once I suspect them)
        if len(alive) < view.majority:
            return []  # primary partition: a minority never installs a view of its own
        # Attempts only grow, across coordinators too, so members tell a newer one apart.
        self._attempts = max(self._attempts, self._answered[1]) + 1
        flush = _Flush(max(target, self._flush.target if self._flush else 0),
                       self._attempts, tuple(alive))
        self._flush = flush
        others = tuple(m for m in flush.members if m != self.node)
        prepare = VcPrepare(flush.target, flush.attempt, list(flush.members))
        effects: list[Effect] = [Multicast(others, prepare)] if others else []
        return effects + self._on_state(self.node, self._state(flush.target, flush.attempt))

    def _state(self, target: int, attempt: int) -> VcState:
        view = self.view
        assert view is not None
        self._frozen = True
        self._answered = (target, attempt)
        numbers = [(g, mid.origin, mid.seq) for g, (mid, _) in sorted(self._log.items())]
        numbers += [(g, mid.origin, mid.seq) for g, mid in sorted(self._numbers.items())]
        held = [(mid.origin, mid.seq, dict(self._deps_of.get(mid, {})), body)
                for mid, body in self._bodies.items()]
        held += [(mid.origin, mid.seq, {}, body) for mid, body in self._log.values()]
        return VcState(target, attempt, view.view_id, self.delivered_through(),
                       dict(self._delivered), numbers, held)

    def _on_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        if self.node not in members or (target, attempt) <= self._answered:
            return []
        return [Send(sender, self._state(target, attempt))]

    def _on_state(self, sender: NodeId, state: VcState) -> list[Effect]:
        flush = self._flush
        if flush is None or (state.target, state.attempt) != (flush.target, flush.attempt):
            return []
        if state.view_id >= flush.target:  # someone is ahead of us: aim past it
            return self._maybe_coordinate(state.view_id + 1)
        flush.states[sender] = state
        if set(flush.states) != set(flush.members):
            return []
        return self._conclude(flush)

    # -- concluding: one outcome for everyone ---------------------------------------------
    def _conclude(self, flush: _Flush) -> list[Effect]:
        states = [flush.states[m] for m in flush.members]
        numbers: dict[int, MsgId] = {}
        bodies: dict[MsgId, bytes] = {}
        deps: dict[MsgId, Mapping[NodeId, int]] = {}
        done: dict[NodeId, int] = {}
        for st in states:
            for number, origin, seq in st.numbers:
                numbers.setdefault(number, MsgId(origin, seq))
            for origin, seq, d, body in st.held:
                bodies.setdefault(MsgId(origin, seq), body)
                if d:
                    deps.setdefault(MsgId(origin, seq), d)
            for origin, seq in st.per_origin.items():
                done[origin] = max(done.get(origin, 0), seq)
        low = min(st.delivered for st in states)
        high = max(st.delivered for st in states)
        ids: list[MsgId] = []
        number = low + 1
        while (mid := numbers.get(number)) is not None and (mid in bodies or number <= high):
            ids.append(mid)
            number += 1
        numbered = set(ids) | {mid for g, mid in numbers.items() if g <= low}
        for mid in ids:
            done[mid.origin] = max(done.get(mid.origin, 0), mid.seq)
        ids += _admission_order(
            [m for m in bodies if m not in numbered and m.seq > done.get(m.origin, 0)],
            done, deps,
        )
        install = VcInstall(
            flush.target, flush.attempt, list(flush.members), low + 1,
            [(m.origin, m.seq) for m in ids],
            [(m.origin, m.seq, bodies[m]) for m in ids if m in bodies], high,
        )
        self._flush = None
        others = tuple(m for m in flush.members if m != self.node)
        effects: list[Effect] = [Multicast(others, install)] if others else []
        return effects + self._on_install(install)

    def _on_install(self, install: VcInstall) -> list[Effect]:
        view = self.view
        if view is None or install.view_id <= view.view_id:
            return []
        if (install.view_id, install.attempt) != self._answered:
            return []  # a flush this member left for a newer one
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
        self._safe_upto = max(self._safe_upto, install.safe if self.safe else last)
        effects = self._deliver_ready()  # the old view's messages, in the old view
        new_view = View(install.view_id, tuple(install.members))
        effects.append(InstallView(new_view))
        if self.node not in new_view.members:
            self.stopped = True
            return effects
        effects += self.adopt_view(new_view, last)
        early, self._early = self._early, []
        for event in early:
            if event.sender == new_view.leader:
                effects += self.handle(event, self._now)
        queued, self._queued = self._queued, []
        for seq, payload in queued:
            effects += self._broadcast(seq, payload)
        return effects

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


def _admission_order(
    pending: list[MsgId], done: dict[NodeId, int], deps: Mapping[MsgId, Mapping[NodeId, int]]
) -> list[MsgId]:
    """Unnumbered messages in an order a sequencer could have numbered them: each origin's
    in sequence, each after its causal dependencies; what can never be ready (its
    predecessor is lost with a crashed node) is left out."""
    waiting = {m: True for m in sorted(pending, key=lambda m: (m.seq, m.origin))}
    released = dict(done)
    out: list[MsgId] = []
    progress = True
    while waiting and progress:
        progress = False
        for mid in list(waiting):
            if released.get(mid.origin, 0) != mid.seq - 1:
                continue
            if any(released.get(o, 0) < k for o, k in deps.get(mid, {}).items()):
                continue
            del waiting[mid]
            released[mid.origin] = mid.seq
            out.append(mid)
            progress = True
    return out

