"""Join, leave and removal in the membership layer: a joiner asking contacts until it is
welcomed with the state at the cut, a member asking the leader to leave it out, a leaver
waiting for the new members' farewells, and a member the group went on without.

Rules (the phase table is abcast.membership.layer's): a joiner sends `MJoin` to a contact
(the next one every `join_retry_us`); the acting leader takes the request into its next
flush, and after installing the view snapshots the application (`TakeSnapshot`) and
sends `MWelcome` with the ordering's join cut. A leaver asks the acting leader (again
every `leave_retry_us`), is a member of the flush that leaves it out, and departs once
every new member said farewell (or after `farewell_wait_us`). A member that learns a
later view left it out, by a farewell or the detector's `Excluded`, was cut off: it
stops (`cut_off`), unless it was leaving and waits for the install it gave its state to.
"""

from __future__ import annotations

from typing import Any

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
from abcast.ids import NodeId, View
from abcast.membership.state import (
    FAREWELL_WAIT,
    JOIN_RETRY,
    LEAVE_RETRY,
    STABLE,
    TIMERS,
    MembershipState,
    WelcomeDraft,
)
from abcast.membership.wire import (
    MFarewell,
    MJoin,
    MJoinFwd,
    MLeave,
    MNotYet,
    MPrepare,
    MWelcome,
)


class JoinLeave(MembershipState):
    """Joining, leaving and removal (a part of the membership layer)."""

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
        self._drafts[self._tokens] = WelcomeDraft(joiners, view, self._answered[1],
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
        if self._queued or self._owes_own():
            # Our own broadcasts first: an ordering that delivers some of the old view
            # in the next one (the sequencer under SAFE) would never deliver them here.
            return []  # asked again every leave_retry_us
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
        return [*(CancelTimer(k) for k in sorted(TIMERS)), InstallView(final)]

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
            if any(t <= view_id for t in self._answered_for) and not mine:
                # We gave our state to a flush for this view or an earlier one, not yet
                # installed here: its install (our last deliveries, and the view that
                # lets us go) is on its way. Wait for it, once.
                if waiting:
                    return []
                return [SetTimer(FAREWELL_WAIT, self._now + self.config.farewell_wait_us)]
        return self._cut(final)

    def _cut(self, final: View) -> list[Effect]:
        """The group went on without us before our leave was taken: removed."""
        self.cut_off = True
        self.status = "stopped"
        return [*(CancelTimer(k) for k in sorted(TIMERS)), InstallView(final)]
