"""Sweep: many seeded simulations per ordering under network faults; every one must be clean.

Rules: one task = one `run_simulation` (ordering, n, seed) in a worker process (default 2
workers, the machine has 2 cores); the parent shows a rich progress bar on stderr and
prints one Markdown table on stdout — per ordering and n: seeds, messages per run,
deliveries, violations, mean packets per broadcast, and the summed wall time of its runs.
Any violation, undelivered message or run that did not go quiet is listed with the
command that replays it, and the exit code is 1. It is a benchmark, not a test: it never
compares times against a limit.

Tasks go out seed by seed, so a sweep cut short — `--budget-s` elapsed, SIGTERM (e.g.
from `timeout`) or Ctrl-C — still prints a table of whole seeds' worth of runs, marked
PARTIAL (exit code 3 when it is otherwise clean). `--log FILE` appends one JSON line per
run as it finishes; `--report FILE` runs nothing and prints the table of such a log (runs
of several invocations, e.g. a sweep continued with `--first-seed`, each run counted
once). Without a terminal, progress is a plain line every 5% on stderr.

    .venv/bin/python bench/sweep_orderings.py                       # the full sweep
    .venv/bin/python bench/sweep_orderings.py --seeds 5 --messages 300 --nodes 3,5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation

ORDERINGS = ("causal", "sequencer", "skeen", "causal-total")
FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"


@dataclass(frozen=True, slots=True)
class Task:
    ordering: str
    nodes: int
    seed: int
    messages: int
    faults: str
    batch: int | None

    def config(self) -> SimConfig:
        return SimConfig(self.ordering, nodes=self.nodes, messages=self.messages,
                         seed=self.seed, faults=self.faults,
                         options=OrderingOptions(batch=self.batch))

    def command(self) -> str:
        batch = "" if self.batch is None else f" --batch {self.batch}"
        return (f"abcast sim --ordering {self.ordering} --nodes {self.nodes} "
                f"--messages {self.messages} --seed {self.seed} --faults {self.faults}"
                f"{batch} --out /tmp/replay")


@dataclass(frozen=True, slots=True)
class Outcome:
    task: Task
    delivered: int
    violations: dict[str, int]
    packets_per_broadcast: float
    quiescent: bool
    wall_s: float

    @property
    def clean(self) -> bool:
        return (not self.violations and self.quiescent
                and self.delivered == self.task.messages * self.task.nodes)


@dataclass(slots=True)
class Row:
    seeds: int = 0
    deliveries: int = 0
    violations: int = 0
    packets: float = 0.0
    wall_s: float = 0.0
    bad: list[Outcome] = field(default_factory=list)


def run_one(task: Task) -> Outcome:
    start = time.perf_counter()
    result = run_simulation(task.config())
    return Outcome(task, result.delivered, result.counts, result.packets_per_broadcast,
                   result.quiescent, time.perf_counter() - start)


def tasks(args: argparse.Namespace) -> Iterator[Task]:
    """Costliest first (big n, Skeen), so the two workers finish together."""
    cost = {"skeen": 3, "causal-total": 2, "sequencer": 2, "causal": 1}
    combos = sorted(((o, n) for o in args.orderings for n in args.nodes),
                    key=lambda c: -cost.get(c[0], 2) * c[1])
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for ordering, nodes in combos:
            yield Task(ordering, nodes, seed, args.messages, args.faults, args.batch)


def table(rows: dict[tuple[str, int], Row], messages: int) -> str:
    lines = [
        "| ordering | n | seeds | messages | deliveries | violations "
        "| mean packets/broadcast | wall time (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (ordering, nodes), row in sorted(rows.items(), key=lambda kv: (
            ORDERINGS.index(kv[0][0]) if kv[0][0] in ORDERINGS else 99, kv[0][1])):
        mean = row.packets / row.seeds if row.seeds else 0.0
        lines.append(f"| {ordering} | {nodes} | {row.seeds} | {messages} | {row.deliveries} "
                     f"| {row.violations} | {mean:.3f} | {row.wall_s:.1f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--orderings", type=lambda s: s.split(","), default=list(ORDERINGS))
    p.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[3, 5, 8])
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--faults", default=FAULTS)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=None,
                   help="stop submitting runs after this many seconds; report what ran")
    p.add_argument("--log", type=Path, default=None, help="append one JSON line per run")
    p.add_argument("--report", type=Path, default=None,
                   help="print the table of a --log file instead of running")
    return p.parse_args(argv)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class _Sweep:
    """The parent's bookkeeping: rows, progress output, the optional JSONL log."""

    def __init__(
        self, total: int, console: Console, log: IO[str] | None, *, quiet: bool = False
    ) -> None:
        self.total = total
        self.quiet = quiet
        self.done = 0
        self.bad = 0
        self.rows: dict[tuple[str, int], Row] = {}
        self.console = console
        self.log = log
        self.started = time.perf_counter()
        self._next_report = 0

    def add(self, out: Outcome) -> None:
        row = self.rows.setdefault((out.task.ordering, out.task.nodes), Row())
        row.seeds += 1
        row.deliveries += out.delivered
        row.violations += sum(out.violations.values())
        row.packets += out.packets_per_broadcast
        row.wall_s += out.wall_s
        self.done += 1
        if not out.clean:
            self.bad += 1
            row.bad.append(out)
        if self.log is not None:
            self.log.write(json.dumps({**asdict(out), "clean": out.clean}) + "\n")
            self.log.flush()
        if not (self.quiet or self.console.is_terminal) and self.done >= self._next_report:
            self._next_report = self.done + max(1, self.total // 20)
            print(f"sweep: {self.done}/{self.total} runs, {self.bad} not clean, "
                  f"{self.elapsed():.0f} s", file=sys.stderr, flush=True)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


def _read_log(path: Path) -> list[Outcome]:
    """The runs of a --log file, each (ordering, n, seed, messages, faults, batch) once."""
    runs: dict[Task, Outcome] = {}
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        task = Task(**raw["task"])
        runs[task] = Outcome(task, raw["delivered"], raw["violations"],
                             raw["packets_per_broadcast"], raw["quiescent"], raw["wall_s"])
    return list(runs.values())


def report(path: Path) -> int:
    outcomes = _read_log(path)
    sweep = _Sweep(len(outcomes), Console(stderr=True), None, quiet=True)
    for out in outcomes:
        sweep.add(out)
    messages = sorted({o.task.messages for o in outcomes})
    faults = sorted({o.task.faults for o in outcomes})
    seeds = sorted({o.task.seed for o in outcomes})
    print(table(sweep.rows, messages[0] if len(messages) == 1 else 0))
    span = f"seeds {seeds[0]}–{seeds[-1]}" if seeds else "no seeds"
    print(f"\n{len(outcomes)} runs from {path} ({span}), faults "
          f"{', '.join(f'`{f}`' for f in faults)}.")
    _print_bad(sweep)
    return 1 if sweep.bad else 0


def _print_bad(sweep: _Sweep) -> None:
    for row in sweep.rows.values():
        for out in row.bad:
            print(f"NOT CLEAN: delivered {out.delivered}/{out.task.messages * out.task.nodes}, "
                  f"violations {out.violations}, quiescent {out.quiescent}: "
                  f"{out.task.command()}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        return report(args.report)
    todo = list(tasks(args))
    console = Console(stderr=True)
    log = args.log.open("a") if args.log else None
    sweep = _Sweep(len(todo), console, log)
    progress = Progress(TextColumn("[bold]sweep"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[bad]} bad"), TimeElapsedColumn(),
                        console=console, disable=not console.is_terminal)
    signal.signal(signal.SIGTERM, _interrupt)
    cut_short = ""
    with progress, multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        bar = progress.add_task("runs", total=len(todo), bad=0)
        try:
            for out in pool.imap_unordered(run_one, todo):
                sweep.add(out)
                progress.update(bar, advance=1, bad=sweep.bad)
                if args.budget_s is not None and sweep.elapsed() > args.budget_s:
                    cut_short = f"the {args.budget_s:.0f} s budget ran out"
                    break
        except KeyboardInterrupt:
            cut_short = "interrupted"
        pool.terminate()
    if log is not None:
        log.close()
    print(table(sweep.rows, args.messages))
    note = f" PARTIAL ({cut_short}): {sweep.done} of {len(todo)} runs." if cut_short else ""
    print(f"\n{sweep.done} runs, faults `{args.faults}`, {args.workers} workers, "
          f"{sweep.elapsed():.0f} s elapsed.{note}")
    _print_bad(sweep)
    if sweep.bad:
        return 1
    return 3 if cut_short else 0


if __name__ == "__main__":
    sys.exit(main())
