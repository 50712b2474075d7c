"""The Spark checks on seqs no writer reaches but a trace may hold: a jump from seq 1 to
2**62 is one FIFO hole, found without building the 2**62-long range between (Spark's
`sequence` refused it, and abcast.checks ran out of memory listing it), and the bigint
extremes -2**63 and 2**63-1 as seqs, indices and view ids are compared and counted
without an arithmetic overflow (Spark's ANSI mode failed the job on `seq - prev` and on
causal order's `seq - 1`). Both checkers report the same counts per code on every run.

The in-memory side runs under a soft address-space cap (1 GiB above what the process
holds), so a checker that builds the range fails here with MemoryError instead of
taking the machine's memory."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_traces import ALL

from abcast.pipeline.commands import run_check
from abcast.pipeline.io import read_trace
from abcast.pipeline.suite import CHECKS
from abcast.pipeline.trace_tables import materialize_tables
from abcast.testing import check_fifo, check_traces, count_by_code
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import CODES, FIFO_ORDER
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark

BIG, LOW, TOP = 2**62, -(2**63), 2**63 - 1


@contextlib.contextmanager
def memory_capped(extra: int = 1 << 30) -> Iterator[None]:
    """The process's soft RLIMIT_AS lowered to its present size plus `extra` (the hard
    limit is left alone, so the old soft one comes back)."""
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = kib * 1024 + extra
    resource.setrlimit(resource.RLIMIT_AS, (cap if hard == resource.RLIM_INFINITY
                                            else min(cap, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _info(run: str) -> RunInfo:
    return RunInfo(run, "test", "mem://", 3, 0, "wide", None, None, ALL, 0, 1)


def _runs() -> list[tuple[list[EventRow], RunInfo]]:
    def row(run: str, node: str, kind: str, origin: str | None, seq: int | None, t: int,
            index: int | None = None, **more: object) -> EventRow:
        return EventRow(run, node, kind, origin, seq, "g", t, index, **more)  # type: ignore[arg-type]

    gap = [row("gap", "n1", "send", "n1", 1, 1),
           row("gap", "n1", "send", "n1", BIG, 2, deps={"n2": BIG}),
           row("gap", "n1", "deliver", "n1", 1, 3, 1), row("gap", "n1", "deliver", "n1", BIG, 4, 2),
           row("gap", "n2", "deliver", "n1", 1, 5, 1), row("gap", "n2", "deliver", "n1", BIG, 6, 2)]
    rising = [row("rising", "n2", "deliver", "n1", LOW, 1, 1),
              row("rising", "n2", "deliver", "n1", TOP, 2, 2),
              row("rising", "n1", "send", "n1", TOP, 3, deps={"n2": TOP})]
    falling = [row("falling", "n2", "deliver", "n1", TOP, 1, 1),
               row("falling", "n2", "deliver", "n1", LOW, 2, 2),
               row("falling", "n2", "deliver", "n1", 3, 3, 3),
               row("falling", "n1", "send", "n1", LOW, 4, deps={"n2": LOW, "n1": TOP})]
    edges = [row("edges", "n2", "deliver", "n1", TOP, 3, TOP),
             row("edges", "n2", "deliver", "n1", TOP - 1, 4, LOW),
             row("edges", "n3", "deliver", "n1", TOP - 1, 3, TOP),
             row("edges", "n3", "deliver", "n1", TOP, 4, LOW),
             row("edges", "n2", "view", None, None, TOP, view_id=TOP, members=("n2", "n3")),
             row("edges", "n3", "view", None, None, LOW, view_id=LOW, members=("n2",)),
             row("edges", "n3", "view", None, None, 0, view_id=TOP, members=("n2", "n3")),
             row("edges", "n1", "send", "n1", TOP, 5, view_id=LOW, deps={"n2": LOW, "n1": TOP})]
    # a joiner whose snapshot (n1#1..2, delivered in view 1) trims the wide gap's bottom
    joiner = [row("joiner", n, "view", None, None, t, view_id=1, members=("n1", "n2"))
              for t, n in ((1, "n1"), (2, "n2"))]
    joiner += [row("joiner", n, "deliver", "n1", s, 2 + 2 * s + k, s, view_id=1)
               for s in (1, 2) for k, n in enumerate(("n1", "n2"))]
    joiner += [row("joiner", n, "view", None, None, 10 + k, view_id=2,
                   members=("n1", "n2", "n3")) for k, n in enumerate(("n1", "n2", "n3"))]
    joiner += [row("joiner", "n3", "deliver", "n1", s, 20 + k, k + 1, view_id=2)
               for k, s in enumerate((1, BIG))]
    return [(rows, _info(rows[0].run_id)) for rows in (gap, rising, falling, edges, joiner)]


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wide")
    for rows, info in _runs():
        write_run(out, rows, info)
    return out


def test_spark_and_memory_agree_on_wide_seqs(spark: object, trace_dir: Path) -> None:
    runs, events = read_traces(trace_dir)
    with memory_capped():
        found = check_traces(runs, events)
    memory = {run: count_by_code(v, CODES) for run, v in found.items()}
    assert memory["gap"][FIFO_ORDER] == 2  # n1#2..2**62-1 at n1 and at n2
    assert memory["rising"][FIFO_ORDER] == 1  # n1#1..2**63-2
    assert memory["joiner"][FIFO_ORDER] == 1  # n1#3..2**62-1: above the snapshot's top

    outcome = run_check(spark, str(trace_dir), None)  # type: ignore[arg-type]
    by_spark = {r.run_id: {code: outcome.verdict.counts.get((r.run_id, code), 0)
                           for code in CODES} for r in runs}
    assert by_spark == memory


def test_a_wide_hole_is_one_row_named_by_its_ends(spark: object, trace_dir: Path) -> None:
    """Unit for unit what abcast.checks finds: each hole its lowest and highest seq."""
    _, events = read_traces(trace_dir)
    with memory_capped():
        memory = sorted(
            (v.run_id, v.nodes, tuple(f"{g}/{o}:{s}" for g, o, s in v.messages))
            for v in check_fifo(events) if not v.positions)
    assert ("gap", ("n2",), ("g/n1:2", f"g/n1:{BIG - 1}")) in memory
    assert ("falling", ("n2",), ("g/n1:4", f"g/n1:{TOP - 1}")) in memory
    assert len(memory) == 6

    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    holes = CHECKS[FIFO_ORDER](materialize_tables(trace.events)).where("size(positions) = 0")
    assert sorted((r["run_id"], tuple(r["nodes"]), tuple(r["messages"]))
                  for r in holes.collect()) == memory
