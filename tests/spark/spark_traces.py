"""Hand-written traces for the Spark tests: one run per situation, each either clean or
with a violation planted on purpose, and the counterexample the checker must cite.

Every run claims every guarantee, so every check looks at every run; the in-memory
checker (abcast.testing) gives the expected count of every other code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abcast.testing import TraceBuilder
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import GUARANTEES
from abcast.trace.writer import write_run

ALL = tuple(GUARANTEES)


@dataclass(frozen=True, slots=True)
class Planted:
    """One violation the checker must report: its code, and the counterexample."""

    code: str
    nodes: tuple[str, ...]
    messages: tuple[str, ...]
    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Scenario:
    run_id: str
    rows: list[EventRow]
    info: RunInfo
    #: code -> how many units the run has (codes not named: none)
    counts: dict[str, int]
    planted: tuple[Planted, ...] = ()


def _clean() -> Scenario:
    b = TraceBuilder("clean")
    ms = [b.send("n1"), b.send("n2"), b.send("n1"), b.send("n3")]
    for node in ("n1", "n2", "n3"):  # optimistic deliveries, each before its final one
        b.opt_deliver(node, "n1", 1)
    b.deliver_all(["n1", "n2", "n3"], ms)
    return Scenario("clean", b.rows(), b.run_info(ALL), {})


def _crashed_prefix() -> Scenario:
    b = TraceBuilder("crashed-prefix")
    ms = [b.send("n1"), b.send("n2"), b.send("n1"), b.send("n2"), b.send("n1")]
    b.deliver_all(["n1", "n2"], ms)
    for m in ms[:3]:
        b.deliver("n3", m[1], m[2])
    b.crash("n3")
    return Scenario("crashed-prefix", b.rows(), b.run_info(ALL), {})


def _joiner() -> Scenario:
    b = TraceBuilder("joiner")
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2"])
    early = [b.send("n1"), b.send("n2")]
    b.deliver_all(["n1", "n2"], early)
    for node in ("n1", "n2", "n3"):
        b.view(node, 2, ["n1", "n2", "n3"])
    late = [b.send("n1"), b.send("n3"), b.send("n2")]
    b.deliver_all(["n1", "n2", "n3"], late)
    return Scenario("joiner", b.rows(), b.run_info(ALL), {})


def _duplicate() -> Scenario:
    b = TraceBuilder("duplicate")
    ms = [b.send("n1"), b.send("n1")]
    b.deliver_all(["n1", "n2", "n3"], ms)
    b.deliver("n2", "n1", 1)  # again, at position 3
    return Scenario("duplicate", b.rows(), b.run_info(ALL),
                    {"INTEGRITY_DUPLICATE": 1, "FIFO_ORDER": 1},
                    (Planted("INTEGRITY_DUPLICATE", ("n2",), ("g/n1:1",), (1, 3)),
                     Planted("FIFO_ORDER", ("n2",), ("g/n1:2", "g/n1:1"), (2, 3))))


def _unknown() -> Scenario:
    b = TraceBuilder("unknown")
    a = b.send("n1")
    b.deliver_all(["n1", "n2", "n3"], [a])
    b.deliver("n2", "n9", 1)  # n9 never sent anything
    return Scenario("unknown", b.rows(), b.run_info(ALL),
                    {"INTEGRITY_UNKNOWN": 1, "AGREEMENT": 2},
                    (Planted("INTEGRITY_UNKNOWN", ("n2",), ("g/n9:1",), (2,)),
                     Planted("AGREEMENT", ("n1", "n2"), ("g/n9:1",), (2,))))


def _validity() -> Scenario:
    b = TraceBuilder("validity")
    a = b.send("n1")
    b.send("n1")  # nobody, not even n1, delivers it
    b.deliver_all(["n1", "n2", "n3"], [a])
    return Scenario("validity", b.rows(), b.run_info(ALL), {"VALIDITY": 1},
                    (Planted("VALIDITY", ("n1",), ("g/n1:2",), ()),))


def _agreement() -> Scenario:
    b = TraceBuilder("agreement")
    a, m = b.send("n1"), b.send("n1")
    b.deliver_all(["n1", "n2", "n3"], [a])
    b.deliver_all(["n1", "n2"], [m])
    return Scenario("agreement", b.rows(), b.run_info(ALL), {"AGREEMENT": 1},
                    (Planted("AGREEMENT", ("n3", "n1"), ("g/n1:2",), (2,)),))


def _uniform() -> Scenario:
    b = TraceBuilder("uniform")
    a = b.send("n1")
    b.deliver_all(["n1", "n2", "n3"], [a])
    b.send("n1")
    b.deliver("n1", "n1", 2)
    b.crash("n1")
    return Scenario("uniform", b.rows(), b.run_info(ALL), {"UNIFORM_AGREEMENT": 2},
                    (Planted("UNIFORM_AGREEMENT", ("n2", "n1"), ("g/n1:2",), (2,)),
                     Planted("UNIFORM_AGREEMENT", ("n3", "n1"), ("g/n1:2",), (2,))))


def _fifo() -> Scenario:
    b = TraceBuilder("fifo")
    ms = [b.send("n1"), b.send("n1"), b.send("n1")]
    b.deliver_all(["n1"], ms)
    for seq in (2, 1, 3):
        b.deliver("n2", "n1", seq)
    for seq in (1, 3):
        b.deliver("n3", "n1", seq)
    return Scenario("fifo", b.rows(), b.run_info(ALL),
                    {"FIFO_ORDER": 2, "AGREEMENT": 1, "TOTAL_ORDER": 1, "CAUSAL_ORDER": 2},
                    (Planted("FIFO_ORDER", ("n2",), ("g/n1:2", "g/n1:1"), (1, 2)),
                     Planted("FIFO_ORDER", ("n3",), ("g/n1:2",), ())))


def _causal() -> Scenario:
    b = TraceBuilder("causal")
    a = b.send("n1")
    b.deliver_all(["n1", "n2"], [a])
    m = b.send("n2", deps={"n1": 1})
    b.deliver_all(["n1", "n2", "n3"], [m])
    b.deliver("n3", "n1", 1)
    return Scenario("causal", b.rows(), b.run_info(ALL), {"CAUSAL_ORDER": 1, "TOTAL_ORDER": 2},
                    (Planted("CAUSAL_ORDER", ("n3",), ("g/n2:1", "g/n1:1"), (1, 2)),))


def _total() -> Scenario:
    b = TraceBuilder("total")
    a, m = b.send("n1"), b.send("n2")
    b.deliver_all(["n1", "n3"], [a, m])
    b.deliver_all(["n2"], [m, a])
    return Scenario("total", b.rows(), b.run_info(ALL), {"TOTAL_ORDER": 2},
                    (Planted("TOTAL_ORDER", ("n1", "n2"), ("g/n1:1", "g/n2:1"), (1, 2, 2, 1)),
                     Planted("TOTAL_ORDER", ("n2", "n3"), ("g/n2:1", "g/n1:1"), (1, 2, 2, 1))))


def _natural_order() -> Scenario:
    """p < q is node order: n2 before n10 (string order would swap them and count 1)."""
    b = TraceBuilder("natural-order")
    a, c = b.send("n2"), b.send("n10")
    bb, d = b.send("n2"), b.send("n10")
    b.deliver_all(["n2"], [a, bb, c, d])
    b.deliver_all(["n10"], [bb, d, a, c])
    return Scenario("natural-order", b.rows(), b.run_info(ALL),
                    {"TOTAL_ORDER": 2, "FIFO_ORDER": 2, "CAUSAL_ORDER": 2},
                    (Planted("TOTAL_ORDER", ("n2", "n10"), ("g/n2:1", "g/n2:2"), (1, 2, 3, 1)),
                     Planted("TOTAL_ORDER", ("n2", "n10"), ("g/n10:1", "g/n10:2"),
                             (3, 4, 4, 2))))


def _local_order() -> Scenario:
    b = TraceBuilder("local-order")
    a = b.send("n1")
    b.opt_deliver("n1", "n1", 1)
    b.deliver_all(["n1", "n2", "n3"], [a])
    b.opt_deliver("n2", "n1", 1)  # after n2's final delivery
    b.opt_deliver("n3", "n1", 1)
    return Scenario("local-order", b.rows(), b.run_info(ALL), {"LOCAL_ORDER": 2},
                    (Planted("LOCAL_ORDER", ("n2",), ("g/n1:1",), (1, 1)),
                     Planted("LOCAL_ORDER", ("n3",), ("g/n1:1",), (1, 1))))


def _views_witness() -> Scenario:
    """n3 is owed m through n2's delivery (view 2), not n1's (view 1, without n3)."""
    b = TraceBuilder("views-witness")
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2"])
    m = b.send("n1")
    b.deliver("n1", *m[1:])
    for node in ("n2", "n3"):
        b.view(node, 2, ["n2", "n3"])
    b.deliver("n2", *m[1:])
    # n1 delivered m in view 1, n2 in view 2: m is also split over two views.
    return Scenario("views-witness", b.rows(), b.run_info(ALL),
                    {"AGREEMENT": 1, "SAME_VIEW_DELIVERY": 1},
                    (Planted("AGREEMENT", ("n3", "n2"), ("g/n1:1",), (1,)),
                     Planted("SAME_VIEW_DELIVERY", ("n1", "n2"), ("g/n1:1",), (1, 1))))


def _null_group() -> Scenario:
    b = TraceBuilder("null-group", group=None)  # type: ignore[arg-type]
    a, m = b.send("n1"), b.send("n2")
    b.deliver_all(["n1"], [a, m])
    b.deliver_all(["n2"], [m, a])
    return Scenario("null-group", b.rows(), b.run_info(ALL), {"TOTAL_ORDER": 1},
                    (Planted("TOTAL_ORDER", ("n1", "n2"), ("n1:1", "n2:1"), (1, 2, 2, 1)),))


def _two_groups() -> Scenario:
    """Orders across groups are not compared: each group's order is consistent."""
    b = TraceBuilder("two-groups")
    a, m = b.send("n1", group="g1"), b.send("n1", group="g2")
    b.deliver_all(["n1"], [a, m])
    b.deliver_all(["n2"], [m, a])
    return Scenario("two-groups", b.rows(), b.run_info(ALL), {})


