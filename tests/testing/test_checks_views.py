"""VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY and SAME_VIEW_DELIVERY: clean runs with joins,
leaves and crashes pass; each planted fault is found with its code, its unit count and
its counterexample (docs/checks.md, "Views")."""

from __future__ import annotations

from abcast.sim import SimConfig, run_simulation
from abcast.testing import (
    SAME_VIEW_DELIVERY,
    VIEW_CONSISTENCY,
    VIRTUAL_SYNCHRONY,
    TraceBuilder,
    check_events,
    check_virtual_synchrony,
    count_by_code,
)
from abcast.trace import EventRow

VS = ("virtual_synchrony",)
ABC = ("n1", "n2", "n3")


def group_of_three(run_id: str = "run-1") -> TraceBuilder:
    b = TraceBuilder(run_id)
    for node in ABC:
        b.view(node, 1, ABC)
    return b


def test_clean_run_with_two_joiners_a_leave_and_a_crash_passes() -> None:
    b = group_of_three()
    first = [b.send("n1"), b.send("n2")]
    b.deliver_all(ABC, first)
    # Two joiners, each built alone in view 0 before it is admitted (as the simulator
    # does): private starts, compared with nobody.
    b.view("n4", 0, ["n4"])
    b.view("n5", 0, ["n5"])
    four = ["n1", "n2", "n3", "n4", "n5"]
    for node in four:
        b.view(node, 2, four)
    second = [b.send("n4"), b.send("n3")]
    b.deliver_all(four, second)
    # n2 leaves: it installs no view without itself; n3 crashes mid-view.
    third_members = ["n1", "n3", "n4", "n5"]
    for node in third_members:
        b.view(node, 3, third_members)
    third = [b.send("n5"), b.send("n1")]
    b.deliver_all(["n1", "n4", "n5"], third)
    b.deliver("n3", "n5", 1)
    b.crash("n3")
    everything = (*VS, "integrity", "agreement", "total")
    assert check_events(b.rows(), everything) == []


def test_a_node_listing_other_members_is_one_unit_citing_the_majority() -> None:
    b = group_of_three()
    b.view("n1", 2, ["n1", "n2"])
    b.view("n2", 2, ["n1", "n2"])
    odd = b.view("n3", 2, ["n1", "n3"])
    found = check_virtual_synchrony(b.rows())
    assert count_by_code(found) == {VIEW_CONSISTENCY: 1}
    (v,) = found
    assert v.nodes == ("n3", "n1")
    assert v.positions == (odd.index,)
    assert "[n1,n3]" in v.detail and "[n1,n2]" in v.detail


def test_the_reference_set_is_the_majority_even_when_the_first_node_is_odd() -> None:
    b = TraceBuilder()
    odd = b.view("n1", 1, ["n1", "n2"])  # not alone: not a private start
    for node in ("n2", "n3", "n10"):
        b.view(node, 1, ["n1", "n2", "n3", "n10"])
    found = check_virtual_synchrony(b.rows())
    assert [(v.code, v.nodes, v.positions) for v in found] == [
        (VIEW_CONSISTENCY, ("n1", "n2"), (odd.index,))]


def test_view_ids_that_fall_or_repeat_are_one_unit_per_row() -> None:
    b = group_of_three()
    first = b.view("n2", 3, ABC)
    fell = b.view("n2", 2, ABC)
    again = b.view("n2", 2, ABC)
    found = [v for v in check_virtual_synchrony(b.rows()) if v.code == VIEW_CONSISTENCY]
    assert [(v.nodes, v.positions) for v in found] == [
        (("n2",), (first.index, fell.index)), (("n2",), (fell.index, again.index))]


def test_a_message_one_survivor_missed_in_the_old_view_is_a_synchrony_unit() -> None:
    b = group_of_three()
    ms = [b.send("n1"), b.send("n2"), b.send("n3")]
    b.deliver_all(["n1", "n2"], ms)
    b.deliver_all(["n3"], ms[:2])  # n3 misses its own n3#1 in view 1 ...
    for node in ABC:
        b.view(node, 2, ABC)
    b.deliver("n3", "n3", 1)  # ... and delivers it only in view 2
    found = check_virtual_synchrony(b.rows())
    synchrony = [v for v in found if v.code == VIRTUAL_SYNCHRONY]
    assert [(v.nodes, v.messages, v.positions) for v in synchrony] == [
        (("n3", "n1"), (("g", "n3", 1),), (3,))]
    assert "view 1" in synchrony[0].detail and "view 2" in synchrony[0].detail
    # The late copy also splits n3#1 over two views.
    assert count_by_code(found) == {VIRTUAL_SYNCHRONY: 1, SAME_VIEW_DELIVERY: 1}


