"""The view checks through `abcast check`: the command reads the member lists only when a
run claims virtual synchrony, reports the three codes in its JSON line and its tables
with concrete counterexamples, and leaves runs that do not claim it alone. (Each check's
planted units are in spark_traces.py, run by test_spark_checks.py; agreement with the
in-memory checker, on simulated and mutated view traces too, by
test_spark_agrees_with_memory.py.)"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from abcast.pipeline.commands import check, run_check
from abcast.testing import TraceBuilder, check_traces
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark

ABC = ("n1", "n2", "n3")


def _faulty(run_id: str) -> TraceBuilder:
    """n3 lists other members for view 2 and misses n2#1 in view 1, which it delivers in
    view 2 instead."""
    b = TraceBuilder(run_id)
    for node in ABC:
        b.view(node, 1, ABC)
    ms = [b.send("n1"), b.send("n2")]
    b.deliver_all(["n1", "n2"], ms)
    b.deliver_all(["n3"], ms[:1])
    b.view("n1", 2, ABC)
    b.view("n2", 2, ABC)
    b.view("n3", 2, ["n1", "n3"])
    b.deliver("n3", "n2", 1)
    return b


def test_check_reports_view_codes_only_for_runs_claiming_them(spark: object,
                                                              tmp_path: Path) -> None:
    claimed = _faulty("claimed")
    write_run(tmp_path, claimed.rows(), claimed.run_info(["integrity", "virtual_synchrony"]))
    unclaimed = _faulty("unclaimed")
    write_run(tmp_path, unclaimed.rows(), unclaimed.run_info(["integrity", "total"]))

    result = CliRunner().invoke(check, [str(tmp_path), "--json"])
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert {code: n for code, n in summary["violations"].items() if n} == {
        "VIEW_CONSISTENCY": 1, "VIRTUAL_SYNCHRONY": 1, "SAME_VIEW_DELIVERY": 1}
    examples = {e["code"]: e for e in summary["examples"]}
    assert all(e["run"] == "claimed" for e in summary["examples"])
    assert examples["VIEW_CONSISTENCY"]["nodes"] == ["n3", "n1"]
    assert examples["VIRTUAL_SYNCHRONY"]["nodes"] == ["n3", "n1"]
    assert examples["VIRTUAL_SYNCHRONY"]["messages"] == ["g/n2:1"]
    assert examples["VIRTUAL_SYNCHRONY"]["positions"] == [2]
    assert "view 1" in examples["VIRTUAL_SYNCHRONY"]["detail"]
    assert examples["SAME_VIEW_DELIVERY"]["nodes"] == ["n1", "n3"]
    assert examples["SAME_VIEW_DELIVERY"]["positions"] == [2, 2]
    # the tables (on stderr with --json) list the codes for the claiming run
    assert "VIRTUAL_SYNCHRONY" in result.stderr and "run claimed" in result.stderr


def test_a_deviant_is_shown_at_its_first_deviating_row_by_both_checkers(
        spark: object, tmp_path: Path) -> None:
    """n3 lists view 1 as [n1, n3] twice; a writer numbered the later row lower (index 1,
    the earlier one 2). The counterexample is its first deviating row in its views'
    order (docs/checks.md), index 2, in both checkers: Spark took the lowest index (1)
    while memory showed the first row's."""
    b = TraceBuilder("deviant-twice")
    for node in ("n1", "n2"):
        b.view(node, 1, ABC)
    b.view("n3", 1, ["n1", "n3"])
    b.view("n3", 1, ["n3", "n1"])
    rows = [replace(r, index=3 - r.index) if (r.node, r.kind) == ("n3", "view")
            and r.index is not None else r for r in b.rows()]
    write_run(tmp_path, rows, b.run_info(["virtual_synchrony"]))
    runs, events = read_traces(tmp_path)
    memory = [v for v in check_traces(runs, events)["deviant-twice"]
              if v.code == "VIEW_CONSISTENCY" and v.nodes == ("n3", "n1")]
    assert [v.positions for v in memory] == [(2,)]

    outcome = run_check(spark, str(tmp_path), None)  # type: ignore[arg-type]
    shown = [e.positions for e in outcome.verdict.examples
             if e.code == "VIEW_CONSISTENCY" and e.nodes == ("n3", "n1")]
    assert shown == [(2,)]