def _wide() -> Scenario:
    """70 nodes: node sets span two 64-bit words; n70 (rank 69) misses a message."""
    b = TraceBuilder("wide")
    nodes = [f"n{i}" for i in range(1, 71)]
    m = b.send("n1")
    b.deliver_all(nodes[:-1], [m])
    # n70 has a row (so it is a node of the run) but no delivery
    b.recorder.record("n70", "net_recv", 10**9, peer="n1", size=64)
    return Scenario("wide", b.rows(), b.run_info(ALL), {"AGREEMENT": 1},
                    (Planted("AGREEMENT", ("n70", "n1"), ("g/n1:1",), (1,)),))


ABC = ("n1", "n2", "n3")


def _in_view_one(run_id: str) -> TraceBuilder:
    b = TraceBuilder(run_id)
    for node in ABC:
        b.view(node, 1, ABC)
    return b


def _churn() -> Scenario:
    """Clean views: two joiners (each built alone in view 0 first, as the simulator
    does), a leave (no view without itself), a crash inside a view."""
    b = _in_view_one("churn")
    first = [b.send("n1"), b.send("n2")]
    b.deliver_all(ABC, first)
    b.view("n4", 0, ["n4"])
    b.view("n5", 0, ["n5"])
    five = ["n1", "n2", "n3", "n4", "n5"]
    for node in five:
        b.view(node, 2, five)
    second = [b.send("n4"), b.send("n3")]
    b.deliver_all(five, second)
    four = ["n1", "n3", "n4", "n5"]  # n2 left
    for node in four:
        b.view(node, 3, four)
    third = [b.send("n5"), b.send("n1")]
    b.deliver_all(["n1", "n4", "n5"], third)
    b.deliver("n3", "n5", 1)
    b.crash("n3")
    return Scenario("churn", b.rows(), b.run_info(ALL), {})


