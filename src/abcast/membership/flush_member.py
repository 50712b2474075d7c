"""The membership layer's flush, as a member answers it: which prepare it answers and
when, the state it gives, the flushes it stays frozen for, the aborts that let it go, and
the prepares it holds back.

Rules (the numbered steps are abcast.membership.layer's):

1. A prepare from a member of our view is answered only if every member before its
   sender in the view is suspected by us too; else it is held back (`deferred`, the
   latest of each sender), and answered once we suspect them (`Suspected`, evs's
   `go_on_without`) or an install leaves them out (`retry_deferred`). One from a
   non-member may be for a view of ours still to come (kept, `keep_early`), else it is
   stale: a RemoteProtocolError once, then dropped quietly.
2. One coordinator's prepares are ordered by attempt: a newer one is answered even for a
   lower view id (it gave that flush up and starts again from its view), a resent or
   older one dropped. Another coordinator's for a flush no later than the one we
   answered gets `MBusy`, and so under evs does any other while we are frozen for a
   view of another side's coordinator (a member ends up in one side only).
3. Our state (`state_for`) freezes us and pledges it to its flush (`pledged`, under
   either policy): its coordinator may install a view with it. `MAbort` releases that
   flush and the coordinator's earlier ones; we resume our view once none we answered
   is open (`unfreeze`) — not while a merge holds us (evs). Any view installed settles
   them all but a later one we answered since.
"""

from __future__ import annotations

from abcast.codec import EMPTY
from abcast.effects import Effect, Send
from abcast.errors import RemoteProtocolError
from abcast.events import Received
from abcast.ids import NodeId
from abcast.membership.state import Part, keep_early
from abcast.membership.wire import MBusy, MPrepare, MState


