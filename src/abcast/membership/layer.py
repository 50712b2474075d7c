"""The membership layer: views for an ordering — join with state transfer, graceful leave,
removal on suspicion, and the flush that makes every view change virtually synchronous.

Phases (`status`, and `frozen` while a flush runs):

    status     event                                  next        what it does
    member     JoinRequested (alone in its view)      joining     MJoin to a contact
    joining    MWelcome into a current view           member      InstallState, InstallView
    joining    MPrepare naming it                     joining     MNotYet (welcome me later)
    member     LeaveRequested                         leaving     MLeave to the leader
    member*    MPrepare (or coordinating)             (frozen)    report; buffer, queue
    member*    MInstall of an attempt it answered     member*     outcome in the old view,
                                                                  InstallView, unfreeze
    leaving    MInstall leaving it out                departing   wait for farewells
    departing  every farewell, suspicion or timeout   stopped     InstallView without it
    member*    MFarewell / Excluded from a later view stopped     removed (cut off)

    (member* = member or leaving)

Rules. A view change is a flush run by its coordinator — the lowest member of the view
it does not suspect — exactly as abcast.ordering.sequencer_flush runs it (the same
attempts, busy answers, crossing installs, and primary partition: only a coordinator
that hears a majority of its view goes on):

1. `MPrepare(target, attempt, members)` to the proposed members (the view less the
   suspects). Each *freezes* — the ordering is fed nothing more: its packets are
   buffered, its broadcasts queued — and answers `MState` with the ordering's report
   (abcast.membership.api): what it delivered and holds of the view.
2. With every report, the coordinator asks the ordering to `settle` them: the messages
   of the closing view every survivor delivers, in order — everything any survivor
   delivered among them. `MInstall` carries them and the next members (the proposed
   ones, less leavers, plus joiners).
3. Each member has its ordering `conclude` the outcome (deliver what it lacks, *in the
   old view*), installs the new view, replays what it buffered from its members and
   sends what it queued. So members moving on together delivered the same set in the
   old view (virtual synchrony), and a crashed sender's message any survivor delivered
   is delivered by all before the next view (agreement among survivors).

Joiners give no state: the coordinator snapshots the application right after
installing the view (`TakeSnapshot`, the cut) and welcomes them with the ordering's
`join_cut`. A leaver is a flush member (what it sent is settled in the old view) left
out of the next view; it waits for every new member's farewell before it stops. A member
that learns a later view left it out (`MFarewell`, the detector's `Excluded`) was cut
off: it stops, the Isis rule (`cut_off`: drivers record a removal, not a leave).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Final

from abcast.codec import EMPTY
from abcast.effects import (
    CancelTimer,
    Effect,
    InstallState,
    InstallView,
    Multicast,
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
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.membership.api import ViewOrdering
from abcast.membership.wire import (
    MEMBERSHIP_HEADERS,
    FlushMessage,
    JoinCut,
    MAbort,
    MBusy,
    MembershipHeader,
    MFarewell,
    MInstall,
    MJoin,
    MJoinFwd,
    MLeave,
    MNotYet,
    MPrepare,
    MStable,
    MState,
    MWelcome,
)
from abcast.snapshot import LayerSnapshot

JOIN_RETRY: Final = "m-join-retry"
LEAVE_RETRY: Final = "m-leave-retry"
FAREWELL_WAIT: Final = "m-farewell-wait"
STABLE: Final = "m-stable"
_TIMERS: Final = frozenset({JOIN_RETRY, LEAVE_RETRY, FAREWELL_WAIT, STABLE})


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Knobs in microseconds (the same defaults as the sequencer family's)."""

    join_retry_us: int = 500_000  # ask the next contact after this long unanswered
    leave_retry_us: int = 500_000  # ask the (maybe new) leader again
    farewell_wait_us: int = 5_000_000  # a leaver waits at most this long for farewells
    #: how often members report what they delivered (stability: the log's garbage)
    stable_period_us: int = 200_000

    def __post_init__(self) -> None:
        if min(self.join_retry_us, self.leave_retry_us, self.farewell_wait_us,
               self.stable_period_us) <= 0:
            raise LocalProtocolError(f"membership knobs must be positive: {self}")


