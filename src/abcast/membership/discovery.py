"""Discovery under evs: how a view's coordinator finds the other sides of a partition
once they can hear it again (a part of the merge, abcast.membership.merge, whose
`Merger` it is the base of).

Rules. Every member remembers the nodes its lineage lost (`lost`: node → when): those a
view of ours dropped, and a joiner's contacts its first view lacks; a view that holds a
node again forgets it. The view's coordinator, neither frozen nor stopping, probes them
(`MMergeProbe(view id, members)`) every `probe_us` for `probe_for_us` after losing them.
A member passes a probe to its coordinator; the lowest node of both views coordinates
the merge — unless a side with a lower node still probed it within two probe periods
(`lower_probes`): that node merges the sides one by one, and a merge of its own would
cross it. The other coordinator answers with a probe of its own (at most one per
`probe_us` per side: `probe_answered`) so that the lowest starts.
"""

from __future__ import annotations

from abcast.effects import Effect, Send
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId, View, node_sort_key, sorted_nodes
from abcast.membership.state import Part, arm_probe, note
from abcast.membership.wire import MMergeProbe


class Discovery(Part):
    """Finding the other sides (the merge's first step): the `Merger` is one, and starts
    the merge discovery calls for (`_start`) unless it is busy with one (`busy`)."""

    @property
    def busy(self) -> bool:
        raise NotImplementedError

    def _start(self, other_view_id: int, members: tuple[NodeId, ...]) -> list[Effect]:
        raise NotImplementedError

    def view_installed(self, old: View, new: View) -> list[Effect]:
        """Remember whom the new view lost, and probe for them; forget aborts of merges
        into views we are past (their prepares are dropped as old anyway)."""
        now = self.s.now
        self.s.merge_aborted = {a: None for a in self.s.merge_aborted if a[1] > new.view_id}
        self.s.lost.update({m: now for m in old.members if m not in new.members})
        for node in new.members:
            self.s.lost.pop(node, None)
        return arm_probe(self.s)

    def probe(self) -> list[Effect]:
        s = self.s
        s.probe_armed = False
        horizon = s.now - s.config.probe_for_us
        s.lost = {n: t for n, t in s.lost.items() if t >= horizon}
        view = s.view
        effects: list[Effect] = []
        if (view is not None and view.leader == s.node and not s.frozen
                and s.status in ("member", "leaving")):
            probe = MMergeProbe(view.view_id, list(view.members))
            effects += [Send(n, probe, control=True) for n in sorted_nodes(list(s.lost))
                        if n not in view.members]
        return effects + arm_probe(self.s)

    def _on_probe(self, sender: NodeId, view_id: int, members: tuple[NodeId, ...]
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
        lowest = sorted_nodes(list(members))[0]
        if node_sort_key(lowest) < node_sort_key(s.node):
            note(s.lower_probes, lowest, s.now)
        if s.frozen or self.busy or s.flush is not None or s.suspects & set(view.members):
            return []  # busy, or a flush of our own comes first; the next probe comes
        ours = [m for m in view.members if m not in s.suspects]
        union = sorted_nodes([*ours, *members])
        if union[0] == s.node:
            if self._lower_side_probing():
                # Three sides or more: a side with a lower node than ours probes us too.
                # It merges the sides one by one; a merge of ours would cross its merge
                # with us (each needs our members) and both fail, again and again.
                return []
            return self._start(view_id, union)
        other = members[0]
        last = s.probe_answered.get(other)
        if last is not None and s.now - last < s.config.probe_us:
            return []
        # An answer older than `probe_us` no longer holds the next one back: forget it.
        horizon = s.now - s.config.probe_us
        s.probe_answered = {n: t for n, t in s.probe_answered.items() if t > horizon}
        note(s.probe_answered, other, s.now)
        return [Send(other, MMergeProbe(view.view_id, list(view.members)), control=True)]

    def _lower_side_probing(self) -> bool:
        """A side whose lowest node is below us probed us within two probe periods."""
        s = self.s
        horizon = s.now - 2 * s.config.probe_us
        s.lower_probes = {n: t for n, t in s.lower_probes.items() if t >= horizon}
        return bool(s.lower_probes)
