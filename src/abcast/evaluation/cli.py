"""`abcast bench`: the click command (the top-level CLI registers it with
`cli.add_command(bench)`; until then `python -m abcast.evaluation`).

Rules: wiring only — pick the grid, run it with rich progress bars on stderr, check the
traces with Spark (one session), write bench.json, report.md and the plots into --out,
then the client/server section (abcast.evaluation.rpc_bench: rpc.json, appended to
report.md), then print the report's path and a short summary on stdout. Exit code 0
when no check found a violation, every run completed (open-loop runs past saturation
may fall over: the report shows it) and every client/server request was OK, 1
otherwise, 2 for a bad option.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Final

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from abcast.cli_params import OUT_DIR, SPARK_MASTER, make_out_dir
from abcast.evaluation.analysis import (
    cpu_us_per_message,
    floor_of,
    load_curves,
    paired_lone,
    paired_saturation,
    peer_ratios,
)
from abcast.evaluation.grid import (
    Grid,
    GridSpec,
    Phase,
    build_grid,
    full_spec,
    quick_spec,
    scale_only,
)
from abcast.evaluation.peers import REDIS_INSTALL, find_redis_server
from abcast.evaluation.report import write_report
from abcast.evaluation.results import BenchResult, is_clean, save
from abcast.evaluation.rpc_report import run_rpc_section
from abcast.evaluation.runner import BenchRunner, spark_check
from abcast.evaluation.scale import scale_points

EXIT_CLEAN: Final = 0
EXIT_FAILED: Final = 1


class RichProgress:
    """Two bars on a terminal: the whole bench, and the section running now. Off a
    terminal (output redirected, CI) one line per section instead."""

    def __init__(self, progress: Progress, total: int) -> None:
        self._progress = progress
        self._overall: TaskID = progress.add_task("bench", total=total)
        self._section: TaskID | None = None
        self._lines = not progress.console.is_terminal
        self._total = total
        self._done = 0

    def begin(self, section: str, total: int) -> None:
        if self._section is not None:
            self._progress.remove_task(self._section)
        self._section = self._progress.add_task(section, total=total)
        if self._lines:
            self._progress.console.print(
                f"bench: {section} ({total} steps; {self._done}/{self._total} done)",
                highlight=False)

    def step(self, label: str) -> None:
        self._progress.update(self._overall, description=f"bench: {label}")

    def advance(self) -> None:
        self._done += 1
        self._progress.advance(self._overall)
        if self._section is not None:
            self._progress.advance(self._section)


def planned_steps(grid: Grid) -> int:
    curves = {(e.ordering, e.nodes) for e in grid.of(Phase.LOAD)}
    return (len(grid.spec.middlewares) + len(grid.experiments) + len(curves)
            + len(grid.peers) + len(grid.spec.sim_tasks()) + 1)


def run_bench(spec: GridSpec, out: Path, *, quick: bool, master: str | None,
              use_spark: bool, console: Console) -> BenchResult:
    grid = build_grid(spec)
    # gRPC's C core logs every closed connection at INFO on the nodes' stderr (inherited),
    # which would scroll the progress bars away
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    notes: list[str] = []
    if any(p.peer == "redis" for p in grid.peers) and find_redis_server() is None:
        notes.append(f"no redis-server found, the Redis peer is skipped: "
                     f"install it with `{REDIS_INSTALL}`")
        console.print(f"[yellow]{notes[-1]}[/]")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bars:
        progress = RichProgress(bars, planned_steps(grid))
        result = asyncio.run(BenchRunner(grid, out, progress).run())
        result = replace(result, quick=quick, notes=tuple(notes))
        if use_spark:
            progress.begin("Spark check", 1)
            progress.step("Spark check of every trace (one session)")
            result = spark_check(result, out / "traces", master)
            progress.advance()
    return result


def summary_lines(result: BenchResult) -> list[str]:
    lines = []
    floor = floor_of(result)
    for curve in load_curves(result.runs, Phase.FLOOR):
        lines.append(f"{'floor':>15} n={curve.nodes} {curve.transport}: saturation "
                     f"{_rate(curve.knee.saturation)} msg/s")
    for loop, run in floor.lone.items():
        lines.append(f"{'floor':>15} n={run.experiment.nodes}: lone message p50 "
                     f"{_us(run.figures.p50_us)}, p99 {_us(run.figures.p99_us)} on "
                     f"{loop or 'the default loop'}, {_us(cpu_us_per_message(run))} CPU "
                     "per message")
    saturation = paired_saturation(result)
    for curve in load_curves(result.runs):
        _, of_floor = floor.saturation_ratio(curve)
        paired_too = saturation is not None and bool(saturation.rounds) and (
            curve.ordering, curve.transport, curve.nodes) == saturation.group
        lines.append(f"{curve.ordering:>15} n={curve.nodes} {curve.transport}: saturation "
                     f"{_rate(curve.knee.saturation)} msg/s, knee at "
                     f"{_rate(curve.knee.offered)} offered"
                     + ("" if of_floor is None else f"; {of_floor:.3f} of the floor")
                     + (" (single runs minutes apart: quote the paired median)"
                        if paired_too and of_floor is not None else ""))
        lowest = min(curve.points, key=lambda p: p.offered, default=None)
        if lowest is not None and lowest.p50_us is not None:
            lines.append(f"{curve.ordering:>15} n={curve.nodes} {curve.transport}: p50 "
                         f"{lowest.p50_us:,.0f} µs "
                         f"at {_rate(lowest.offered)} msg/s offered")
    if saturation is not None:
        ordering, transport, nodes = saturation.group
        left_out = f", {saturation.left_out} left out (a run incomplete or in violation)" \
            if saturation.left_out else ""
        lines.append(f"{ordering:>15} n={nodes} {transport}: saturation paired with the "
                     f"floor, {len(saturation.rounds)} rounds back to back{left_out}: "
                     f"{_fraction(saturation.throughput_median)} of the floor (per round "
                     f"{', '.join(f'{r:.3f}' for r in saturation.throughput_ratios)}), CPU "
                     f"per message {_times(saturation.cpu_median)} the floor's (medians: "
                     "the figures to quote)")
    for lone in result.of(Phase.LONE):
        e = lone.experiment
        poll = f", busy-poll {e.busy_poll_us} µs" if e.busy_poll_us else ""
        p50_ratio, p99_ratio = floor.lone_ratios(lone)
        cpu_ratio = floor.lone_cpu_ratio(lone)
        ratios = "" if p50_ratio is None else (
            f"; p50 {_times(p50_ratio)}, p99 {_times(p99_ratio)} the floor's"
            + ("" if cpu_ratio is None else f", CPU per message {_times(cpu_ratio)}"))
        lines.append(f"{e.variant:>15} n={e.nodes}: lone message p50 "
                     f"{_us(lone.figures.p50_us)} on "
                     f"{e.event_loop or 'the default loop'}{poll} (one in flight){ratios}")
    paired = paired_lone(result)
    if paired is not None and paired.rounds:
        per_round = ", ".join(f"{r:.2f}" for r in paired.p50_ratios)
        lines.append(f"{'sequencer':>15} n={paired.rounds[0].ours.experiment.nodes}: lone "
                     f"message paired with the floor on "
                     f"{paired.event_loop or 'the default loop'}, {len(paired.rounds)} "
                     f"rounds back to back: p50 {_times(paired.p50_median)} (per round "
                     f"{per_round}), p99 {_times(paired.p99_median)}, CPU per message "
                     f"{_times(paired.cpu_median)} the floor's (medians: the figures to "
                     "quote)")
    for base in result.of(Phase.BASELINE):
        e = base.experiment
        p50 = base.figures.p50_us
        lines.append(f"{e.ordering:>15} n={e.nodes}: closed-loop p50 "
                     f"{'—' if p50 is None else f'{p50:,.0f} µs'}")
    for point in scale_points(result):
        rss = point.rss_mib
        lines.append(f"{point.ordering:>15} n={point.nodes}: saturation "
                     f"{_rate(point.saturation)} msg/s (model {_rate(point.model_saturation)}"
                     f"), lone p50 {_us(point.lone_p50_us)} (model "
                     f"{_us(point.model_p50_us)}), RSS per node "
                     f"{'—' if rss is None else f'{rss[0]:,.0f} MiB'}")
    for sim in result.sims:
        lines.append(f"{sim.ordering:>15} simulated n={sim.nodes}: "
                     f"{'clean' if sim.clean else 'NOT CLEAN'}, {sim.wall_s:.1f} s wall, "
                     f"{sim.cpu_s:.1f} s CPU, peak RSS {sim.peak_rss_kib / 1024:,.0f} MiB")
    for peer in result.peers:
        # a peer skipped for a reason already said up front (a note) is not said again
        if peer.skipped and not any(peer.experiment.peer in n.lower() for n in result.notes):
            lines.append(f"peer {peer.experiment.peer}: skipped — {peer.skipped}")
    for r in peer_ratios(result):
        lines.append(f"{r.ordering} / {r.peer}: throughput {_times(r.throughput_ratio)}, "
                     f"p50 {_times(r.p50_ratio)}")
    bad = [r for r in result.runs if not is_clean(r)]
    traced = [r for r in result.runs if r.experiment.trace]
    checked = sum(1 for r in traced if r.spark_violations is not None)
    lines.append(f"runs: {len(result.runs)}, incomplete or in violation: {len(bad)}; "
                 f"Spark checked {checked}/{len(traced)} traced runs"
                 + (f" ({result.spark_error})" if result.spark_error else ""))
    return lines


def _fraction(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _times(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _us(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f} µs"


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:,.0f}"


@click.command("bench")
@click.option("--quick", is_flag=True, help="A reduced grid (about two minutes).")
@click.option("--out", "out", default="bench-out", show_default=True, type=OUT_DIR,
              help="Directory for traces, bench.json, report.md and the plots.")
@click.option("--master", default=None, type=SPARK_MASTER,
              help="Spark master URL for the trace check (default: embedded local[*]).")
@click.option("--spark/--no-spark", "use_spark", default=True, show_default=True,
              help="Check every trace with the Spark pipeline.")
@click.option("--peers/--no-peers", "with_peers", default=True, show_default=True,
              help="Measure PySyncObj and Redis Streams in the same run.")
@click.option("--rpc/--no-rpc", "with_rpc", default=True, show_default=True,
              help="The client/server section (Case A/B, saturation, consolidation).")
@click.option("--scale-only", "scale_only_", is_flag=True,
              help="Only the full bench's scale section (3–16 processes, every ordering "
                   "simulated at 64 nodes) and the tcp ping its model needs.")
def bench(quick: bool, out: Path, master: str | None, use_spark: bool,
          with_peers: bool, with_rpc: bool, scale_only_: bool) -> None:
    """Run the evaluation on real processes over loopback: the thesis's latency tables with
    the model beside them, a message-size sweep, throughput vs offered load with its knee,
    the peers (PySyncObj, Redis Streams), every trace checked by Spark, and a report."""
    if quick and scale_only_:
        raise click.UsageError("--scale-only runs the full bench's scale section; "
                               "--quick has none")
    spec = quick_spec() if quick else full_spec()
    if scale_only_:
        spec, with_rpc = scale_only(spec), False
    if not with_peers:
        spec = replace(spec, peers=())
    console = Console(stderr=True)
    make_out_dir(out)
    result = run_bench(spec, out, quick=quick, master=master, use_spark=use_spark,
                       console=console)
    save(result, out / "bench.json")
    page = write_report(result, out)
    rpc = run_rpc_section(quick, out, page, console) if with_rpc else None
    click.echo(f"report: {page}")
    for line in [*summary_lines(result), *(rpc.lines if rpc is not None else ())]:
        click.echo(f"  {line}")
    failed = bench_failed(result) or (rpc is not None and rpc.failed)
    sys.exit(EXIT_FAILED if failed else EXIT_CLEAN)


def bench_failed(result: BenchResult) -> bool:
    """A violation anywhere, a run that did not finish (except open-loop runs pushed past
    saturation: falling over there is a finding the report shows, not a bench failure),
    a simulated scale run that is not clean, or no Spark verdict."""
    for run in result.runs:
        if any(run.violations.values()) or run.checked_clean is False:
            return True
        if not run.complete and not run.experiment.open_loop_load:
            return True
    if any(not sim.clean for sim in result.sims):
        return True
    return result.spark_error is not None
