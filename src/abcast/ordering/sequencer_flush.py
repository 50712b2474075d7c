"""The sequencer family's view change (the flush), stability and SAFE delivery.

Rules. A view change is a flush run by its coordinator — the lowest member of the current
view that the coordinator itself does not suspect: `VcPrepare` to the proposed members,
each freezes and answers `VcState` (abcast.ordering.sequencer_numbering's report); with
every state in, the coordinator fixes the outcome (abcast.ordering._flush_outcome) and
sends `VcInstall`; each member delivers through it in the old view, installs the new view
and sends what it queued. Only a majority of the view may install the next one, unless
evs. Delivered messages stay in a log until every member reports them (`SStable`); SAFE
delivers a number only once a quorum acks it (`SAck`, `SSafe`). The full rules, and how
packets of neighbouring flushes cross, are in docs/orderings.md.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

from abcast.effects import Effect, InstallView, Multicast, Send, SetTimer
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId, View
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering._flush_outcome import fresh_number, outcome
from abcast.ordering.sequencer_state import Flow, FlushRound, SequencerState
from abcast.ordering.sequencer_wire import (
    SAck,
    SOrder,
    SSafe,
    SStable,
    VcBusy,
    VcInstall,
    VcPrepare,
    VcState,
)

STABLE_TIMER: Final = "stable"
#: evs: view ids are congruent to the coordinator's hash modulo this
VIEW_ID_SPAN: Final = 1 << 20


def after_event(st: SequencerState) -> list[Effect]:
    """Batched per event: SAFE acks and the stability timer."""
    effects: list[Effect] = []
    if st.safe and st.steady and st.view is not None:
        effects += _ack_holdings(st)
    if not st.timer_armed and st.delivered_through() > st.reported:
        st.timer_armed = True
        effects.append(SetTimer(STABLE_TIMER, st.now + st.stable_period_us))
    return effects


def safe_quorum(st: SequencerState, view: View) -> int:
    """SAFE: how many members must hold a number before it is delivered (evs: all)."""
    return len(view.members) if st.evs else view.majority


def next_view_id(st: SequencerState, target: int) -> int:
    """The id a flush aiming at `target` installs (evs: congruent to our hash)."""
    return evs_view_id(target, st.node) if st.evs else target


def evs_view_id(target: int, coordinator: NodeId) -> int:
    """The smallest id at least `target` that is congruent to `coordinator`'s hash: two
    sides of a partition (different coordinators) never install the same view id."""
    residue = zlib.crc32(coordinator.encode()) % VIEW_ID_SPAN
    base = target - target % VIEW_ID_SPAN + residue
    return base if base >= target else base + VIEW_ID_SPAN


# -- stability (garbage collection of the log) ---------------------------------------------
def report_stable(st: SequencerState) -> list[Effect]:
    st.timer_armed = False
    view = st.view
    if view is None:
        return []
    upto = st.delivered_through()
    st.reported = upto
    if view.leader == st.node:
        st.reports[st.node] = upto
        return _announce_stable(st)
    return [Send(view.leader, SStable(upto), control=True)]


def _announce_stable(st: SequencerState) -> list[Effect]:
    view = st.view
    assert view is not None
    stable = min(st.reports.get(m, 0) for m in view.members)
    if stable <= st.stable:
        return []
    _collect(st, stable)
    return [Send(m, SStable(stable), control=True) for m in st.others]


def _collect(st: SequencerState, stable: int) -> None:
    for number in range(st.stable + 1, stable + 1):
        st.log.pop(number, None)
    st.stable = max(st.stable, stable)


# -- SAFE ----------------------------------------------------------------------------------
def _ack_holdings(st: SequencerState) -> list[Effect]:
    view = st.view
    assert view is not None
    held = numbering.held_through(st)
    if held <= st.acked:
        return []
    st.acked = held
    if view.leader != st.node:
        return [Send(view.leader, SAck(held))]
    st.holds[st.node] = held
    return _announce_safe(st)


def _announce_safe(st: SequencerState) -> list[Effect]:
    view = st.view
    assert view is not None
    holds = sorted((st.holds.get(m, 0) for m in view.members), reverse=True)
    safe = holds[safe_quorum(st, view) - 1]
    if safe <= st.safe_upto:
        return []
    st.safe_upto = safe
    effects: list[Effect] = [Multicast(st.others, SSafe(safe))] if st.others else []
    return effects + numbering.deliver_ready(st)


# -- flush messages ------------------------------------------------------------------------
def on_message(st: SequencerState, sender: NodeId, header: Any) -> list[Effect]:
    view = st.view
    if view is None:
        return []
    match header:
        case SStable(upto) if view.leader == st.node:
            st.reports[sender] = max(st.reports.get(sender, 0), upto)
            return _announce_stable(st)
        case SStable(upto):
            _collect(st, min(upto, st.delivered_through()))
            return []
        case SAck(upto) if view.leader == st.node:
            st.holds[sender] = max(st.holds.get(sender, 0), upto)
            return _announce_safe(st)
        case SSafe(upto):
            st.safe_upto = max(st.safe_upto, upto)
            return numbering.deliver_ready(st)
        case SAck():
            return []  # to a former sequencer: the flush settles what it was for
        case VcPrepare(target, attempt, members):
            return _on_prepare(st, sender, target, attempt, tuple(members))
        case VcState():
            return _on_state(st, sender, header)
        case VcBusy(target, attempt):
            return _on_busy(st, target, attempt)
        case VcInstall():
            return _on_install(st, header)
        case _:
            raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")


# -- starting and restarting a view change -------------------------------------------------
def on_suspect(st: SequencerState, node: NodeId) -> list[Effect]:
    view = st.view
    if view is None or node not in view.members:
        return []
    flush = st.flush
    if flush is not None and node not in flush.members:
        return []  # already leaving it out
    return coordinate(st, view.view_id + 1)


def on_restored(st: SequencerState) -> list[Effect]:
    """A suspicion was wrong. A flush given up for want of a majority, or one still
    waiting for a member suspected meanwhile, may go on now."""
    view = st.view
    if view is None or st.flow is Flow.STEADY:
        return []
    flush = st.flush
    if flush is not None and not st.suspects & set(flush.members):
        return []
    return coordinate(st, view.view_id + 1)


def change_view(st: SequencerState) -> list[Effect]:
    """Start a flush for membership requests, unless one is running (it takes them)."""
    view = st.view
    if view is None or st.flush is not None or st.flow is not Flow.STEADY:
        return []
    return coordinate(st, view.view_id + 1)


def coordinate(st: SequencerState, target: int) -> list[Effect]:
    """Run the flush for view `target` (or later) if this node is the coordinator."""
    if st.merge is not None or st.merging is not None:
        return []  # the merge settles this view; a flush may follow it
    view = st.view
    assert view is not None
    alive = [m for m in view.members if m not in st.suspects]
    if not alive or alive[0] != st.node:
        return []  # someone lower will coordinate (or I will, once I suspect them)
    if len(alive) < view.majority and not st.evs:
        # Primary partition: a minority never installs a view of its own. Give the
        # flush up (it waits for members we cannot hear); `Restored` brings it back.
        st.flush = None
        return []
    # Attempts only grow, across coordinators too, so members tell a newer one apart.
    st.attempts = max(st.attempts, st.answered[1]) + 1
    target = next_view_id(st, max(target, st.flush.target if st.flush else 0))
    flush = FlushRound(target, st.attempts, tuple(alive))
    st.flush = flush
    others = tuple(m for m in flush.members if m != st.node)
    prepare = VcPrepare(flush.target, flush.attempt, list(flush.members))
    effects: list[Effect] = [Multicast(others, prepare)] if others else []
    prior = _prior_for(st, st.node)
    st.answered_to = st.node
    state = freeze_and_report(st, flush.target, flush.attempt, prior)
    return effects + _on_state(st, st.node, state)


def _prior_for(st: SequencerState, coordinator: NodeId) -> int:
    """The target we last answered, when that was for another coordinator."""
    return st.answered[0] if st.answered_to != coordinator else 0


def freeze_and_report(st: SequencerState, target: int, attempt: int, prior: int = 0) -> VcState:
    st.go_flow(Flow.FLUSHING)
    st.answered = (target, attempt)
    st.answered_for.setdefault(target, set()).add(attempt)
    return numbering.report(st, target, attempt, prior)


def _on_prepare(
    st: SequencerState, sender: NodeId, target: int, attempt: int,
    members: tuple[NodeId, ...],
) -> list[Effect]:
    view = st.view
    if (st.evs and view is not None and st.flow is not Flow.STEADY and st.flush is None
            and st.answered_to not in (sender, st.node)
            and st.answered_to not in st.suspects
            and st.answered[0] > view.view_id and sender in view.members):
        # Frozen for another coordinator's view: under evs two sides may be forming
        # at once, and a member must end up in one of them only.
        return [Send(sender, VcBusy(*st.answered))]
    if st.node not in members or view is None or sender not in view.members:
        return []  # not ours, or from a node our view left out (cut off, stale)
    if target <= view.view_id:
        # It has not installed our view: its coordinator crashed before the VcInstall
        # reached it. Hand it over; it installs it and starts again from there.
        last = st.last_install
        return [Send(sender, last)] if last is not None else []
    if (target, attempt) <= st.answered:
        if sender == st.answered_to:
            return []  # an older attempt of the coordinator we answered
        return [Send(sender, VcBusy(*st.answered))]
    prior = _prior_for(st, sender)
    st.answered_to = sender
    return [Send(sender, freeze_and_report(st, target, attempt, prior))]


def _on_busy(st: SequencerState, target: int, attempt: int) -> list[Effect]:
    """A proposed member answered another coordinator: try again, above it."""
    flush = st.flush
    if flush is None or (target, attempt) < (flush.target, flush.attempt):
        return []
    st.attempts = max(st.attempts, attempt)
    return coordinate(st, max(flush.target, target))


def _on_state(st: SequencerState, sender: NodeId, state: VcState) -> list[Effect]:
    flush = st.flush
    if flush is None or (state.target, state.attempt) != (flush.target, flush.attempt):
        return []
    if state.view_id >= flush.target:  # someone is ahead of us: aim past it
        return coordinate(st, state.view_id + 1)
    if state.prior >= flush.target:
        # It answered another coordinator for this view first, which may have
        # concluded and installed it before it was cut off: one view id must name
        # one membership, so this flush takes the next id.
        return coordinate(st, state.prior + 1)
    view = st.view
    last = st.last_install
    if view is not None and state.view_id < view.view_id:
        # It answered before our view's VcInstall reached it: hand that over; it
        # installs it and answers again, so nothing of our view is delivered in its
        # older one. (View ids may skip — see `VcState.prior` — so "older" is any
        # lower id. Without that install here — we were welcomed into our view —
        # its own copy is on its way, and it answers again once installed.)
        return [Send(sender, last)] if last is not None else []
    flush.states[sender] = state
    return _conclude(st, flush) if flush.complete() else []


def note_fresh(st: SequencerState, sender: NodeId, target: int, attempt: int) -> list[Effect]:
    """A proposed member answered that it is still joining (`SNotYet`): it gives no
    state and is welcomed (again) into the outcome."""
    flush = st.flush
    if flush is None or (target, attempt) != (flush.target, flush.attempt):
        return []
    if sender not in flush.members or sender == st.node:
        return []
    flush.fresh.add(sender)
    return _conclude(st, flush) if flush.complete() else []


def _next_members(st: SequencerState, flush: FlushRound) -> tuple[NodeId, ...]:
    """The members of the view this flush installs: joiners added, leavers out."""
    leaving = st.leave_requests
    joining = st.join_requests - set(flush.members) - leaving
    kept = [m for m in flush.members if m not in leaving]
    if not kept:
        return flush.members  # nobody would be left: the last member stays
    return (*kept, *sorted(joining))


# -- concluding: one outcome for everyone --------------------------------------------------
def _conclude(st: SequencerState, flush: FlushRound) -> list[Effect]:
    view = st.view
    assert view is not None
    states = [flush.states[m] for m in flush.members if m in flush.states]
    first, ids, bodies, safe = outcome(states, flush.members, view, evs=st.evs)
    install = VcInstall(
        flush.target, flush.attempt, list(_next_members(st, flush)), first,
        [(m.origin, m.seq) for m in ids],
        [(m.origin, m.seq, bodies[m]) for m in ids if m in bodies], safe,
        fresh_number(states, first + len(ids) - 1, evs=st.evs),
    )
    st.flush = None
    others = tuple(m for m in flush.members if m != st.node and m not in flush.fresh)
    effects: list[Effect] = [Multicast(others, install)] if others else []
    # Membership's bookkeeping: who is welcomed at the cut, which requests are done.
    members = set(install.members)
    joiners = (members - set(flush.members)) | (flush.fresh & members)
    st.welcome_next = tuple(sorted(joiners))
    st.join_requests -= members
    # Whoever is out of the view is done leaving — let go, or removed as suspected
    # before its request came up; a leave request kept for it would keep it out
    # when it asks to join again.
    st.leave_requests &= members
    return effects + _on_install(st, install)


def _on_install(st: SequencerState, install: VcInstall) -> list[Effect]:
    view = st.view
    if view is None or install.view_id <= view.view_id:
        return []
    if install.attempt not in st.answered_for.get(install.view_id, ()):
        return []  # a flush this member left for a newer one
    # Answered a later flush already: install this view, deliver nothing in it yet.
    still_frozen = st.answered[0] > install.view_id
    st.answered_for = {t: a for t, a in st.answered_for.items() if t > install.view_id}
    numbering.settle(st, install.first, install.ids, install.bodies)
    last = install.first + len(install.ids) - 1
    st.go_flow(Flow.STEADY)
    # Exactly the flush's safe point, not what this node heard before freezing: every
    # member delivers the same numbers in the old view (virtual synchrony).
    st.safe_upto = install.safe if st.safe else last
    effects = numbering.deliver_ready(st)  # the old view's messages, in the old view
    if install.next_number > last + 1 and st.delivered_through() == last:
        last = install.next_number - 1
        st.next_delivery = install.next_number
        st.safe_upto = max(st.safe_upto, last)
    new_view = View(install.view_id, tuple(install.members))
    if st.node not in new_view.members:
        return effects + st.hub.left_out(view, new_view, last)
    effects.append(InstallView(new_view))
    if still_frozen:
        st.go_flow(Flow.FLUSHING)
    # A node new to the view is a fresh peer for the failure detector, which will not
    # take back a suspicion of it we may still hold from before it was removed.
    st.suspects -= set(new_view.members) - set(view.members)
    effects += st.hub.view_installed(view, new_view, last)
    effects += adopt_view(st, new_view, last)
    effects += replay_early(st, new_view)
    st.last_install = install
    if still_frozen:
        if st.answered_to != st.node:  # what we told it came from an older view
            effects.append(Send(st.answered_to, freeze_and_report(st, *st.answered)))
        return effects
    effects += send_queued(st)
    if st.suspects & set(new_view.members):  # suspected before: remove them now
        effects += coordinate(st, new_view.view_id + 1)
    return effects


def replay_early(st: SequencerState, view: View) -> list[Effect]:
    """Packets kept while frozen, meant for `view`: handle them now."""
    effects: list[Effect] = []
    early, st.early = st.early, []
    for event in early:
        ordering = isinstance(event.header, SOrder | SSafe)
        if event.sender == view.leader if ordering else event.sender in view.members:
            effects += st.hub.handle(event, st.now)
    return effects


def send_queued(st: SequencerState) -> list[Effect]:
    """Our own broadcasts queued while frozen go out now."""
    effects: list[Effect] = []
    queued, st.queued = st.queued, []
    for seq, payload in queued:
        effects += numbering.broadcast(st, seq, payload)
    return effects


def adopt_view(st: SequencerState, view: View, last_number: int) -> list[Effect]:
    """Switch to `view`; its sequencer numbers on from `last_number`."""
    if st.evs:
        # Numbers past the flush's are the old sequencer's (maybe another side's):
        # the new one numbers afresh. Bodies from another side's origins are that
        # side's to deliver.
        st.numbers = {n: m for n, m in st.numbers.items() if n <= last_number}
        numbered = set(st.numbers.values())
        st.bodies = {m: b for m, b in st.bodies.items()
                     if m.origin in view.members or m in numbered}
        for node in view.members:
            st.lost.pop(node, None)
    st.view = view
    st.others = view.others(st.node)
    st.reports = {m: r for m, r in st.reports.items() if m in view.members}
    st.holds = {}
    st.acked = 0
    st.flush = None
    if view.leader != st.node:
        return []
    return numbering.take_over(st, last_number, st.deps_of)
