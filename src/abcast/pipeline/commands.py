"""`abcast check` and `abcast report`: the click commands the top-level CLI registers
(`cli.add_command(check)`, `cli.add_command(report)`).

Rules: these only wire steps — validate the trace dir (before Java starts, so a bad dir
fails fast), build the session, read, derive the shared tables, run the pure transforms of
abcast.pipeline, print. pyspark is imported inside the commands only, so the rest of the
CLI starts without Java. Exit codes: 0 clean, 1 violations found (check), 2 the trace dir
is missing, empty or not in the format (one line on stderr naming the file or column), or
Spark could not run on the master named (one line naming it). With `--json` the tables go
to stderr and stdout holds only the JSON line. Spark takes tens of seconds: each phase
prints one line on stderr (`abcast check: reading …`), and on a terminal Spark's own
stage progress bar shows between them. A session that already runs (tests share one) is
reused and left running.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn

import click

from abcast.cli_params import OUT_DIR, SPARK_MASTER, fail, make_out_dir
from abcast.pipeline.io import (
    TraceDirError,
    check_claims,
    local_path,
    preflight,
    read_trace,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from abcast.pipeline.suite import RunClaim, Verdict

EXIT_CLEAN: Final = 0
EXIT_VIOLATIONS: Final = 1
EXIT_BAD_INPUT: Final = 2

#: the columns the checks read; the rest of a trace (peer, size of net rows) stays on disk.
#: `members` whatever the runs claim: a joiner's admission view skips its private start
#: (a first view row listing it alone), which FIFO and causal order's snapshots need
_CHECK_COLUMNS: Final = ("run_id", "node", "kind", "origin", "seq", "group", "t_ns",
                         "index", "size", "view_id", "deps", "members")


@dataclass(frozen=True, slots=True)
class CheckOutcome:
    runs: tuple[RunClaim, ...]
    events: int
    verdict: Verdict


def _refuse(command: str, error: TraceDirError) -> NoReturn:
    fail(str(error))


def _phase(command: str, line: str) -> None:
    """One line per phase on stderr, so a long Spark job never runs without a word."""
    click.echo(f"abcast {command}: {line}", err=True)


def _spark_failure(exc: Exception) -> bool:
    """A failure of Spark itself (the JVM, a master that cannot be reached or used)."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    return isinstance(exc, (Py4JError, PySparkException, ConnectionError))


def _first_line(exc: Exception) -> str:
    text = str(exc)
    return next((line.strip() for line in text.splitlines() if line.strip()),
                type(exc).__name__)[:300]


_UNREADABLE: Final = ("not a Parquet file", "CANNOT_READ_FILE", "FileNotFoundException",
                      "FAILED_READ_FILE", "PATH_NOT_FOUND")


def _unreadable(exc: Exception) -> TraceDirError | None:
    """A Spark failure that means the input is not a trace (a remote dir is only read when
    a job runs), as a one-line refusal; None for any other failure."""
    text = str(exc)
    if not any(marker in text for marker in _UNREADABLE):
        return None
    first = next((line.strip() for line in text.splitlines() if line.strip()), text)
    return TraceDirError(f"cannot read the trace: {first[:300]}")


def _session(
    command: str, master: str | None, remote: str | None = None
) -> tuple[SparkSession, bool]:
    """The session to use and whether this command started it (and so stops it)."""
    from pyspark import SparkContext

    from abcast.pipeline.session import DEFAULT_MASTER, build_session

    if remote is not None:
        return build_session(remote=remote), True
    already = SparkContext._active_spark_context is not None
    if not already:
        _phase(command, f"starting Spark on {master or DEFAULT_MASTER}")
    try:
        return build_session(master, progress=sys.stderr.isatty(),
                             save_classes=not already), not already
    except Exception as exc:
        if not _spark_failure(exc):
            raise
        fail(f"Spark could not start on master {master or DEFAULT_MASTER}: "
             f"{_first_line(exc)}")


