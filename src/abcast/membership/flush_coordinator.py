"""The membership layer's flush, as its coordinator runs it: who coordinates, the prepare,
the states it collects, busy answers and crossing installs, giving a flush up, and the
install it concludes with.

Rules (the numbered steps are abcast.membership.layer's): the coordinator is the lowest
member of the view it does not suspect; only one that hears a majority of its view goes
on (primary partition: of the members that did not withdraw, `primary`), else it gives
its flush up (`MAbort`); under evs every side goes on, with view ids of its
coordinator's (abcast.membership.merge). A state from a member
that answered another coordinator for this view id, or that is ahead of the flush's
target, sends the flush to a higher view id; one from a member a view behind gets our
last install; one from a member a view ahead of ours (primary partition: below the
target; evs: a view whose flush we answered, its id naming its coordinator: any other
may be another side's) stops the flush and asks that member for the install we missed.
With every state in (joiners count as fresh), the ordering settles the reports
(`Membership.settled`) and `MInstall` carries the outcome and the next members: the
proposed ones, less leavers, plus joiners (and names the fresh ones, welcomed again).
Every flush given up is aborted (`MAbort`), under evs too: a lower member heard again
(`_abandon`), an attempt replaced, a member a view ahead (`_ask_for_install`), an
install that overtakes it (`Membership.on_install`). A member keeps each flush it
answered pledged until its abort or a view installed (abcast.membership.flush_member),
so an abort thaws only a member with no other flush open — not one that answered
another coordinator's flush whose install is on its way.
"""

from __future__ import annotations

from abcast.effects import Effect, Multicast, Send
from abcast.ids import NodeId
from abcast.membership.merge import evs_view_id
from abcast.membership.state import CoordinatedFlush, Part
from abcast.membership.wire import MAbort, MInstall, MPrepare, MState


