"""FIFO_ORDER, CAUSAL_ORDER, TOTAL_ORDER and LOCAL_ORDER: clean logs pass, planted
descents, holes, causal inversions, order disagreements and late optimistic deliveries
are found in the units of docs/checks.md, with their counterexamples."""

from __future__ import annotations

from abcast.testing import (
    CAUSAL_ORDER,
    FIFO_ORDER,
    LOCAL_ORDER,
    TOTAL_ORDER,
    TraceBuilder,
    check_causal,
    check_fifo,
    check_local_order,
    check_total_order,
    count_by_code,
)
from abcast.testing.builders import rejoined_optimistic


def fifo_of(*seqs: int, origin: str = "n1") -> TraceBuilder:
    b = TraceBuilder()
    for s in sorted(set(seqs)):
        b.send(origin, s)
    for s in seqs:
        b.deliver("n2", origin, s)
    return b


# ---------------------------------------------------------------- FIFO


def test_fifo_in_order_and_late_start_pass() -> None:
    assert check_fifo(fifo_of(1, 2, 3, 4).rows()) == []
    assert check_fifo(fifo_of(5, 6, 7).rows()) == []  # a joiner starts late: no hole


def test_fifo_one_descent_with_its_counterexample() -> None:
    found = check_fifo(fifo_of(1, 3, 2).rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (FIFO_ORDER, ("n2",), (("g", "n1", 3), ("g", "n1", 2)), (2, 3))]


def test_fifo_each_hole_is_one_unit_named_by_its_ends() -> None:
    found = check_fifo(fifo_of(1, 4).rows())
    assert [v.messages for v in found] == [(("g", "n1", 2), ("g", "n1", 3))]
    found = check_fifo(fifo_of(1, 3, 4, 7).rows())  # two holes: n1#2, n1#5..6
    assert [v.messages for v in found] == [(("g", "n1", 2),),
                                           (("g", "n1", 5), ("g", "n1", 6))]


def test_fifo_descents_and_holes_add_up() -> None:
    # 3 then 1: one descent; 1→2→5: ascents; 4 never delivered: one hole
    assert len(check_fifo(fifo_of(3, 1, 2, 5).rows())) == 2
    # 5,4,3,2,1: four adjacent descents, no hole
    assert len(check_fifo(fifo_of(5, 4, 3, 2, 1).rows())) == 4
    # a redelivered older message is a descent (the duplicate itself is INTEGRITY's)
    assert len(check_fifo(fifo_of(1, 2, 1).rows())) == 1


def test_fifo_is_per_origin_and_per_group() -> None:
    b = TraceBuilder()
    b.send("n1", 1)
    b.send("n1", 2)
    b.send("n3", 1)
    b.send("n1", 1, group="h")
    b.deliver("n2", "n1", 1)
    b.deliver("n2", "n3", 1)  # other origins in between: not a descent
    b.deliver("n2", "n1", 2)
    b.deliver("n2", "n1", 1, group="h")  # seq 1 of another group's stream
    assert check_fifo(b.rows()) == []


# ---------------------------------------------------------------- CAUSAL


def causal_chain() -> TraceBuilder:
    """n1 sends a; n2 delivers a, then sends b depending on it."""
    b = TraceBuilder()
    b.send("n1")
    b.deliver("n1", "n1", 1)
    b.deliver("n2", "n1", 1)
    b.send("n2", deps={"n1": 1})
    b.deliver("n2", "n2", 1)
    b.deliver("n1", "n2", 1)
    return b


def test_causal_respected_passes() -> None:
    b = causal_chain()
    b.deliver("n3", "n1", 1)
    b.deliver("n3", "n2", 1)
    assert check_causal(b.rows()) == []


def test_causal_effect_before_cause() -> None:
    b = causal_chain()
    b.deliver("n3", "n2", 1)
    b.deliver("n3", "n1", 1)
    found = check_causal(b.rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (CAUSAL_ORDER, ("n3",), (("g", "n2", 1), ("g", "n1", 1)), (1, 2))]


