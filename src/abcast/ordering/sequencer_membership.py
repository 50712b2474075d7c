"""Dynamic groups for the sequencer family: join with state transfer, graceful leave, and
a member cut off by a partition coming back (abcast.ordering.sequencer_failover runs the
flush every view change goes through).

Rules. Membership changes are view changes, and every view change is the flush of
sequencer_failover, run by the lowest member of the view that nobody it trusts
precedes (normally the leader = the sequencer).

Join. A joiner — a stack started alone, then `JoinRequested(contacts)` — sends `SJoin`
to a contact, and to the next contact every `join_retry_us` until it is welcomed. A
contact forwards the request to its leader (`SJoinFwd`); the leader records it and
starts a flush (or lets the running one take it along). The flush's outcome is the view
members ∪ joiners; the joiners give no state to it. The coordinator installs the outcome
like everyone else — it delivers the old view's messages through the flush's numbers —
and right after `InstallView`, before anything is delivered in the new view, takes a
snapshot (`TakeSnapshot`: the cut). `SWelcome` carries the snapshot with the view, the
first number the joiner delivers, the numbers already fixed beyond the cut (SAFE mode
delivers them only once a majority holds them, so they may still be pending) and the
per-origin delivery points, so the joiner delivers exactly the messages ordered after
the cut. Until welcomed, a joiner keeps what members send it in the new view (they may
install it before the welcome arrives) and replays it afterwards; members still frozen
in the flush likewise keep what the joiner sends early (sequencer_failover). A joiner
that is asked for its state in a later flush (its welcome died with the coordinator)
answers `SNotYet` and is welcomed by that flush's coordinator instead.

Leave. A leaver sends `SLeave` to the leader (every `leave_retry_us`, so a new leader
hears it too). The leader's flush collects the leaver's state like any member's — what
it broadcast is ordered in the old view — and installs a view without it. Every member
that installs a view leaving nodes out sends each of them `SFarewell(view_id)`; the
leaver delivers the old view's messages, then waits for the farewell of every member of
the new view (or for suspecting it, at most `farewell_wait_us`) before it installs the
view without itself and stops, so the flush's last packets (its own `VcInstall`, when it
coordinated) are not lost with it. A leaver that learns it was left out by a flush it
gave no state to (it was cut off before its leave was taken) did not leave: it missed
what the group delivered meanwhile. With `rejoin` it comes back and leaves from there.

Cut off. A member that learns the group went on without it (`SFarewell`, or the failure
detector's `Excluded`, from a later view) asks to join again through the members of its
last view when `rejoin` is on (the open stack's default; otherwise it stops, the Isis
rule). It is welcomed with a snapshot like any joiner and sends again, with the same
ids, its own broadcasts the group had not ordered, so nobody sees a hole in its
sequence. Its deliveries before and after are two incarnations': it is not a member
present throughout, and its trace shows the gap. A welcome can outlive its view: sent
across a partition, retransmitted by the channel once it heals, after the group removed
the joiner again. A joiner therefore remembers the latest view it was told leaves it out
(`SFarewell`, `Excluded`) and refuses a welcome into that view or an older one.

Under extended virtual synchrony (abcast.ordering.sequencer_merge) a member is never
cut off: a view of another side that leaves it out is a partition, and the sides merge.

What it does not know: how the application encodes its state (bytes in, bytes out), and
who runs the registry (contacts are given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
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
    JoinRequested,
    LeaveRequested,
    Received,
    Restored,
    SnapshotTaken,
    Suspected,
    TimerFired,
)
from abcast.ids import MsgId, NodeId, View
from abcast.ordering.sequencer import SData, SOrder
from abcast.ordering.sequencer_failover import (
    FailoverSequencer,
    NodeList,
    VcInstall,
    VcPrepare,
    VcState,
    _Flush,
)

_MANY: Final = 10_000_000
JOIN_RETRY: Final = "join-retry"
LEAVE_RETRY: Final = "leave-retry"
FAREWELL_WAIT: Final = "farewell-wait"


class SJoin(Header, frozen=True):
    """Joiner → contact: admit me (the sender is the joiner)."""


class SJoinFwd(Header, frozen=True):
    """Contact → its leader: `joiner` asks to be admitted."""

    joiner: NodeField


class SWelcome(Header, frozen=True):
    """Coordinator → joiner: the view, and the group's state at the cut."""

    view_id: Seq
    attempt: Count
    members: NodeList
    first: Seq  # the first number the joiner delivers; ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    per_origin: dict[NodeField, Count]  # at the cut: highest seq delivered per origin
    safe: Count  # SAFE mode: numbers up to here may be delivered at once
    state: bytes


