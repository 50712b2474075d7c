"""The Spark FIFO_ORDER and CAUSAL_ORDER checks judge each delivery with the snapshot of
the incarnation it belongs to (docs/checks.md, "Joiners and rejoined nodes"), as the
in-memory checker does: a node that rejoined and later really crashed keeps its rejoin
snapshot, a hole after the rejoin or in the first incarnation is still found, and on
random traces of nodes cut off, re-admitted and crashed (several incarnations each) and
on the flapping simulated run that showed the bug, both checkers count the same."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from abcast.pipeline.io import read_trace
from abcast.pipeline.suite import CHECKS
from abcast.pipeline.trace_tables import TraceTables, materialize_tables, release
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults
from abcast.testing import TraceBuilder, check_traces, count_by_code
from abcast.testing.builders import rejoined_then_crashed
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import CAUSAL_ORDER, FIFO_ORDER
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark

ORDER_CODES = (FIFO_ORDER, CAUSAL_ORDER)
CLAIMS = ("fifo", "causal")


def _rejoined_then_crashed(run_id: str, **faults: bool) -> tuple[list[EventRow], RunInfo]:
    b = rejoined_then_crashed(run_id, **faults)
    return b.rows(), b.run_info(CLAIMS)


def _flapping(seed: int) -> tuple[list[EventRow], RunInfo]:
    """Four nodes through eight views; by seed, members are cut off (delivering a little
    in the minority, or not), come back (crash, recover; now and then a second recover
    with no view of its own), skip or swap deliveries, and crash for good."""
    rng = random.Random(3000 + seed)
    b = TraceBuilder(f"flapping-{seed}")
    nodes = ["n1", "n2", "n3", "n10"]
    out: set[str] = set()
    gone: set[str] = set()
    sent: dict[str, int] = {}
    for view in range(1, 9):
        for node in sorted(out):
            if rng.random() < 0.6:  # re-admitted
                out.discard(node)
                b.crash(node)
                b.recover(node)
        live = [n for n in nodes if n not in gone]
        if len(live) > 2 and rng.random() < 0.4:
            out.add(rng.choice(live))
        members = [n for n in live if n not in out]
        for node in members:
            b.view(node, view, members)
            if rng.random() < 0.1:
                b.crash(node)
                b.recover(node)
        ms = []
        for _ in range(rng.randint(1, 3)):
            origin = rng.choice(members)
            deps = {o: k for o, k in sent.items() if o != origin and rng.random() < 0.7}
            ms.append(b.send(origin, deps=deps or None))
            sent[origin] = sent.get(origin, 0) + 1
        for node in members:
            mine = list(ms)
            roll = rng.random()
            if roll < 0.15:
                mine.pop(rng.randrange(len(mine)))
            elif roll < 0.25 and len(mine) > 1:
                mine[0], mine[1] = mine[1], mine[0]
            for _group, origin, seq in mine:
                b.deliver(node, origin, seq)
        for node in sorted(out):
            if rng.random() < 0.3:  # delivers in the minority, in its stale view
                b.deliver(node, ms[0][1], ms[0][2])
        if rng.random() < 0.15:
            doomed = rng.choice(live)
            b.crash(doomed)
            gone.add(doomed)
            out.discard(doomed)
    return b.rows(), b.run_info(CLAIMS)


def _simulated() -> tuple[list[EventRow], RunInfo]:
    """Seed 30 of the flapping chandra-toueg sweep: n5 rejoins, then crashes."""
    nodes = random.Random(30).choice((6, 7, 8))
    config = SimConfig("chandra-toueg", nodes=nodes, messages=200, seed=30,
                       faults=flapping_faults(random.Random(30), nodes))
    result = run_simulation(config)
    info = result.run_info()
    claimed = RunInfo(**{**{f: getattr(info, f) for f in info.__slots__},
                         "guarantees": CLAIMS})
    return result.recorder.rows(), claimed


PLANTED = {  # run -> (FIFO_ORDER, CAUSAL_ORDER)
    "clean": (0, 0),
    "recover-again": (0, 0),
    "hole-after": (1, 2),
    "hole-before": (1, 1),
}


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rejoin-crash")
    write_run(out, *_rejoined_then_crashed("clean"))
    write_run(out, *_rejoined_then_crashed("recover-again", recover_again=True))
    write_run(out, *_rejoined_then_crashed("hole-after", skip_after=True))
    write_run(out, *_rejoined_then_crashed("hole-before", skip_before=True))
    for seed in range(8):
        write_run(out, *_flapping(seed))
    write_run(out, *_simulated())
    return out


@pytest.fixture(scope="module")
def tables(spark: object, trace_dir: Path) -> Iterator[TraceTables]:
    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    made = materialize_tables(trace.events, with_total=False)
    yield made
    release(made)


def _spark_counts(tables: TraceTables) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for code in ORDER_CODES:
        for row in CHECKS[code](tables).groupBy("run_id").count().collect():
            out.setdefault(row["run_id"], dict.fromkeys(ORDER_CODES, 0))[code] = row["count"]
    return out


def test_rejoin_crash_spark_finds_the_planted_units_and_no_false_ones(
        tables: TraceTables) -> None:
    assert tables.snapshots is not None
    counts = _spark_counts(tables)
    found = {run: (counts.get(run, {}).get(FIFO_ORDER, 0),
                   counts.get(run, {}).get(CAUSAL_ORDER, 0)) for run in PLANTED}
    assert found == PLANTED
    holes = {tuple(r["messages"]) for r in CHECKS[FIFO_ORDER](tables)
             .where("run_id in ('hole-after', 'hole-before')").collect()}
    assert holes == {("g/n1:7",), ("g/n1:2",)}


def test_rejoin_crash_spark_and_memory_count_the_same(tables: TraceTables,
                                                      trace_dir: Path) -> None:
    runs, events = read_traces(trace_dir)
    memory = {run: count_by_code(found, ORDER_CODES)
              for run, found in check_traces(runs, events).items()}
    # the random runs plant faults on both sides of recovers: something to agree on
    assert sum(c[FIFO_ORDER] for r, c in memory.items() if r.startswith("flapping")) >= 3
    assert sum(c[CAUSAL_ORDER] for r, c in memory.items() if r.startswith("flapping")) >= 3
    spark = _spark_counts(tables)
    by_spark = {run: spark.get(run, dict.fromkeys(ORDER_CODES, 0)) for run in memory}
    assert by_spark == memory
