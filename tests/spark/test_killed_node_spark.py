"""A member process SIGKILLed under load (abcast.evaluation.soak.kill_under_load): the
Spark checker reads its unsealed stream through the same reader as the in-memory one
(the inferred crash row included) and finds the survivors' run clean, as the in-memory
checker does; the same trace with the lost tail's INTEGRITY_UNKNOWN excuse broken (the
crash row dropped) is not clean for either, and both count the same."""

from __future__ import annotations

import asyncio
import shutil
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


def _spark_counts(spark: object, trace_dir: Path) -> dict[str, int]:
    runs = read_runs(trace_dir)
    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    claims = [RunClaim(r.run_id, r.ordering, r.nodes, r.guarantees) for r in runs]
    verdict = summarize(find_violations(materialize_tables(trace.events, with_views=True),
                                        runs_by_code(claims)))
    return {code: n for (_, code), n in verdict.counts.items() if n}


def test_both_checkers_find_a_killed_members_run_clean(spark: object, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    run = asyncio.run(kill_under_load(out, nodes=3))
    assert run.result.errors == [] and run.result.states_equal
    assert (out / "events" / "killed" / f"{run.victim}.arrows").exists()
    rows = read_events(out, "killed")
    assert preflight(str(out)) == len(rows)  # the stream's rows and its crash row counted
    (info,) = read_runs(out)
    assert count_by_code(check_events(rows, info.guarantees, "killed")) == {}
    assert _spark_counts(spark, out) == {}

    # planted: the same rows, written as a finished run without the inferred crash row
    planted = tmp_path / "planted"
    without = [r for r in rows if not (r.node == run.victim and r.kind == "crash")]
    write_run(planted, without, info)
    memory = count_by_code(check_events(without, info.guarantees, "killed"), CODES)
    assert sum(memory.values()) > 0
    assert _spark_counts(spark, planted) == {c: n for c, n in memory.items() if n}
    shutil.rmtree(planted)