def _stop(command: str, spark: SparkSession) -> None:
    from abcast.pipeline.session import saving_classes, stop_session

    if saving_classes():
        _phase(command, "saving the JVM's loaded classes for later starts (once)")
    stop_session(spark)


def _absolute(uri: str) -> str:
    """A local trace dir as an absolute path: executors of a cluster and a Spark Connect
    server resolve a relative one against their own working directory."""
    local = local_path(uri)
    return str(local.resolve()) if local is not None else uri


def _where(master: str | None, remote: str | None) -> tuple[str | None, str | None]:
    if master is not None and remote is not None:
        fail("give --master or --remote, not both")
    return master, remote


_REMOTE_HELP: Final = ("Spark Connect server (sc://HOST:PORT) to run on instead of a "
                       "master.")


def read_claims(runs: DataFrame) -> tuple[RunClaim, ...]:
    """The runs rows (a small table) as RunClaims, in run_id order."""
    from abcast.pipeline.suite import RunClaim

    rows = runs.select("run_id", "ordering", "nodes", "guarantees").collect()
    check_claims([(r["run_id"], r["guarantees"]) for r in rows], "runs.parquet")
    return tuple(sorted(
        (RunClaim(r["run_id"], r["ordering"], int(r["nodes"]), tuple(r["guarantees"] or ()))
         for r in rows), key=lambda c: c.run_id))


def run_check(spark: SparkSession, uri: str, event_rows: int | None) -> CheckOutcome:
    """Read the trace dir, check every run for what it claims, summarise."""
    from abcast.pipeline.suite import Verdict, find_violations, runs_by_code, summarize
    from abcast.pipeline.trace_tables import materialize_tables, release
    from abcast.trace.schema import CAUSAL_ORDER, TOTAL_ORDER, VIEW_CONSISTENCY

    trace = read_trace(spark, uri)
    claims = read_claims(trace.runs)
    count = event_rows if event_rows is not None else trace.events.count()
    checked = runs_by_code(claims)
    if not checked:
        return CheckOutcome(runs=claims, events=count, verdict=Verdict({}, ()))
    claimed_runs = sorted({run for runs in checked.values() for run in runs})
    events = trace.events.select(*_CHECK_COLUMNS).where(
        trace.events["run_id"].isin(*claimed_runs))
    tables = materialize_tables(events, with_deps=CAUSAL_ORDER in checked,
                                with_total=TOTAL_ORDER in checked,
                                with_views=VIEW_CONSISTENCY in checked)
    try:
        verdict = summarize(find_violations(tables, checked))
    finally:
        release(tables)
    return CheckOutcome(runs=claims, events=count, verdict=verdict)