class FlushCoordinator(Part):
    """The coordinator's side of a view change (a part of the membership layer): it
    reads and writes the layer's state `s` and takes the member's steps from `member`."""

    def on_suspect(self, node: NodeId) -> list[Effect]:
        view = self.s.view
        if self.s.status == "departing":
            self.s.awaiting_farewell.discard(node)
            return self.member.depart() if not self.s.awaiting_farewell else []
        if self.s.status == "joining" or view is None or node not in view.members:
            return []
        if self.s.frozen and node == self.s.answered_to != self.s.node:
            # The coordinator we answered is gone; its install may have reached others
            # only. Tell the next coordinator where we are: one that has installed the
            # view hands us its install (`_on_state`).
            alive = [m for m in view.members if m not in self.s.suspects]
            if alive and alive[0] != self.s.node:
                state = MState(*self.s.answered, view.view_id, self.s.ordering.report())
                return [Send(alive[0], state), *self.maybe_coordinate(view.view_id + 1)]
        flush = self.s.flush
        if flush is not None and node not in flush.members:
            return []  # already leaving it out
        return self.maybe_coordinate(view.view_id + 1)

    def _abandon(self) -> list[Effect]:
        """Give our flush up: the members it froze resume their view."""
        flush, self.s.flush = self.s.flush, None
        if flush is None:
            return []
        others = tuple(m for m in flush.members if m != self.s.node)
        effects: list[Effect] = [Multicast(others, MAbort(flush.target, flush.attempt))] \
            if others else []
        if (self.s.answered_to, self.s.answered) == (self.s.node, (flush.target, flush.attempt)):
            self.member.release(self.s.node, flush.target, flush.attempt)
            effects += self.member.unfreeze()
        return effects

    def on_restored(self, node: NodeId) -> list[Effect]:
        """A wrong suspicion. A member that precedes us is back: it coordinates, not us.
        A flush given up for want of a majority, or waiting for a member suspected
        meanwhile, may go on now. Not a joiner that withdrew: it stopped (what is heard
        is its stack's last retransmissions), and `primary` leaves it out already — alive
        too, a flush would prepare it and wait for a state that never comes."""
        if node in self.s.withdrawn:
            return []
        self.s.suspects.discard(node)
        view = self.s.view
        if view is None or self.s.status not in ("member", "leaving"):
            return []
        alive = [m for m in view.members if m not in self.s.suspects]
        if alive and alive[0] != self.s.node:
            return self._abandon()
        flush = self.s.flush
        if flush is not None and not self.s.suspects & set(flush.members):
            return []
        if flush is None and not self.s.suspects & set(view.members) and not self.s.frozen:
            return []
        return self.maybe_coordinate(view.view_id + 1)

    def change_view(self) -> list[Effect]:
        """Start a flush for the requests, unless one runs (it takes them along)."""
        view = self.s.view
        if view is None or self.s.flush is not None or self.s.frozen:
            return []
        return self.maybe_coordinate(view.view_id + 1)

    def maybe_coordinate(self, target: int) -> list[Effect]:
        view = self.s.view
        assert view is not None
        alive = [m for m in view.members if m not in self.s.suspects]
        if not alive or alive[0] != self.s.node:
            # Someone lower coordinates (or I will, once I suspect them).
            return self._abandon()
        evs = self.s.config.evs
        if evs and (self.s.merge is not None or self.s.merging is not None):
            return []  # the merge settles this view; a flush may follow it
        if not evs and not self.primary(view.members, alive):
            return self._abandon()
        self.s.attempts = max(self.s.attempts, self.s.answered[1]) + 1
        old = self.s.flush
        target = max(target, old.target if old else 0)
        if evs:  # two sides never install the same id (abcast.membership.merge)
            target = evs_view_id(target, self.s.node)
        flush = CoordinatedFlush(target, self.s.attempts, tuple(alive))
        self.s.flush = flush
        self.s.flushes_coordinated += 1
        others = tuple(m for m in flush.members if m != self.s.node)
        prepare = MPrepare(flush.target, flush.attempt, list(flush.members))
        effects: list[Effect] = []
        old_others = tuple(m for m in old.members if m != self.s.node) if old else ()
        if old is not None and old_others:
            # The attempt this one replaces installed nothing: its members would stay
            # frozen for it (`pledged`: it is aimed at a lower target, and a member
            # cannot tell it from one we installed before this attempt)
            effects.append(Multicast(old_others, MAbort(old.target, old.attempt)))
        if others:
            effects.append(Multicast(others, prepare))
        prior = self.member.prior_for(self.s.node)
        self.s.answered_to = self.s.node
        self.s.prepared = (target, flush.attempt, flush.members)
        state = self.member.state_for(target, flush.attempt, prior)
        return effects + self.on_state(self.s.node, state)

    def primary(self, members: tuple[NodeId, ...], alive: list[NodeId]) -> bool:
        """Primary partition: `alive` is a majority of the view's `members` that did not
        withdraw (two such majorities share a member, whatever withdrawals each side
        heard of: every one is real). Not "alive + withdrawn >= a majority of the view":
        two members that each counted two withdrawn joiners went on apart."""
        withdrawn = sum(1 for m in members if m in self.s.withdrawn)
        return 2 * len(alive) > len(members) - withdrawn

    def on_busy(self, target: int, attempt: int) -> list[Effect]:
        flush = self.s.flush
        if flush is None or (target, attempt) < (flush.target, flush.attempt):
            return []
        self.s.attempts = max(self.s.attempts, attempt)
        return self.maybe_coordinate(max(flush.target, target))

    def on_state(self, sender: NodeId, state: MState) -> list[Effect]:
        flush = self.s.flush
        view = self.s.view
        assert view is not None
        if flush is None or (state.target, state.attempt) != (flush.target, flush.attempt):
            last = self.s.last_install
            if last is not None and state.view_id < view.view_id and sender in view.members:
                return [Send(sender, last)]  # it missed the install that made our view
            return []
        if self.s.config.evs and self._installed_without_us(state.view_id):
            # (Before the id checks: under evs ids jump by coordinator, so the view we
            # missed may be numbered past our target as well as below it.)
            return self._ask_for_install(flush, sender, state.view_id)
        if state.view_id >= flush.target:  # someone is ahead of us: aim past it
            return self.maybe_coordinate(state.view_id + 1)
        if state.prior >= flush.target:
            # It answered another coordinator for this view first, which may have
            # installed it: one view id names one membership, so take the next.
            return self.maybe_coordinate(state.prior + 1)
        if state.view_id < view.view_id:
            # It answered before our view's install reached it: hand that over; it
            # installs it and answers again.
            last = self.s.last_install
            return [Send(sender, last)] if last is not None else []
        if state.view_id > view.view_id and not self.s.config.evs:
            # (Under evs a member's view id may be another side's, which the merge
            # settles: there only a view we answered the flush of is one we missed.)
            return self._ask_for_install(flush, sender, state.view_id)
        flush.states[sender] = state
        return self._conclude(flush) if flush.complete() else []

    def _installed_without_us(self, view_id: int) -> bool:
        """Under evs: a member reports view `view_id`, past ours, and we answered the
        flush for that id: it installed, and its install never reached us (a cut took
        its coordinator away first). An evs id names one coordinator's view (its hash,
        abcast.membership.merge), so it is that flush's, of our lineage — not another
        side's, which would not list us (and a member in a view without us drops our
        prepare)."""
        view = self.s.view
        assert view is not None
        return view_id > view.view_id and view_id in self.s.answered_for

    def _ask_for_install(self, flush: CoordinatedFlush, sender: NodeId, view_id: int
                         ) -> list[Effect]:
        """`sender` is in view `view_id`, ahead of ours: the coordinator of that view
        went (crashed, or cut off) after its install reached others only. Concluding
        would settle reports of two views (and leave out members of the later one; under
        evs each member would deliver the outcome in its own old view). Give this flush
        up, staying frozen, and ask `sender` for that install (a prepare for a view it
        is in is answered with its last install, `FlushMember._answer`); installed, we
        flush from there (`Membership.on_install`, which starts it: the view's
        coordinator is suspected).

        The abort thaws no member that answered that view's flush too: that flush is
        still pledged (`FlushMember.pledge`, under evs as well), so it stays frozen for
        its install rather than deliver in its old view what the view's outcome left out
        (a safe point of the old sequencer's still in flight, say; evs used to send no
        abort here, and its members then stayed frozen for a flush nobody would
        conclude unless we flushed again)."""
        self.s.flush = None
        probe = MPrepare(view_id, 0, [self.s.node, sender])
        others = tuple(m for m in flush.members if m != self.s.node)
        return [Multicast(others, MAbort(flush.target, flush.attempt)), Send(sender, probe)]

    def note_fresh(self, sender: NodeId, target: int, attempt: int) -> list[Effect]:
        flush = self.s.flush
        if flush is None or (target, attempt) != (flush.target, flush.attempt):
            return []
        if sender not in flush.members or sender == self.s.node:
            return []
        flush.fresh.add(sender)
        return self._conclude(flush) if flush.complete() else []

    def _next_members(self, flush: CoordinatedFlush) -> tuple[NodeId, ...]:
        leaving = self.s.leave_requests
        joining = self.s.join_requests - set(flush.members) - leaving
        kept = [m for m in flush.members if m not in leaving]
        if not kept:
            return flush.members  # nobody would be left: the last member stays
        return (*kept, *sorted(joining))

    def _conclude(self, flush: CoordinatedFlush) -> list[Effect]:
        outcome, spent = self.member.settled(flush)
        members = self._next_members(flush)
        fresh = [m for m in members if m in flush.fresh]
        install = MInstall(flush.target, flush.attempt, list(members), outcome, spent, fresh)
        self.s.flush = None
        others = tuple(m for m in flush.members if m != self.s.node and m not in flush.fresh)
        effects: list[Effect] = [Multicast(others, install)] if others else []
        joined = (set(members) - set(flush.members)) | (flush.fresh & set(members))
        self.s.welcome_next = tuple(sorted(joined))
        self.s.join_requests -= set(members)
        self.s.leave_requests &= set(members)
        return effects + self.member.on_install(install)