def test_an_extra_message_counts_once_for_every_node_that_lacks_it() -> None:
    b = group_of_three()
    ms = [b.send("n1"), b.send("n2")]
    b.deliver_all(ABC, ms[:1])
    b.deliver("n3", "n2", 1)
    for node in ABC:
        b.view(node, 2, ABC)
    found = check_virtual_synchrony(b.rows())
    assert sorted(v.nodes for v in found) == [("n1", "n3"), ("n2", "n3")]
    assert {v.code for v in found} == {VIRTUAL_SYNCHRONY}


def test_a_crashed_node_is_judged_only_up_to_its_crash() -> None:
    b = group_of_three()
    ms = [b.send("n1"), b.send("n1"), b.send("n2")]
    b.deliver_all(["n1", "n2"], ms)
    b.deliver_all(["n3"], ms[:1])
    b.crash("n3")
    # Rows after the crash (a recovery that replays old state) are not judged.
    b.recover("n3")
    b.view("n3", 2, ["n1", "n2"])
    b.deliver("n3", "n1", 2)
    for node in ("n1", "n2"):
        b.view(node, 2, ["n1", "n2"])
    assert check_virtual_synchrony(b.rows()) == []


def test_nodes_that_move_to_different_next_views_are_not_compared() -> None:
    b = group_of_three()
    ms = [b.send("n1"), b.send("n2")]
    b.deliver_all(["n1", "n2"], ms)
    b.deliver_all(["n3"], ms[:1])
    b.view("n1", 2, ["n1", "n2"])
    b.view("n2", 2, ["n1", "n2"])
    b.view("n3", 3, ["n3"])
    assert check_virtual_synchrony(b.rows()) == []


def test_a_message_delivered_in_two_views_is_one_split_unit() -> None:
    b = TraceBuilder()
    for node in ("n1", "n2"):
        b.view(node, 1, ABC)
    b.view("n3", 2, ABC)  # n3 starts in view 2: nobody moves on with anybody
    m = b.send("n1")
    b.deliver("n1", "n1", 1)
    b.deliver("n2", "n1", 1)
    b.deliver("n3", "n1", 1)
    found = check_virtual_synchrony(b.rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (SAME_VIEW_DELIVERY, ("n1", "n3"), (m,), (1, 1))]


def test_a_delivery_in_a_view_older_than_the_send_is_one_unit_per_node() -> None:
    b = group_of_three()
    b.view("n1", 2, ABC)
    m = b.send("n1")  # sent in view 2
    b.deliver("n2", "n1", 1)  # n2 and n3 are still in view 1
    b.deliver("n3", "n1", 1)
    found = check_virtual_synchrony(b.rows())
    early = sorted((v.nodes, v.messages, v.positions) for v in found)
    assert early == [(("n2", "n1"), (m,), (1,)), (("n3", "n1"), (m,), (1,))]
    assert {v.code for v in found} == {SAME_VIEW_DELIVERY}


def test_a_broadcast_held_by_a_flush_may_be_delivered_in_the_next_view() -> None:
    b = group_of_three()
    held = b.send("n2")  # asked for in view 1, sent once view 2 is in place
    for node in ABC:
        b.view(node, 2, ABC)
    b.deliver_all(ABC, [held])
    assert check_virtual_synchrony(b.rows()) == []


def test_view_codes_are_checked_only_when_claimed() -> None:
    b = TraceBuilder()
    for node in ("n1", "n2"):
        b.view(node, 1, ABC)
    b.view("n3", 1, ["n3", "n9"])
    assert check_events(b.rows(), ["total", "integrity"]) == []
    assert count_by_code(check_events(b.rows(), VS)) == {VIEW_CONSISTENCY: 1}


def _matrix_with_a_join() -> list[EventRow]:
    return run_simulation(SimConfig("matrix", 3, 12, seed=2,
                                    faults="join=n4@2ms")).recorder.rows()


def test_a_matrix_run_with_a_join_keeps_virtual_synchrony() -> None:
    rows = _matrix_with_a_join()
    assert any(r.kind == "view" and r.members == ("n4",) for r in rows)  # a private start
    assert check_events(rows, VS) == []


def test_a_delivery_removed_from_a_simulated_run_is_found() -> None:
    rows = _matrix_with_a_join()
    views = {(r.node, r.view_id) for r in rows if r.kind == "view"}
    moved_on = {node for node, view in views if view == 2} & {n for n, v in views if v == 1}
    victim = next(r for r in rows if r.kind == "deliver" and r.node == "n2"
                  and r.view_id == 1 and "n2" in moved_on)
    found = check_events([r for r in rows if r is not victim], VS)
    m = (victim.group, victim.origin, victim.seq)
    assert [(v.code, v.nodes[0], v.messages) for v in found] == [
        (VIRTUAL_SYNCHRONY, "n2", (m,))]
