"""The sequencer family's dynamic groups under evs (every other mode runs under the
membership layer, abcast.membership): join with state transfer, graceful leave, removal.

Rules: every membership change is a flush (abcast.ordering.sequencer_flush) run by the
leader. A joiner asks a contact (`SJoin`, forwarded to the leader as `SJoinFwd`); the
flush's outcome adds it, the coordinator snapshots the application right after installing
the view (`TakeSnapshot`, the cut) and sends `SWelcome`: view, snapshot, the numbers fixed
beyond the cut. A leaver sends `SLeave` once its own broadcasts are delivered; the flush
collects its state like any member's, and it stops once every member of the new view said
`SFarewell` (or `farewell_wait_us`). A member the group went on without (`SFarewell`,
`Excluded` from a later view) stops (a side of a partition merges instead: evs).
docs/orderings.md has the full rules and what they cost.
"""

from __future__ import annotations

from typing import Final

from abcast.effects import (
    CancelTimer,
    Effect,
    InstallState,
    InstallView,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    Received,
    Restored,
    Suspected,
)
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_flush as flush
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering.sequencer_state import EvsWelcomeDraft, Flow, Role, SequencerState
from abcast.ordering.sequencer_wire import (
    SFarewell,
    SJoin,
    SJoinFwd,
    SLeave,
    SNotYet,
    SWelcome,
    VcInstall,
    VcPrepare,
    VcState,
)

JOIN_RETRY: Final = "join-retry"
LEAVE_RETRY: Final = "leave-retry"
FAREWELL_WAIT: Final = "farewell-wait"
_IGNORED_WHILE_JOINING = (VcState, VcInstall, SJoin, SJoinFwd, SLeave, SNotYet, SFarewell)


