"""Join, leave and removal in the membership layer: a joiner asking contacts until it is
welcomed with the state at the cut, a member asking the leader to leave it out, a leaver
waiting for the new members' farewells, and a member the group went on without.

Rules (the phase table is abcast.membership.layer's): a joiner sends `MJoin` to a contact
(the next one every `join_retry_us`: abcast.membership.contacts, shared with
chandra-toueg); the acting leader takes the request into its next
flush, and after installing the view snapshots the application (`TakeSnapshot`) and
sends `MWelcome` with the ordering's join cut. A leaver asks the acting leader (again
every `leave_retry_us`), is a member of the flush that leaves it out, and departs once
every new member said farewell (or after `farewell_wait_us`). A member that learns a
later view left it out, by a farewell or the detector's `Excluded`, was cut off: it
stops (`cut_off`), unless it was leaving and waits for the install it gave its state to.
A joiner that gives up before its welcome withdraws (`MWithdraw` to every contact) and
stops: a member drops its ask, forgets it below (`Forget`), takes its ask's
retransmissions — and a member's forward of it that the withdrawal overtook: it carries
the ask — for stale for `withdraw_memory_us`, and if its view admitted it goes on
without it, leaving it out of the majority it needs (`primary`: it stopped).
Under evs two sides may each admit one joiner: it takes the first welcome and refuses
the second view (`MRefuse` to every member listed), whose members go on without it —
in that view or any later one that still lists it (`admitted_in`). A view whose flush
welcomed again a member still joining (its welcome to the view before never came: it
answered not-yet) admits it (`MInstall.fresh`): its refusal of the view before is old news.
"""

from __future__ import annotations

from typing import Any