class SNotYet(Header, frozen=True):
    """A proposed member that is still joining answers a `VcPrepare`: no state here."""

    target: Seq
    attempt: Count


class SLeave(Header, frozen=True):
    """Member → leader: leave me out of the next view."""


class SFarewell(Header, frozen=True):
    """Member → node that view `view_id` leaves out: you are not in it."""

    view_id: Seq


MEMBERSHIP_HEADERS = SJoin | SJoinFwd | SWelcome | SNotYet | SLeave | SFarewell
_IGNORED_WHILE_JOINING = (VcState, VcInstall, SJoin, SJoinFwd, SLeave, SNotYet, SFarewell)


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Knobs in microseconds."""

    join_retry_us: int = 500_000  # ask the next contact after this long unanswered
    leave_retry_us: int = 500_000  # ask the (maybe new) leader again
    farewell_wait_us: int = 5_000_000  # a leaver waits at most this long for farewells
    #: a member the group left out joins again (else it stops). Off by default: it
    #: needs a stack whose detector and channel let non-members' packets up
    #: (the registry's stack for this family); over the plain ones a rejoin never lands.
    rejoin: bool = False

    def __post_init__(self) -> None:
        if min(self.join_retry_us, self.leave_retry_us, self.farewell_wait_us) <= 0:
            raise LocalProtocolError(f"membership knobs must be positive: {self}")


@dataclass(frozen=True, slots=True)
class _WelcomeDraft:
    """A welcome waiting for its snapshot."""

    joiners: tuple[NodeId, ...]
    view: View
    attempt: int
    first: int
    ids: list[tuple[NodeId, int]]
    bodies: list[tuple[NodeId, int, bytes]]
    per_origin: dict[NodeId, int]
    safe: int


#: the packets of a member in a steady view: none of the membership cases applies
_STEADY: Final = frozenset({SData, SOrder})


class MembershipSequencer(FailoverSequencer):
    """The fail-over sequencer with join, leave and rejoin (the `sequencer` ordering)."""

    name = "sequencer"
    header_type = FailoverSequencer.header_type | MEMBERSHIP_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, safe: bool = False,
        stable_period_us: int = 50_000, membership: MembershipConfig | None = None,
        relay: bool = False,
    ) -> None:
        super().__init__(node, batch, safe=safe, stable_period_us=stable_period_us,
                         relay=relay)
        self.membership = membership or MembershipConfig()
        #: member → (leaving → departing) → stopped; joining → member
        self.status = "member"
        self._contacts: tuple[NodeId, ...] = ()
        self._contact_index = 0
        self._buffered: list[Received] = []  # while joining: packets of the view to come
        self._fresh_for = 0  # the latest flush told (SNotYet) that we have no state yet
        self._resend: dict[int, bytes] = {}  # rejoining: own broadcasts to send again
        #: the latest view we know the group installed without us: a welcome into it or
        #: an older one is stale (it was retransmitted across a partition that healed)
        self._left_out_of = 0
        self._leave_after_join = False
        self._leave_asked = False  # leaving: SLeave sent (own broadcasts all delivered)
        # the leader's side
        self._join_requests: set[NodeId] = set()
        self._leave_requests: set[NodeId] = set()
        self._welcome_next: tuple[NodeId, ...] = ()
        self._drafts: dict[int, _WelcomeDraft] = {}
        self._tokens = 0
        # the leaver's side
        self._final_view: View | None = None
        self._awaiting_farewell: set[NodeId] = set()
        self.welcomes_sent = 0
        self.rejoins = 0

    # -- introspection -------------------------------------------------------------------
    @property
    def is_member(self) -> bool:
        return self.status in ("member", "leaving") and not self.stopped

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self._now = now
        if self.stopped:
            return []
        if (type(event) is Received and self.status == "member"
                and type(event.header) in _STEADY):
            return super().handle(event, now)  # steady state: skip both matches below
        match event:
            case JoinRequested(contacts):
                return self._join(contacts, now)
            case LeaveRequested():
                return self._leave(now)
            case SnapshotTaken(token, state):
                return self._send_welcome(token, state)
            case TimerFired(key) if key == JOIN_RETRY:
                return self._retry_join(now)
            case TimerFired(key) if key == LEAVE_RETRY:
                return self._retry_leave(now)
            case TimerFired(key) if key == FAREWELL_WAIT:
                return self._farewell_timeout()
            case _:
                pass
        if self.status == "joining":
            return self._while_joining(event, now)
        if self.status == "departing":
            return self._while_departing(event)
        view = self.view
        members = view.members if view is not None else ()
        match event:
            case Received(sender, SJoin(), _):
                effects = self._on_join_ask(sender)
            case Received(sender, SJoinFwd(joiner), _) if sender in members:
                effects = self._on_join_ask(joiner)
            case Received(sender, SLeave(), _) if sender in members:
                effects = self._on_leave_ask(sender)
            case Received(sender, SNotYet(target, attempt), _):
                effects = self.note_fresh(sender, target, attempt)
            case Received(sender, SFarewell(view_id), _):
                if view is None or sender not in members or view_id <= view.view_id:
                    return []
                effects = self.excluded(sender, view_id)
            case Received(_, SJoinFwd() | SLeave() | SWelcome(), _):
                return []  # from a former member, or a welcome sent twice
            case _:
                return super().handle(event, now)
        return effects + self._after_event()

    # -- joining (the joiner's side) -----------------------------------------------------
    def _join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        view = self.view
        if view is not None and len(view.members) > 1:
            raise LocalProtocolError(f"{self.node} is already a member of {view}")
        if self.status != "member" or self.delivered_through() or self._bodies:
            raise LocalProtocolError(f"{self.node} cannot join now (it is {self.status}, "
                                     "or it has broadcast alone)")
        candidates = tuple(c for c in contacts if c != self.node)
        if not candidates:
            raise LocalProtocolError("join needs at least one contact other than this node")
        return self._start_joining(candidates, now)

    def _start_joining(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        self.status = "joining"
        self._contacts = contacts
        self._contact_index = 0
        return [Send(contacts[0], SJoin()),
                SetTimer(JOIN_RETRY, now + self.membership.join_retry_us)]

    def _retry_join(self, now: int) -> list[Effect]:
        if self.status != "joining":
            return []
        self._contact_index = (self._contact_index + 1) % len(self._contacts)
        contact = self._contacts[self._contact_index]
        return [Send(contact, SJoin()), SetTimer(JOIN_RETRY, now + self.membership.join_retry_us)]

    def _while_joining(self, event: Event, now: int) -> list[Effect]:
        match event:
            case Received(sender, SWelcome() as welcome, _):
                return self._on_welcome(sender, welcome, now)
            case Received(sender, VcPrepare(target, attempt, members), _):
                if self.node in members:
                    self._fresh_for = max(self._fresh_for, target)
                    return [Send(sender, SNotYet(target, attempt))]
                return []
            case Received(_, SFarewell(view_id), _):
                self._left_out_of = max(self._left_out_of, view_id)
                return []
            case Received(_, header, _) if isinstance(header, _IGNORED_WHILE_JOINING):
                return []
            case Received():
                self._buffered.append(event)  # the view to come, sent before our welcome
                return []
            case BroadcastRequested(seq, payload):
                self._queued.append((seq, payload))
                return []
            case Suspected(node):
                self._suspects.add(node)  # mirror the detector: it reports changes only
                return []
            case Restored(node):
                self._suspects.discard(node)
                return []
            case Excluded(_, view_id):
                self._left_out_of = max(self._left_out_of, view_id)
                return []
            case _:
                return []  # timers of the old view: nothing to act on yet

    def _on_welcome(self, sender: NodeId, welcome: SWelcome, now: int) -> list[Effect]:
        view = View(welcome.view_id, tuple(welcome.members))
        if self.node not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.node} into {view}")
        if self.view is not None and view.view_id <= self.view.view_id:
            return []
        if view.view_id < self._fresh_for:
            # We told a later flush that we have no state: it welcomes us into its view
            # (taking this one now would leave us a view behind, with no way forward).
            return []
        if view.view_id <= self._left_out_of:
            # The group removed us again after this welcome was sent (it never reached
            # us: a partition); its channel delivered it once the partition healed.
            # Taking it would make us a member — maybe the sequencer — of a view the
            # others left behind, numbering their new broadcasts in it. We are still
            # asking to join: the welcome into a current view comes.
            return []
        # A coordinator that left in the same flush waits for our word before it stops.
        farewell = [] if sender in view.members else [Send(sender, SFarewell(view.view_id))]
        self.status = "member"
        first, last = welcome.first, welcome.first + len(welcome.ids) - 1
        # Start from the cut: nothing of before it is ours to deliver or to report.
        self._numbers = {first + i: MsgId(o, s) for i, (o, s) in enumerate(welcome.ids)}
        self._bodies = {MsgId(o, s): body for o, s, body in welcome.bodies}
        self._delivered = dict(welcome.per_origin)
        self._next_delivery = first
        self._log = {}
        self._deps_of = {}
        self._stable = self._reported = first - 1
        self._frozen = False
        self._flush = None
        self._early = []
        self._answered = (welcome.view_id, welcome.attempt)
        self._answered_for = {}
        self._attempts = max(self._attempts, welcome.attempt)
        self._safe_upto = welcome.safe if self.safe else last
        self._join_requests.clear()
        self._leave_requests.clear()
        old = self.view.members if self.view is not None else ()
        self._suspects -= set(view.members) - set(old)  # fresh peers for the detector
        effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                                 InstallView(view), *farewell]
        effects += self.adopt_view(view, last)
        effects += self._deliver_ready()
        buffered, self._buffered = self._buffered, []
        for event in buffered:
            if event.sender in view.members:
                effects += self.handle(event, now)
        # A rejoiner's own broadcasts the group never ordered go out again, same ids, in
        # order, so that nobody sees a hole in its sequence.
        done = self._delivered.get(self.node, 0)
        resend, self._resend = self._resend, {}
        for seq in sorted(s for s in resend if s > done):
            effects += self._broadcast(seq, resend[seq])
        # The group may have numbered one of them already (another member held its body)
        # and that order was among the buffered packets replayed above, before the body
        # was back here: nothing else would deliver it if no more traffic comes.
        effects += self._deliver_ready()
        queued, self._queued = self._queued, []
        for seq, payload in queued:
            effects += self._broadcast(seq, payload)
        if self._leave_after_join:
            effects += self._leave(now)
        return effects + self._after_event()

    # -- admitting (the leader's and coordinator's side) ------------------------------------
    def _on_join_ask(self, joiner: NodeId) -> list[Effect]:
        view = self.view
        if view is None or joiner == self.node:
            return []
        if view.leader != self.node:
            return [Send(view.leader, SJoinFwd(joiner))]
        if joiner in view.members:
            # An old ask, overtaken by its welcome; or the welcome died with its
            # coordinator, whose removal is a flush that asks the joiner for its state and
            # welcomes it again (SNotYet).
            return []
        self._join_requests.add(joiner)
        self._leave_requests.discard(joiner)  # it comes back to leave from a new view
        return self._change_view()

    def _on_leave_ask(self, leaver: NodeId) -> list[Effect]:
        view = self.view
        if view is None:
            return []
        if view.leader != self.node:
            return [Send(view.leader, SLeave())] if leaver == self.node else []
        self._leave_requests.add(leaver)
        return self._change_view()

    def _change_view(self) -> list[Effect]:
        """Start a flush for the requests, unless one is running (it takes them along)."""
        view = self.view
        if view is None or self._flush is not None or self._frozen:
            return []
        return self._maybe_coordinate(view.view_id + 1)

    def next_members(self, flush: _Flush) -> tuple[NodeId, ...]:
        leaving = self._leave_requests
        joining = self._join_requests - set(flush.members) - leaving
        kept = [m for m in flush.members if m not in leaving]
        if not kept:
            return flush.members  # nobody would be left: the last member stays
        return (*kept, *sorted(joining))

    def concluding(self, flush: _Flush, install: VcInstall) -> None:
        members = set(install.members)
        joiners = (members - set(flush.members)) | (flush.fresh & members)
        self._welcome_next = tuple(sorted(joiners))
        self._join_requests -= members
        # Whoever is out of the view is done leaving — let go, or removed as suspected
        # before its request came up; a leave request kept for it would keep it out
        # when it asks to join again.
        self._leave_requests &= members

    def view_installed(self, old: View, new: View, last_number: int) -> list[Effect]:
        effects: list[Effect] = [Send(m, SFarewell(new.view_id))
                                 for m in old.members if m not in new.members]
        joiners, self._welcome_next = self._welcome_next, ()
        if joiners:
            effects.append(self._take_snapshot(joiners, new, last_number))
        return effects

    def _take_snapshot(
        self, joiners: tuple[NodeId, ...], view: View, last_number: int
    ) -> Effect:
        first = self.delivered_through() + 1
        ids = [self._numbers[n] for n in range(first, last_number + 1)]
        self._tokens += 1
        self._drafts[self._tokens] = _WelcomeDraft(
            joiners, view, self._answered[1], first,
            [(m.origin, m.seq) for m in ids],
            [(m.origin, m.seq, self._bodies[m]) for m in ids if m in self._bodies],
            dict(self._delivered), self._safe_upto if self.safe else last_number,
        )
        return TakeSnapshot(self._tokens)

    def _send_welcome(self, token: int, state: bytes) -> list[Effect]:
        draft = self._drafts.pop(token, None)
        if draft is None:
            raise LocalProtocolError(f"{self.node} took no snapshot with token {token}")
        welcome = SWelcome(
            draft.view.view_id, draft.attempt, list(draft.view.members), draft.first,
            draft.ids, draft.bodies, draft.per_origin, draft.safe, state,
        )
        self.welcomes_sent += len(draft.joiners)
        return [Send(j, welcome) for j in draft.joiners]

    # -- leaving ---------------------------------------------------------------------------
    def _leave(self, now: int) -> list[Effect]:
        if self.status == "joining":
            self._leave_after_join = True  # the group may already count on us: join first
            return []
        if self.status != "member":
            return []  # already leaving
        view = self.view
        if view is not None and view.members == (self.node,):
            self.stopped = True  # the last member: the group ends with it
            return [InstallView(View(view.view_id + 1, ()))]
        self.status = "leaving"
        self._leave_asked = False
        retry = SetTimer(LEAVE_RETRY, now + self.membership.leave_retry_us)
        return [*self._ask_to_leave(), retry]

    def _retry_leave(self, now: int) -> list[Effect]:
        if self.status != "leaving":
            return []
        retry = SetTimer(LEAVE_RETRY, now + self.membership.leave_retry_us)
        return [*self._ask_to_leave(), retry]

    def _ask_to_leave(self) -> list[Effect]:
        # Our own broadcasts are delivered first: SAFE, the flush delivers in the old
        # view only what may be safe, and the rest in the next view — which a leaver
        # never installs, so it would never deliver its own message (validity).
        if self._own_pending():
            return []
        self._leave_asked = True
        return self._on_leave_ask(self.node)

    def _own_pending(self) -> bool:
        return bool(self._queued) or any(m.origin == self.node for m in self._bodies)

    def _after_event(self) -> list[Effect]:
        effects = super()._after_event()
        if self.status == "leaving" and not self._leave_asked and not self._own_pending():
            effects += self._ask_to_leave()
        return effects

    def left_out(self, old: View, new: View, last_number: int) -> list[Effect]:
        if self.status != "leaving":
            return self._cut_off(new)
        self.status = "departing"
        self._frozen = True  # the old view is over here: nothing more is delivered
        self._final_view = new
        self._awaiting_farewell = set(new.members) - self._suspects
        # As the flush's coordinator, welcome its joiners before going: the cut is here.
        joiners, self._welcome_next = self._welcome_next, ()
        effects: list[Effect] = [self._take_snapshot(joiners, new, last_number)] if joiners else []
        if not self._awaiting_farewell:
            return effects + self._depart()
        return [*effects, CancelTimer(LEAVE_RETRY),
                SetTimer(FAREWELL_WAIT, self._now + self.membership.farewell_wait_us)]

    def _while_departing(self, event: Event) -> list[Effect]:
        final = self._final_view
        match event:
            case Received(sender, SFarewell(view_id), _) if final and view_id >= final.view_id:
                self._awaiting_farewell.discard(sender)
            case Suspected(node):
                self._awaiting_farewell.discard(node)
            case _:
                return []
        return self._depart() if not self._awaiting_farewell else []

    def _depart(self) -> list[Effect]:
        final = self._final_view
        if self.status not in ("leaving", "departing") or final is None:
            return []
        self.stopped = True
        timers = (JOIN_RETRY, LEAVE_RETRY, FAREWELL_WAIT)
        return [*(CancelTimer(k) for k in timers), InstallView(final)]

    # -- cut off ---------------------------------------------------------------------------
    def excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        view = self.view
        assert view is not None
        if self.status == "departing":
            self._awaiting_farewell.discard(by)
            return [] if self._awaiting_farewell else self._depart()
        if self.status == "leaving":
            waiting = self._final_view is not None
            self._final_view = View(view_id, view.others(self.node))
            # (Our own flush for that view lost to another coordinator's attempt: no
            # install that has our state can come.)
            mine = self._flush is not None and self._flush.target == view_id
            if view_id in self._answered_for and not mine:
                # We gave our state to the flush that installed it: its VcInstall (our
                # last deliveries) is on its way, retransmitted by the coordinator. Each
                # member tells us (and the detector again, every period): wait once.
                if waiting:
                    return []
                return [SetTimer(FAREWELL_WAIT, self._now + self.membership.farewell_wait_us)]
            if self.membership.rejoin:
                return self._rejoin_to_leave(self._final_view)
            return self._depart()
        return self._cut_off(View(view_id, view.others(self.node)))

    def _farewell_timeout(self) -> list[Effect]:
        final = self._final_view
        if self.status == "leaving" and final is not None and self.membership.rejoin:
            # We gave our state to an attempt for that view, but another attempt — one
            # that did not have us — installed it: no VcInstall with our last
            # deliveries is coming.
            return self._rejoin_to_leave(final)
        return self._depart()

    def _rejoin_to_leave(self, new: View) -> list[Effect]:
        """Left out by a flush we gave no state to (cut off before our leave was taken):
        we did not leave, the group went on without us, and what it delivered in our
        last view we may never have. Come back as a new incarnation, like any member cut
        off, and leave from there."""
        self._final_view = None
        self._leave_after_join = True
        self.status = "member"
        return [CancelTimer(LEAVE_RETRY), CancelTimer(FAREWELL_WAIT), *self._cut_off(new)]

    def _cut_off(self, new: View) -> list[Effect]:
        view = self.view
        if not self.membership.rejoin or view is None:
            self.stopped = True
            return [InstallView(new)]
        contacts = view.others(self.node)
        if not contacts:
            self.stopped = True
            return [InstallView(new)]
        # Keep our own broadcasts the group may not have ordered; forget the rest.
        mine = {mid.seq: body for mid, body in self._bodies.items() if mid.origin == self.node}
        mine.update({mid.seq: body for mid, body in self._log.values() if mid.origin == self.node})
        self._resend.update(mine)
        self._bodies = {}
        self._numbers = {}
        self._log = {}
        self._flush = None
        self._frozen = True  # nothing more is delivered in the view we were cut from
        self._buffered = []
        self._left_out_of = max(self._left_out_of, new.view_id)
        self.rejoins += 1
        return self._start_joining(contacts, self._now)