# -- joining (the joiner's side) -----------------------------------------------------------
def join(st: SequencerState, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
    view = st.view
    if view is not None and len(view.members) > 1:
        raise LocalProtocolError(f"{st.node} is already a member of {view}")
    if st.role is not Role.MEMBER or st.delivered_through() or st.bodies:
        raise LocalProtocolError(f"{st.node} cannot join now (it is {st.role.value}, "
                                 "or it has broadcast alone)")
    candidates = tuple(c for c in contacts if c != st.node)
    if not candidates:
        raise LocalProtocolError("join needs at least one contact other than this node")
    return _start_joining(st, candidates, now)


def _start_joining(st: SequencerState, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
    st.go_role(Role.JOINING)
    st.contacts = contacts
    st.contact_index = 0
    return [Send(contacts[0], SJoin()),
            SetTimer(JOIN_RETRY, now + st.membership.join_retry_us)]


def retry_join(st: SequencerState, now: int) -> list[Effect]:
    if st.role is not Role.JOINING:
        return []
    st.contact_index = (st.contact_index + 1) % len(st.contacts)
    contact = st.contacts[st.contact_index]
    return [Send(contact, SJoin()), SetTimer(JOIN_RETRY, now + st.membership.join_retry_us)]


def while_joining(st: SequencerState, event: Event, now: int) -> list[Effect]:
    match event:
        case Received(sender, SWelcome() as welcome, _):
            return _on_welcome(st, sender, welcome, now)
        case Received(sender, VcPrepare(target, attempt, members), _):
            if st.node in members:
                st.fresh_for = max(st.fresh_for, target)
                return [Send(sender, SNotYet(target, attempt))]
            return []
        case Received(_, SFarewell(view_id), _):
            st.left_out_of = max(st.left_out_of, view_id)
            return []
        case Received(_, header, _) if isinstance(header, _IGNORED_WHILE_JOINING):
            return []
        case Received():
            st.buffered.append(event)  # the view to come, sent before our welcome
            return []
        case BroadcastRequested(seq, payload):
            st.queued.append((seq, payload))
            return []
        case Suspected(node):
            st.suspects.add(node)  # mirror the detector: it reports changes only
            return []
        case Restored(node):
            st.suspects.discard(node)
            return []
        case Excluded(_, view_id):
            st.left_out_of = max(st.left_out_of, view_id)
            return []
        case _:
            return []  # timers of the old view: nothing to act on yet


def _on_welcome(st: SequencerState, sender: NodeId, welcome: SWelcome, now: int) -> list[Effect]:
    view = View(welcome.view_id, tuple(welcome.members))
    if st.node not in view.members:
        raise RemoteProtocolError(f"{sender} welcomed {st.node} into {view}")
    if st.view is not None and view.view_id <= st.view.view_id:
        return []
    if view.view_id < st.fresh_for:
        # We told a later flush that we have no state: it welcomes us into its view
        # (taking this one now would leave us a view behind, with no way forward).
        return []
    if view.view_id <= st.left_out_of:
        # The group removed us again after this welcome was sent (it never reached
        # us: a partition); its channel delivered it once the partition healed.
        # Taking it would make us a member — maybe the sequencer — of a view the
        # others left behind, numbering their new broadcasts in it. We are still
        # asking to join: the welcome into a current view comes.
        return []
    # A coordinator that left in the same flush waits for our word before it stops.
    farewell = [] if sender in view.members else [Send(sender, SFarewell(view.view_id))]
    st.go_role(Role.MEMBER)
    first, last = welcome.first, welcome.first + len(welcome.ids) - 1
    # Start from the cut: nothing of before it is ours to deliver or to report.
    st.numbers = {first + i: MsgId(o, s) for i, (o, s) in enumerate(welcome.ids)}
    st.bodies = {MsgId(o, s): body for o, s, body in welcome.bodies}
    st.delivered = dict(welcome.per_origin)
    st.next_delivery = first
    st.log = {}
    st.deps_of = {}
    st.stable = st.reported = first - 1
    st.go_flow(Flow.STEADY)
    st.flush = None
    st.early = []
    st.answered = (welcome.view_id, welcome.attempt)
    st.answered_for = {}
    st.attempts = max(st.attempts, welcome.attempt)
    st.safe_upto = welcome.safe if st.safe else last
    st.join_requests.clear()
    st.leave_requests.clear()
    old = st.view.members if st.view is not None else ()
    st.suspects -= set(view.members) - set(old)  # fresh peers for the detector
    effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                             InstallView(view), *farewell]
    effects += flush.adopt_view(st, view, last)
    effects += numbering.deliver_ready(st)
    buffered, st.buffered = st.buffered, []
    for event in buffered:
        if event.sender in view.members:
            effects += st.hub.handle(event, now)
    effects += numbering.deliver_ready(st)
    effects += flush.send_queued(st)
    if st.leave_after_join:
        effects += leave(st, now)
    return effects + after_event(st)


# -- admitting (the leader's and coordinator's side) ---------------------------------------
def on_join_ask(st: SequencerState, joiner: NodeId) -> list[Effect]:
    view = st.view
    if view is None or joiner == st.node:
        return []
    if view.leader != st.node:
        return [Send(view.leader, SJoinFwd(joiner))]
    if joiner in view.members:
        # An old ask, overtaken by its welcome; or the welcome died with its
        # coordinator, whose removal is a flush that asks the joiner for its state and
        # welcomes it again (SNotYet).
        return []
    st.join_requests.add(joiner)
    st.leave_requests.discard(joiner)  # it comes back to leave from a new view
    return flush.change_view(st)


def on_leave_ask(st: SequencerState, leaver: NodeId) -> list[Effect]:
    view = st.view
    if view is None:
        return []
    if view.leader != st.node:
        return [Send(view.leader, SLeave())] if leaver == st.node else []
    st.leave_requests.add(leaver)
    return flush.change_view(st)


def view_installed(st: SequencerState, old: View, new: View, last_number: int) -> list[Effect]:
    """Right after `InstallView(new)`, before anything is delivered in it: farewells to
    whoever the view leaves out, a snapshot at the cut for its joiners."""
    effects: list[Effect] = [Send(m, SFarewell(new.view_id))
                             for m in old.members if m not in new.members]
    joiners, st.welcome_next = st.welcome_next, ()
    if joiners:
        effects.append(_take_snapshot(st, joiners, new, last_number))
    return effects


def _take_snapshot(
    st: SequencerState, joiners: tuple[NodeId, ...], view: View, last_number: int
) -> Effect:
    first = st.delivered_through() + 1
    ids = [st.numbers[n] for n in range(first, last_number + 1)]
    st.tokens += 1
    st.drafts[st.tokens] = EvsWelcomeDraft(
        joiners, view, st.answered[1], first,
        [(m.origin, m.seq) for m in ids],
        [(m.origin, m.seq, st.bodies[m]) for m in ids if m in st.bodies],
        dict(st.delivered), st.safe_upto if st.safe else last_number,
    )
    return TakeSnapshot(st.tokens)


def send_welcome(st: SequencerState, token: int, state: bytes) -> list[Effect]:
    draft = st.drafts.pop(token, None)
    if draft is None:
        raise LocalProtocolError(f"{st.node} took no snapshot with token {token}")
    welcome = SWelcome(
        draft.view.view_id, draft.attempt, list(draft.view.members), draft.first,
        draft.ids, draft.bodies, draft.per_origin, draft.safe, state,
    )
    st.welcomes_sent += len(draft.joiners)
    return [Send(j, welcome) for j in draft.joiners]


# -- leaving -------------------------------------------------------------------------------
def leave(st: SequencerState, now: int) -> list[Effect]:
    if st.role is Role.JOINING:
        st.leave_after_join = True  # the group may already count on us: join first
        return []
    if st.role is not Role.MEMBER:
        return []  # already leaving
    view = st.view
    if view is not None and view.members == (st.node,):
        st.go_role(Role.STOPPED)  # the last member: the group ends with it
        return [InstallView(View(view.view_id + 1, ()))]
    st.go_role(Role.LEAVING)
    st.leave_asked = False
    retry = SetTimer(LEAVE_RETRY, now + st.membership.leave_retry_us)
    return [*_ask_to_leave(st), retry]


def retry_leave(st: SequencerState, now: int) -> list[Effect]:
    if st.role is not Role.LEAVING:
        return []
    retry = SetTimer(LEAVE_RETRY, now + st.membership.leave_retry_us)
    return [*_ask_to_leave(st), retry]


def _ask_to_leave(st: SequencerState) -> list[Effect]:
    # Our own broadcasts are delivered first: SAFE, the flush delivers in the old
    # view only what may be safe, and the rest in the next view — which a leaver
    # never installs, so it would never deliver its own message (validity).
    if _own_pending(st):
        return []
    st.leave_asked = True
    return on_leave_ask(st, st.node)


def _own_pending(st: SequencerState) -> bool:
    return bool(st.queued) or any(m.origin == st.node for m in st.bodies)


def after_event(st: SequencerState) -> list[Effect]:
    """Batched per event: the flush's (SAFE acks, stability timer), then a leaver's ask
    once its own broadcasts are delivered."""
    effects = flush.after_event(st)
    if not st.steady_member and st.role is Role.LEAVING and not st.leave_asked \
            and not _own_pending(st):
        effects += _ask_to_leave(st)
    return effects


def left_out(st: SequencerState, old: View, new: View, last_number: int) -> list[Effect]:
    """The flush's outcome does not hold this node: a leaver waits for farewells, a
    member was cut off."""
    if st.role is not Role.LEAVING:
        return _cut_off(st, new)
    st.go_role(Role.DEPARTING)
    st.go_flow(Flow.FLUSHING)  # the old view is over here: nothing more is delivered
    st.final_view = new
    st.awaiting_farewell = set(new.members) - st.suspects
    # As the flush's coordinator, welcome its joiners before going: the cut is here.
    joiners, st.welcome_next = st.welcome_next, ()
    effects: list[Effect] = [_take_snapshot(st, joiners, new, last_number)] if joiners else []
    if not st.awaiting_farewell:
        return effects + _depart(st)
    return [*effects, CancelTimer(LEAVE_RETRY),
            SetTimer(FAREWELL_WAIT, st.now + st.membership.farewell_wait_us)]


def while_departing(st: SequencerState, event: Event) -> list[Effect]:
    final = st.final_view
    match event:
        case Received(sender, SFarewell(view_id), _) if final and view_id >= final.view_id:
            st.awaiting_farewell.discard(sender)
        case Suspected(node):
            st.awaiting_farewell.discard(node)
        case _:
            return []
    return _depart(st) if not st.awaiting_farewell else []


def _depart(st: SequencerState) -> list[Effect]:
    final = st.final_view
    if st.role not in (Role.LEAVING, Role.DEPARTING) or final is None:
        return []
    st.go_role(Role.STOPPED)
    timers = (JOIN_RETRY, LEAVE_RETRY, FAREWELL_WAIT)
    return [*(CancelTimer(k) for k in timers), InstallView(final)]


# -- cut off -------------------------------------------------------------------------------
def excluded(st: SequencerState, by: NodeId, view_id: int) -> list[Effect]:
    """`by` installed view `view_id`, which leaves this node out."""
    view = st.view
    assert view is not None
    if st.role is Role.DEPARTING:
        st.awaiting_farewell.discard(by)
        return [] if st.awaiting_farewell else _depart(st)
    if st.role is Role.LEAVING:
        waiting = st.final_view is not None
        st.final_view = View(view_id, view.others(st.node))
        # (Our own flush for that view lost to another coordinator's attempt: no
        # install that has our state can come.)
        mine = st.flush is not None and st.flush.target == view_id
        if view_id in st.answered_for and not mine:
            # We gave our state to the flush that installed it: its VcInstall (our
            # last deliveries) is on its way, retransmitted by the coordinator. Each
            # member tells us (and the detector again, every period): wait once.
            if waiting:
                return []
            return [SetTimer(FAREWELL_WAIT, st.now + st.membership.farewell_wait_us)]
        return _depart(st)
    return _cut_off(st, View(view_id, view.others(st.node)))


def farewell_timeout(st: SequencerState) -> list[Effect]:
    return _depart(st)


def _cut_off(st: SequencerState, new: View) -> list[Effect]:
    """The group went on without us: removed (under evs a member merges, it never
    rejoins; a leaver cut off just goes)."""
    st.go_role(Role.STOPPED)
    return [InstallView(new)]
