"""`abcast check` and `abcast report` as commands: exit codes, the JSON line, refusals of
directories that are not traces (one clear line naming the file or column, no
traceback), and the report's tables and plots."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from spark_traces import build_scenarios, write_scenarios

from abcast.pipeline.commands import check, report
from abcast.pipeline.io import join_path, local_path, preflight
from abcast.sim import SimConfig, run_simulation
from abcast.testing import TraceBuilder
from abcast.trace.rows import TraceFormatError
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark


def _clean_dir(out: Path) -> Path:
    b = TraceBuilder("clean-run")
    ms = [b.send("n1"), b.send("n2")]
    b.deliver_all(["n1", "n2", "n3"], ms)
    write_run(out, b.rows(), b.run_info(["integrity", "validity", "agreement", "fifo",
                                         "total"]))
    return out


def _refusal(args: list[str]) -> str:
    result = CliRunner().invoke(check, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    return lines[0]


# ---------------------------------------------------------------- refusals (no Spark)


def test_missing_dir_exits_2(tmp_path: Path) -> None:
    line = _refusal([str(tmp_path / "nowhere")])
    assert "not found" in line and "nowhere" in line


def test_empty_dir_exits_2_naming_the_missing_part(tmp_path: Path) -> None:
    assert "events" in _refusal([str(tmp_path)])


def test_missing_runs_file_exits_2(tmp_path: Path) -> None:
    _clean_dir(tmp_path)
    (tmp_path / "runs.parquet").unlink()
    assert "runs.parquet" in _refusal([str(tmp_path)])


def test_non_parquet_event_file_exits_2_naming_it(tmp_path: Path) -> None:
    _clean_dir(tmp_path)
    (tmp_path / "events" / "clean-run" / "n1.parquet").write_text("run_id,node\nr,n1\n")
    line = _refusal([str(tmp_path)])
    assert "n1.parquet" in line and "not a Parquet file" in line


def test_missing_column_exits_2_naming_it(tmp_path: Path) -> None:
    _clean_dir(tmp_path)
    path = tmp_path / "events" / "clean-run" / "n2.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["view_id"]), path)
    line = _refusal([str(tmp_path), "--json"])
    assert "n2.parquet" in line and "'view_id'" in line


def test_a_run_without_its_event_directory_exits_2_naming_it(tmp_path: Path) -> None:
    """A runs row whose events/<run_id>/ is gone: the in-memory reader refuses it
    (read_events); Spark read no row of it and judged the run clean."""
    _clean_dir(tmp_path)
    kept = TraceBuilder("kept")  # another run's files keep events/ non-empty
    kept.deliver_all(["n1"], [kept.send("n1")])
    write_run(tmp_path, kept.rows(), kept.run_info(["validity"]))
    shutil.rmtree(tmp_path / "events" / "clean-run")
    line = _refusal([str(tmp_path)])
    assert "clean-run" in line and "no event directory" in line
    with pytest.raises(TraceFormatError, match="no event directory"):
        read_traces(tmp_path)


@pytest.mark.parametrize(("edit", "said"), [
    ("unknown", "claims unknown guarantees ['totl']"), ("twice", "appears twice")])
def test_runs_rows_the_in_memory_reader_refuses_are_refused(tmp_path: Path, edit: str,
                                                            said: str) -> None:
    """abcast.trace.read_runs refuses a guarantee it does not know and a run_id listed
    twice; Spark ignored the unknown name (a run claiming "totl" was checked for nothing
    and judged clean) and took the duplicate as one more claim."""
    _clean_dir(tmp_path)
    runs_path = tmp_path / "runs.parquet"
    table = pq.read_table(runs_path)
    if edit == "unknown":
        column = table.schema.get_field_index("guarantees")
        table = table.set_column(column, "guarantees",
                                 pa.array([["totl"]], table.schema.field(column).type))
    else:
        table = pa.concat_tables([table, table])
    pq.write_table(table, runs_path)
    with pytest.raises(TraceFormatError, match=re.escape(said)):
        read_traces(tmp_path)
    assert said in _refusal([str(tmp_path)])


def test_report_refuses_like_check(tmp_path: Path) -> None:
    result = CliRunner().invoke(report, [str(tmp_path / "nowhere"), "--out",
                                         str(tmp_path / "r")])
    assert result.exit_code == 2 and "not found" in result.stderr
    assert not (tmp_path / "r").exists()


def test_runs_file_missing_a_column_exits_2(tmp_path: Path) -> None:
    _clean_dir(tmp_path)
    runs = pq.read_table(tmp_path / "runs.parquet")
    pq.write_table(pa.table({"run_id": runs.column("run_id")}), tmp_path / "runs.parquet")
    line = _refusal([str(tmp_path)])
    assert "runs.parquet" in line and "missing column" in line


def test_only_local_paths_are_inspected_on_disk(tmp_path: Path) -> None:
    assert local_path("s3a://bucket/traces") is None
    assert local_path("hdfs://namenode:8020/traces") is None
    assert local_path(f"file://{tmp_path}") == tmp_path
    assert local_path("relative/dir") == Path("relative/dir")
    assert preflight("s3a://bucket/traces") is None  # Spark judges remote dirs
    assert join_path("s3a://bucket/t/", "events") == "s3a://bucket/t/events"
    _clean_dir(tmp_path)
    rows = preflight(str(tmp_path))
    assert rows is not None and rows > 0 and preflight(f"file://{tmp_path}") == rows


# ---------------------------------------------------------------- checks (Spark)


def test_check_clean_dir_exits_0(spark: object, tmp_path: Path) -> None:
    """A clean run exits 0 with its claimed codes at 0, and the running session's settings
    are left alone (one check for both): a running session is used as it is
    (build_session); before, the builder's getOrCreate set the command's own SQL settings
    on it (eight shuffle partitions on the tests' shared two-partition session, for every
    test after)."""
    conf = spark.conf  # type: ignore[attr-defined]
    conf.set("spark.sql.shuffle.partitions", "2")
    result = CliRunner().invoke(check, [str(_clean_dir(tmp_path)), "--json"])
    assert result.exit_code == 0, result.output
    assert conf.get("spark.sql.shuffle.partitions") == "2"
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1  # with --json, stdout is the JSON line alone
    summary = json.loads(lines[0])
    assert summary["runs"] == 1 and summary["events"] > 0
    # the codes the run claimed, and only those: what it did not claim was not checked
    assert set(summary["violations"].values()) == {0}
    assert {"VALIDITY", "AGREEMENT", "FIFO_ORDER", "TOTAL_ORDER"} <= set(summary["violations"])
    assert "UNIFORM_AGREEMENT" not in summary["violations"]
    assert "CAUSAL_ORDER" not in summary["violations"] and summary["examples"] == []


def test_check_planted_dir_exits_1_with_counts_and_examples(spark: object,
                                                            tmp_path: Path) -> None:
    scenarios = [s for s in build_scenarios() if s.run_id in ("total", "agreement", "clean")]
    out = write_scenarios(tmp_path, scenarios)
    result = CliRunner().invoke(check, [str(out), "--json"])
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["runs"] == 3
    assert summary["events"] == sum(len(s.rows) for s in scenarios)
    assert summary["violations"]["TOTAL_ORDER"] == 2
    assert summary["violations"]["AGREEMENT"] == 1
    assert sum(summary["violations"].values()) == 3
    example = next(e for e in summary["examples"] if e["code"] == "AGREEMENT")
    assert example == {"run": "agreement", "code": "AGREEMENT", "nodes": ["n3", "n1"],
                       "messages": ["g/n1:2"], "positions": [2],
                       "detail": example["detail"]}
    assert "TOTAL_ORDER" in result.stderr and "run total" in result.stderr  # the tables


# ---------------------------------------------------------------- report (Spark)


def test_report_writes_tables_and_plots(spark: object, tmp_path: Path) -> None:
    traces = tmp_path / "traces"
    for nodes in (3, 4):
        for payload in (16, 512):
            run = run_simulation(SimConfig("sequencer", nodes, 6, seed=nodes, payload=payload,
                                           net_trace=True))
            run.write(traces)
    b = TraceBuilder("optimistic")
    m = b.send("n1")
    b.opt_deliver("n1", "n1", 1)
    b.opt_deliver("n2", "n1", 1)
    b.deliver_all(["n1", "n2"], [m])
    write_run(traces, b.rows(), b.run_info(["integrity"], ordering="optimistic"))
    out = tmp_path / "report"
    result = CliRunner().invoke(report, [str(traces), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.md").read_text()
    for heading in ("## Runs", "## By configuration", "## Optimistic delivery",
                    "## Fitted latency model"):
        assert heading in page
    # a configuration row; simulated time says it is virtual
    assert "| sequencer | sim (virtual time) | 4 | 512 | closed-round-robin | 1 |" in page
    assert "virtual time" in page.split("## Runs")[0]
    assert "| optimistic | 2 | 100.0% |" in page  # accuracy: both positions match
    fit = next(line for line in page.splitlines()
               if line.startswith("| sequencer | sim (virtual time) | 512 | closed-round-robin |"))
    assert fit.split("|")[5].strip() == "2" and "—" not in fit.split("|")[6]  # two sizes
    for name in ("latency_vs_nodes.png", "latency_vs_payload.png", "throughput_vs_nodes.png"):
        png = out / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
        assert f"]({name})" in page


def test_report_keeps_a_crash_an_evs_and_a_relay_run_apart(spark: object,
                                                           tmp_path: Path) -> None:
    """Three sequencer runs of one size that measure different things: each is its own
    configuration, beside its own model (relay: n packets; the others 2(n−1), marked as
    a failure-free reference where faults were injected)."""
    from abcast.ordering.registry import OrderingOptions

    traces = tmp_path / "traces"
    for faults, options in (("crash=n3@20ms", OrderingOptions()),
                            ("partition=n1|*@5ms-60ms", OrderingOptions(partitions="evs")),
                            ("", OrderingOptions(relay=True))):
        run_simulation(SimConfig("sequencer", 3, 30, seed=2, faults=faults, net_trace=True,
                                 options=options)).write(traces)
    out = tmp_path / "report"
    result = CliRunner().invoke(report, [str(traces), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.md").read_text()
    configs = page.split("## By configuration")[1].split("##")[0]
    rows = [line for line in configs.splitlines() if line.startswith("| sequencer |")]
    assert len(rows) == 3
    cells = [re.split(r"(?<!\\)\|", row) for row in rows]  # `\|` is a pipe inside a cell
    by_setting = {c[5].strip(): c[-2].strip() for c in cells}
    assert by_setting == {"closed-round-robin, faults crash=n3@20ms": "4 †",
                          "closed-round-robin, partitions=evs, faults partition=n1\\|*@5ms-60ms":
                              "4 †",
                          "closed-round-robin, relay": "3"}
    assert "† the model is of a failure-free run" in page


def test_report_skips_plots_of_a_single_point(spark: object, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = CliRunner().invoke(report, [str(_clean_dir(tmp_path / "t")), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = (out / "report.md").read_text()
    assert "skipped" in page and not list(out.glob("*.png"))