class FlushMember(Part):
    """The member's side of a view change (a part of the membership layer): it reads and
    writes the layer's state `s` and takes the member's steps from `member`."""

    def on_prepare(self, sender: NodeId, prepare: MPrepare) -> list[Effect]:
        view = self.s.view
        assert view is not None
        target, attempt = prepare.target, prepare.attempt
        if sender not in view.members:
            if self._ahead_of_us(sender, target):
                # Led by a member of a view we have not installed yet (a joiner it
                # admitted): answer once that view is ours.
                keep_early(self.s, Received(sender, prepare, EMPTY), (target, attempt))
                return []
            if sender in self.s.stale_from:
                return []  # said once: its retransmissions are dropped quietly
            self.s.stale_from.add(sender)
            raise RemoteProtocolError(
                f"flush for view {target} from {sender}, not a member of {view}"
                " (its further flush messages are dropped quietly)")
        lower = view.members[:view.members.index(sender)]
        if any(m not in self.s.suspects for m in lower):
            # Someone I still trust precedes it: it may be cut off from them (a
            # minority's coordinator). Answer once I suspect them too.
            kept = self.s.deferred.get(sender)
            if kept is None or (target, attempt) > (kept.header.target,
                                                    kept.header.attempt):
                self.s.deferred[sender] = Received(sender, prepare, EMPTY)
            return []
        if (sender, target, attempt) in self.s.aborted:
            return []
        return self._answer(sender, target, attempt, tuple(prepare.members))

    def _ahead_of_us(self, sender: NodeId, target: int) -> bool:
        """A flush from a non-member may be for a view beyond the next one of our lineage
        (led by a joiner that view admitted), or stale. Primary: view ids count views, so
        a target past the next id says it. evs: ids jump by coordinator (`evs_view_id`),
        so numbers say nothing of lineage; who leads does. A node our views left out
        (`lost`: a former member, now on another side) leads another lineage's flush,
        never one of our next views; anyone else may, for any later id."""
        view = self.s.view
        assert view is not None
        if self.s.config.evs:
            return sender not in self.s.lost and target > view.view_id
        return target > view.view_id + 1

    def _answer(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if self.s.node not in members:
            return []
        if target <= view.view_id:
            # Its coordinator's install of our view never reached it: hand it over.
            last = self.s.last_install
            return [Send(sender, last)] if last is not None else []
        answered_to = self.s.answered_to
        if (self.s.config.evs and self.s.frozen and self.s.flush is None
                and answered_to not in (sender, self.s.node)
                and answered_to not in self.s.suspects and self.s.answered[0] > view.view_id):
            # Frozen for another coordinator's view: under evs two sides may be forming
            # at once, and a member must end up in one of them only.
            return [Send(sender, MBusy(*self.s.answered))]
        if sender == self.s.answered_to and attempt <= self.s.answered[1]:
            return []  # sent twice, or overtaken by its newer attempt
        if (target, attempt) <= self.s.answered and sender != self.s.answered_to:
            return [Send(sender, MBusy(*self.s.answered))]
        # (A newer attempt of the coordinator we answered is answered, even for a lower
        # view id: it gave that flush up and starts again from its view.)
        prior = self.prior_for(sender)
        self.s.answered_to = sender
        self.s.prepared = (target, attempt, members)
        return [Send(sender, self.state_for(target, attempt, prior))]

    def prior_for(self, coordinator: NodeId) -> int:
        return self.s.answered[0] if self.s.answered_to != coordinator else 0

    def state_for(self, target: int, attempt: int, prior: int = 0) -> MState:
        view = self.s.view
        assert view is not None
        self.s.frozen = True
        self.s.answered = (target, attempt)
        self.s.answered_for.setdefault(target, set()).add(attempt)
        self.pledge(self.s.answered_to, target, attempt)
        return MState(target, attempt, view.view_id, self.s.ordering.report(), prior)

    def pledge(self, coordinator: NodeId, target: int, attempt: int) -> None:
        """Our state goes to `coordinator`'s flush (target, attempt). Its earlier ones for
        this target or a later one installed nothing (a coordinator that installed a view
        prepares only later ones); our own earlier ones none at all. Under evs too: a
        side goes on without a majority, but a flush we answered may still install a
        view of our side with our report (its install on its way), and what we delivered
        more in our view meanwhile its members never would."""
        node = self.s.node
        self.s.pledged = {(c, t, a) for c, t, a in self.s.pledged
                          if c != coordinator or (c != node and (t < target or a > attempt))}
        self.s.pledged.add((coordinator, target, attempt))

    def release(self, coordinator: NodeId, target: int, attempt: int) -> None:
        """`coordinator` gave its flush (target, attempt) up: that one and its earlier
        ones for this target or a later one installed nothing."""
        self.s.pledged = {(c, t, a) for c, t, a in self.s.pledged
                          if c != coordinator or t < target or a > attempt}

    def on_abort(self, sender: NodeId, target: int, attempt: int) -> list[Effect]:
        self.release(sender, target, attempt)
        if (sender, (target, attempt)) != (self.s.answered_to, self.s.answered):
            self.s.aborted.add((sender, target, attempt))  # its prepare is late
            # (or the flush we answered before the one we froze for: the last open one
            # given up, we are back in our view)
            return self.unfreeze() if self.s.flush is None else []
        return self.unfreeze()

    def unfreeze(self) -> list[Effect]:
        """The flush we answered will install nothing: back to the view we are in —
        unless another flush we gave our state to may have installed a view with it
        (`pledged`: its coordinator suspected since, its install not here yet). Its
        members went on from our report: what we delivered more here, they never would.
        Frozen, we wait for its install, its abort or a flush that settles the view.
        Not while a merge holds us (`merging`: frozen for it, our report is its): an
        abort then is stale — of the flush we answered last, say, released already by
        its coordinator's later attempt's abort that the channel brought first — and
        only the merge's end thaws us (abcast.membership.merge)."""
        s = self.s
        if (not s.frozen or s.status not in ("member", "leaving") or s.pledged
                or s.merging is not None):
            return []
        s.frozen = False
        s.answered_for.pop(s.answered[0], None)
        return self.member.resume()

    def retry_deferred(self) -> list[Effect]:
        """The prepares held back (rule 1), handled again now."""
        deferred, self.s.deferred = self.s.deferred, {}
        effects: list[Effect] = []
        for event in deferred.values():
            if self.s.status in ("member", "leaving"):
                effects += self.member.replay(event)
        return effects