@dataclass(slots=True)
class _Flush:
    """The coordinator's side of a view change."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, MState] = field(default_factory=dict)
    fresh: set[NodeId] = field(default_factory=set)  # joiners with nothing to report

    def complete(self) -> bool:
        return set(self.states) | self.fresh == set(self.members)


@dataclass(frozen=True, slots=True)
class _WelcomeDraft:
    joiners: tuple[NodeId, ...]
    view: View
    attempt: int
    cut: JoinCut


class Membership(Layer):
    """Views for the ordering it wraps (one stack slot: its headers and the ordering's)."""

    def __init__(
        self, node: NodeId, ordering: ViewOrdering, config: MembershipConfig | None = None
    ) -> None:
        super().__init__(node)
        self.ordering = ordering
        self.name = ordering.name  # type: ignore[misc]  # the slot keeps the ordering's name
        self.header_type = ordering.header_type | MembershipHeader  # type: ignore[misc]
        self.config = config or MembershipConfig()
        self.view: View | None = None
        self.status = "member"  # member | joining | leaving | departing | stopped
        self.frozen = False
        self.cut_off = False  # the group removed this node (not a graceful leave)
        self._now = 0
        self._suspects: set[NodeId] = set()
        self._buffered: list[Received] = []  # the ordering's packets while frozen/joining
        self._queued: list[tuple[int, bytes]] = []  # broadcasts while frozen/joining
        self._early: list[Received] = []  # prepares for a view beyond the next
        #: prepares from a coordinator some member I trust precedes, by sender
        self._deferred: dict[NodeId, Received] = {}
        self._aborted: set[tuple[NodeId, int, int]] = set()  # aborts ahead of their prepare
        # the flush, as a member
        self._answered: tuple[int, int] = (0, 0)
        self._answered_for: dict[int, set[int]] = {}
        self._answered_to: NodeId = node
        self._last_install: MInstall | None = None
        # the flush, as coordinator
        self._flush: _Flush | None = None
        self._attempts = 0
        self._join_requests: set[NodeId] = set()
        self._leave_requests: set[NodeId] = set()
        self._welcome_next: tuple[NodeId, ...] = ()
        self._drafts: dict[int, _WelcomeDraft] = {}
        self._tokens = 0
        # joining
        self._contacts: tuple[NodeId, ...] = ()
        self._contact_index = 0
        self._fresh_for = 0
        self._left_out_of = 0
        self._leave_after_join = False
        # leaving
        self._final_view: View | None = None
        self._awaiting_farewell: set[NodeId] = set()
        # stability: what each member delivered (as acting leader), what we last said
        self._stable_reports: dict[NodeId, dict[NodeId, int]] = {}
        self._stable_said: dict[NodeId, int] | None = None
        self._stable: dict[NodeId, int] = {}
        # counters
        self.views_installed = 0
        self.flushes_coordinated = 0
        self.welcomes_sent = 0

    # -- introspection -------------------------------------------------------------------
    @property
    def phase(self) -> str:
        return f"{self.status}, flushing" if self.frozen else self.status

    def inspect(self) -> LayerSnapshot:
        view = self.view
        flush: dict[str, Any] = {}
        if self._flush is not None:
            f = self._flush
            flush = {"target": f.target, "attempt": f.attempt, "members": list(f.members),
                     "reported": sorted(f.states), "fresh": sorted(f.fresh)}
        clock: dict[str, Any] = {
            "view_id": view.view_id if view is not None else 0,
            "members": list(view.members) if view is not None else [],
            "suspects": sorted(self._suspects),
            "pending_joins": sorted(self._join_requests),
            "pending_leaves": sorted(self._leave_requests),
            "answered": list(self._answered),
            "flush": flush,
        }
        return LayerSnapshot(
            layer="membership", phase=self.phase, clock=clock,
            counters={"views_installed": self.views_installed,
                      "flushes_coordinated": self.flushes_coordinated,
                      "welcomes_sent": self.welcomes_sent, "buffered": len(self._buffered),
                      "queued": len(self._queued)})

    def snapshots(self) -> list[LayerSnapshot]:
        """This layer's snapshot and the ordering's, bottom first."""
        return [self.inspect(), self.ordering.inspect()]

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self._now = now
        status = self.status
        if status == "stopped":
            return []
        if type(event) is Received and not self.frozen and status in ("member", "leaving"):
            header = event.header
            if not isinstance(header, MEMBERSHIP_HEADERS):
                view = self.view
                if view is not None and event.sender in view.members:
                    return self.ordering.handle(event, now)
                return []  # from a node this view left out (or not yet admitted)
        match event:
            case Received(sender, header, _) if isinstance(header, MEMBERSHIP_HEADERS):
                effects = self._membership(sender, header)
            case Received():
                if status == "joining" or self.frozen:
                    self._buffered.append(event)
                return []
            case BroadcastRequested(seq, payload):
                if status in ("departing", "stopped"):
                    raise LocalProtocolError(f"{self.node} has left the group")
                if status == "joining" or self.frozen:
                    self._queued.append((seq, payload))
                    return []
                return self.ordering.handle(event, now)
            case JoinRequested(contacts):
                return self._join(contacts, now)
            case LeaveRequested():
                effects = self._leave(now)
            case SnapshotTaken(token, state):
                return self._send_welcome(token, state)
            case TimerFired(key) if isinstance(key, str) and key in _TIMERS:
                effects = self._timer(key, now)
            case TimerFired():
                return self.ordering.handle(event, now)
            case ViewInstalled(view):
                if self.view is not None:
                    return []
                self.view = view  # the first view, from the stack
                timer = SetTimer(STABLE, now + self.config.stable_period_us)
                return [*self.ordering.handle(event, now), timer]
            case Suspected(node):
                self._suspects.add(node)
                effects = self._on_suspect(node) + self._retry_deferred()
            case Restored(node):
                self._suspects.discard(node)
                effects = self._on_restored()
            case Excluded(by, view_id):
                effects = self._on_excluded(by, view_id)
            case _:
                return self.ordering.handle(event, now)
        return effects

    # -- membership messages -------------------------------------------------------------
    def _membership(self, sender: NodeId, header: Any) -> list[Effect]:
        if self.status == "joining":
            return self._while_joining(sender, header)
        if self.status == "departing":
            final = self._final_view
            if isinstance(header, MFarewell) and final and header.view_id >= final.view_id:
                self._awaiting_farewell.discard(sender)
                return self._depart() if not self._awaiting_farewell else []
            return []
        view = self.view
        assert view is not None
        members = view.members
        match header:
            case MJoin():
                return self._on_join_ask(sender)
            case MJoinFwd(joiner):
                if sender not in members:
                    raise RemoteProtocolError(
                        f"{sender}, not a member of {view}, forwarded {joiner}'s join")
                return self._on_join_ask(joiner)
            case MLeave():
                return self._on_leave_ask(sender) if sender in members else []
            case MStable(view_id, delivered, up):
                if view_id != view.view_id or sender not in members:
                    return []  # about another view: the next report comes
                return self._on_stable(sender, delivered, up)
            case MNotYet(target, attempt):
                return self._note_fresh(sender, target, attempt)
            case MFarewell(view_id):
                if sender not in members or view_id <= view.view_id:
                    return []
                return self._removed(sender, view_id)
            case MWelcome(members=listed):
                if self.node not in listed:
                    raise RemoteProtocolError(f"{sender} welcomed {self.node} into a view "
                                              f"without it: {listed}")
                return []  # a welcome sent twice: we are in already
            case MPrepare(target, attempt, proposed):
                if sender not in members:
                    if target > view.view_id + 1:
                        # Led by a member of a view we have not installed yet (a joiner it
                        # admitted): answer once that view is ours.
                        self._early.append(Received(sender, header, EMPTY))
                        return []
                    raise RemoteProtocolError(
                        f"flush for view {target} from {sender}, not a member of {view}")
                lower = view.members[:view.members.index(sender)]
                if any(m not in self._suspects for m in lower):
                    # Someone I still trust precedes it: it may be cut off from them (a
                    # minority's coordinator). Answer once I suspect them too.
                    kept = self._deferred.get(sender)
                    if kept is None or (target, attempt) > (kept.header.target,
                                                            kept.header.attempt):
                        self._deferred[sender] = Received(sender, header, EMPTY)
                    return []
                if (sender, target, attempt) in self._aborted:
                    return []
                return self._on_prepare(sender, target, attempt, tuple(proposed))
            case MAbort(target, attempt):
                if (sender, (target, attempt)) != (self._answered_to, self._answered):
                    self._aborted.add((sender, target, attempt))  # its prepare is late
                    return []
                return self._unfreeze()
            case MState():
                return self._on_state(sender, header)
            case MBusy(target, attempt):
                return self._on_busy(target, attempt)
            case MInstall(view_id):
                if view_id <= view.view_id and sender not in members:
                    raise RemoteProtocolError(
                        f"install of old view {view_id} from {sender}, not in {view}")
                return self._on_install(header)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    # -- the flush, as a member ----------------------------------------------------------
    def _prior_for(self, coordinator: NodeId) -> int:
        return self._answered[0] if self._answered_to != coordinator else 0

    def _state(self, target: int, attempt: int, prior: int = 0) -> MState:
        view = self.view
        assert view is not None
        self.frozen = True
        self._answered = (target, attempt)
        self._answered_for.setdefault(target, set()).add(attempt)
        return MState(target, attempt, view.view_id, self.ordering.report(), prior)

    def _on_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.view
        assert view is not None
        if self.node not in members:
            return []
        if target <= view.view_id:
            # Its coordinator's install of our view never reached it: hand it over.
            last = self._last_install
            return [Send(sender, last)] if last is not None else []
        if (target, attempt) <= self._answered:
            if sender == self._answered_to:
                return []
            return [Send(sender, MBusy(*self._answered))]
        prior = self._prior_for(sender)
        self._answered_to = sender
        return [Send(sender, self._state(target, attempt, prior))]

    def _on_install(self, install: MInstall) -> list[Effect]:
        view = self.view
        assert view is not None
        if install.view_id <= view.view_id:
            return []
        if install.attempt not in self._answered_for.get(install.view_id, ()):
            return []  # a flush this member left for a newer one
        still_frozen = self._answered[0] > install.view_id
        self._answered_for = {t: a for t, a in self._answered_for.items()
                              if t > install.view_id}
        effects = self.ordering.conclude(install.outcome)  # the old view's, in the old view
        new = View(install.view_id, tuple(install.members))
        self._last_install = install
        if self.node not in new.members:
            return effects + self._left_out(new)
        effects.append(InstallView(new))
        self.views_installed += 1
        self.frozen = still_frozen
        self._suspects -= set(new.members) - set(view.members)  # fresh peers
        effects += [Send(m, MFarewell(new.view_id)) for m in view.members
                    if m not in new.members]
        joiners, self._welcome_next = self._welcome_next, ()
        if joiners:
            effects.append(self._take_snapshot(joiners, new))
        effects += self._adopt(new)
        if still_frozen and self._answered_to not in new.members:
            # The flush we answered since is led by a node this view left out: it cannot
            # install a view after this one (it needs our state for this one). Drop it.
            self._answered = (new.view_id, 0)
            self._answered_for = {}
            still_frozen = self.frozen = False
        if still_frozen:
            if self._answered_to != self.node:  # what we told it came from an older view
                effects.append(Send(self._answered_to, self._state(*self._answered)))
            return effects
        effects += self._resume()
        if self._suspects & set(new.members):
            effects += self._maybe_coordinate(new.view_id + 1)
        elif self._join_requests or self._leave_requests:
            effects += self._change_view()
        return effects

    def _adopt(self, view: View) -> list[Effect]:
        self.view = view
        self._flush = None
        self._stable_reports = {}
        self._stable_said = None
        self._stable = {}
        self._aborted = {a for a in self._aborted if a[1] > view.view_id}
        self._deferred = {n: e for n, e in self._deferred.items()
                          if n in view.members and e.header.target > view.view_id}
        effects = self.ordering.handle(ViewInstalled(view), self._now)
        early, self._early = self._early, []
        for event in early:
            if event.sender in view.members:
                effects += self.handle(event, self._now)
        return effects

    def _resume(self) -> list[Effect]:
        """Unfrozen in a new view: what was buffered from its members, then our queue."""
        view = self.view
        assert view is not None
        effects: list[Effect] = []
        buffered, self._buffered = self._buffered, []
        for event in buffered:
            if event.sender in view.members:
                effects += self.ordering.handle(event, self._now)
        queued, self._queued = self._queued, []
        for seq, payload in queued:
            effects += self.ordering.handle(BroadcastRequested(seq, payload), self._now)
        return effects

    # -- the flush, as coordinator -------------------------------------------------------
    def _on_suspect(self, node: NodeId) -> list[Effect]:
        view = self.view
        if self.status == "departing":
            self._awaiting_farewell.discard(node)
            return self._depart() if not self._awaiting_farewell else []
        if self.status == "joining" or view is None or node not in view.members:
            return []
        if self.frozen and node == self._answered_to != self.node:
            # The coordinator we answered is gone; its install may have reached others
            # only. Tell the next coordinator where we are: one that has installed the
            # view hands us its install (`_on_state`).
            alive = [m for m in view.members if m not in self._suspects]
            if alive and alive[0] != self.node:
                state = MState(*self._answered, view.view_id, self.ordering.report())
                return [Send(alive[0], state), *self._maybe_coordinate(view.view_id + 1)]
        flush = self._flush
        if flush is not None and node not in flush.members:
            return []  # already leaving it out
        return self._maybe_coordinate(view.view_id + 1)

    def _retry_deferred(self) -> list[Effect]:
        deferred, self._deferred = self._deferred, {}
        effects: list[Effect] = []
        for event in deferred.values():
            if self.status in ("member", "leaving"):
                effects += self.handle(event, self._now)
        return effects

    def _abandon(self) -> list[Effect]:
        """Give our flush up: the members it froze resume their view."""
        flush, self._flush = self._flush, None
        if flush is None:
            return []
        others = tuple(m for m in flush.members if m != self.node)
        effects: list[Effect] = [Multicast(others, MAbort(flush.target, flush.attempt))] \
            if others else []
        if (self._answered_to, self._answered) == (self.node, (flush.target, flush.attempt)):
            effects += self._unfreeze()
        return effects

    def _unfreeze(self) -> list[Effect]:
        """The flush we answered will install nothing: back to the view we are in."""
        if not self.frozen or self.status not in ("member", "leaving"):
            return []
        self.frozen = False
        self._answered_for.pop(self._answered[0], None)
        return self._resume()

    def _on_restored(self) -> list[Effect]:
        """A wrong suspicion. A member that precedes us is back: it coordinates, not us.
        A flush given up for want of a majority, or waiting for a member suspected
        meanwhile, may go on now."""
        view = self.view
        if view is None or self.status not in ("member", "leaving"):
            return []
        alive = [m for m in view.members if m not in self._suspects]
        if alive and alive[0] != self.node:
            return self._abandon()
        flush = self._flush
        if flush is not None and not self._suspects & set(flush.members):
            return []
        if flush is None and not self._suspects & set(view.members) and not self.frozen:
            return []
        return self._maybe_coordinate(view.view_id + 1)

    def _change_view(self) -> list[Effect]:
        """Start a flush for the requests, unless one runs (it takes them along)."""
        view = self.view
        if view is None or self._flush is not None or self.frozen:
            return []
        return self._maybe_coordinate(view.view_id + 1)

    def _maybe_coordinate(self, target: int) -> list[Effect]:
        view = self.view
        assert view is not None
        alive = [m for m in view.members if m not in self._suspects]
        if not alive or alive[0] != self.node:
            # Someone lower coordinates (or I will, once I suspect them).
            return self._abandon()
        if len(alive) < view.majority:
            # Primary partition: a minority never installs a view.
            return self._abandon()
        self._attempts = max(self._attempts, self._answered[1]) + 1
        target = max(target, self._flush.target if self._flush else 0)
        flush = _Flush(target, self._attempts, tuple(alive))
        self._flush = flush
        self.flushes_coordinated += 1
        others = tuple(m for m in flush.members if m != self.node)
        prepare = MPrepare(flush.target, flush.attempt, list(flush.members))
        effects: list[Effect] = [Multicast(others, prepare)] if others else []
        prior = self._prior_for(self.node)
        self._answered_to = self.node
        return effects + self._on_state(self.node, self._state(target, flush.attempt, prior))

    def _on_busy(self, target: int, attempt: int) -> list[Effect]:
        flush = self._flush
        if flush is None or (target, attempt) < (flush.target, flush.attempt):
            return []
        self._attempts = max(self._attempts, attempt)
        return self._maybe_coordinate(max(flush.target, target))

    def _on_state(self, sender: NodeId, state: MState) -> list[Effect]:
        flush = self._flush
        view = self.view
        assert view is not None
        if flush is None or (state.target, state.attempt) != (flush.target, flush.attempt):
            last = self._last_install
            if last is not None and state.view_id < view.view_id and sender in view.members:
                return [Send(sender, last)]  # it missed the install that made our view
            return []
        if state.view_id >= flush.target:  # someone is ahead of us: aim past it
            return self._maybe_coordinate(state.view_id + 1)
        if state.prior >= flush.target:
            # It answered another coordinator for this view first, which may have
            # installed it: one view id names one membership, so take the next.
            return self._maybe_coordinate(state.prior + 1)
        if state.view_id < view.view_id:
            # It answered before our view's install reached it: hand that over; it
            # installs it and answers again.
            last = self._last_install
            return [Send(sender, last)] if last is not None else []
        flush.states[sender] = state
        return self._conclude(flush) if flush.complete() else []

    def _note_fresh(self, sender: NodeId, target: int, attempt: int) -> list[Effect]:
        flush = self._flush
        if flush is None or (target, attempt) != (flush.target, flush.attempt):
            return []
        if sender not in flush.members or sender == self.node:
            return []
        flush.fresh.add(sender)
        return self._conclude(flush) if flush.complete() else []

    def _next_members(self, flush: _Flush) -> tuple[NodeId, ...]:
        leaving = self._leave_requests
        joining = self._join_requests - set(flush.members) - leaving
        kept = [m for m in flush.members if m not in leaving]
        if not kept:
            return flush.members  # nobody would be left: the last member stays
        return (*kept, *sorted(joining))

    def outcome(self, flush: _Flush) -> list[FlushMessage]:
        """The flush's outcome: the ordering settles every survivor's report (a hook so
        that tests can plant a forgetful one)."""
        return self.ordering.settle([flush.states[m].report for m in flush.members
                                     if m in flush.states])

    def _conclude(self, flush: _Flush) -> list[Effect]:
        outcome = self.outcome(flush)
        members = self._next_members(flush)
        install = MInstall(flush.target, flush.attempt, list(members), outcome)
        self._flush = None
        others = tuple(m for m in flush.members if m != self.node and m not in flush.fresh)
        effects: list[Effect] = [Multicast(others, install)] if others else []
        joined = (set(members) - set(flush.members)) | (flush.fresh & set(members))
        self._welcome_next = tuple(sorted(joined))
        self._join_requests -= set(members)
        self._leave_requests &= set(members)
        return effects + self._on_install(install)

    # -- stability: the log's garbage ----------------------------------------------------
    def _report_stable(self, now: int) -> list[Effect]:
        """Every period: what we delivered, to the acting leader, when it changed."""
        again = SetTimer(STABLE, now + self.config.stable_period_us)
        view = self.view
        if self.status not in ("member", "leaving") or self.frozen or view is None:
            return [again]
        point = self.ordering.stable_point()
        if point == self._stable_said:
            return [again]
        self._stable_said = point
        leader = self._acting_leader(view)
        if leader == self.node:
            return [*self._on_stable(self.node, point, True), again]
        return [Send(leader, MStable(view.view_id, point, True), control=True), again]

    def _on_stable(self, sender: NodeId, delivered: dict[NodeId, int], up: bool) -> list[Effect]:
        view = self.view
        assert view is not None
        if not up:
            if sender == self._acting_leader(view) and not self.frozen:
                self.ordering.forget(delivered)
            return []
        if self._acting_leader(view) != self.node:
            return []
        self._stable_reports[sender] = dict(delivered)
        reports = [self._stable_reports.get(m) for m in view.members]
        if any(r is None for r in reports):
            return []
        origins = {o for r in reports if r is not None for o in r}
        stable = {o: min(r.get(o, 0) for r in reports if r is not None) for o in origins}
        stable = {o: k for o, k in stable.items() if k}
        if stable == self._stable:
            return []
        self._stable = stable
        if not self.frozen:
            self.ordering.forget(stable)
        down = MStable(view.view_id, stable, False)
        return [Send(m, down, control=True) for m in view.members if m != self.node]

    # -- joining -------------------------------------------------------------------------
    def _join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        view = self.view
        if view is None or view.members != (self.node,) or self.status != "member":
            raise LocalProtocolError(f"{self.node} cannot join now: it is in {view}")
        candidates = tuple(c for c in contacts if c != self.node)
        if not candidates:
            raise LocalProtocolError("join needs at least one contact other than this node")
        self.status = "joining"
        self._contacts = candidates
        self._contact_index = 0
        return [Send(candidates[0], MJoin()), SetTimer(JOIN_RETRY, now + self.config.join_retry_us)]

    def _while_joining(self, sender: NodeId, header: Any) -> list[Effect]:
        match header:
            case MWelcome():
                return self._on_welcome(sender, header)
            case MPrepare(target, attempt, members) if self.node in members:
                self._fresh_for = max(self._fresh_for, target)
                return [Send(sender, MNotYet(target, attempt))]
            case MFarewell(view_id):
                self._left_out_of = max(self._left_out_of, view_id)
                return []
            case _:
                return []  # flush traffic of views before ours

    def _on_welcome(self, sender: NodeId, welcome: MWelcome) -> list[Effect]:
        view = View(welcome.view_id, tuple(welcome.members))
        if self.node not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.node} into {view}")
        if view.view_id < self._fresh_for or view.view_id <= self._left_out_of:
            # A later flush welcomes us (we told it we have no state), or the group
            # removed us after this welcome was sent: the current welcome comes.
            return []
        self.status = "member"
        self.frozen = False
        self._flush = None
        self._answered = (welcome.view_id, welcome.attempt)
        self._answered_for = {}
        self._attempts = max(self._attempts, welcome.attempt)
        self._join_requests.clear()
        self._leave_requests.clear()
        self._suspects -= set(view.members)
        self.ordering.start_from(welcome.cut)
        self.views_installed += 1
        effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                                 InstallView(view),
                                 SetTimer(STABLE, self._now + self.config.stable_period_us)]
        if sender not in view.members:  # a coordinator that left in that flush waits for us
            effects.append(Send(sender, MFarewell(view.view_id)))
        effects += self._adopt(view)
        effects += self._resume()
        if self._leave_after_join:
            effects += self._leave(self._now)
        return effects

    def _take_snapshot(self, joiners: tuple[NodeId, ...], view: View) -> Effect:
        self._tokens += 1
        self._drafts[self._tokens] = _WelcomeDraft(joiners, view, self._answered[1],
                                                   self.ordering.join_cut())
        return TakeSnapshot(self._tokens)

    def _send_welcome(self, token: int, state: bytes) -> list[Effect]:
        draft = self._drafts.pop(token, None)
        if draft is None:
            raise LocalProtocolError(f"{self.node} took no snapshot with token {token}")
        welcome = MWelcome(draft.view.view_id, draft.attempt, list(draft.view.members),
                           draft.cut, state)
        self.welcomes_sent += len(draft.joiners)
        return [Send(j, welcome) for j in draft.joiners]

    def _on_join_ask(self, joiner: NodeId) -> list[Effect]:
        view = self.view
        assert view is not None
        if joiner == self.node:
            return []
        leader = self._acting_leader(view)
        if leader != self.node:
            return [Send(leader, MJoinFwd(joiner))]
        if joiner in view.members:
            return []  # an old ask, overtaken by its welcome
        self._join_requests.add(joiner)
        self._leave_requests.discard(joiner)
        return self._change_view()

    def _acting_leader(self, view: View) -> NodeId:
        """The member that would coordinate the next flush: the lowest not suspected."""
        return next((m for m in view.members if m not in self._suspects), view.leader)

    # -- leaving -------------------------------------------------------------------------
    def _leave(self, now: int) -> list[Effect]:
        if self.status == "joining":
            self._leave_after_join = True  # the group may count on us already: join first
            return []
        view = self.view
        if self.status != "member" or view is None:
            return []
        if view.members == (self.node,):
            self.status = "stopped"  # the last member: the group ends with it
            return [InstallView(View(view.view_id + 1, ()))]
        self.status = "leaving"
        return [*self._ask_to_leave(), SetTimer(LEAVE_RETRY, now + self.config.leave_retry_us)]

    def _ask_to_leave(self) -> list[Effect]:
        view = self.view
        assert view is not None
        leader = self._acting_leader(view)
        if leader == self.node:
            return self._on_leave_ask(self.node)
        return [Send(leader, MLeave())]

    def _on_leave_ask(self, leaver: NodeId) -> list[Effect]:
        view = self.view
        assert view is not None
        if self._acting_leader(view) != self.node:
            return []
        self._leave_requests.add(leaver)
        return self._change_view()

    def _left_out(self, new: View) -> list[Effect]:
        if self.status != "leaving":
            return self._cut(new)
        self.status = "departing"
        self.frozen = True  # the old view is over here
        self._final_view = new
        self._awaiting_farewell = set(new.members) - self._suspects
        joiners, self._welcome_next = self._welcome_next, ()
        effects: list[Effect] = [self._take_snapshot(joiners, new)] if joiners else []
        if not self._awaiting_farewell:
            return effects + self._depart()
        return [*effects, CancelTimer(LEAVE_RETRY),
                SetTimer(FAREWELL_WAIT, self._now + self.config.farewell_wait_us)]

    def _depart(self) -> list[Effect]:
        final = self._final_view
        assert final is not None
        self.status = "stopped"
        return [*(CancelTimer(k) for k in sorted(_TIMERS)), InstallView(final)]

    # -- removed -------------------------------------------------------------------------
    def _on_excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        view = self.view
        if self.status == "joining":
            self._left_out_of = max(self._left_out_of, view_id)
            return []
        final = self._final_view
        if self.status == "departing" and final is not None and view_id >= final.view_id:
            self._awaiting_farewell.discard(by)  # it has our last view: as good as a farewell
            return self._depart() if not self._awaiting_farewell else []
        if view is None or by not in view.members or view_id <= view.view_id:
            return []
        return self._removed(by, view_id)

    def _removed(self, by: NodeId, view_id: int) -> list[Effect]:
        """`by` installed view `view_id`, which leaves this node out."""
        view = self.view
        assert view is not None
        final = View(view_id, view.others(self.node))
        if self.status == "leaving":
            waiting = self._final_view is not None
            self._final_view = final
            mine = self._flush is not None and self._flush.target == view_id
            if view_id in self._answered_for and not mine:
                # We gave our state to the flush that installed it: its install (our last
                # deliveries) is on its way. Wait for it, once.
                if waiting:
                    return []
                return [SetTimer(FAREWELL_WAIT, self._now + self.config.farewell_wait_us)]
        return self._cut(final)

    def _cut(self, final: View) -> list[Effect]:
        """The group went on without us before our leave was taken: removed."""
        self.cut_off = True
        self.status = "stopped"
        return [*(CancelTimer(k) for k in sorted(_TIMERS)), InstallView(final)]

    # -- timers --------------------------------------------------------------------------
    def _timer(self, key: Hashable, now: int) -> list[Effect]:
        if key == JOIN_RETRY and self.status == "joining":
            self._contact_index = (self._contact_index + 1) % len(self._contacts)
            contact = self._contacts[self._contact_index]
            return [Send(contact, MJoin()), SetTimer(JOIN_RETRY, now + self.config.join_retry_us)]
        if key == LEAVE_RETRY and self.status == "leaving":
            retry = SetTimer(LEAVE_RETRY, now + self.config.leave_retry_us)
            return [*self._ask_to_leave(), retry]
        if key == STABLE:
            return self._report_stable(now)
        if key == FAREWELL_WAIT:
            if self.status == "departing":
                return self._depart()
            if self.status == "leaving" and self._final_view is not None:
                return self._cut(self._final_view)
        return []

