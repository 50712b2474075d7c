"""check_events / check_traces / count_by_code / validate_guarantees: a run is judged
only by the guarantees it claims, runs never contaminate each other, misuse is refused."""

from __future__ import annotations

import pytest

from abcast.errors import LocalProtocolError
from abcast.testing import (
    AGREEMENT,
    CODES,
    FIFO_ORDER,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    TOTAL_ORDER,
    TraceBuilder,
    check_agreement,
    check_events,
    check_traces,
    codes_for,
    count_by_code,
    validate_guarantees,
)
from abcast.trace import GUARANTEES


def faulty_run(run_id: str) -> TraceBuilder:
    """One FIFO descent at n2 (which is also a TOTAL_ORDER descent against n1)."""
    b = TraceBuilder(run_id)
    b.send("n1")
    b.send("n1")
    b.deliver_all(("n1",), [("g", "n1", 1), ("g", "n1", 2)])
    b.deliver_all(("n2",), [("g", "n1", 2), ("g", "n1", 1)])
    return b


def test_only_claimed_guarantees_are_checked() -> None:
    rows = faulty_run("r").rows()
    assert count_by_code(check_events(rows, ["fifo"])) == {FIFO_ORDER: 1}
    assert count_by_code(check_events(rows, ["total"])) == {TOTAL_ORDER: 1}
    assert count_by_code(check_events(rows, ["total", "fifo"])) == {
        FIFO_ORDER: 1, TOTAL_ORDER: 1}
    assert check_events(rows, ["integrity", "validity", "agreement"]) == []
    assert check_events(rows, []) == []


def test_violations_come_in_codes_order() -> None:
    b = faulty_run("r")
    b.deliver("n2", "n7", 1)
    b.deliver("n2", "n7", 1)
    found = check_events(b.rows(), GUARANTEES)
    codes = [v.code for v in found]
    assert codes == sorted(codes, key=CODES.index)
    assert {INTEGRITY_DUPLICATE, INTEGRITY_UNKNOWN, FIFO_ORDER, TOTAL_ORDER} <= set(codes)


def test_rows_of_several_runs_need_a_run_id() -> None:
    rows = faulty_run("a").rows() + faulty_run("b").rows()
    with pytest.raises(LocalProtocolError, match="check_traces"):
        check_events(rows, ["fifo"])
    only_b = check_events(rows, ["fifo"], run_id="b")
    assert [v.run_id for v in only_b] == ["b"]
    assert check_events([], ["fifo"]) == []


def test_single_property_checks_keep_runs_apart() -> None:
    # run a: n1 delivers m. run b: n2 exists but never saw run a's message.
    a = TraceBuilder("a")
    a.send("n1")
    a.deliver("n1", "n1", 1)
    b = TraceBuilder("b")
    b.send("n2")
    b.deliver("n2", "n2", 1)
    assert check_agreement(a.rows() + b.rows()) == []
    b.recorder.record("n1", "net_send", 1, peer="n2")  # n1 is in run b and misses n2#1
    found = check_agreement(a.rows() + b.rows())
    assert [(v.run_id, v.nodes) for v in found] == [("b", ("n1", "n2"))]


def test_check_traces_checks_each_run_for_its_own_guarantees() -> None:
    a, b = faulty_run("a"), faulty_run("b")
    quiet = TraceBuilder("c")  # a run with no rows at all
    runs = [a.run_info(["fifo"]), b.run_info(["agreement", "total"]),
            quiet.run_info(GUARANTEES)]
    result = check_traces(runs, a.rows() + b.rows())
    assert {k: count_by_code(v) for k, v in result.items()} == {
        "a": {FIFO_ORDER: 1}, "b": {TOTAL_ORDER: 1}, "c": {}}


def test_count_by_code_can_list_zeros() -> None:
    found = check_events(faulty_run("r").rows(), ["fifo", "agreement"])
    assert count_by_code(found, codes=codes_for(["fifo", "agreement"])) == {
        AGREEMENT: 0, FIFO_ORDER: 1}
    assert count_by_code([]) == {}


def test_validate_guarantees() -> None:
    assert validate_guarantees(["total", "fifo", "total"]) == ("fifo", "total")
    assert codes_for(["integrity"]) == (INTEGRITY_DUPLICATE, INTEGRITY_UNKNOWN)
    assert set(codes_for(GUARANTEES)) == set(CODES)
    with pytest.raises(LocalProtocolError, match="atomic"):
        validate_guarantees(["total", "atomic"])
    with pytest.raises(LocalProtocolError, match="collection"):
        validate_guarantees("total")
    with pytest.raises(LocalProtocolError):
        check_events([], ["sequential"])