def test_causal_cause_never_delivered() -> None:
    b = causal_chain()
    b.deliver("n3", "n2", 1)
    found = check_causal(b.rows())
    assert [(v.nodes, v.messages, v.positions) for v in found] == [
        (("n3",), (("g", "n2", 1), ("g", "n1", 1)), (1,))]


def test_causal_own_earlier_broadcasts_are_implied_predecessors() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.send("n1")  # no deps: its predecessor n1#1 is implied
    b.deliver("n2", "n1", 2)
    b.deliver("n2", "n1", 1)
    found = check_causal(b.rows())
    assert [(v.nodes, v.messages, v.positions) for v in found] == [
        (("n2",), (("g", "n1", 2), ("g", "n1", 1)), (1, 2))]


def test_causal_unit_is_per_predecessor_origin() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.send("n2")
    b.send("n3")
    b.send("n3", deps={"n1": 1, "n2": 1})  # n3#2: preds n1#1, n2#1 and (own) n3#1
    b.deliver("n4", "n3", 2)
    for o in ("n1", "n2", "n3"):
        b.deliver("n4", o, 1)
    found = check_causal(b.rows())
    assert count_by_code(found) == {CAUSAL_ORDER: 3}
    assert sorted(v.messages[1] for v in found) == [
        ("g", "n1", 1), ("g", "n2", 1), ("g", "n3", 1)]
    # one unit per origin, not per missing message
    b2 = TraceBuilder()
    for _ in range(3):
        b2.send("n1")
    b2.send("n2", deps={"n1": 3})
    b2.deliver("n4", "n2", 1)
    assert len(check_causal(b2.rows())) == 1
    assert check_causal(b2.rows())[0].messages[1] == ("g", "n1", 1)


def test_causal_first_missing_predecessor_is_reported() -> None:
    b = TraceBuilder()
    for _ in range(4):
        b.send("n1")
    b.send("n2", deps={"n1": 4})
    for s in (1, 2, 4):
        b.deliver("n3", "n1", s)
    b.deliver("n3", "n2", 1)  # position 4, n1#3 missing
    b.deliver("n3", "n1", 3)  # position 5
    found = check_causal(b.rows())
    assert sorted((v.messages, v.positions) for v in found) == [
        # n1#4 at position 3 came before its own predecessor n1#3 as well
        ((("g", "n1", 4), ("g", "n1", 3)), (3, 5)),
        ((("g", "n2", 1), ("g", "n1", 3)), (4, 5)),
    ]


def test_causal_base_excuses_what_a_joiner_never_delivers() -> None:
    b = TraceBuilder()
    for _ in range(6):
        b.send("n1")
    b.send("n2", deps={"n1": 6})
    b.send("n2", deps={"n1": 3})
    # n4 joined late: delivers n1#5, n1#6 only, so base = 4
    b.deliver("n4", "n1", 5)
    b.deliver("n4", "n1", 6)
    b.deliver("n4", "n2", 1)  # needs n1#5..6: delivered before
    b.deliver("n4", "n2", 2)  # needs n1 up to 3 <= base: nothing owed
    assert check_causal(b.rows()) == []


def test_causal_zero_bounds_and_unsent_messages() -> None:
    b = TraceBuilder()
    b.send("n2", deps={"n1": 0})
    b.deliver("n3", "n2", 1)
    assert check_causal(b.rows()) == []
    # the lowest seq n3 delivers from n5 sets its base: n5#1..2 are not owed to it
    b.deliver("n3", "n5", 3)
    assert check_causal(b.rows()) == []
    # an unsent message still has its origin's earlier broadcasts as predecessors
    b.deliver("n3", "n5", 1)
    found = check_causal(b.rows())
    assert [(v.messages, v.positions) for v in found] == [
        ((("g", "n5", 3), ("g", "n5", 1)), (2, 3))]


def test_causal_duplicate_predecessor_counts_from_its_first_delivery() -> None:
    b = causal_chain()
    b.deliver("n3", "n1", 1)
    b.deliver("n3", "n2", 1)
    b.deliver("n3", "n1", 1)  # a later copy does not undo the earlier one
    assert check_causal(b.rows()) == []


# ---------------------------------------------------------------- TOTAL


