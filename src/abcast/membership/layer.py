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

Where it lives: this module is the layer — events in, the member's side of the flush,
stability, timers; the coordinator's side of the flush is abcast.membership.
flush_coordinator, joining, leaving and removal abcast.membership.join_leave, and the
fields all three share abcast.membership.state.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from abcast.codec import EMPTY
from abcast.effects import (
    Effect,
    InstallView,
    Send,
    SetTimer,
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
from abcast.membership.flush_coordinator import FlushCoordinator
from abcast.membership.join_leave import JoinLeave
from abcast.membership.state import (
    FAREWELL_WAIT,
    JOIN_RETRY,
    LEAVE_RETRY,
    STABLE,
    TIMERS,
    CoordinatedFlush,
)
from abcast.membership.wire import (
    MEMBERSHIP_HEADERS,
    FlushMessage,
    MAbort,
    MBusy,
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


class Membership(FlushCoordinator, JoinLeave):
    """Views for the ordering it wraps (one stack slot: its headers and the ordering's)."""

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

    def backpressured(self) -> bool:
        """The ordering's flow control (abcast.ordering._credit): its own broadcasts not
        yet delivered everywhere are at its bound."""
        return self.ordering.backpressured()

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
            case TimerFired(key) if isinstance(key, str) and key in TIMERS:
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
    def _retry_deferred(self) -> list[Effect]:
        deferred, self._deferred = self._deferred, {}
        effects: list[Effect] = []
        for event in deferred.values():
            if self.status in ("member", "leaving"):
                effects += self.handle(event, self._now)
        return effects

    def _unfreeze(self) -> list[Effect]:
        """The flush we answered will install nothing: back to the view we are in."""
        if not self.frozen or self.status not in ("member", "leaving"):
            return []
        self.frozen = False
        self._answered_for.pop(self._answered[0], None)
        return self._resume()

    def outcome(self, flush: CoordinatedFlush) -> list[FlushMessage]:
        """The flush's outcome: the ordering settles every survivor's report (a hook so
        that tests can plant a forgetful one)."""
        return self.ordering.settle([flush.states[m].report for m in flush.members
                                     if m in flush.states])

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

    def _acting_leader(self, view: View) -> NodeId:
        """The member that would coordinate the next flush: the lowest not suspected."""
        return next((m for m in view.members if m not in self._suspects), view.leader)

    # -- leaving -------------------------------------------------------------------------
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

