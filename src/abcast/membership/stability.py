"""Stability in the membership layer: the log's garbage, and the frozen member's call
for an install it missed.

Rules: every `stable_period_us` (the `STABLE` timer) a member that delivered more tells
the acting leader (the lowest member not suspected) what it delivered (`MStable` up,
control traffic); the leader, once it holds a report from every member of the view,
hands down the minimum over them (`MStable` down) and every ordering drops that from its
view's log (`forget`), so a flush carries only what some member may lack. Nothing is
forgotten while frozen. On the same period a member frozen for a flush whose
coordinator it suspects since (`pledged`), with no flush of its own, asks every member it
trusts for the install it may have missed (`ask_for_install`; primary partition only:
under evs its side goes on, and the next coordinator's flush hands it that install).
"""

from __future__ import annotations

from abcast.effects import Effect, Send, SetTimer
from abcast.ids import NodeId
from abcast.membership.state import STABLE, Part
from abcast.membership.wire import MStable, MState, ViewReport


class Stability(Part):
    """Stable reports and the missed-install call (a part of the membership layer): it
    reads and writes the layer's state `s` and takes the member's steps from `member`."""

    def report(self, now: int) -> list[Effect]:
        """Every period: what we delivered, to the acting leader, when it changed."""
        again = SetTimer(STABLE, now + self.s.config.stable_period_us)
        view = self.s.view
        if self.s.status not in ("member", "leaving") or self.s.frozen or view is None:
            return [*self.ask_for_install(), again]
        point = self.s.ordering.stable_point()
        if point == self.s.stable_said:
            return [again]
        self.s.stable_said = point
        leader = self.member.acting_leader(view)
        if leader == self.s.node:
            return [*self.on_stable(self.s.node, point, True), again]
        return [Send(leader, MStable(view.view_id, point, True), control=True), again]

    def ask_for_install(self) -> list[Effect]:
        """Frozen for a flush we answered whose coordinator we suspect since, with no
        flush of our own running: if it installed a view, its install may have reached
        others only (a partition cut it off), and a view behind we cannot form a majority
        to ask for it by a prepare. Every period, a state for no flush (attempt 0) to each
        member we trust: one that installed a later view hands us its last install
        (FlushCoordinator.on_state); the others ignore it. Primary partition only
        (evs keeps pledges too, but not this traffic): under evs a side needs no
        majority, and its next coordinator's flush prepares us and hands that install
        over the same way."""
        view, s = self.s.view, self.s
        if (view is None or not s.frozen or s.flush is not None or s.config.evs
                or s.status not in ("member", "leaving")):
            return []
        lost = [t for c, t, _ in s.pledged if c in s.suspects and c != self.s.node]
        if not lost:
            return []
        probe = MState(max(lost), 0, view.view_id, ViewReport({}, []))
        return [Send(m, probe, control=True) for m in view.members
                if m != self.s.node and m not in s.suspects]

    def on_stable(self, sender: NodeId, delivered: dict[NodeId, int], up: bool) -> list[Effect]:
        view = self.s.view
        assert view is not None
        if not up:
            if sender == self.member.acting_leader(view) and not self.s.frozen:
                self.s.ordering.forget(delivered)
            return []
        if self.member.acting_leader(view) != self.s.node:
            return []
        self.s.stable_reports[sender] = dict(delivered)
        reports = [self.s.stable_reports.get(m) for m in view.members]
        if any(r is None for r in reports):
            return []
        origins = {o for r in reports if r is not None for o in r}
        stable = {o: min(r.get(o, 0) for r in reports if r is not None) for o in origins}
        stable = {o: k for o, k in stable.items() if k}
        if stable == self.s.stable:
            return []
        self.s.stable = stable
        if not self.s.frozen:
            self.s.ordering.forget(stable)
        down = MStable(view.view_id, stable, False)
        return [Send(m, down, control=True) for m in view.members if m != self.s.node]