def three_nodes_deliver(orders: dict[str, list[str]]) -> TraceBuilder:
    b = TraceBuilder()
    names = sorted({m for order in orders.values() for m in order})
    ids = {name: b.send(name) for name in names}  # each message from its own origin
    for node, order in orders.items():
        for name in order:
            _, origin, seq = ids[name]
            b.deliver(node, origin, seq)
    return b


def test_total_same_order_everywhere_passes() -> None:
    order = ["a", "b", "c", "d"]
    b = three_nodes_deliver({"n1": order, "n2": order, "n3": order})
    assert check_total_order(b.rows()) == []


def test_total_one_swap_is_one_unit_per_pair_involving_the_node() -> None:
    order = ["a", "b", "c", "d"]
    b = three_nodes_deliver({"n1": order, "n2": order, "n3": ["a", "c", "b", "d"]})
    found = check_total_order(b.rows())
    assert count_by_code(found) == {TOTAL_ORDER: 2}
    by_pair = {v.nodes: v for v in found}
    assert set(by_pair) == {("n1", "n3"), ("n2", "n3")}
    v = by_pair[("n1", "n3")]
    assert v.messages == (("g", "b", 1), ("g", "c", 1))
    assert v.positions == (2, 3, 3, 2)


def test_total_counts_only_common_messages_along_the_lower_nodes_order() -> None:
    # n1: a b c d; n2: b d a c. Along n1, n2's positions are 3 1 4 2: two descents.
    # (Along n2 it would have been one: the pair is oriented by node order.)
    b = three_nodes_deliver({"n1": ["a", "b", "c", "d"], "n2": ["b", "d", "a", "c"]})
    assert len(check_total_order(b.rows())) == 2
    # node order is n2 < n10, not string order
    b = three_nodes_deliver({"n2": ["a", "b", "c", "d"], "n10": ["b", "d", "a", "c"]})
    found = check_total_order(b.rows())
    assert len(found) == 2
    assert {v.nodes for v in found} == {("n2", "n10")}
    # messages only one node delivers do not count
    b = three_nodes_deliver({"n1": ["a", "x", "b"], "n2": ["y", "a", "b", "z"]})
    assert check_total_order(b.rows()) == []


def test_total_order_is_per_group() -> None:
    b = TraceBuilder()
    b.send("n1", group="g")
    b.send("n1", group="h")
    b.deliver("n1", "n1", 1, group="g")
    b.deliver("n1", "n1", 1, group="h")
    b.deliver("n2", "n1", 1, group="h")
    b.deliver("n2", "n1", 1, group="g")
    assert check_total_order(b.rows()) == []


# ---------------------------------------------------------------- LOCAL


def test_local_order_optimistic_before_final_passes() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.opt_deliver("n2", "n1", 1)
    b.deliver("n2", "n1", 1)
    b.opt_deliver("n3", "n1", 1)  # never finally delivered: not LOCAL_ORDER's business
    assert check_local_order(b.rows()) == []


def test_local_order_optimistic_after_final_is_one_unit_per_node_and_message() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.send("n1")
    b.opt_deliver("n2", "n1", 1)  # opt index 1
    b.deliver("n2", "n1", 1)  # deliver index 1
    b.opt_deliver("n2", "n1", 1)  # opt index 2: after the final delivery
    b.opt_deliver("n2", "n1", 1)  # opt index 3: same unit
    b.deliver("n2", "n1", 2)  # deliver index 2
    b.opt_deliver("n2", "n1", 2)  # opt index 4
    found = check_local_order(b.rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (LOCAL_ORDER, ("n2",), (("g", "n1", 1),), (1, 3)),
        (LOCAL_ORDER, ("n2",), (("g", "n1", 2),), (2, 4)),
    ]


def test_local_order_is_judged_per_incarnation() -> None:
    """A rejoined incarnation opt-delivers a message its first one final-delivered, then
    final-delivers it: local order (the duplicate is INTEGRITY_DUPLICATE's); the same
    opt-delivery after that second final delivery is one unit."""
    assert check_local_order(rejoined_optimistic().rows()) == []
    found = check_local_order(rejoined_optimistic(late=True).rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (LOCAL_ORDER, ("n2",), (("g", "n2", 1),), (2, 2))]
