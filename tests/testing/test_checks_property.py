"""Hypothesis: any correct total-order run passes every check; one adjacent swap at one
node is exactly one TOTAL_ORDER unit per pair that node belongs to."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from abcast.testing import (
    FIFO_ORDER,
    TOTAL_ORDER,
    TraceBuilder,
    check_events,
    count_by_code,
)
from abcast.trace import GUARANTEES

Message = tuple[str | None, str, int]
Run = tuple[list[str], list[Message], dict[Message, dict[str, int]]]


@st.composite
def total_order_runs(draw: st.DrawFn) -> Run:
    """Nodes, one delivery order respecting each origin's FIFO, and causally sound deps:
    an origin sends after having delivered some prefix of that order (never shrinking)."""
    n = draw(st.integers(2, 5))
    nodes = [f"n{i}" for i in range(1, n + 1)]
    labels = [o for o in nodes for _ in range(draw(st.integers(0, 5)))]
    shuffled = draw(st.permutations(labels))
    order: list[Message] = []
    next_seq = dict.fromkeys(nodes, 1)
    for origin in shuffled:
        order.append(("g", origin, next_seq[origin]))
        next_seq[origin] += 1
    deps: dict[Message, dict[str, int]] = {}
    seen_prefix = dict.fromkeys(nodes, 0)
    for t, m in enumerate(order):
        origin = m[1]
        seen_prefix[origin] = draw(st.integers(seen_prefix[origin], t))
        prefix = order[: seen_prefix[origin]]
        deps[m] = {o: sum(1 for p in prefix if p[1] == o) for o in nodes
                   if o != origin and any(p[1] == o for p in prefix)}
    return nodes, order, deps


def build(nodes: list[str], order: list[Message], deps: dict[Message, dict[str, int]],
          per_node: dict[str, list[Message]], optimistic: set[str], crashed: set[str],
          ) -> TraceBuilder:
    b = TraceBuilder()
    for node in nodes:
        b.view(node, 1, nodes)
    for m in order:
        b.send(m[1], m[2], deps=deps[m])
    for node in nodes:
        for _, origin, seq in per_node[node]:
            if node in optimistic:
                b.opt_deliver(node, origin, seq)
            b.deliver(node, origin, seq)
        if node in crashed:
            b.crash(node)
    return b


@settings(max_examples=150, deadline=None)
@given(run=total_order_runs(), data=st.data())
def test_correct_total_order_run_passes_every_check(
    run: Run, data: st.DataObject,
) -> None:
    nodes, order, deps = run
    optimistic = set(data.draw(st.lists(st.sampled_from(nodes), max_size=2)))
    # at most one crash: a crashed node delivered a prefix of the common order
    crashed = set(data.draw(st.lists(st.sampled_from(nodes), max_size=1)))
    per_node = {n: list(order) for n in nodes}
    for n in crashed:
        per_node[n] = order[: data.draw(st.integers(0, len(order)))]
    b = build(nodes, order, deps, per_node, optimistic, crashed)
    assert check_events(b.rows(), GUARANTEES) == []


@settings(max_examples=150, deadline=None)
@given(run=total_order_runs(), data=st.data())
def test_one_adjacent_swap_is_one_total_order_unit_per_pair(
    run: Run, data: st.DataObject,
) -> None:
    nodes, order, deps = run
    swappable = [i for i in range(len(order) - 1) if order[i][1] != order[i + 1][1]]
    assume(swappable)
    i = data.draw(st.sampled_from(swappable))
    x = data.draw(st.sampled_from(nodes))
    per_node = {n: list(order) for n in nodes}
    per_node[x][i], per_node[x][i + 1] = per_node[x][i + 1], per_node[x][i]
    b = build(nodes, order, deps, per_node, set(), set())
    counts = count_by_code(check_events(b.rows(), GUARANTEES), codes=(TOTAL_ORDER, FIFO_ORDER))
    assert counts[TOTAL_ORDER] == len(nodes) - 1
    assert counts[FIFO_ORDER] == 0  # the two messages have different origins
    found = check_events(b.rows(), ["total"])
    assert all(x in v.nodes for v in found)
    assert all(set(v.messages) == {order[i], order[i + 1]} for v in found)
