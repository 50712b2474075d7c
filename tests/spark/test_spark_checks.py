"""Each Spark check, a pure transform, run on small hand-written traces: planted
violations are found with the right code, one row per unit, and the right
counterexample; clean runs (a crashed node with a consistent prefix, a joiner with view
rows, two groups) produce nothing."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import Row
from spark_traces import Scenario, build_scenarios, write_scenarios

from abcast.ids import node_sort_key
from abcast.pipeline.checks import VIOLATION_COLUMNS, node_order_key
from abcast.pipeline.commands import CheckOutcome, run_check
from abcast.pipeline.io import read_trace
from abcast.pipeline.suite import (
    CHECKS,
    Example,
    RunClaim,
    find_violations,
    runs_by_code,
    summarize,
)
from abcast.pipeline.trace_tables import TraceTables, materialize_tables
from abcast.testing import TraceBuilder, Violation, check_traces, count_by_code
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import CODES
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def scenarios() -> list[Scenario]:
    return build_scenarios()


@pytest.fixture(scope="module")
def tables(spark: object, scenarios: list[Scenario],
           tmp_path_factory: pytest.TempPathFactory) -> TraceTables:
    out = write_scenarios(tmp_path_factory.mktemp("planted"), scenarios)
    trace = read_trace(spark, str(out))  # type: ignore[arg-type]
    return materialize_tables(trace.events)


Unit = tuple[tuple[str, ...], tuple[str, ...], tuple[int, ...]]


def _units(rows: Sequence[Row]) -> dict[str, set[Unit]]:
    """run -> its (nodes, messages, positions) counterexamples."""
    out: dict[str, set[Unit]] = {}
    for r in rows:
        out.setdefault(r["run_id"], set()).add(
            (tuple(r["nodes"]), tuple(r["messages"]), tuple(r["positions"])))
    return out


@pytest.mark.parametrize("code", CODES)
def test_check_reports_each_planted_unit_once(
    tables: TraceTables, scenarios: list[Scenario], code: str,
) -> None:
    frame = CHECKS[code](tables)
    assert tuple(frame.columns) == VIOLATION_COLUMNS
    rows = frame.collect()
    assert {r["code"] for r in rows} <= {code}
    per_run = Counter(r["run_id"] for r in rows)
    expected = {s.run_id: s.counts.get(code, 0) for s in scenarios}
    assert {run: per_run.get(run, 0) for run in expected} == expected
    units = _units(rows)
    for s in scenarios:
        for planted in s.planted:
            if planted.code == code:
                assert (planted.nodes, planted.messages, planted.positions) in units[s.run_id]


def test_runs_are_checked_only_for_what_they_claim(
    tables: TraceTables, scenarios: list[Scenario],
) -> None:
    # "fifo" has FIFO, AGREEMENT, TOTAL and CAUSAL violations: it claims only fifo here.
    narrow = [RunClaim("fifo", "test", 3, ("fifo",)),
              RunClaim("validity", "test", 3, ("integrity", "validity"))]
    clean = ["clean", "crashed-prefix", "joiner", "two-groups"]
    full = [RunClaim(s.run_id, "test", 3, s.info.guarantees) for s in scenarios
            if s.run_id in (*clean, "natural-order")]
    verdict = summarize(find_violations(tables, runs_by_code([*narrow, *full])),
                        examples_per_code=1)
    assert dict(verdict.counts) == {
        ("fifo", "FIFO_ORDER"): 2, ("validity", "VALIDITY"): 1,
        ("natural-order", "FIFO_ORDER"): 2, ("natural-order", "CAUSAL_ORDER"): 2,
        ("natural-order", "TOTAL_ORDER"): 2,
    }
    per_key = Counter((e.run_id, e.code) for e in verdict.examples)
    assert per_key == dict.fromkeys(verdict.counts, 1)
    assert not verdict.clean


def test_node_order_key_sorts_like_node_sort_key(spark: object) -> None:
    # Digit runs longer than 38 digits (beyond any Spark decimal) still compare as
    # numbers: n + 39 nines after n5, and before n1 + 39 zeros.
    names = ["n10", "n2", "n1", "a", "n1x", "b20c", "b3c", "n02", "z", "10",
             "n" + "9" * 39, "n1" + "0" * 39, "n0" + "1" * 39, "n5", "m" + "7" * 60 + "x"]
    frame = spark.createDataFrame([(n,) for n in names], "node string")  # type: ignore[attr-defined]
    ordered = [r["node"] for r in frame.orderBy(node_order_key(frame["node"])).collect()]
    # Ties of node_sort_key (n02 and n2) break on the raw string, as abcast.testing does.
    assert ordered == sorted(names, key=lambda n: (node_sort_key(n), n))


def test_trace_dir_reads_back_every_row(spark: object, tmp_path: Path,
                                        scenarios: list[Scenario]) -> None:
    out = write_scenarios(tmp_path, scenarios[:2])
    trace = read_trace(spark, str(out))  # type: ignore[arg-type]
    assert trace.events.count() == sum(len(s.rows) for s in scenarios[:2])
    assert sorted(r["run_id"] for r in trace.runs.collect()) == sorted(
        s.run_id for s in scenarios[:2])


# -- hand-written regressions, one Spark check for all ---------------------------------
# Each test below is a disagreement once found between the checkers: its run's rows come
# from the builder registered beside it; every run sits in one trace dir, checked in
# memory and by ONE `run_check` (a check's cost here is its plan, not its rows: a check
# per run made eight of them), and each test reads its own run's counts and examples.

Built = tuple[list[EventRow], RunInfo]
_BUILDERS: list[Callable[[], Built]] = []


def _handwritten(build: Callable[[], Built]) -> Callable[[], Built]:
    _BUILDERS.append(build)
    return build


def _info(run: str, nodes: int, claims: tuple[str, ...]) -> RunInfo:
    return RunInfo(run, "test", "mem://", nodes, 0, "handwritten", None, None, claims, 0, 1)


@dataclass(frozen=True)
class Checked:
    """The in-memory violations per run and the one Spark check of all the runs."""

    memory: dict[str, list[Violation]]
    outcome: CheckOutcome

    def counts(self, run: str) -> dict[tuple[str, str], int]:
        return {key: n for key, n in self.outcome.verdict.counts.items() if key[0] == run}

    def examples(self, run: str) -> list[Example]:
        return [e for e in self.outcome.verdict.examples if e.run_id == run]


@pytest.fixture(scope="module")
def checked(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Checked:
    out = tmp_path_factory.mktemp("handwritten")
    for build in _BUILDERS:
        rows, info = build()
        write_run(out, rows, info)
    runs, events = read_traces(out)
    assert sorted(r.run_id for r in runs) == sorted(b()[1].run_id for b in _BUILDERS)
    return Checked(check_traces(runs, events),
                   run_check(spark, str(out), None))  # type: ignore[arg-type]


@_handwritten
def _long_ids() -> Built:
    long_id = "n" + "9" * 39
    b = TraceBuilder("long-ids")
    ms = [b.send("n1") for _ in range(4)]
    b.deliver_all(["n1", "n5"], ms)
    for seq in (3, 1, 4, 2):
        b.deliver(long_id, "n1", seq)
    return b.rows(), b.run_info(("total",))


def test_total_order_pairs_long_node_ids_in_node_order(checked: Checked) -> None:
    """TOTAL_ORDER walks each pair along its lower node's order, and the count depends
    on which node that is (q delivers p's 3rd, 1st, 4th, 2nd: along p, q's positions
    read 2 4 1 3, one descent; along q, p's read 3 1 4 2, two). A node id with a digit
    run longer than 38 digits must be placed as abcast.ids.node_sort_key places it:
    Spark's key once cast such runs to a null number, put n + 39 nines before n1 and n5
    and counted 4 where the in-memory checker counts 2."""
    memory = count_by_code(checked.memory["long-ids"])
    assert memory == {"TOTAL_ORDER": 2}  # one descent each for n1 and n5 against it
    assert checked.counts("long-ids") == {("long-ids", "TOTAL_ORDER"): 2}


@_handwritten
def _seq_zero() -> Built:
    b = TraceBuilder("seq-zero")
    for seq in (1, 2, 0):
        b.send("n1", seq)
    for seq in (1, 2, 0):
        b.deliver("n2", "n1", seq)
    return b.rows(), b.run_info(("causal",))


def test_causal_base_is_never_below_zero(checked: Checked) -> None:
    """docs/checks.md: a causal unit's base is at least 0, so a seq 0 (no message id a
    writer gives, but one a trace can hold) is never a causal predecessor. n2 delivers
    n1#1, then n1#2 (whose predecessors are n1#1..1), then n1#0: in memory clean; Spark
    took base = lowest seq - 1 = -1, counted n1#0 among n1#2's predecessors, and
    reported it delivered late."""
    assert checked.memory["seq-zero"] == []
    assert checked.counts("seq-zero") == {}


@_handwritten
def _repeated_index() -> Built:
    rows = [EventRow("repeated-index", "n1", "send", "n1", seq, "g", seq, None, 0)
            for seq in (1, 2, 3)]
    for t_ns, (node, seq, index) in enumerate(
            [("n1", 1, 1), ("n1", 2, 1), ("n1", 3, 2),
             ("n2", 2, 1), ("n2", 1, 2), ("n2", 3, 3)], start=10):
        rows.append(EventRow("repeated-index", node, "deliver", "n1", seq, "g", t_ns, index, 0))
    return rows, _info("repeated-index", 2, ("total",))


def test_total_order_orders_a_repeated_index_by_time(checked: Checked) -> None:
    """A node whose writer repeated an index (two deliveries at position 1) has its
    deliveries in (index, t_ns) order, as abcast.checks orders them. n1, the reference
    node, delivers m1 and m2 both at index 1 (m1 first in time), then m3; n2 delivers
    m2, m1, m3: one descent in memory. Spark compared each node with the reference
    positions (1, 1, 2), in which n2's order showed no descent; both nodes "conformed",
    no pair was walked, and the run was clean."""
    assert count_by_code(checked.memory["repeated-index"]) == {"TOTAL_ORDER": 1}
    assert checked.counts("repeated-index") == {("repeated-index", "TOTAL_ORDER"): 1}


@_handwritten
def _wide_index() -> Built:
    run = "wide-index"
    rows = [EventRow(run, "n1", "send", "n1", 1, "g", 1, None, 0),
            EventRow(run, "n1", "deliver", "n1", 1, "g", 2, 2**41, 0),
            EventRow(run, "n2", "send", "n2", 1, "g", 3, None, 0),
            EventRow(run, "n2", "deliver", "n2", 1, "g", 4, 1, 0),
            EventRow(run, "n1", "deliver", "n2", 1, "g", 5, 2**41 + 1, 0)]
    return rows, _info(run, 2, ("agreement", "virtual_synchrony"))


def test_a_witness_index_beyond_40_bits_keeps_its_unit(checked: Checked) -> None:
    """The agreement and view checks pack a witness as (rank << 40) + index. n1 delivers
    its m at index 2**41 and n2 never delivers it: one AGREEMENT unit in memory; Spark
    decoded the witness as rank 2, a node that does not exist, dropped the unit and
    judged the run clean (/tmp/checks/witness40.py)."""
    run = "wide-index"
    assert count_by_code(checked.memory[run]) == {"AGREEMENT": 1}
    assert checked.counts(run) == {(run, "AGREEMENT"): 1}
    assert [e.nodes for e in checked.examples(run)] == [("n2", "n1")]


@_handwritten
def _low_seqs() -> Built:
    run = "low-seqs"
    rows = [EventRow(run, "n1", "send", "n1", seq, "g", seq + 10, None, 0) for seq in (-1, 4)]
    rows += [EventRow(run, "n3", "send", "n3", -1, "g", 20, None, 0),
             EventRow(run, "n3", "crash", None, None, "g", 21, None),
             EventRow(run, "n2", "deliver", "n1", -1, "g", 30, 1, 0),
             EventRow(run, "n2", "deliver", "n1", 4, "g", 31, 2, 0),
             EventRow(run, "n2", "deliver", "n3", 0, "g", 32, 3, 0)]
    return rows, _info(run, 3, ("integrity", "fifo"))


def test_seqs_at_or_below_zero_are_judged_as_in_memory(checked: Checked) -> None:
    """A trace may hold seqs a writer never gives (0, -1). docs/checks.md floors at 0
    what has no snapshot: a FIFO hole is a missing seq above 0, and a crashed origin's
    send top is 0 when it sent nothing above it. n2 delivers n1#-1 then n1#4: one hole,
    n1#1..3 (Spark took in 0 too); n3, crashed, sent only n3#-1 and n2 delivers n3#0: unknown
    (Spark took the top as -1 and excused it)."""
    run = "low-seqs"
    found = checked.memory[run]
    assert count_by_code(found) == {"INTEGRITY_UNKNOWN": 1, "FIFO_ORDER": 1}
    assert checked.outcome.verdict.of_run(run) == count_by_code(found)
    assert [v.messages for v in found if v.code == "FIFO_ORDER"] == [
        (("g", "n1", 1), ("g", "n1", 3))]
    assert [e.messages for e in checked.examples(run) if e.code == "FIFO_ORDER"] == [
        ("g/n1:1", "g/n1:3")]


@_handwritten
def _repeated_row() -> Built:
    run = "repeated-row"
    rows = [EventRow(run, "n1", "send", "n1", s, "g", s, None) for s in (1, 2, 3)]
    rows += [EventRow(run, "n1", "deliver", "n1", s, "g", 10 + s, s) for s in (1, 2, 3)]
    twice = EventRow(run, "n2", "deliver", "n1", 3, "g", 22, 2)
    rows += [EventRow(run, "n2", "deliver", "n1", 1, "g", 21, 1), twice, twice,
             EventRow(run, "n2", "deliver", "n1", 2, "g", 23, 3)]
    return rows, _info(run, 3, ("integrity", "causal"))


def test_a_row_written_twice_is_counted_as_in_memory(checked: Checked) -> None:
    """A trace may hold one deliver row twice, verbatim (a file copied twice, a writer's
    retry). Spark matched first-copy flags back to deliveries by (node, index, t_ns), so
    both copies of n2's n1#3 took both flags and its causal unit (n1#3 before n1#2) was
    counted twice; now it comes once, as in memory."""
    run = "repeated-row"
    found = checked.memory[run]
    assert count_by_code(found) == {"INTEGRITY_DUPLICATE": 1, "CAUSAL_ORDER": 1}
    assert checked.outcome.verdict.of_run(run) == count_by_code(found)


@_handwritten
def _tied_opt() -> Built:
    run = "tied-opt"
    rows = [EventRow(run, "n1", "send", "n1", 1, "g", 1, None),
            EventRow(run, "n2", "deliver", "n1", 1, "g", 2, 1),
            EventRow(run, "n2", "opt_deliver", "n1", 1, "g", 3, 1),
            EventRow(run, "n2", "opt_deliver", "n1", 1, "g", 3, 2)]
    return rows, _info(run, 3, ("local_order",))


def test_local_order_counterexample_of_tied_rows_as_in_memory(checked: Checked) -> None:
    """n2 opt-delivered n1#1 twice at one t_ns (indices 1 and 2) after delivering it: both
    checkers show the opt_deliver row with the higher index (TIME_ORDER); on main memory
    showed the first in the file (index 1) and Spark's max_by over t_ns alone either."""
    run = "tied-opt"
    assert [(v.code, v.positions) for v in checked.memory[run]] == [("LOCAL_ORDER", (1, 2))]
    assert [(e.code, e.positions) for e in checked.examples(run)] == [
        ("LOCAL_ORDER", (1, 2))]


