"""INTEGRITY_DUPLICATE, INTEGRITY_UNKNOWN and VALIDITY: clean logs pass, planted faults are
found with the right unit count and counterexample."""

from __future__ import annotations

from abcast.testing import (
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    VALIDITY,
    TraceBuilder,
    check_integrity,
    check_validity,
    count_by_code,
)

NODES = ("n1", "n2", "n3")


def clean_run() -> tuple[TraceBuilder, list[tuple[str | None, str, int]]]:
    b = TraceBuilder()
    messages = [b.send(o) for o in NODES for _ in range(2)]
    b.deliver_all(NODES, messages)
    return b, messages


def test_clean_run_has_no_integrity_or_validity_violation() -> None:
    b, _ = clean_run()
    assert check_integrity(b.rows()) == []
    assert check_validity(b.rows()) == []


def test_duplicate_counted_once_per_node_and_message_with_every_position() -> None:
    b, _ = clean_run()  # each node has delivered 6 messages
    b.deliver("n2", "n1", 1)  # position 7
    b.deliver("n2", "n1", 1)  # position 8
    b.deliver("n3", "n1", 2)  # position 7
    found = check_integrity(b.rows())
    assert count_by_code(found) == {INTEGRITY_DUPLICATE: 2}
    by_node = {v.nodes: v for v in found}
    assert by_node[("n2",)].messages == (("g", "n1", 1),)
    assert by_node[("n2",)].positions == (1, 7, 8)
    assert by_node[("n3",)].messages == (("g", "n1", 2),)
    assert by_node[("n3",)].positions == (2, 7)
    assert all(v.run_id == "run-1" for v in found)


def test_unknown_message_is_one_unit_per_node_even_when_duplicated() -> None:
    b, _ = clean_run()
    b.deliver("n2", "n9", 4)
    b.deliver("n2", "n9", 4)
    b.deliver("n3", "n9", 4)
    found = check_integrity(b.rows())
    assert count_by_code(found) == {INTEGRITY_DUPLICATE: 1, INTEGRITY_UNKNOWN: 2}
    unknown = sorted((v.nodes, v.messages, v.positions) for v in found
                     if v.code == INTEGRITY_UNKNOWN)
    assert unknown == [(("n2",), (("g", "n9", 4),), (7, 8)),
                       (("n3",), (("g", "n9", 4),), (7,))]


def test_send_row_written_by_another_node_does_not_make_a_message_sent() -> None:
    b, _ = clean_run()
    # n2 claims n1 sent seq 5; only the origin's own send row counts.
    b.recorder.record("n2", "send", 10**9, origin="n1", seq=5, group="g")
    b.deliver("n3", "n1", 5)
    found = check_integrity(b.rows())
    assert [(v.code, v.nodes, v.messages) for v in found] == [
        (INTEGRITY_UNKNOWN, ("n3",), (("g", "n1", 5),))]


def test_message_id_includes_the_group() -> None:
    b = TraceBuilder()
    b.send("n1", group="g")
    b.deliver("n1", "n1", 1, group="g")
    b.deliver("n2", "n1", 1, group="h")  # same origin and seq, other group: never sent
    found = check_integrity(b.rows())
    assert [(v.code, v.messages) for v in found] == [(INTEGRITY_UNKNOWN, (("h", "n1", 1),))]


def test_validity_one_unit_per_message_never_delivered_by_its_correct_origin() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.send("n1")
    b.send("n2")
    b.deliver_all(("n1", "n2"), [("g", "n1", 1), ("g", "n2", 1)])
    b.deliver("n2", "n1", 2)  # others delivering it does not help: the origin must
    found = check_validity(b.rows())
    assert [(v.code, v.nodes, v.messages, v.positions) for v in found] == [
        (VALIDITY, ("n1",), (("g", "n1", 2),), ())]


def test_validity_excuses_crashed_origins_including_recovered_ones() -> None:
    b = TraceBuilder()
    b.send("n1")
    b.send("n2")
    b.crash("n1")
    b.crash("n2")
    b.recover("n2")  # crashed once: no longer correct
    b.send("n3")
    b.deliver("n3", "n3", 1)
    assert check_validity(b.rows()) == []