def _view_members() -> Scenario:
    b = _in_view_one("view-members")
    b.view("n1", 2, ["n1", "n2"])
    b.view("n2", 2, ["n1", "n2"])
    odd = b.view("n3", 2, ["n1", "n3"])
    fell = b.view("n2", 1, ["n1", "n2", "n3"])
    return Scenario("view-members", b.rows(), b.run_info(ALL), {"VIEW_CONSISTENCY": 2}, (
        Planted("VIEW_CONSISTENCY", ("n3", "n1"), (), (odd.index or 0,)),
        Planted("VIEW_CONSISTENCY", ("n2",), (), (2, fell.index or 0))))


def _synchrony() -> Scenario:
    """n1, n2, n3 move from view 1 to 2 together; n3 missed n2#1 in view 1 and n1
    missed nothing, so: two units (n3 lacks n2#1; n1 and n2 lack nothing)."""
    b = _in_view_one("synchrony")
    ms = [b.send("n1"), b.send("n2"), b.send("n1")]
    b.deliver_all(["n1", "n2"], ms)
    b.deliver_all(["n3"], [ms[0]])
    for node in ABC:
        b.view(node, 2, ABC)
    b.deliver_all(["n3"], [ms[2]])  # n1#2 in view 2: split too; n2#1 never
    return Scenario("synchrony", b.rows(), b.run_info(ALL),
                    {"VIRTUAL_SYNCHRONY": 2, "SAME_VIEW_DELIVERY": 1, "AGREEMENT": 1}, (
        Planted("VIRTUAL_SYNCHRONY", ("n3", "n1"), ("g/n2:1",), (2,)),
        Planted("VIRTUAL_SYNCHRONY", ("n3", "n1"), ("g/n1:2",), (3,)),
        Planted("SAME_VIEW_DELIVERY", ("n1", "n3"), ("g/n1:2",), (3, 2))))