from abcast.codec import EMPTY
from abcast.effects import (
    CancelTimer,
    Effect,
    Forget,
    InstallState,
    InstallView,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import Received
from abcast.ids import NodeId, View
from abcast.membership.contacts import JoinContacts, left_out_by
from abcast.membership.state import (
    FAREWELL_WAIT,
    JOIN_RETRY,
    LEAVE_RETRY,
    MAX_LOST,
    MAX_PENDING_JOINS,
    STABLE,
    TIMERS,
    Part,
    WelcomeDraft,
    arm_probe,
    keep_early,
    note,
)
from abcast.membership.wire import (
    MFarewell,
    MJoin,
    MJoinFwd,
    MLeave,
    MNotYet,
    MPrepare,
    MRefuse,
    MWelcome,
    MWithdraw,
)


class JoinLeave(Part):
    """Joining, leaving and removal (a part of the membership layer): it reads and writes
    the layer's state `s` and takes the member's steps from `member`."""

    def join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        view = self.s.view
        if view is None or view.members != (self.s.node,) or self.s.status != "member":
            raise LocalProtocolError(f"{self.s.node} cannot join now: it is in {view}")
        self.s.contacts = asked = JoinContacts(contacts, self.s.node)
        self.s.status = "joining"
        self.s.ask = max(now, 1)
        retry = SetTimer(JOIN_RETRY, now + self.s.config.join_retry_us)
        return [Send(asked.current(), MJoin(self.s.ask)), retry]

    def retry_join(self, now: int) -> list[Effect]:
        """Unanswered for `join_retry_us`: ask the next contact."""
        asked = self.s.contacts
        if self.s.status != "joining" or asked is None:
            return []
        retry = SetTimer(JOIN_RETRY, now + self.s.config.join_retry_us)
        return [Send(asked.next(), MJoin(self.s.ask)), retry]

    def abandon(self, now: int) -> list[Effect]:
        """The application gave the join up. Not yet welcomed: `MWithdraw` to every
        contact (the one that took our ask may have admitted us in a view whose welcome
        is still on its way: its members leave us out) and stop, taking nothing more.
        Welcomed meanwhile: a graceful leave."""
        if self.s.status == "joining":
            asked = self.s.contacts
            self.s.status = "stopped"
            contacts = asked.nodes if asked is not None else ()
            return [*(CancelTimer(k) for k in sorted(TIMERS)),
                    *(Send(c, MWithdraw(self.s.ask)) for c in contacts)]
        return self.leave(now)

    def on_withdraw(self, joiner: NodeId, ask: int) -> list[Effect]:
        """`joiner` gave its join up and stopped: its ask is dropped, the layers below
        forget it (`Forget`: its next stack, joining again, starts afresh), and if our
        view admitted it the group goes on without it, leaving it out of the majority
        (`withdrawn`, kept while a view of ours lists it)."""
        view = self.s.view
        assert view is not None
        if joiner == self.s.node:
            return []
        if joiner in view.members and joiner not in self.s.admitted_in:
            # A member of our first view (admitted_in holds those our views admitted since)
            # was never a joiner here: a forged frame, or a stale one of an earlier stack of
            # that node. (A joiner admitted since is taken at its word: nothing here tells a
            # live one from one that never installed its view.)
            self.s.withdrawals_refused += 1
            return []
        self.s.join_requests.discard(joiner)
        asks = self.s.withdrawn_asks
        note(asks, joiner, (max(ask, asks.get(joiner, (0, 0))[0]), self.s.now),
             MAX_PENDING_JOINS)
        if joiner not in view.members:
            return [Forget(joiner)]
        self.s.withdrawn[joiner] = None
        return [Forget(joiner), *self.member.go_on_without(joiner)]

    def while_joining(self, sender: NodeId, header: Any) -> list[Effect]:
        match header:
            case MWelcome():
                return self._on_welcome(sender, header)
            case MPrepare(target, attempt, members) if self.s.node in members:
                self.s.fresh_for = max(self.s.fresh_for, target)
                return [Send(sender, MNotYet(target, attempt))]
            case MFarewell(view_id):
                self.s.left_out_of = max(self.s.left_out_of, view_id)
                return []
            case _:
                return []  # flush traffic of views before ours

    def _on_welcome(self, sender: NodeId, welcome: MWelcome) -> list[Effect]:
        view = View(welcome.view_id, tuple(welcome.members))
        if self.s.node not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.s.node} into {view}")
        if view.view_id < self.s.fresh_for or view.view_id <= self.s.left_out_of:
            # A later flush welcomes us (we told it we have no state), or the group
            # removed us after this welcome was sent: the current welcome comes.
            return []
        self.s.status = "member"
        self.s.frozen = False
        self.s.flush = None
        self.s.answered = (welcome.view_id, welcome.attempt)
        self.s.answered_for = {}
        self.s.pledged = set()
        self.s.attempts = max(self.s.attempts, welcome.attempt)
        self.s.join_requests.clear()
        self.s.leave_requests.clear()
        self.s.suspects -= set(view.members)
        self.s.ordering.start_from(welcome.cut)
        self.s.views_installed += 1
        effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                                 InstallView(view),
                                 SetTimer(STABLE, self.s.now + self.s.config.stable_period_us)]
        if sender not in view.members:  # a coordinator that left in that flush waits for us
            effects.append(Send(sender, MFarewell(view.view_id)))
        effects += self.member.adopt(view)
        effects += self.member.resume()
        if self.s.config.evs and self.s.contacts is not None:
            # Contacts this view lacks may be on another side (a side that admitted us,
            # then lost the rest): probe them as a lineage's lost members.
            for contact in self.s.contacts.nodes:
                if contact not in view.members:
                    note(self.s.lost, contact, self.s.now, MAX_LOST)
            effects += arm_probe(self.s)
        if self.s.leave_after_join:
            effects += self.leave(self.s.now)
        return effects

    # -- admitted twice (evs: two sides each took our join) ------------------------------
    def welcome_again(self, sender: NodeId, welcome: MWelcome) -> list[Effect]:
        """A welcome while a member: sent twice, or a second view admitted us (two sides
        took our join). That view goes on without us: tell every member it lists (its
        coordinator may be a leaver, gone)."""
        view = self.s.view
        assert view is not None
        if self.s.node not in welcome.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.s.node} into a view "
                                      f"without it: {welcome.members}")
        if welcome.view_id == view.view_id or sender in view.members:
            return []  # a welcome sent twice: we are in already
        return [Send(m, MRefuse(welcome.view_id)) for m in welcome.members
                if m != self.s.node]

    def on_refuse(self, sender: NodeId, view_id: int) -> list[Effect]:
        """`sender` took another side's welcome and refused view `view_id`, which
        admitted it: go on without it, in our view or in the views since that still list
        it (we may have moved on before the refusal came: it would stay listed until the
        detector suspects it, which its answers to our packets may keep from happening).
        A refusal of a view beyond ours waits for it; one of a view that did not admit
        the member we have now (it was left out and came back since) is old news."""
        view = self.s.view
        assert view is not None
        if view_id > view.view_id:  # its install is on its way
            keep_early(self.s, Received(sender, MRefuse(view_id), EMPTY), (view_id, 0))
            return []
        admitted = self.s.admitted_in.get(sender, view.view_id)
        if sender in view.members and admitted == view_id:
            return self.member.go_on_without(sender)
        return []

    def note_admitted(self, old: View | None, new: View, fresh: tuple[NodeId, ...] = ()
                      ) -> None:
        """Note, as `new` is installed, the members it admits to our views (`admitted_in`
        holds members of `old` only); withdrawn joiners it left out are forgotten. A
        member of `old` whose welcome to it never came (`fresh`: it answered the flush
        not-yet) is welcomed into `new`, which admits it: a refusal of `old`, sent once
        that welcome comes late, is old news (it is with us)."""
        kept = {m: v for m, v in self.s.admitted_in.items() if m in new.members}
        self.s.withdrawn = {m: None for m in self.s.withdrawn if m in new.members}
        old_members = old.members if old is not None else ()
        self.s.admitted_in = kept | {m: new.view_id for m in new.members
                                     if m not in old_members or m in fresh}

    def take_snapshot(self, joiners: tuple[NodeId, ...], view: View) -> Effect:
        self.s.tokens += 1
        self.s.drafts[self.s.tokens] = WelcomeDraft(joiners, view, self.s.answered[1],
                                                   self.s.ordering.join_cut())
        return TakeSnapshot(self.s.tokens)

    def send_welcome(self, token: int, state: bytes) -> list[Effect]:
        draft = self.s.drafts.pop(token, None)
        if draft is None:
            raise LocalProtocolError(f"{self.s.node} took no snapshot with token {token}")
        welcome = MWelcome(draft.view.view_id, draft.attempt, list(draft.view.members),
                           draft.cut, state)
        self.s.welcomes_sent += len(draft.joiners)
        return [Send(j, welcome) for j in draft.joiners]

    def on_join_ask(self, joiner: NodeId, ask: int = 0) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if joiner == self.s.node or self._withdrawn_ask(joiner, ask):
            return []
        leader = self.member.acting_leader(view)
        if leader != self.s.node:
            return [Send(leader, MJoinFwd(joiner, ask))]
        if joiner in view.members:
            return []  # an old ask, overtaken by its welcome
        if joiner not in self.s.join_requests and len(self.s.join_requests) >= MAX_PENDING_JOINS:
            self.s.joins_deferred += 1
            return []
        self.s.join_requests.add(joiner)
        self.s.leave_requests.discard(joiner)
        return self.member.change_view()

    def _withdrawn_ask(self, joiner: NodeId, ask: int) -> bool:
        """An ask of a join its joiner withdrew (a retransmission of the stack that gave
        up, heard after the withdrawal): not a new join."""
        given_up = self.s.withdrawn_asks.get(joiner)
        if given_up is None or not ask:
            return False
        withdrawn, heard = given_up
        return ask <= withdrawn and self.s.now - heard < self.s.config.withdraw_memory_us

    def leave(self, now: int) -> list[Effect]:
        if self.s.status == "joining":
            self.s.leave_after_join = True  # the group may count on us already: join first
            return []
        view = self.s.view
        if self.s.status != "member" or view is None:
            return []
        if view.members == (self.s.node,):
            self.s.status = "stopped"  # the last member: the group ends with it
            return [InstallView(View(view.view_id + 1, ()))]
        self.s.status = "leaving"
        return [*self.ask_to_leave(), SetTimer(LEAVE_RETRY, now + self.s.config.leave_retry_us)]

    def ask_to_leave(self) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if self.s.queued or self.s.owes_own():
            # Our own broadcasts first: an ordering that delivers some of the old view
            # in the next one (the sequencer under SAFE) would never deliver them here.
            return []  # asked again every leave_retry_us
        leader = self.member.acting_leader(view)
        if leader == self.s.node:
            return self.on_leave_ask(self.s.node)
        return [Send(leader, MLeave())]

    def on_leave_ask(self, leaver: NodeId) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if self.member.acting_leader(view) != self.s.node:
            return []
        self.s.leave_requests.add(leaver)
        return self.member.change_view()

    def left_out(self, new: View) -> list[Effect]:
        if self.s.status != "leaving":
            return self.cut(new)
        self.s.status = "departing"
        self.s.frozen = True  # the old view is over here
        self.s.final_view = new
        self.s.awaiting_farewell = set(new.members) - self.s.suspects
        joiners, self.s.welcome_next = self.s.welcome_next, ()
        effects: list[Effect] = [self.take_snapshot(joiners, new)] if joiners else []
        if not self.s.awaiting_farewell:
            return effects + self.depart()
        return [*effects, CancelTimer(LEAVE_RETRY),
                SetTimer(FAREWELL_WAIT, self.s.now + self.s.config.farewell_wait_us)]

    def depart(self) -> list[Effect]:
        final = self.s.final_view
        assert final is not None
        self.s.status = "stopped"
        return [*(CancelTimer(k) for k in sorted(TIMERS)), InstallView(final)]

    # -- removed -------------------------------------------------------------------------
    def on_excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        view = self.s.view
        if self.s.status == "joining":
            self.s.left_out_of = max(self.s.left_out_of, view_id)
            return []
        final = self.s.final_view
        if self.s.status == "departing" and final is not None and view_id >= final.view_id:
            self.s.awaiting_farewell.discard(by)  # it has our last view: as good as a farewell
            return self.depart() if not self.s.awaiting_farewell else []
        if view is None or not left_out_by(view.members, view.view_id, by, view_id):
            return []
        return self.removed(by, view_id)

    def removed(self, by: NodeId, view_id: int) -> list[Effect]:
        """`by` installed view `view_id`, which leaves this node out."""
        view = self.s.view
        assert view is not None
        final = View(view_id, view.others(self.s.node))
        if self.s.status == "leaving":
            waiting = self.s.final_view is not None
            self.s.final_view = final
            mine = self.s.flush is not None and self.s.flush.target == view_id
            if any(t <= view_id for t in self.s.answered_for) and not mine:
                # We gave our state to a flush for this view or an earlier one, not yet
                # installed here: its install (our last deliveries, and the view that
                # lets us go) is on its way. Wait for it, once.
                if waiting:
                    return []
                return [SetTimer(FAREWELL_WAIT, self.s.now + self.s.config.farewell_wait_us)]
        return self.cut(final)

    def cut(self, final: View) -> list[Effect]:
        """The group went on without us before our leave was taken: removed."""
        self.s.cut_off = True
        self.s.status = "stopped"
        return [*(CancelTimer(k) for k in sorted(TIMERS)), InstallView(final)]
