"""`RunFacts`: one run's trace rows indexed the ways the checks need them, each index
built on first use and shared by every check of that run.

Rules: vocabulary of docs/checks.md, nothing more. A message is `(group, origin, seq)`;
a delivery's position is its row's `index`; a node is correct when it has no `crash` row
in the run; `Violation` is the record every check returns. Rows a check cannot place are
skipped: a `send`, `deliver` or `opt_deliver` row without origin or seq, a `deliver` row
without index, a `view` row without view_id (for who-installed-which-view; it still
tells that its group has views), a null entry of a `deps` map (no bound) or of a
`members` list (no node). `group` is
compared as a plain value, so rows with a null group form one group of their own. A
node's snapshots (docs/checks.md, "Joiners and rejoined nodes") are indexed here too: its
incarnations (delimited by its `recover` rows), the admission view of each, and per origin
the top of the prefix the group delivered before it; a delivery is judged with the
snapshot of the incarnation it was written in. A node's deliveries are read in
DELIVERY_ORDER and its view rows in VIEW_ROW_ORDER, which both checkers share. This
module decides no violation;
abcast.checks.properties and abcast.checks.views do.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import accumulate
from operator import attrgetter
from typing import Any, Final

from abcast.ids import NodeOrder, node_sort_key
from abcast.trace.rows import EventRow

#: a message id: (group, origin, seq)
MessageKey = tuple[str | None, str, int]
#: (group, origin): one origin's stream of messages in one group
StreamKey = tuple[str | None, str]
#: where a node's first incarnation begins (the later ones begin at its `recover` rows)
FIRST_INCARNATION = -(2**63)


def node_order(node: str) -> NodeOrder:
    """The node order of the checks (n2 before n10); the raw string breaks ties."""
    return node_sort_key(node)


# The two row orders both checkers read a node's rows in (docs/checks.md, "Fine print").
# A writer gives each row its own index and t_ns; a trace may still repeat both, and
# then these columns, the same names as EventRow fields and as event columns (Spark's
# windows order by them: abcast.pipeline), settle the order, so no verdict depends on
# the order of rows in a file. Strings compare as code points (Spark: UTF-8 bytes, the
# same order).

#: a node's deliveries: position, then t_ns, then the message (origin, seq)
DELIVERY_ORDER: Final = ("index", "t_ns", "origin", "seq")
#: a node's view rows: t_ns, then index (null as 0), view_id, then the member list as a
#: sorted set (a null list first)
VIEW_ROW_ORDER: Final = ("t_ns", "index", "view_id", "members")

#: a node's opt_deliver or deliver rows of one message, as LOCAL_ORDER picks its latest
#: and earliest: t_ns, then index (a null index first)
TIME_ORDER: Final = ("t_ns", "index")

delivery_order: Final = attrgetter(*DELIVERY_ORDER)
"""The sort key of a deliver row (one with index, origin and seq) in DELIVERY_ORDER."""


def member_set(members: Iterable[str | None] | None) -> tuple[str, ...] | None:
    """A view row's member list as the checks compare it: a sorted set, a null entry
    (which names no node) left out; a null list stays None."""
    return None if members is None else tuple(sorted({m for m in members if m is not None}))


def time_order(row: EventRow) -> tuple[int, bool, int]:
    """The sort key of a row in TIME_ORDER."""
    return (row.t_ns, row.index is not None, row.index or 0)


def view_row_order(row: EventRow) -> tuple[Any, ...]:
    """The sort key of a view row (one with a view_id) in VIEW_ROW_ORDER."""
    members = member_set(row.members)
    return (row.t_ns, row.index or 0, row.view_id,
            (0, ()) if members is None else (1, members))


@dataclass(frozen=True, slots=True)
class Violation:
    """One unit of one code, with its counterexample (layout: abcast.checks.properties)."""

    run_id: str
    code: str
    nodes: tuple[str, ...]
    messages: tuple[MessageKey, ...]
    positions: tuple[int, ...]
    detail: str


def show_message(m: MessageKey) -> str:
    """"origin#seq@group" ("origin#seq" for a null group), for detail text."""
    group, origin, seq = m
    return f"{origin}#{seq}" if group is None else f"{origin}#{seq}@{group}"


@dataclass(frozen=True, slots=True)
class Delivery:
    node: str
    message: MessageKey
    position: int
    view_id: int | None
    #: when it was written: places it in one of the node's incarnations
    t_ns: int


class Reach:
    """For one node q and one stream (group, o'): by which position q had delivered all of
    o's messages base+1..j, for each j (docs/checks.md, CAUSAL_ORDER).

    `base` is the lowest seq q delivers from the stream, minus one, raised to the top of
    the snapshot it is judged with (`RunFacts.snapshot_top`: the one of the incarnation
    of the delivery asking) when that is higher. Positions are first deliveries;
    the running maximum of (position, seq) over seqs base+1, base+2, … stops at the first
    hole, beyond which the answer is "never".
    """

    __slots__ = ("base", "first_position", "latest", "reach")

    def __init__(self, first_position: dict[int, int], snapshot_top: int = 0) -> None:
        self.first_position = first_position
        lowest = min(first_position) if first_position else snapshot_top + 1
        self.base = max(lowest - 1, snapshot_top)
        contiguous: list[tuple[int, int]] = []
        seq = self.base + 1
        while seq in first_position:
            contiguous.append((first_position[seq], seq))
            seq += 1
        #: latest[j - base - 1]: the (position, seq) q delivered last among base+1..j
        self.latest = list(accumulate(contiguous, max))
        self.reach = [position for position, _ in self.latest]

    def missing(self, bound: int, before: int) -> int | None:
        """The predecessor seq a unit names when q did not deliver all of (base, bound]
        before position `before`: the one q delivered last when one of them came too
        late, else the first it never delivered (Spark names the same); None when every
        one came before (or bound <= base)."""
        if bound <= self.base:
            return None
        top = self.base + len(self.reach)  # q delivered all of base+1..top
        probe = min(bound, top)
        if probe > self.base:
            position, seq = self.latest[probe - self.base - 1]
            if position >= before:
                return seq
        return top + 1 if bound > top else None


class RunFacts:
    """The rows of one run and the indexes the checks share."""

    def __init__(self, run_id: str, rows: Iterable[EventRow]) -> None:
        self.run_id = run_id
        self.rows = list(rows)
        # filled on demand: one per (node, stream, snapshot top) a check asks for
        self._reaches: dict[tuple[str, StreamKey, int], Reach | None] = {}

    # ------------------------------------------------------------------ nodes

    @cached_property
    def nodes(self) -> list[str]:
        """Every node with a row in the run, in node order."""
        return sorted({r.node for r in self.rows}, key=node_order)

    @cached_property
    def crashed(self) -> frozenset[str]:
        return frozenset(r.node for r in self.rows if r.kind == "crash")

    @cached_property
    def correct(self) -> list[str]:
        return [n for n in self.nodes if n not in self.crashed]

    # ------------------------------------------------------------------ sends

    @cached_property
    def sent(self) -> dict[MessageKey, dict[str, int]]:
        """Sent messages (a `send` row written by the origin itself) → their deps; several
        send rows for one message merge to the largest bound per origin."""
        sent: dict[MessageKey, dict[str, int]] = {}
        for r in self.rows:
            if r.kind != "send" or r.origin is None or r.seq is None or r.node != r.origin:
                continue
            deps = sent.setdefault((r.group, r.origin, r.seq), {})
            for origin, bound in (r.deps or {}).items():
                if bound is not None and bound > deps.get(origin, 0):  # null: no bound
                    deps[origin] = bound
        return sent

    @cached_property
    def sent_top(self) -> dict[StreamKey, int]:
        """(group, origin) -> the highest seq the origin wrote a send row for."""
        top: dict[StreamKey, int] = {}
        for group, origin, seq in self.sent:
            if seq > top.get((group, origin), 0):
                top[(group, origin)] = seq
        return top

    def lost_with_crash(self, m: MessageKey) -> bool:
        """m's send row may have died with its origin: the origin crashed and m's seq is
        above every seq it wrote a send row for (docs/checks.md, "A trace that ends
        without a close")."""
        group, origin, seq = m
        return origin in self.crashed and seq > self.sent_top.get((group, origin), 0)

    # ------------------------------------------------------------------ deliveries

    @cached_property
    def deliveries(self) -> dict[str, list[Delivery]]:
        """Each node's deliveries in DELIVERY_ORDER (position; the ties a recorder never
        makes, by t_ns, then by message)."""
        keyed: dict[str, list[tuple[Any, Delivery]]] = {}
        for r in self.rows:
            if r.kind != "deliver" or r.origin is None or r.seq is None or r.index is None:
                continue
            d = Delivery(r.node, (r.group, r.origin, r.seq), r.index, r.view_id, r.t_ns)
            keyed.setdefault(r.node, []).append((delivery_order(r), d))
        out: dict[str, list[Delivery]] = {}
        for node in sorted(keyed, key=node_order):
            items = keyed[node]
            items.sort(key=lambda item: item[0])
            out[node] = [d for _, d in items]
        return out

    @cached_property
    def positions(self) -> dict[str, dict[MessageKey, list[int]]]:
        """node → message → every position it was delivered at, ascending."""
        out: dict[str, dict[MessageKey, list[int]]] = {}
        for node, deliveries in self.deliveries.items():
            mine: dict[MessageKey, list[int]] = {}
            for d in deliveries:
                mine.setdefault(d.message, []).append(d.position)
            out[node] = mine
        return out

    @cached_property
    def _first_times(self) -> dict[tuple[str, MessageKey], int]:
        """(node, message) -> t_ns of the node's first delivery of it."""
        out: dict[tuple[str, MessageKey], int] = {}
        for node, deliveries in self.deliveries.items():
            for d in deliveries:
                out.setdefault((node, d.message), d.t_ns)
        return out

    def first_delivery_t(self, node: str, message: MessageKey) -> int:
        return self._first_times[(node, message)]

    @cached_property
    def deliverers(self) -> dict[MessageKey, list[Delivery]]:
        """message → its deliveries by any node (node order, then position)."""
        out: dict[MessageKey, list[Delivery]] = {}
        for deliveries in self.deliveries.values():
            for d in deliveries:
                out.setdefault(d.message, []).append(d)
        return out

    @cached_property
    def first_positions_by_group(self) -> dict[str | None, dict[str, dict[MessageKey, int]]]:
        """group → node → message → first position (insertion order = position order)."""
        out: dict[str | None, dict[str, dict[MessageKey, int]]] = {}
        for node, deliveries in self.deliveries.items():
            for d in deliveries:
                mine = out.setdefault(d.message[0], {}).setdefault(node, {})
                mine.setdefault(d.message, d.position)
        return out

    def reach(self, node: str, stream: StreamKey, snapshot_top: int = 0) -> Reach | None:
        """The node's Reach for a stream, judged with a snapshot of that top (the one of
        the incarnation asking), or None when it neither delivers anything from the
        stream nor holds any of it in that snapshot."""
        key = (node, stream, snapshot_top)
        if key not in self._reaches:
            first = self._first_seq_positions.get((node, stream))
            self._reaches[key] = (None if first is None and snapshot_top == 0
                                  else Reach(first or {}, snapshot_top))
        return self._reaches[key]

    @cached_property
    def _first_seq_positions(self) -> dict[tuple[str, StreamKey], dict[int, int]]:
        """(node, stream) -> seq -> the node's first position of it."""
        firsts: dict[tuple[str, StreamKey], dict[int, int]] = {}
        for node, by_message in self.positions.items():
            for (group, origin, seq), positions in by_message.items():
                firsts.setdefault((node, (group, origin)), {})[seq] = positions[0]
        return firsts

    # ------------------------------------------------------------------ snapshots

    @cached_property
    def recoveries(self) -> dict[str, list[int]]:
        """node -> the t_ns of its `recover` rows, ascending: where each incarnation after
        its first begins (a row at or after one belongs to the incarnation it begins)."""
        out: dict[str, list[int]] = {}
        for r in self.rows:
            if r.kind == "recover":
                out.setdefault(r.node, []).append(r.t_ns)
        return {node: sorted(times) for node, times in out.items()}

    def incarnation_start(self, node: str, t_ns: int) -> int:
        """The t_ns of the `recover` row that began the node's incarnation holding time
        t_ns, or FIRST_INCARNATION for its first incarnation."""
        starts = self.recoveries.get(node, [])
        k = bisect_right(starts, t_ns)
        return starts[k - 1] if k else FIRST_INCARNATION

    @cached_property
    def admissions(self) -> dict[tuple[str, str | None], tuple[list[int], list[int]]]:
        """(node, group) -> (starts, views): the incarnations that have an admission view
        (docs/checks.md, "Joiners and rejoined nodes"), in time order: where each began
        (`incarnation_start`) and its admission view J, the view_id of its first `view`
        row in that incarnation, in VIEW_ROW_ORDER (t_ns order), not counting a private
        start (a first row listing the node alone)."""
        keyed: dict[tuple[str, str | None, int], list[EventRow]] = {}
        for r in self.rows:
            if r.kind == "view" and r.view_id is not None:
                start = self.incarnation_start(r.node, r.t_ns)
                keyed.setdefault((r.node, r.group, start), []).append(r)
        chosen: dict[tuple[str, str | None], list[tuple[int, int]]] = {}
        for (node, group, start), views in keyed.items():
            ordered = sorted(views, key=view_row_order)
            first = ordered[0]
            if member_set(first.members) == (node,):
                ordered = ordered[1:]
            if ordered and ordered[0].view_id is not None:
                chosen.setdefault((node, group), []).append((start, ordered[0].view_id))
        out: dict[tuple[str, str | None], tuple[list[int], list[int]]] = {}
        for key, entries in chosen.items():
            entries.sort()
            out[key] = ([start for start, _ in entries], [view for _, view in entries])
        return out

    def admission_view(self, node: str, group: str | None, t_ns: int) -> int | None:
        """J of the node's incarnation holding time t_ns; an incarnation without one of
        its own keeps the one before it's. None when no incarnation up to it has one."""
        found = self.admissions.get((node, group))
        if found is None:
            return None
        starts, views = found
        k = bisect_right(starts, self.incarnation_start(node, t_ns))
        return views[k - 1] if k else None

    @cached_property
    def _prefix_views(self) -> dict[StreamKey, list[int]]:
        """(group, origin) -> P, where P[s-1] is the highest of the lowest views in which
        o#1..s were each delivered (by any node), for as long as o#1, o#2, … all were
        delivered in some view: o#1..s were all delivered before view J iff P[s-1] < J."""
        low_view: dict[MessageKey, int] = {}
        for deliveries in self.deliveries.values():
            for d in deliveries:
                if d.view_id is not None and d.view_id < low_view.get(d.message, d.view_id + 1):
                    low_view[d.message] = d.view_id
        out: dict[StreamKey, list[int]] = {}
        for group, origin in {(m[0], m[1]) for m in low_view}:
            prefix: list[int] = []
            seq = 1
            while (group, origin, seq) in low_view:
                view = low_view[(group, origin, seq)]
                prefix.append(max(view, prefix[-1]) if prefix else view)
                seq += 1
            if prefix:
                out[(group, origin)] = prefix
        return out

    def snapshot_top(self, node: str, stream: StreamKey, t_ns: int) -> int:
        """The top of the snapshot the node held at time t_ns, the one its incarnation
        then was admitted with: the highest s such that o#1..s were all delivered, by
        some node, in views older than that admission view (0 without one)."""
        admitted = self.admission_view(node, stream[0], t_ns)
        prefix = self._prefix_views.get(stream)
        if admitted is None or prefix is None:
            return 0
        return bisect_left(prefix, admitted)  # prefix is non-decreasing

    # ------------------------------------------------------------------ views

    @cached_property
    def groups_with_views(self) -> frozenset[str | None]:
        return frozenset(r.group for r in self.rows if r.kind == "view")

    @cached_property
    def view_installers(self) -> dict[tuple[str | None, int], frozenset[str]]:
        """(group, view_id) → the nodes that wrote a `view` row for it."""
        out: dict[tuple[str | None, int], set[str]] = {}
        for r in self.rows:
            if r.kind == "view" and r.view_id is not None:
                out.setdefault((r.group, r.view_id), set()).add(r.node)
        return {key: frozenset(nodes) for key, nodes in out.items()}

    def owes(self, delivery: Delivery, q: str) -> bool:
        """Whether correct node q is owed the message because of this delivery."""
        group = delivery.message[0]
        if group not in self.groups_with_views:
            return True
        if delivery.view_id is None:
            return False
        return q in self.view_installers.get((group, delivery.view_id), frozenset())

    # ------------------------------------------------------------------ optimistic

    @cached_property
    def local_order_rows(
        self,
    ) -> dict[tuple[str, MessageKey], tuple[list[EventRow], list[EventRow]]]:
        """(node, message) → (its opt_deliver rows, its deliver rows), for messages with
        both."""
        opt: dict[tuple[str, MessageKey], list[EventRow]] = {}
        final: dict[tuple[str, MessageKey], list[EventRow]] = {}
        for r in self.rows:
            if r.origin is None or r.seq is None:
                continue
            if r.kind == "opt_deliver":
                opt.setdefault((r.node, (r.group, r.origin, r.seq)), []).append(r)
            elif r.kind == "deliver":
                final.setdefault((r.node, (r.group, r.origin, r.seq)), []).append(r)
        return {key: (rows, final[key]) for key, rows in opt.items() if key in final}