@_handwritten
def _causal_late() -> Built:
    run = "causal-late"
    rows = [EventRow(run, "n1", "send", "n1", 1, "g", 1, None),
            EventRow(run, "n1", "send", "n1", 2, "g", 2, None),
            EventRow(run, "n2", "send", "n2", 1, "g", 3, None, 0, None, {"n1": 2}),
            EventRow(run, "n3", "deliver", "n2", 1, "g", 4, 1),
            EventRow(run, "n3", "deliver", "n1", 1, "g", 5, 2),
            EventRow(run, "n3", "deliver", "n1", 2, "g", 6, 3)]
    return rows, _info(run, 3, ("causal",))


def test_causal_counterexample_names_the_same_predecessor_as_in_memory(
        checked: Checked) -> None:
    """n3 delivered n2#1 (which depends on n1#1..2) before both: both checkers name n1#2,
    the predecessor it delivered last (abcast.checks.facts.Reach.missing); memory named
    n1#1 (the first missing) while Spark named n1#2."""
    run = "causal-late"
    assert [(v.messages, v.positions) for v in checked.memory[run]] == [
        ((("g", "n2", 1), ("g", "n1", 2)), (1, 3))]
    assert [(e.messages, e.positions) for e in checked.examples(run)] == [
        (("g/n2:1", "g/n1:2"), (1, 3))]
