"""Rows that tie in a node's order have one order all the same (docs/checks.md, "Fine
print"): a node's deliveries at one index and one t_ns in DELIVERY_ORDER (then by
message), its view rows at one t_ns in VIEW_ROW_ORDER (then by index, view_id, member
set). No writer makes such ties, but a trace may hold them, and before this order the
in-memory checks kept them in file order (a stable sort) while Spark's windows took any
order: the verdict depended on how the rows sat in the files. Here it must not, and the
ties resolve as the fine print says. (tests/spark/test_spark_agrees_with_memory holds
Spark to the same traces.)
"""

from __future__ import annotations

import random
from dataclasses import replace

from abcast.testing import (
    CODES,
    FIFO_ORDER,
    LOCAL_ORDER,
    TOTAL_ORDER,
    VIEW_CONSISTENCY,
    VIRTUAL_SYNCHRONY,
    TraceBuilder,
    check_events,
    count_by_code,
)
from abcast.testing.builders import tied_rows
from abcast.trace.rows import EventRow
from abcast.trace.schema import GUARANTEES


def _counts(rows: list[EventRow]) -> dict[str, int]:
    return count_by_code(check_events(rows, GUARANTEES), CODES)


def _tie(rows: list[EventRow], node: str, kind: str, *, t_ns: int,
         index: int | None = None) -> list[EventRow]:
    """The rows with every `kind` row of `node` moved to one index and t_ns."""
    return [replace(r, index=index, t_ns=t_ns) if (r.node, r.kind) == (node, kind) else r
            for r in rows]


def _swapped(rows: list[EventRow], node: str, kind: str) -> list[EventRow]:
    """The rows with the `kind` rows of `node` in the opposite file order."""
    picked = [r for r in rows if (r.node, r.kind) == (node, kind)]
    others = [r for r in rows if (r.node, r.kind) != (node, kind)]
    return others + picked[::-1]


def test_no_verdict_depends_on_the_order_of_tied_rows() -> None:
    judged = 0
    for seed in range(60):
        rows = tied_rows(seed)
        expected = _counts(rows)
        judged += sum(expected.values())
        orders = [rows[::-1]]
        for k in range(3):
            shuffled = list(rows)
            random.Random(k).shuffle(shuffled)
            orders.append(shuffled)
        for other in orders:
            assert _counts(other) == expected, f"seed {seed}"
    assert judged > 100  # the traces hold violations to judge, not only clean runs


def test_two_messages_at_one_position_are_in_message_order() -> None:
    """n2 wrote n1#2 and n1#1 at one index and t_ns: n1#1 comes first (seq order), so
    there is no FIFO descent, whichever row the file holds first."""
    b = TraceBuilder()
    b.send("n1")
    b.send("n1")
    b.deliver("n2", "n1", 2)
    b.deliver("n2", "n1", 1)
    tied = _tie(b.rows(), "n2", "deliver", index=1, t_ns=10_000)
    for order in (tied, _swapped(tied, "n2", "deliver")):
        assert _counts(order)[FIFO_ORDER] == 0


def test_total_order_walks_a_tie_in_message_order() -> None:
    """n1 wrote n1#1 and n2#1 at one index and t_ns; n2 delivered n2#1 first. In n1's
    order n1#1 comes first (origin n1 before n2), so the pair disagrees once, in either
    file order, with the same counterexample."""
    b = TraceBuilder()
    b.send("n1")
    b.send("n2")
    b.deliver("n1", "n2", 1)
    b.deliver("n1", "n1", 1)
    b.deliver("n2", "n2", 1)
    b.deliver("n2", "n1", 1)
    tied = _tie(b.rows(), "n1", "deliver", index=1, t_ns=10_000)
    for order in (tied, _swapped(tied, "n1", "deliver")):
        found = [v for v in check_events(order, ["total"]) if v.code == TOTAL_ORDER]
        assert [(v.nodes, v.messages, v.positions) for v in found] == [
            (("n1", "n2"), (("g", "n1", 1), ("g", "n2", 1)), (1, 1, 2, 1))]


def test_view_rows_at_one_time_are_in_view_order() -> None:
    """A joiner wrote its private start and its first group view at one t_ns, and n1 two
    views at one t_ns: the private start (view 0) comes first and is dropped, n1's views
    rise, whichever row the file holds first; n1 and n2 then move 1 -> 2 together and
    deliver the same, so nothing is reported."""
    b = TraceBuilder()
    b.view("n3", 0, ["n3"])
    b.view("n3", 1, ["n1", "n2", "n3"])
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2", "n3"])
        b.view(node, 2, ["n1", "n2"])
    rows = _tie(_tie(b.rows(), "n3", "view", t_ns=5_000), "n1", "view", t_ns=7_000)
    for order in (rows, _swapped(_swapped(rows, "n3", "view"), "n1", "view")):
        counts = _counts(order)
        assert counts[VIEW_CONSISTENCY] == 0
        assert counts[VIRTUAL_SYNCHRONY] == 0


def test_local_order_shows_the_latest_of_tied_rows_by_index() -> None:
    """n2 opt-delivered n1#1 twice at one t_ns (indices 1 and 2), after delivering it: the
    unit shows the opt_deliver row with the higher index (TIME_ORDER), in either file
    order."""
    b = TraceBuilder()
    b.send("n1")
    b.deliver("n2", "n1", 1)
    b.opt_deliver("n2", "n1", 1)
    b.opt_deliver("n2", "n1", 1)
    tied = [replace(r, t_ns=9_000) if r.kind == "opt_deliver" else r for r in b.rows()]
    for order in (tied, _swapped(tied, "n2", "opt_deliver")):
        found = check_events(order, ["local_order"])
        assert [(v.code, v.positions) for v in found] == [(LOCAL_ORDER, (1, 2))]
