"""The membership layer's flush, as its coordinator runs it: who coordinates, the prepare,
the states it collects, busy answers and crossing installs, giving a flush up, and the
install it concludes with.

Rules (the numbered steps are abcast.membership.layer's): the coordinator is the lowest
member of the view it does not suspect; only one that hears a majority of its view goes
on (primary partition), else it gives its flush up (`MAbort`). A state from a member
that answered another coordinator for this view id, or that is a view ahead, sends the
flush to a higher view id; one from a member a view behind gets our last install. With
every state in (joiners count as fresh), the ordering settles the reports
(`Membership.outcome`) and `MInstall` carries the outcome and the next members: the
proposed ones, less leavers, plus joiners.
"""

from __future__ import annotations

from abcast.effects import Effect, Multicast, Send
from abcast.ids import NodeId
from abcast.membership.state import CoordinatedFlush, MembershipState
from abcast.membership.wire import MAbort, MInstall, MPrepare, MState


class FlushCoordinator(MembershipState):
    """The coordinator's side of a view change (a part of the membership layer)."""

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
        flush = CoordinatedFlush(target, self._attempts, tuple(alive))
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

    def _next_members(self, flush: CoordinatedFlush) -> tuple[NodeId, ...]:
        leaving = self._leave_requests
        joining = self._join_requests - set(flush.members) - leaving
        kept = [m for m in flush.members if m not in leaving]
        if not kept:
            return flush.members  # nobody would be left: the last member stays
        return (*kept, *sorted(joining))

    def _conclude(self, flush: CoordinatedFlush) -> list[Effect]:
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