def _sent_later() -> Scenario:
    """n1 sent m in view 2; n2 and n3 delivered it while still in view 1."""
    b = _in_view_one("sent-later")
    b.view("n1", 2, ABC)
    b.send("n1")
    b.deliver_all(ABC, [("g", "n1", 1)])
    return Scenario("sent-later", b.rows(), b.run_info(ALL), {"SAME_VIEW_DELIVERY": 3}, (
        Planted("SAME_VIEW_DELIVERY", ("n2", "n1"), ("g/n1:1",), (1,)),
        Planted("SAME_VIEW_DELIVERY", ("n3", "n1"), ("g/n1:1",), (1,)),
        Planted("SAME_VIEW_DELIVERY", ("n2", "n1"), ("g/n1:1",), (1, 1))))


SCENARIOS: tuple[Callable[[], Scenario], ...] = (
    _clean, _crashed_prefix, _joiner, _duplicate, _unknown, _validity, _agreement, _uniform,
    _fifo, _causal, _total, _natural_order, _local_order, _views_witness, _null_group,
    _two_groups, _wide, _churn, _view_members, _synchrony, _sent_later,
)


def build_scenarios() -> list[Scenario]:
    return [make() for make in SCENARIOS]


def write_scenarios(out: Path, scenarios: list[Scenario]) -> Path:
    for s in scenarios:
        write_run(out, s.rows, s.info)
    return out


def memory_counts(trace_dir: Path) -> tuple[list[RunInfo], dict[str, dict[str, int]]]:
    """The runs in `trace_dir` and the in-memory checker's count per code per run
    (codes with none left out)."""
    from abcast.testing import check_traces, count_by_code
    from abcast.trace.schema import CODES
    from abcast.trace.writer import read_traces

    runs, events = read_traces(trace_dir)
    return runs, {run_id: {c: n for c, n in count_by_code(found, CODES).items() if n}
                  for run_id, found in check_traces(runs, events).items()}


def spark_counts(
    spark: object, trace_dir: Path, runs: list[RunInfo]
) -> tuple[dict[str, dict[str, int]], Any]:
    """The Spark checker's count per code per run on `trace_dir`, and its verdict."""
    from abcast.pipeline.io import read_trace
    from abcast.pipeline.suite import RunClaim, find_violations, runs_by_code, summarize
    from abcast.pipeline.trace_tables import materialize_tables
    from abcast.trace.schema import CODES

    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    claims = [RunClaim(r.run_id, r.ordering, r.nodes, r.guarantees) for r in runs]
    verdict = summarize(find_violations(materialize_tables(trace.events, with_views=True),
                                        runs_by_code(claims)))
    return {r.run_id: {c: n for c in CODES if (n := verdict.counts.get((r.run_id, c), 0))}
            for r in runs}, verdict
