"""Wire headers of the `matrix` ordering, and the matrix clock it piggybacks.

Rules: declarations only (msgspec Structs), plus the matrix clock's in-memory form and
its merge rules, which are pure bookkeeping. What the protocol does with them lives in
abcast.ordering.matrix; joins, leaves and crashes are the membership layer's
(abcast.membership.wire).

Every packet of an origin's *stream* in a view (a write or a NOPE heartbeat) carries the
view it was sent in (a late packet of a settled view is dropped), the origin's stream
number `n` in that view (1, 2, 3 …: receivers process an origin's stream in that order,
the channel below delivers in any order), its Lamport stamp `ts` and the origin's whole
matrix clock.

Matrix clock at node i: `M[i][k]` (i's own row) is the stamp of the latest packet of k's
stream that i has processed, `M[i][i]` is i's Lamport clock; any other row `M[j][·]` is
what i has learnt of j's row from piggybacked matrices (merged by maximum). Only i's own
row decides what i may execute; the other rows say what others have received.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId

#: most nodes a piggybacked matrix may name
MAX_NODES: Final = 256


class MatrixWire(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A square matrix: `rows[r][c]` is M[nodes[r]][nodes[c]]."""

    nodes: Annotated[list[NodeField], msgspec.Meta(max_length=MAX_NODES)]
    rows: Annotated[list[list[Count]], msgspec.Meta(max_length=MAX_NODES)]


class MxWrite(Header, frozen=True):
    view: Count
    n: Seq
    ts: Seq
    seq: Seq  # the application's message number (its payload rides in the packet)
    clock: MatrixWire


class MxNope(Header, frozen=True):
    """A heartbeat: "my clock is ts; nothing I send from now on is stamped lower"."""

    view: Count
    n: Seq
    ts: Count
    clock: MatrixWire


MatrixHeader = MxWrite | MxNope
StreamHeader = MxWrite | MxNope


class MatrixClock:
    """The matrix clock of node `me` over the nodes it knows (see the module docstring)."""

    __slots__ = ("_rows", "me")

    def __init__(self, me: NodeId) -> None:
        self.me = me
        self._rows: dict[NodeId, dict[NodeId, int]] = {me: {me: 0}}

    @property
    def time(self) -> int:
        """This node's Lamport clock, M[me][me]."""
        return self._rows[self.me][self.me]

    def advance_to(self, ts: int) -> None:
        own = self._rows[self.me]
        own[self.me] = max(own[self.me], ts)

    def tick(self) -> int:
        """A new stamp for an operation of this node (strictly above everything seen)."""
        own = self._rows[self.me]
        own[self.me] += 1
        return own[self.me]

    def rows(self) -> dict[NodeId, dict[NodeId, int]]:
        """A copy of the matrix, row by row (for `Matrix.inspect`)."""
        return {row: dict(cols) for row, cols in self._rows.items()}

    def direct(self, node: NodeId) -> int | None:
        """M[me][node]: the latest stamp processed from node's stream (None: none yet)."""
        return self._rows[self.me].get(node)

    def set_direct(self, node: NodeId, ts: int) -> None:
        own = self._rows[self.me]
        if ts > own.get(node, -1):
            own[node] = ts
        self.advance_to(ts)

    def known(self, row: NodeId, col: NodeId) -> int:
        """M[row][col] as far as this node knows (-1: nothing known)."""
        return self._rows.get(row, {}).get(col, -1)

    def merge(self, wire: MatrixWire, members: frozenset[NodeId]) -> None:
        """Take the maximum with a piggybacked matrix, over rows and columns of
        `members`; this node's own row is never taken from others."""
        nodes = wire.nodes
        if len(wire.rows) != len(nodes) or any(len(r) != len(nodes) for r in wire.rows):
            raise RemoteProtocolError(f"matrix clock is not square over {len(nodes)} nodes")
        cols = [(i, c) for i, c in enumerate(nodes) if c in members]
        for r, row_node in enumerate(nodes):
            if row_node == self.me or row_node not in members:
                continue
            row = self._rows.setdefault(row_node, {})
            values = wire.rows[r]
            for i, c in cols:
                v = values[i]
                if v > row.get(c, -1):
                    row[c] = v

    def row(self) -> dict[NodeId, int]:
        """A copy of this node's own row (its clock included)."""
        return dict(self._rows[self.me])

    def keep(self, members: frozenset[NodeId]) -> None:
        """Drop every row and column outside `members` (departed nodes; never our own)."""
        rows = self._rows
        for node in [r for r in rows if r not in members and r != self.me]:
            del rows[node]
        for row in rows.values():
            for node in [c for c in row if c not in members and c != self.me]:
                del row[node]

    def wire(self, nodes: tuple[NodeId, ...]) -> MatrixWire:
        rows = self._rows
        empty: dict[NodeId, int] = {}
        return MatrixWire(
            list(nodes),
            [[max(0, rows.get(r, empty).get(c, 0)) for c in nodes] for r in nodes],
        )