def _print_tables(outcome: CheckOutcome, *, to_stderr: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    stream = sys.stderr if to_stderr else sys.stdout
    console = Console(file=stream, width=max(Console(file=stream).width, 120))
    for claim in outcome.runs:
        counts = outcome.verdict.of_run(claim.run_id)
        table = Table(title=f"run {claim.run_id} — {claim.ordering}, {claim.nodes} nodes",
                      title_justify="left")
        table.add_column("code")
        table.add_column("violations", justify="right")
        table.add_column("counterexamples (nodes · messages · positions)")
        if not claim.codes:
            table.add_row("—", "0", "no guarantees claimed; nothing checked")
        for code in claim.codes:
            examples = [e for e in outcome.verdict.examples
                        if e.run_id == claim.run_id and e.code == code]
            shown = "\n".join(
                f"{','.join(e.nodes)} · {' '.join(e.messages)} · "
                f"{','.join(str(p) for p in e.positions) or '-'} — {e.detail}"
                for e in examples) or "clean"
            table.add_row(code, str(counts.get(code, 0)), shown)
        console.print(table)


@click.command("check")
@click.argument("trace_dir")
@click.option("--master", default=None, type=SPARK_MASTER,
              help="Spark master URL (default: embedded local[*]).")
@click.option("--remote", default=None, metavar="URL", help=_REMOTE_HELP)
@click.option("--json", "as_json", is_flag=True,
              help="End with one JSON line: runs, events, violations per claimed code, "
                   "examples.")
def check(trace_dir: str, master: str | None, remote: str | None, as_json: bool) -> None:
    """Check every run in TRACE_DIR for the guarantees its runs row claims.

    Exit code 0 when clean, 1 when any violation is found, 2 when TRACE_DIR is missing,
    empty or not a trace directory.
    """
    try:
        event_rows = preflight(trace_dir)
    except TraceDirError as exc:
        _refuse("check", exc)
    spark, owned = _session("check", *_where(master, remote))
    _phase("check", f"checking the runs in {trace_dir}")
    try:
        outcome = run_check(spark, _absolute(trace_dir), event_rows)
    except TraceDirError as exc:
        _refuse("check", exc)
    except Exception as exc:
        refusal = _unreadable(exc)
        if refusal is not None:
            _refuse("check", refusal)
        if not _spark_failure(exc):
            raise
        fail(f"Spark failed on master {master or 'local[*]'}: {_first_line(exc)}")
    finally:
        if owned:
            _stop("check", spark)
    # With --json, stdout carries only the JSON line (the CLI's convention).
    _print_tables(outcome, to_stderr=as_json)
    if as_json:
        claimed = {code for claim in outcome.runs for code in claim.codes}
        summary = {
            "runs": len(outcome.runs),
            "events": outcome.events,
            # the codes some run claimed, as in the tables: a code nobody claimed was
            # not checked, and a 0 would say it was
            "violations": {code: n for code, n in outcome.verdict.totals().items()
                           if code in claimed},
            "examples": [e.as_json() for e in outcome.verdict.examples],
        }
        click.echo(json.dumps(summary, sort_keys=False))
    sys.exit(EXIT_CLEAN if outcome.verdict.clean else EXIT_VIOLATIONS)


def run_report(
    spark: SparkSession, uri: str, out_dir: Path, event_rows: int | None,
) -> Path:
    """Read the trace dir, write `report.md` and the PNG plots into `out_dir`."""
    from abcast.pipeline.plots import draw_plots
    from abcast.pipeline.report import collect_report, render_markdown

    trace = read_trace(spark, uri)
    count = event_rows if event_rows is not None else trace.events.count()
    report_data = collect_report(trace.events, trace.runs, uri, count)
    plots = draw_plots(report_data.configs, out_dir)
    page = out_dir / "report.md"
    page.write_text(render_markdown(report_data, [(p.title, p.file_name, p.note)
                                                  for p in plots]))
    return page


@click.command("report")
@click.argument("trace_dir")
@click.option("--out", "out_dir", required=True, type=OUT_DIR,
              help="Directory for report.md and the plots (created if missing).")
@click.option("--master", default=None, type=SPARK_MASTER,
              help="Spark master URL (default: embedded local[*]).")
@click.option("--remote", default=None, metavar="URL", help=_REMOTE_HELP)
def report(trace_dir: str, out_dir: Path, master: str | None, remote: str | None) -> None:
    """Summarise the runs in TRACE_DIR: latency, throughput, packets per broadcast
    against the model, optimistic accuracy, a fitted latency model, and plots.

    Exit code 2 when TRACE_DIR is missing, empty or not a trace directory.
    """
    try:
        event_rows = preflight(trace_dir)
    except TraceDirError as exc:
        _refuse("report", exc)
    make_out_dir(out_dir)
    spark, owned = _session("report", *_where(master, remote))
    _phase("report", f"summarising the runs in {trace_dir}")
    try:
        page = run_report(spark, _absolute(trace_dir), out_dir, event_rows)
    except TraceDirError as exc:
        _refuse("report", exc)
    except Exception as exc:
        refusal = _unreadable(exc)
        if refusal is not None:
            _refuse("report", refusal)
        if not _spark_failure(exc):
            raise
        fail(f"Spark failed on master {master or 'local[*]'}: {_first_line(exc)}")
    finally:
        if owned:
            _stop("report", spark)
    click.echo(f"wrote {page}")
