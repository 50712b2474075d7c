"""The membership layer: views for an ordering — join with state transfer, graceful leave,
removal on suspicion, and the flush that makes every view change virtually synchronous.

Phases (`status`, and `frozen` while a flush runs; `phase` says "flushing", or
"merging" while an evs merge holds the member):

    status     event                                  next        what it does
    member     JoinRequested (alone in its view)      joining     MJoin to a contact
    joining    MWelcome into a current view           member      InstallState, InstallView
    joining    MPrepare naming it                     joining     MNotYet (welcome me later)
    joining    JoinAbandoned (its join timed out)     stopped     MWithdraw to every contact
    member*    MWithdraw from a joiner it admitted    member*     suspect it (agreeing)
    member     LeaveRequested                         leaving     MLeave to the leader
    member*    MPrepare (or coordinating)             (frozen)    report; buffer, queue
    member*    MInstall of an attempt it answered     member*     outcome in the old view,
                                                                  InstallView, unfreeze
    leaving    MInstall leaving it out                departing   wait for farewells
    departing  every farewell, suspicion or timeout   stopped     InstallView without it
    member*    MFarewell / Excluded from a later view stopped     removed (cut off)
    member     the same, under evs                    member      suspect it: our side's flush
    leaving    MFarewell of a flush it did not answer leaving     the same (no install comes;
               (evs)                                              it leaves from its side)
    member     MWelcome into another view (evs)       member      MRefuse: that side's flush
    member*    MMergePrepare (evs, sides meet)        (merging)   MMergeState to its coordinator
    member*    MMergeInstall of the merge answered    member*     side's outcome in the old
                                                                  view, InstallView, merged
                                                                  InstallState, unfreeze
    member*    MMergeAbort, or its coordinator gone   member*     its side's outcome if fixed
                                                                  (kept in the view), unfreeze

    (member* = member or leaving)

Rules. A view change is a flush run by its coordinator — the lowest member of the view
it does not suspect — with attempts, busy answers, crossing installs, and a partition
policy: "primary" (only a coordinator that hears a majority of its view goes on) or
"evs" (every side goes on, and sides merge when they meet: abcast.membership.merge):

1. `MPrepare(target, attempt, members)` to the proposed members (the view less the
   suspects). Each *freezes* — the ordering is fed nothing more: its packets are
   buffered, its broadcasts queued — and answers `MState` with the ordering's report
   (abcast.membership.api): what it delivered and holds of the view. It resumes that
   view only once every flush it answered is given up (`MAbort`; one whose
   coordinator it suspected may have installed a view with its report, `pledged`,
   under evs too); a coordinator sends the abort of every attempt it drops.
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

Where it lives: this module is the layer — events in, the install and what it settles,
timers. It owns its state (abcast.membership.state.MembershipState) and parts that take
that state explicitly: the member's side of the flush — prepares answered or held back,
pledges and aborts (abcast.membership.flush_member), the coordinator's side
(abcast.membership.flush_coordinator), joining, leaving and removal
(abcast.membership.join_leave), stable reports and the missed-install call
(abcast.membership.stability) and the evs merge (abcast.membership.merge); they call
back only the member's steps (`MemberSteps`), never each other.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable
from typing import Any

from abcast.codec import EMPTY
from abcast.effects import (
    Effect,
    InstallView,
    Multicast,
    Send,
    SetTimer,
)
from abcast.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    JoinAbandoned,
    JoinRequested,
    LeaveRequested,
    Received,
    Restored,
    SnapshotTaken,
    StatesMerged,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.membership.api import MergingOrdering, ViewOrdering
from abcast.membership.flush_coordinator import FlushCoordinator
from abcast.membership.flush_member import FlushMember
from abcast.membership.join_leave import JoinLeave
from abcast.membership.merge import Merger
from abcast.membership.stability import Stability
from abcast.membership.state import (
    FAREWELL_WAIT,
    JOIN_RETRY,
    LEAVE_RETRY,
    MERGE_PROBE,
    MERGE_TIMEOUT,
    MERGE_WAIT,
    STABLE,
    TIMERS,
    CoordinatedFlush,
    MembershipConfig,
    MembershipState,
)
from abcast.membership.wire import (
    MEMBERSHIP_HEADERS,
    MEMBERSHIP_TYPES,
    MERGE_HEADERS,
    FlushMessage,
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
    MRefuse,
    MStable,
    MState,
    MWelcome,
    MWithdraw,
)
from abcast.snapshot import LayerSnapshot

_log = logging.getLogger(__name__)


class Membership(Layer):
    """Views for the ordering it wraps (one stack slot: its headers and the ordering's).
    It owns the state `s` and its parts, which take that state explicitly: the member's
    flush (`answers`), the coordinator's (`coordinator`), join, leave and removal
    (`joins`), the evs merge (`merger`) and stability (`stability`)."""

    # (`name` and `header_type` are the ordering's, so per instance here)
    __slots__ = (
        "answers", "config", "coordinator", "header_type", "joins", "merger", "name", "ordering",
        "s", "stability",
    )

    def __init__(
        self, node: NodeId, ordering: ViewOrdering, config: MembershipConfig | None = None
    ) -> None:
        super().__init__(node)
        self.ordering = ordering
        self.name = ordering.name  # type: ignore[misc]  # the slot keeps the ordering's name
        self.header_type = ordering.header_type | MembershipHeader  # type: ignore[misc]
        self.config = config or MembershipConfig()
        self.s = MembershipState(node, ordering, self.config)
        self.answers = FlushMember(self.s, self)
        self.coordinator = FlushCoordinator(self.s, self)
        self.joins = JoinLeave(self.s, self)
        self.merger = Merger(self.s, self)
        self.stability = Stability(self.s, self)
        built_for_evs = ordering.evs if isinstance(ordering, MergingOrdering) else None
        if self.config.evs and built_for_evs is None:
            raise ConfigError(f"ordering {ordering.name!r} cannot run partitions='evs'")
        if built_for_evs is not None and built_for_evs != self.config.evs:
            raise ConfigError(
                f"ordering {ordering.name!r} built with evs={built_for_evs} under a membership "
                f"layer with partitions={self.config.partitions!r}: give both the same")

    # -- what drivers and tests read -----------------------------------------------------
    @property
    def view(self) -> View | None:
        return self.s.view

    @property
    def status(self) -> str:
        return self.s.status

    @property
    def frozen(self) -> bool:
        return self.s.frozen

    @property
    def cut_off(self) -> bool:
        return self.s.cut_off

    @property
    def views_installed(self) -> int:
        return self.s.views_installed

    @property
    def flushes_coordinated(self) -> int:
        return self.s.flushes_coordinated

    @property
    def welcomes_sent(self) -> int:
        return self.s.welcomes_sent

    # -- the parts' steps the member forwards (MemberSteps) -------------------------------
    def change_view(self) -> list[Effect]:
        return self.coordinator.change_view()

    def depart(self) -> list[Effect]:
        return self.joins.depart()

    def prior_for(self, coordinator: NodeId) -> int:
        return self.answers.prior_for(coordinator)

    def state_for(self, target: int, attempt: int, prior: int = 0) -> MState:
        return self.answers.state_for(target, attempt, prior)

    def release(self, coordinator: NodeId, target: int, attempt: int) -> None:
        self.answers.release(coordinator, target, attempt)

    def unfreeze(self) -> list[Effect]:
        return self.answers.unfreeze()

    def replay(self, event: Received) -> list[Effect]:
        """A kept membership packet handled now (see `_replayed`: a peer's mistake in it
        is logged and dropped, not raised over the effects made before it)."""
        try:
            return self.handle(event, self.s.now)
        except RemoteProtocolError as exc:
            _log.warning("%s dropped a kept packet from %s: %s", self.node, event.sender, exc)
            return []

    @property
    def merges(self) -> int:
        return self.s.merges

    # -- introspection -------------------------------------------------------------------
    @property
    def phase(self) -> str:
        """The status, and "merging" while an evs merge holds us (answered or
        coordinating), else "flushing" while frozen for a flush: metrics time flushes by
        this name (abcast.runtime.metrics), and a merge is not one."""
        if self.s.merging is not None or self.s.merge is not None:
            return f"{self.s.status}, merging"
        return f"{self.s.status}, flushing" if self.s.frozen else self.s.status

    def kept_peers(self) -> frozenset[NodeId]:
        """evs: the nodes outside our view discovery may yet probe, for ever
        (abcast.membership.discovery; `Stack.peers`: a runtime keeps their addresses)."""
        return self.merger.discovery.kept_peers()

    def inspect(self) -> LayerSnapshot:
        view = self.s.view
        flush: dict[str, Any] = {}
        if self.s.flush is not None:
            f = self.s.flush
            flush = {"target": f.target, "attempt": f.attempt, "members": list(f.members),
                     "reported": sorted(f.states), "fresh": sorted(f.fresh)}
        clock: dict[str, Any] = {
            "view_id": view.view_id if view is not None else 0,
            "members": list(view.members) if view is not None else [],
            "suspects": sorted(self.s.suspects),
            "pending_joins": sorted(self.s.join_requests),
            "pending_leaves": sorted(self.s.leave_requests),
            "answered": list(self.s.answered),
            "flush": flush,
        }
        if self.config.evs:
            clock["merge"] = self.merger.inspect()
        return LayerSnapshot(
            layer="membership", phase=self.phase, clock=clock,
            counters={"views_installed": self.s.views_installed,
                      "flushes_coordinated": self.s.flushes_coordinated,
                      "welcomes_sent": self.s.welcomes_sent,
                      "joins_deferred": self.s.joins_deferred,
                      "withdrawals_refused": self.s.withdrawals_refused, "merges": self.s.merges,
                      "merges_coordinated": self.s.merges_coordinated,
                      "merges_given_up": self.s.merges_given_up,
                      "merge_installs_late": self.s.merge_installs_late,
                      "buffered": len(self.s.buffered), "queued": len(self.s.queued)})

    def backpressured(self) -> bool:
        """The ordering's own flow control (the sequencer's `max_unstable`, causal's, skeen's
        and matrix's abcast.ordering._credit): the stack asks this layer, which holds the
        ordering, on every non-waiting broadcast."""
        return self.ordering.backpressured()

    def snapshots(self) -> list[LayerSnapshot]:
        """This layer's snapshot and the ordering's, bottom first."""
        return [self.inspect(), self.ordering.inspect()]

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self.s.now = now
        status = self.s.status
        if status == "stopped":
            return []
        # The steady path, by exact type: the ordering's packets from members and our
        # own broadcasts go straight down (no per-message work of this layer's own).
        if not self.s.frozen and status in ("member", "leaving"):
            if type(event) is Received:
                if type(event.header) not in MEMBERSHIP_TYPES:
                    view = self.s.view
                    if view is not None and event.sender in view.members:
                        return self.ordering.handle(event, now)
                    return []  # from a node this view left out (or not yet admitted)
            elif type(event) is BroadcastRequested:
                return self.ordering.handle(event, now)
        match event:
            case Received(sender, header, _) if isinstance(header, MEMBERSHIP_HEADERS):
                effects = self._membership(sender, header)
            case Received():
                if status == "joining" or self.s.frozen:
                    self.s.buffered.append(event)
                return []
            case BroadcastRequested(seq, payload):
                if status in ("departing", "stopped"):
                    raise LocalProtocolError(f"{self.node} has left the group")
                if status == "joining" or self.s.frozen:
                    self.s.queued.append((seq, payload))
                    return []
                return self.ordering.handle(event, now)
            case JoinRequested(contacts):
                return self.joins.join(contacts, now)
            case LeaveRequested():
                effects = self.joins.leave(now)
            case JoinAbandoned():  # a member (welcomed meanwhile) leaves instead
                effects = self.joins.abandon(now)
            case SnapshotTaken(token, state) if token in self.s.side_tokens:
                effects = self.merger.side_snapshot(token, state)
            case SnapshotTaken(token, state):
                return self.joins.send_welcome(token, state)
            case StatesMerged(token, state):
                effects = self.merger.states_merged(token, state)
            case TimerFired(key) if isinstance(key, str) and key in TIMERS:
                effects = self._timer(key, now)
            case TimerFired():
                if self.s.frozen:
                    self.s.timers.append(event)  # the ordering is fed nothing while frozen
                    return []
                return self.ordering.handle(event, now)
            case ViewInstalled(view):
                if self.s.view is not None:
                    return []
                self.s.view = view  # the first view, from the stack
                timer = SetTimer(STABLE, now + self.config.stable_period_us)
                return [*self.ordering.handle(event, now), timer]
            case Suspected(node):
                self.s.suspects.add(node)  # before a thaw replays prepares that name it
                effects = self.merger.on_suspect(node)
                effects += self.coordinator.on_suspect(node) + self.answers.retry_deferred()
            case Restored(node):
                effects = self.coordinator.on_restored(node)
            case Excluded(by, view_id) if self._partitioned(by, view_id):
                effects = self.go_on_without(by, view_id)
            case Excluded(by, view_id):
                effects = self.joins.on_excluded(by, view_id)
            case _:
                return self.ordering.handle(event, now)
        return effects

    # -- evs: partitions go on, and merge ---------------------------------------------------
    def _partitioned(self, by: NodeId, view_id: int) -> bool:
        """Under evs, a member another side left out goes on without that side."""
        view = self.s.view
        return (self.config.evs and self.s.status == "member" and view is not None
                and by in view.members and view_id > view.view_id)

    def _left_as_a_side(self, view_id: int, attempt: int) -> bool:
        """Under evs, a leaver that a flush it did not answer left out goes on with its
        side as a member does: no install of that flush is on its way to it (the flush
        it answered, left for that one, lets it go nowhere), and its side still counts on
        it — it may be the lowest member they trust, their coordinator."""
        return (self.config.evs and self.s.status == "leaving"
                and attempt not in self.s.answered_for.get(view_id, ()))

    def go_on_without(self, by: NodeId, in_view: int = 0) -> list[Effect]:
        """Suspect `by` as on `Suspected` (what we held back for it is answered)."""
        self.s.suspects.add(by)
        effects = self.merger.on_suspect(by, in_view) + self.coordinator.on_suspect(by)
        return effects + self.answers.retry_deferred()

    # -- membership messages -------------------------------------------------------------
    def _membership(self, sender: NodeId, header: Any) -> list[Effect]:
        if isinstance(header, MERGE_HEADERS):
            if not self.config.evs:
                raise RemoteProtocolError(f"{sender} sent a merge message {type(header).__name__}"
                                          " to a primary-partition group")
            if self.s.status not in ("member", "leaving"):
                return []
            return self.merger.on_message(sender, header)
        if self.s.status == "joining":
            return self.joins.while_joining(sender, header)
        if self.s.status == "departing":
            final = self.s.final_view
            if isinstance(header, MFarewell) and final and header.view_id >= final.view_id:
                self.s.awaiting_farewell.discard(sender)
                return self.joins.depart() if not self.s.awaiting_farewell else []
            return []
        view = self.s.view
        assert view is not None
        members = view.members
        match header:
            case MJoin(ask):
                return self.joins.on_join_ask(sender, ask)
            case MJoinFwd(joiner, ask):
                if sender not in members:
                    raise RemoteProtocolError(
                        f"{sender}, not a member of {view}, forwarded {joiner}'s join")
                return self.joins.on_join_ask(joiner, ask)
            case MLeave():
                return self.joins.on_leave_ask(sender) if sender in members else []
            case MWithdraw(ask):  # a joiner gave up (our view may hold it)
                return self.joins.on_withdraw(sender, ask)
            case MStable(view_id, delivered, up):
                if view_id != view.view_id or sender not in members:
                    return []  # about another view: the next report comes
                return self.stability.on_stable(sender, delivered, up)
            case MNotYet(target, attempt):
                return self.coordinator.note_fresh(sender, target, attempt)
            case MFarewell(view_id, attempt):
                if sender not in members or view_id <= view.view_id:
                    return []
                if self._partitioned(sender, view_id) or self._left_as_a_side(view_id, attempt):
                    return self.go_on_without(sender, view_id)
                return self.joins.removed(sender, view_id)
            case MWelcome():
                return self.joins.welcome_again(sender, header)
            case MRefuse(view_id):
                return self.joins.on_refuse(sender, view_id)
            case MPrepare() if self.merger.busy:
                return self.merger.defer(Received(sender, header, EMPTY))
            case MPrepare():
                return self.answers.on_prepare(sender, header)
            case MAbort(target, attempt):
                return self.answers.on_abort(sender, target, attempt)
            case MState():
                return self.coordinator.on_state(sender, header)
            case MBusy() if self.config.evs and self._busy_elsewhere(sender):
                # It is forming another side's view: go on without it (a merge follows).
                return self.go_on_without(sender)
            case MBusy(target, attempt):
                return self.coordinator.on_busy(target, attempt)
            case MInstall(view_id):
                if view_id <= view.view_id and sender not in members:
                    raise RemoteProtocolError(
                        f"install of old view {view_id} from {sender}, not in {view}")
                return self.on_install(header)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    def _busy_elsewhere(self, sender: NodeId) -> bool:
        flush = self.s.flush
        return flush is not None and sender in flush.members and sender != self.node

    # -- the install, as a member --------------------------------------------------------
    def on_install(self, install: MInstall) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if install.view_id <= view.view_id:
            return []
        if install.attempt not in self.s.answered_for.get(install.view_id, ()):
            return []  # a flush this member left for a newer one
        # still frozen for the flush we answered since, unless it was given up
        open_ = (self.s.answered_to, *self.s.answered) in self.s.pledged
        still_frozen = self.s.answered[0] > install.view_id and open_
        self.s.answered_for = {t: a for t, a in self.s.answered_for.items()
                              if t > install.view_id}
        # a view is settled: only the flush we answered for a later one stays open
        self.s.pledged = {(self.s.answered_to, *self.s.answered)} if still_frozen else set()
        # the old view's, in the old view
        effects = (self.merger.ordering.conclude_side(install.outcome, install.spent)
                   if self.config.evs else self.ordering.conclude(install.outcome))
        new = View(install.view_id, tuple(install.members))
        self.s.last_install = install
        if self.node not in new.members:
            return effects + self.joins.left_out(new)
        effects.append(InstallView(new))
        self.s.views_installed += 1
        self.s.frozen = still_frozen
        # what matters is suspicion of members that stay: fresh peers start unsuspected,
        # departed ones are forgotten (a long-lived member keeps no entry per departure)
        self.s.suspects &= set(new.members) & set(view.members)
        effects += [Send(m, MFarewell(new.view_id, install.attempt)) for m in view.members
                    if m not in new.members and m not in self.s.withdrawn]
        joiners, self.s.welcome_next = self.s.welcome_next, ()
        if joiners:
            effects.append(self.joins.take_snapshot(joiners, new))
        if self.config.evs:
            effects += self.merger.discovery.view_installed(view, new)
        ours = self.s.flush  # our own flush for a later view, if we were running one
        effects += self.adopt(new, tuple(install.fresh))
        if still_frozen and self.s.answered_to not in new.members:
            # The flush we answered since is led by a node this view left out: it cannot
            # install a view after this one (it needs our state for this one). Drop it.
            self.s.answered = (new.view_id, 0)
            self.s.answered_for = {}
            self.s.pledged = set()
            still_frozen = self.s.frozen = False
        if still_frozen and self.s.answered_to == self.node:
            # Our own flush was for a later view, from the one we were in: `adopt` gave
            # it up (its coordinator handed us this install, FlushCoordinator.on_state).
            # Unfrozen here, `recheck` starts the flush this view calls for. Its members
            # that answered are told (else they stay frozen for it); one that answered
            # this view's flush too stays frozen for its install (`pledged`, under evs
            # too) rather than deliver in the old view what its outcome left out.
            if ours is not None:
                others = tuple(m for m in ours.members if m != self.node)
                if others:
                    effects.append(Multicast(others, MAbort(ours.target, ours.attempt)))
            self.s.answered_for.pop(self.s.answered[0], None)
            self.s.pledged = set()
            still_frozen = self.s.frozen = False
        if still_frozen:
            if self.s.answered_to != self.node:  # what we told it came from an older view
                effects.append(Send(self.s.answered_to, self.state_for(*self.s.answered)))
            return effects
        effects += self.resume()
        # A prepare held back while a member lower than its sender was trusted, which
        # this view leaves out, is answered now (else its coordinator waits on us).
        effects += self.answers.retry_deferred()
        return effects + self.recheck()

    def recheck(self) -> list[Effect]:
        """Once a view is settled (a flush's install, a merge's, a merge given up): the
        flush that what was heard meanwhile calls for: a suspected member (said once;
        a leaver's too: its owed broadcasts may wait on it), a join or a leave."""
        view, s = self.s.view, self.s
        if view is None or s.frozen or s.flush is not None or s.status not in ("member", "leaving"):
            return []
        if s.suspects & set(view.members):
            return self.coordinator.maybe_coordinate(view.view_id + 1)
        if s.status == "member" and (s.join_requests or s.leave_requests):
            return self.coordinator.change_view()
        return []

    def adopt(self, view: View, fresh: tuple[NodeId, ...] = ()) -> list[Effect]:
        self.joins.note_admitted(self.s.view, view, fresh)
        self.s.view = view
        self.s.flush = None
        self.s.stable_reports = {}
        self.s.stable_said = None
        self.s.stable = {}
        self.s.aborted = {a for a in self.s.aborted if a[1] > view.view_id}
        self.s.deferred = {n: e for n, e in self.s.deferred.items()
                          if n in view.members and e.header.target > view.view_id}
        effects = self.ordering.handle(ViewInstalled(view), self.s.now)
        early, self.s.early = self.s.early, {}
        for _, event in early.values():
            if event.sender in view.members:
                effects += self.replay(event)
        return effects

    def resume(self) -> list[Effect]:
        """Unfrozen in a new view: what was buffered from its members, then our queue."""
        view = self.s.view
        assert view is not None
        effects: list[Effect] = []
        timers, self.s.timers = self.s.timers, []
        for timer in timers:
            effects += self.ordering.handle(timer, self.s.now)
        buffered, self.s.buffered = self.s.buffered, []
        for event in buffered:
            if event.sender in view.members:
                effects += self._replayed(event)
        queued, self.s.queued = self.s.queued, []
        for seq, payload in queued:
            effects += self.ordering.handle(BroadcastRequested(seq, payload), self.s.now)
        return effects

    def _replayed(self, event: Received) -> list[Effect]:
        """A kept packet handed to the ordering now. What a peer sent wrong is one log
        line and dropped here, not raised: the effects of the packets replayed before it
        (deliveries the ordering already made) must not be lost with it."""
        try:
            return self.ordering.handle(event, self.s.now)
        except RemoteProtocolError as exc:
            _log.warning("%s dropped a kept packet from %s: %s", self.node, event.sender, exc)
            return []

    # -- the flush, as coordinator -------------------------------------------------------
    def outcome(self, flush: CoordinatedFlush) -> list[FlushMessage]:
        """The flush's outcome: the ordering settles every survivor's report (a hook so
        that tests can plant a forgetful one)."""
        return self.ordering.settle([flush.states[m].report for m in flush.members
                                     if m in flush.states])

    def settled(self, flush: CoordinatedFlush) -> tuple[list[FlushMessage], int]:
        """The outcome and the numbers it spends: under evs a side's own (the ordering's
        `settle_side`, abcast.membership.merge), else `outcome` (nothing spent)."""
        if not self.config.evs:
            return self.outcome(flush), 0
        view = self.s.view
        assert view is not None
        reports = [flush.states[m].report for m in flush.members if m in flush.states]
        return self.merger.ordering.settle_side(reports, flush.members, view)

    def acting_leader(self, view: View) -> NodeId:
        """The member that would coordinate the next flush: the lowest not suspected."""
        return next((m for m in view.members if m not in self.s.suspects), view.leader)

    # -- timers --------------------------------------------------------------------------
    def _timer(self, key: Hashable, now: int) -> list[Effect]:
        if key == JOIN_RETRY:
            return self.joins.retry_join(now)
        if key == LEAVE_RETRY and self.s.status == "leaving":
            retry = SetTimer(LEAVE_RETRY, now + self.config.leave_retry_us)
            return [*self.joins.ask_to_leave(), retry]
        if key == STABLE:
            return self.stability.report(now)
        if key == MERGE_PROBE:
            return self.merger.discovery.probe()
        if key == MERGE_TIMEOUT:
            return self.merger.give_up()
        if key == MERGE_WAIT:
            # Answered a merge that neither concluded nor was called off in twice its
            # coordinator's time limit (its abort overtook its prepare, say).
            stuck = self.s.merging is not None and self.s.merge is None
            return self.merger.thaw() if stuck else []
        if key == FAREWELL_WAIT:
            if self.s.status == "departing":
                return self.joins.depart()
            if self.s.status == "leaving" and self.s.final_view is not None:
                return self.joins.cut(self.s.final_view)
        return []

