"""Discovery under evs: how a view's coordinator finds the other sides of a partition
once they can hear it again (a part of the merge, abcast.membership.merge, whose
`Merger` owns it).

Rules.
- Whom: the nodes our lineage lost (`lost`: node → when), at most MAX_LOST (the longest
  lost forgotten first), less those gone for good: a withdrawn joiner, and a leaver a
  flush let go (`prepared`: a member our install leaves out answered the flush, so it
  asked to leave). A view that holds a node again forgets it.
- How often: the view's coordinator, neither frozen nor stopping, probes each every
  `probe_us` for `probe_for_us` after losing it, then every `probe_slow_us` for ever;
  a probe heard from a side puts its members back on the fast period. The slow period
  must exceed the open channel's guest linger, so an unanswered node holds one probe at
  a time (why 15 s and no jitter: docs/orderings.md, "Cuts of any length").
- Who merges: a member passes a probe to its coordinator; the lowest node of both views
  starts the merge (`Merges.start`) — unless a side with a lower node probed it within
  two probe periods (`lower_probes`), which merges the sides one by one; the other
  coordinator answers with a probe of its own, at most one per `probe_us` per side
  (`probe_answered`).
- A runtime keeps the address of every node probed (`kept_peers`, `Stack.peers`).
"""

from __future__ import annotations

from typing import Protocol

from abcast.effects import Effect, Send
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId, View, node_sort_key, sorted_nodes
from abcast.membership.state import MAX_LOST, MembershipState, MemberSteps, Part, arm_probe, note
from abcast.membership.wire import MMergeProbe


class Merges(Protocol):
    """What discovery asks of the merge (abcast.membership.merge's `Merger`)."""

    @property
    def busy(self) -> bool:
        """A merge is under way here (coordinated or answered)."""
        ...

    def start(self, other_view_id: int, members: tuple[NodeId, ...]) -> list[Effect]:
        """Coordinate the merge of our view with the side whose view is `other_view_id`
        (`members`: both views' members)."""
        ...


class Discovery(Part):
    """Finding the other sides (the merge's first step): a part of the merge, which owns
    it (`Merger.discovery`) and starts the merges it finds (`merges`)."""

    def __init__(self, s: MembershipState, member: MemberSteps, merges: Merges) -> None:
        super().__init__(s, member)
        self.merges = merges

    def kept_peers(self) -> frozenset[NodeId]:
        """The nodes outside our view we may yet probe: a runtime keeps their addresses."""
        return frozenset(self.s.lost)

    def view_installed(self, old: View, new: View) -> list[Effect]:
        """Remember whom the new view lost (but leavers and withdrawn joiners: gone for
        good), and probe for them; forget aborts of merges into views we are past (their
        prepares are dropped as old anyway)."""
        s = self.s
        s.merge_aborted = {a: None for a in s.merge_aborted if a[1] > new.view_id}
        left = self._left_gracefully(new)
        for node in old.members:
            if node not in new.members and node not in left and node not in s.withdrawn:
                note(s.lost, node, s.now, MAX_LOST)
        for node in new.members:
            s.lost.pop(node, None)
        return arm_probe(s)

    def _left_gracefully(self, new: View) -> set[NodeId]:
        """The leavers the flush that installed `new` let go: every member of the flush
        we answered answered it too (it installs only then), and all it leaves out are
        the members that asked to leave (abcast.membership.flush_coordinator)."""
        s = self.s
        install = s.last_install
        target, attempt, members = s.prepared
        if install is None or (install.view_id, install.attempt) != (target, attempt):
            return set()  # a merge's install, a welcome: they leave nobody out
        return set(members) - set(new.members)

    def probe(self) -> list[Effect]:
        """The probe timer: probe the nodes lost within `probe_for_us`, and the rest too
        once every `probe_slow_us`."""
        s = self.s
        s.probe_at = None
        fast_since = s.now - s.config.probe_for_us
        slow = s.now >= s.slow_probe_at and any(t < fast_since for t in s.lost.values())
        if slow:
            s.slow_probe_at = s.now + s.config.probe_slow_us
        view = s.view
        effects: list[Effect] = []
        if (view is not None and view.leader == s.node and not s.frozen
                and s.status in ("member", "leaving")):
            probe = MMergeProbe(view.view_id, list(view.members))
            due = [n for n, t in s.lost.items() if (slow or t >= fast_since)
                   and n not in view.members]
            effects += [Send(n, probe, control=True) for n in sorted_nodes(due)]
        return effects + arm_probe(s)

    def on_probe(self, sender: NodeId, view_id: int, members: tuple[NodeId, ...]
                 ) -> list[Effect]:
        s = self.s
        view = s.view
        if not members:
            raise RemoteProtocolError(f"merge probe from {sender} naming no members")
        if view is None or set(members) & set(view.members):
            return []  # one of ours, or an old probe of a view we merged with since
        if sender not in members and sender not in view.members:
            # a probe comes from the leader of `members`, or from one of ours passing it on
            raise RemoteProtocolError(
                f"merge probe for {members} from {sender}, neither one of them nor of {view}")
        if view.leader != s.node:
            return [Send(view.leader, MMergeProbe(view_id, list(members)), control=True)]
        effects = self._heard_from(members)
        lowest = sorted_nodes(list(members))[0]
        if node_sort_key(lowest) < node_sort_key(s.node):
            note(s.lower_probes, lowest, s.now)
        if s.frozen or self.merges.busy or s.flush is not None or s.suspects & set(view.members):
            return effects  # busy, or a flush of our own comes first; the next probe comes
        ours = [m for m in view.members if m not in s.suspects]
        union = sorted_nodes([*ours, *members])
        if union[0] == s.node:
            if self._lower_side_probing():
                # Three sides or more: a side with a lower node than ours probes us too.
                # It merges the sides one by one; a merge of ours would cross its merge
                # with us (each needs our members) and both fail, again and again.
                return effects
            return effects + self.merges.start(view_id, union)
        other = members[0]
        last = s.probe_answered.get(other)
        if last is not None and s.now - last < s.config.probe_us:
            return effects
        # An answer older than `probe_us` no longer holds the next one back: forget it.
        horizon = s.now - s.config.probe_us
        s.probe_answered = {n: t for n, t in s.probe_answered.items() if t > horizon}
        note(s.probe_answered, other, s.now)
        return [*effects, Send(other, MMergeProbe(view.view_id, list(view.members)),
                               control=True)]

    def _heard_from(self, members: tuple[NodeId, ...]) -> list[Effect]:
        """A side we lost probed us: the link holds again, so probe its members at
        `probe_us` again (a merge given up is tried again within a probe period)."""
        s = self.s
        for m in members:
            if m in s.lost:
                note(s.lost, m, s.now, MAX_LOST)
        return arm_probe(s)

    def _lower_side_probing(self) -> bool:
        """A side whose lowest node is below us probed us within two probe periods."""
        s = self.s
        horizon = s.now - 2 * s.config.probe_us
        s.lower_probes = {n: t for n, t in s.lower_probes.items() if t >= horizon}
        return bool(s.lower_probes)
