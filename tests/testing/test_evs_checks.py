"""The checkers under extended virtual synchrony (docs/checks.md, "Views"): two sides
that go on apart in views of their own ids and merge pass; a merge view a correct member
never installs, a message both sides deliver in different orders, and two sides reusing
one view id are each found, with their counts and counterexamples."""

from __future__ import annotations

from abcast.testing import (
    TOTAL_ORDER,
    VIEW_CONSISTENCY,
    VIRTUAL_SYNCHRONY,
    TraceBuilder,
    check_events,
    count_by_code,
)
from abcast.testing.builders import EVS_CLAIMS, split_and_merge

ALL4 = ("n1", "n2", "n3", "n4")


def counts(b: TraceBuilder) -> dict[str, int]:
    return {c: n for c, n in count_by_code(check_events(b.rows(), EVS_CLAIMS)).items() if n}


def test_two_sides_that_go_on_apart_and_merge_pass() -> None:
    assert counts(split_and_merge()) == {}


def test_a_merge_view_a_correct_member_never_installs_is_one_unit() -> None:
    found = check_events(split_and_merge(skip_merge="n4").rows(), EVS_CLAIMS)
    missed = [v for v in found if v.code == VIEW_CONSISTENCY]
    assert len(missed) == 1
    assert missed[0].nodes == ("n4", "n1")
    assert "merge view 20" in missed[0].detail and "n4" in missed[0].detail
    assert VIRTUAL_SYNCHRONY not in {v.code for v in found}


def test_a_member_that_crashed_before_the_merge_owes_no_install() -> None:
    assert counts(split_and_merge(crash="n4")) == {}


def test_a_message_both_sides_deliver_in_different_orders_is_found() -> None:
    found = check_events(split_and_merge(right_order_swapped=True).rows(), EVS_CLAIMS)
    total = [v for v in found if v.code == TOTAL_ORDER]
    # n1#1 and n3#1 are inverted between every left and every right node: 2 x 2 pairs.
    assert len(total) == 4
    assert {v.nodes for v in total} == {("n1", "n3"), ("n1", "n4"), ("n2", "n3"), ("n2", "n4")}
    assert counts(split_and_merge(right_order_swapped=True)) == {TOTAL_ORDER: 4}


def test_two_sides_reusing_one_view_id_are_found() -> None:
    # Both sides call their partition view 10: one id names two memberships.
    found = check_events(split_and_merge(right_view=10).rows(), EVS_CLAIMS)
    clash = [v for v in found if v.code == VIEW_CONSISTENCY]
    assert sorted(v.nodes for v in clash) == [("n3", "n1"), ("n4", "n1")]
    # ...and the two sides, seen as one cohort moving from 10 to 20, delivered
    # different sets in "view 10": each misses the other's message.
    assert counts(split_and_merge(right_view=10)) == {VIEW_CONSISTENCY: 2,
                                                      VIRTUAL_SYNCHRONY: 4}


def test_a_view_entered_from_one_view_is_not_a_merge_view() -> None:
    # A plain view change that leaves n4 listed but never installed (n4 fell silent,
    # no crash row) is not judged by the merge rule: only merges are.
    b = TraceBuilder("plain")
    for node in ALL4:
        b.view(node, 1, ALL4)
    for node in ALL4[:3]:
        b.view(node, 2, ALL4)
    assert counts(b) == {}
