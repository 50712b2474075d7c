"""AGREEMENT and UNIFORM_AGREEMENT: who is owed what (correct nodes, views, joiners), and
the split that never counts one fault under both codes."""

from __future__ import annotations

from abcast.testing import (
    AGREEMENT,
    UNIFORM_AGREEMENT,
    TraceBuilder,
    check_agreement,
    check_events,
    check_uniform_agreement,
    count_by_code,
)

BOTH = ("agreement", "uniform_agreement")


def sent(b: TraceBuilder, origin: str, count: int) -> list[tuple[str | None, str, int]]:
    return [b.send(origin) for _ in range(count)]


def test_everyone_delivering_everything_passes() -> None:
    b = TraceBuilder()
    ms = sent(b, "n1", 3) + sent(b, "n2", 2)
    b.deliver_all(("n1", "n2", "n3"), ms)
    assert check_events(b.rows(), BOTH) == []


def test_missing_copy_at_a_correct_node_is_one_unit_per_node_and_message() -> None:
    b = TraceBuilder()
    ms = sent(b, "n1", 3)
    b.deliver_all(("n1", "n2"), ms)
    b.deliver("n3", "n1", 1)  # n3 misses #2 and #3
    b.deliver("n4", "n1", 1)
    b.deliver("n4", "n1", 2)  # n4 misses #3
    found = check_agreement(b.rows())
    assert count_by_code(found) == {AGREEMENT: 3}
    units = sorted((v.nodes[0], v.messages[0][2]) for v in found)
    assert units == [("n3", 2), ("n3", 3), ("n4", 3)]
    first = next(v for v in found if v.nodes[0] == "n3" and v.messages[0][2] == 2)
    # the witness is a correct deliverer (the first in node order) and its position
    assert first.nodes == ("n3", "n1")
    assert first.positions == (2,)
    assert check_uniform_agreement(b.rows()) == []


def test_crashed_node_whose_deliveries_are_a_consistent_prefix_passes() -> None:
    b = TraceBuilder()
    ms = sent(b, "n1", 4)
    b.deliver_all(("n1", "n2"), ms)
    b.deliver_all(("n3",), ms[:2])
    b.crash("n3")
    assert check_events(b.rows(), BOTH) == []


def test_message_only_crashed_nodes_delivered_is_a_uniform_violation_only() -> None:
    b = TraceBuilder()
    ms = sent(b, "n1", 2)
    b.deliver_all(("n1", "n2", "n3"), ms[:1])
    b.deliver("n1", "n1", 2)  # only n1 delivers #2, then crashes
    b.crash("n1")
    found = check_events(b.rows(), BOTH)
    assert count_by_code(found, codes=(AGREEMENT, UNIFORM_AGREEMENT)) == {
        AGREEMENT: 0, UNIFORM_AGREEMENT: 2}
    assert sorted(v.nodes for v in found) == [("n2", "n1"), ("n3", "n1")]
    assert all(v.messages == (("g", "n1", 2),) and v.positions == (2,) for v in found)


def test_when_a_correct_node_also_delivered_the_missing_copy_is_agreement_not_uniform() -> None:
    b = TraceBuilder()
    m = b.send("n1")
    b.deliver("n1", "n1", 1)
    b.deliver("n2", "n1", 1)
    b.crash("n1")
    # n3 and n4 are correct nodes of the run (they wrote rows) that never deliver m
    b.recorder.record("n3", "net_send", 10**9, peer="n1")
    b.recorder.record("n4", "net_recv", 10**9, peer="n1")
    found = check_events(b.rows(), BOTH)
    assert count_by_code(found) == {AGREEMENT: 2}
    # the witness is the correct deliverer n2, never crashed n1
    assert sorted(v.nodes for v in found) == [("n3", "n2"), ("n4", "n2")]
    assert all(v.messages == (m,) for v in found)


def test_deliveries_outside_any_view_owe_nothing_once_the_group_has_views() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.deliver("n1", "n1", 1)  # view_id None: recorded before any view row
    b.view("n2", 1, ("n1", "n2"))
    assert check_events(b.rows(), BOTH) == []


def test_joiner_is_not_owed_messages_delivered_before_it_joined() -> None:
    b = TraceBuilder()
    for n in ("n1", "n2", "n3"):
        b.view(n, 1, ("n1", "n2", "n3"))
    early = sent(b, "n1", 2)
    b.deliver_all(("n1", "n2", "n3"), early)
    for n in ("n1", "n2", "n3", "n4"):
        b.view(n, 2, ("n1", "n2", "n3", "n4"))
    late = sent(b, "n1", 2)
    b.deliver_all(("n1", "n2", "n3", "n4"), late)
    assert check_events(b.rows(), BOTH) == []


def test_member_of_the_view_is_owed_and_joiner_owed_only_later_messages() -> None:
    b = TraceBuilder()
    for n in ("n1", "n2", "n3"):
        b.view(n, 1, ("n1", "n2", "n3"))
    early = sent(b, "n1", 2)
    b.deliver_all(("n1", "n2"), early)  # n3 installed view 1 but misses both
    for n in ("n1", "n2", "n3", "n4"):
        b.view(n, 2, ("n1", "n2", "n3", "n4"))
    late = sent(b, "n1", 1)
    b.deliver_all(("n1", "n2", "n3"), late)  # n4 misses the view-2 message
    found = check_agreement(b.rows())
    assert sorted((v.nodes[0], v.messages[0][2]) for v in found) == [
        ("n3", 1), ("n3", 2), ("n4", 3)]


def test_owed_through_any_delivery_in_a_view_the_node_installed() -> None:
    b = TraceBuilder()
    b.view("n1", 1, ("n1", "n2"))
    b.view("n2", 1, ("n1", "n2"))
    b.send("n1")
    b.deliver("n1", "n1", 1)  # in view 1: n3 not owed through this one
    for n in ("n2", "n3"):
        b.view(n, 2, ("n2", "n3"))
    b.deliver("n2", "n1", 1)  # in view 2: n3 owed through this one
    found = check_agreement(b.rows())
    assert [(v.nodes, v.positions) for v in found] == [(("n3", "n2"), (1,))]


def test_uniform_uses_the_crashed_deliverers_view() -> None:
    b = TraceBuilder()
    for n in ("n1", "n2"):
        b.view(n, 1, ("n1", "n2"))
    b.send("n1")
    b.deliver("n1", "n1", 1)  # view 1, then n1 crashes
    b.crash("n1")
    b.view("n2", 2, ("n2", "n3"))
    b.view("n3", 2, ("n2", "n3"))
    found = check_uniform_agreement(b.rows())
    # n2 installed view 1 and is owed; n3 only joined in view 2 and is not
    assert [(v.code, v.nodes) for v in found] == [(UNIFORM_AGREEMENT, ("n2", "n1"))]


def test_crashed_nodes_are_never_owed() -> None:
    b = TraceBuilder()
    ms = sent(b, "n1", 2)
    b.deliver_all(("n1", "n2"), ms)
    b.crash("n3")
    b.recover("n3")  # recovered, still not correct
    b.crash("n4")
    assert check_events(b.rows(), BOTH) == []
