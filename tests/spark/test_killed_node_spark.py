"""A member process SIGKILLed under load (abcast.evaluation.soak.kill_under_load): the
Spark checker reads its unsealed stream through the same reader as the in-memory one
(the inferred crash row included) and finds the survivors' run clean, as the in-memory
checker does; the same trace with the lost tail's INTEGRITY_UNKNOWN excuse broken (the
crash row dropped) is not clean for either, and both count the same. Both runs sit in
one trace dir and Spark checks them in one pass (a check's cost here is its plan, not
its rows: two passes took twice as long)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from abcast.evaluation.soak import kill_under_load
from abcast.pipeline.io import preflight, read_trace
from abcast.pipeline.suite import RunClaim, find_violations, runs_by_code, summarize
from abcast.pipeline.trace_tables import materialize_tables
from abcast.testing import check_events, count_by_code
from abcast.trace import read_events, read_runs, write_run
from abcast.trace.schema import CODES

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def _spark_counts(spark: object, trace_dir: Path) -> dict[tuple[str, str], int]:
    runs = read_runs(trace_dir)
    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    claims = [RunClaim(r.run_id, r.ordering, r.nodes, r.guarantees) for r in runs]
    verdict = summarize(find_violations(materialize_tables(trace.events, with_views=True),
                                        runs_by_code(claims)))
    return {key: n for key, n in verdict.counts.items() if n}


def test_both_checkers_find_a_killed_members_run_clean(spark: object, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    run = asyncio.run(kill_under_load(out, nodes=3))
    assert run.result.errors == [] and run.result.states_equal
    assert (out / "events" / "killed" / f"{run.victim}.arrows").exists()
    rows = read_events(out, "killed")
    assert preflight(str(out)) == len(rows)  # the stream's rows and its crash row counted
    (info,) = read_runs(out)
    assert count_by_code(check_events(rows, info.guarantees, "killed")) == {}

    # planted: the same rows, written beside it as a finished run without the inferred
    # crash row
    without = [dataclasses.replace(r, run_id="planted") for r in rows
               if not (r.node == run.victim and r.kind == "crash")]
    write_run(out, without, dataclasses.replace(info, run_id="planted"))
    memory = count_by_code(check_events(without, info.guarantees, "planted"), CODES)
    assert sum(memory.values()) > 0
    assert read_events(out, "killed") == rows  # the killed run's stream is as it was
    assert _spark_counts(spark, out) == {("planted", c): n for c, n in memory.items() if n}
