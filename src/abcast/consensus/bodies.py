"""The message bodies a Chandra-Toueg member holds, what is decided of each origin, and
the fetches of bodies it lacks.

Rules. Consensus decides message *ids*; the bodies travel separately (each origin
multicasts its own) and a node may learn a decision before a body. This store keeps
bodies by origin until they are stable, knows per origin the first seq not yet decided
(FIFO: a proposal takes each origin's held bodies contiguously from there), and asks
for missing bodies: first of whoever proposed or decided them, then — when that source
is suspected, gone, or silent past a retry — of every member. A late copy of a decided
and delivered body is not kept again. What it does not know: rounds, quorums, views
(the caller passes the members to ask) or time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from abcast.consensus.messages import Fetch
from abcast.effects import Effect, Multicast, Send
from abcast.ids import MsgId, NodeId, sorted_nodes

ANYONE = "*"  # a fetch sent to every other member


class BodyStore:
    def __init__(self, node: NodeId) -> None:
        self.node = node
        self._bodies: dict[NodeId, dict[int, bytes]] = {}
        self.decided_next: dict[NodeId, int] = {}  # per origin: first seq not yet decided
        self.fetching: dict[MsgId, NodeId] = {}  # asked for, and of whom

    # -- holding -------------------------------------------------------------------------
    def held(self) -> int:
        return sum(len(b) for b in self._bodies.values())

    def empty(self) -> bool:
        return not any(self._bodies.values())

    def put(self, origin: NodeId, seq: int, body: bytes) -> None:
        m = MsgId(origin, seq)
        if seq < self.decided_next.get(origin, 1) and m not in self.fetching:
            return  # decided and delivered, or collected: a late copy
        self._bodies.setdefault(origin, {})[seq] = body
        self.fetching.pop(m, None)

    def keep(self, origin: NodeId, seq: int, body: bytes) -> None:
        """Keep a body unconditionally (a joiner, before it knows the cut)."""
        self._bodies.setdefault(origin, {})[seq] = body

    def has(self, m: MsgId) -> bool:
        return m.seq in self._bodies.get(m.origin, {})

    def body(self, m: MsgId) -> bytes:
        return self._bodies[m.origin][m.seq]

    def missing(self, ids: Iterable[MsgId]) -> list[MsgId]:
        return [m for m in ids if not self.has(m)]

    def forget(self, ids: Iterable[MsgId]) -> None:
        """Stable: every member has delivered these."""
        for m in ids:
            held = self._bodies.get(m.origin)
            if held is not None:
                held.pop(m.seq, None)

    # -- deciding ------------------------------------------------------------------------
    def decided(self, ids: Iterable[MsgId]) -> None:
        for m in ids:
            if m.seq >= self.decided_next.get(m.origin, 1):
                self.decided_next[m.origin] = m.seq + 1

    def drop_undecided(self, origin: NodeId) -> None:
        """`origin` left the group: what it sent that was not decided is never decided."""
        held = self._bodies.get(origin, {})
        for seq in [s for s in held if s >= self.decided_next.get(origin, 1)]:
            del held[seq]

    def start_at(self, cut: Mapping[NodeId, int]) -> None:
        """A joiner's cut: everything below it is in the state it was given."""
        self.decided_next = dict(cut)
        for origin, held in self._bodies.items():
            for seq in [s for s in held if s < cut.get(origin, 1)]:
                del held[seq]

    def above(self, cut: Mapping[NodeId, int]) -> list[tuple[NodeId, int, bytes]]:
        """Held bodies at or above a cut (a welcome hands them to the joiner, who would
        otherwise lack those sent before it joined)."""
        return [(o, s, b) for o, held in self._bodies.items() for s, b in sorted(held.items())
                if s >= cut.get(o, 1)]

    def runs(
        self, members: Iterable[NodeId], limit: int | None
    ) -> tuple[list[MsgId], dict[NodeId, int], set[NodeId]]:
        """What a proposal may carry: per member origin, the held bodies contiguous after
        the decided ones, at most `limit` in all. Returns the ids, per origin the first
        seq left after them, and the origins whose held run the limit cut short."""
        ids: list[MsgId] = []
        next_after = dict(self.decided_next)
        cut_short: set[NodeId] = set()
        wanted = set(members)
        for origin in sorted_nodes([o for o in self._bodies if o in wanted]):
            held = self._bodies[origin]
            seq = self.decided_next.get(origin, 1)
            while seq in held:
                if limit is not None and len(ids) >= limit:
                    cut_short.add(origin)
                    break
                ids.append(MsgId(origin, seq))
                seq += 1
            next_after[origin] = seq
        return ids, next_after, cut_short

    # -- fetching ------------------------------------------------------------------------
    def fetch(
        self, missing: list[MsgId], source: NodeId, members: Iterable[NodeId],
        suspects: set[NodeId],
    ) -> list[Effect]:
        new = [m for m in missing if m not in self.fetching]
        if not new:
            return []
        if source == self.node or source in suspects:
            source = ANYONE
        for m in new:
            self.fetching[m] = source
        header = Fetch([(m.origin, m.seq) for m in new])
        if source == ANYONE:
            others = tuple(o for o in members if o != self.node and o not in suspects)
            return [Multicast(others, header)] if others else []
        return [Send(source, header)]

    def refetch(
        self, wanted: list[tuple[list[MsgId], NodeId]], members: Iterable[NodeId],
        suspects: set[NodeId],
    ) -> list[Effect]:
        """Ask again for what is still missing: what was asked before goes to everyone
        (its source may have gone, or crashed after we suspected it); what nobody needs
        any more is forgotten."""
        asked = self.fetching
        self.fetching = {}
        members = tuple(members)
        again = [m for missing, _ in wanted for m in missing if m in asked]
        effects = self.fetch(again, ANYONE, members, suspects)
        for missing, source in wanted:
            effects += self.fetch(missing, source, members, suspects)
        return effects

    def sources_lost(self, node: NodeId) -> list[MsgId]:
        """Bodies asked of `node` (now suspected): they must be asked of others."""
        lost = [m for m, source in self.fetching.items() if source == node]
        for m in lost:
            del self.fetching[m]
        return lost

    def answer(self, ids: list[tuple[str, int]]) -> list[tuple[str, int, bytes]]:
        return [(o, s, self._bodies[o][s]) for o, s in ids if s in self._bodies.get(o, {})]
