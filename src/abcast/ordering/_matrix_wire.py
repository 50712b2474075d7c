"""Wire headers of the `matrix` ordering, and the matrix clock it piggybacks.

Rules: declarations only (msgspec Structs), plus the matrix clock's in-memory form and
its merge rules, which are pure bookkeeping. What the protocol does with them lives in
abcast.ordering.matrix.

Every packet of an origin's *stream* (a write, a JOIN, a LEAVE, a NOPE heartbeat) carries
the origin's stream number `n` (1, 2, 3 … per origin: receivers process an origin's
stream in that order, the channel below delivers in any order), its Lamport stamp `ts`
and the origin's whole matrix clock. The rest is the open world's side traffic, outside
the streams: a joiner's `MxJoinAsk`, the contact's `MxWelcome` (the object state and the
contact's catch-up), every other member's `MxCatchup`, and `MxFarewell` to a leaver.

Matrix clock at node i: `M[i][k]` (i's own row) is the stamp of the latest packet of k's
stream that i has processed, `M[i][i]` is i's Lamport clock; any other row `M[j][·]` is
what i has learnt of j's row from piggybacked matrices (merged by maximum). Only i's own
row decides what i may execute; the other rows say what others have received.
"""

from __future__ import annotations

import enum
from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId

#: most nodes a piggybacked matrix or a welcome's member list may name
MAX_NODES: Final = 256
#: most operations one catch-up carries (an origin's unexecuted ones; a bound, not a policy)
MAX_CATCHUP_OPS: Final = 1 << 16


class OpKind(enum.IntEnum):
    WRITE = 0
    JOIN = 1
    LEAVE = 2


class MatrixWire(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A square matrix: `rows[r][c]` is M[nodes[r]][nodes[c]]."""

    nodes: Annotated[list[NodeField], msgspec.Meta(max_length=MAX_NODES)]
    rows: Annotated[list[list[Count]], msgspec.Meta(max_length=MAX_NODES)]


class MxWrite(Header, frozen=True):
    n: Seq
    ts: Seq
    seq: Seq  # the application's message number (its payload rides in the packet)
    clock: MatrixWire


class MxJoin(Header, frozen=True):
    n: Seq
    ts: Seq
    joiner: NodeField
    clock: MatrixWire


class MxLeave(Header, frozen=True):
    n: Seq
    ts: Seq
    clock: MatrixWire


class MxNope(Header, frozen=True):
    """A heartbeat: "my clock is ts; nothing I send from now on is stamped lower"."""

    n: Seq
    ts: Count
    clock: MatrixWire


class OpRecord(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """An operation of the sender's stream, carried again in a catch-up."""

    ts: Seq
    kind: OpKind
    seq: Count  # WRITE: the application's message number
    subject: str  # JOIN: the joiner
    payload: bytes


class Catchup(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What a joiner needs from one member's stream: the operations it sent before it
    added the joiner to its view and that come after the JOIN in the order, and where
    its stream goes on (`next_n`, at stamp `ts`)."""

    next_n: Seq
    ts: Count
    ops: Annotated[list[OpRecord], msgspec.Meta(max_length=MAX_CATCHUP_OPS)]
    clock: MatrixWire


class MxJoinAsk(Header, frozen=True):
    """A node outside the group asks a member to stamp its JOIN."""


class MxJoinRedirect(Header, frozen=True):
    """A contact that is leaving cannot admit anyone: ask one of these members."""

    members: Annotated[list[NodeField], msgspec.Meta(max_length=MAX_NODES)]


class MxWelcome(Header, frozen=True):
    """The contact's answer, sent once it executed the JOIN: the view from there on, the
    object state at the JOIN's position in the order, and its own catch-up."""

    view_id: Count
    members: Annotated[list[NodeField], msgspec.Meta(max_length=MAX_NODES)]
    state: bytes
    catchup: Catchup


class MxCatchup(Header, frozen=True):
    catchup: Catchup


class MxFarewell(Header, frozen=True):
    """A member executed the recipient's LEAVE: it holds the leaver's whole stream, and
    once the leaver has processed the member's stream up to `after_n` it may take `ts`
    as the member's stamp (the member sends the leaver nothing more; without this the
    leaver could wait forever for a stamp to execute what precedes its LEAVE)."""

    after_n: Count
    ts: Count


class MxFarewellAck(Header, frozen=True):
    """The leaver has used the farewell (and the member's stream up to it)."""


MatrixHeader = (
    MxWrite | MxJoin | MxLeave | MxNope | MxJoinAsk | MxJoinRedirect | MxWelcome | MxCatchup
    | MxFarewell | MxFarewellAck
)
StreamHeader = MxWrite | MxJoin | MxLeave | MxNope


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

    def highest(self) -> int:
        """The largest entry anywhere (a joiner's clock starts there)."""
        return max(v for row in self._rows.values() for v in row.values())

    def forget(self, node: NodeId) -> None:
        self._rows.pop(node, None)
        for row in self._rows.values():
            row.pop(node, None)

    def wire(self, nodes: tuple[NodeId, ...]) -> MatrixWire:
        rows = self._rows
        empty: dict[NodeId, int] = {}
        return MatrixWire(
            list(nodes),
            [[max(0, rows.get(r, empty).get(c, 0)) for c in nodes] for r in nodes],
        )
