"""The Spark checker under extended virtual synchrony: on traces where partitions go on
apart and merge — hand-written (clean, a merge view a correct member misses, a message
both sides deliver in different orders, two sides reusing one view id) and simulated
(`partitions="evs"`, clean and with one node's merge view taken out) — it reports the
planted units and exactly the in-memory checker's count per code per run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spark_traces import memory_counts, spark_counts

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation
from abcast.testing.builders import EVS_CLAIMS, split_and_merge
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import TOTAL_ORDER, VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY
from abcast.trace.writer import write_run

pytestmark = pytest.mark.spark

def _split_and_merge(run_id: str, *, swapped: bool = False, right_view: int = 11,
                     skip_merge: str = "", crash: str = "") -> tuple[list[EventRow], RunInfo]:
    b = split_and_merge(run_id, right_order_swapped=swapped, right_view=right_view,
                        skip_merge=skip_merge, crash=crash)
    return b.rows(), b.run_info(EVS_CLAIMS, nodes=4)


def _simulated() -> tuple[list[EventRow], RunInfo]:
    config = SimConfig("sequencer", nodes=5, messages=60, seed=3, rate=60.0,
                       faults="delay=1-10ms,partition=n1+n2|n3+n4+n5@200ms-2200ms",
                       options=OrderingOptions(partitions="evs"), stall_us=3_000_000)
    result = run_simulation(config)
    return result.recorder.rows(), result.run_info()


def _without_merge_row(rows: list[EventRow], info: RunInfo, node: str
                       ) -> tuple[list[EventRow], RunInfo]:
    """The simulated run, renamed, with `node`'s last view row (the merge view) out."""
    last = max(i for i, r in enumerate(rows) if r.node == node and r.kind == "view")
    cut = [replace(r, run_id="sim-missed") for i, r in enumerate(rows) if i != last]
    return cut, replace(info, run_id="sim-missed")


@pytest.fixture(scope="module")
def evs_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("evs")
    write_run(out, *_split_and_merge("clean"))
    write_run(out, *_split_and_merge("missed", skip_merge="n4"))
    write_run(out, *_split_and_merge("crashed", crash="n4"))
    write_run(out, *_split_and_merge("swapped", swapped=True))
    write_run(out, *_split_and_merge("reused", right_view=10))
    rows, info = _simulated()
    write_run(out, rows, info)
    write_run(out, *_without_merge_row(rows, info, "n5"))
    return out


def test_spark_finds_the_planted_evs_faults_and_agrees_with_memory(
        spark: object, evs_traces: Path) -> None:
    runs, memory = memory_counts(evs_traces)
    sim_id = next(r.run_id for r in runs if r.run_id.startswith("sequencer-"))
    assert memory["clean"] == {} and memory["crashed"] == {} and memory[sim_id] == {}
    assert memory["missed"] == {VIEW_CONSISTENCY: 1}
    assert memory["swapped"] == {TOTAL_ORDER: 4}
    # (one id, two memberships: the two sides also look like one cohort moving 10 -> 20)
    assert memory["reused"] == {VIEW_CONSISTENCY: 2, VIRTUAL_SYNCHRONY: 4}
    assert memory["sim-missed"].get(VIEW_CONSISTENCY) == 1

    by_spark, verdict = spark_counts(spark, evs_traces, runs)
    assert by_spark == memory
    missed = [e for e in verdict.examples
              if e.run_id == "missed" and e.code == VIEW_CONSISTENCY]
    assert missed and list(missed[0].nodes) == ["n4", "n1"]
    assert "merge view 20" in missed[0].detail
