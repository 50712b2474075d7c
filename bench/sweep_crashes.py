"""Sweep: crash-tolerant orderings under crashes at random times, many seeds each.

Rules: one task = one seeded `run_simulation` whose fault schedule is drawn from the
seed (so a failing run is replayed by its printed command). `chandra-toueg` loses
⌊(n−1)/2⌋ random nodes, coordinators included; the sequencer family loses its
sequencer, n1. All under `drop=0.05,delay=1-10ms`. A run is clean when the checks find
nothing for the guarantees it claims, it settled, and every surviving node delivered
every message a surviving node broadcast. Prints a Markdown table; exit 1 on any
unclean run. A benchmark, not a test: it never compares times against a limit.

    .venv/bin/python bench/sweep_crashes.py                 # 500 seeds per row
    .venv/bin/python bench/sweep_crashes.py --seeds 20 --messages 200
    .venv/bin/python bench/sweep_crashes.py --relay     # the sequencer family relaying
    .venv/bin/python bench/sweep_crashes.py --seeds 40 --ordering chandra-toueg
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation

NETWORK = "drop=0.05,delay=1-10ms"
#: (ordering, safe, n) rows of the sweep
ROWS = [("chandra-toueg", False, n) for n in (3, 5, 7)] + [
    (o, safe, 5) for o in ("sequencer", "causal-total") for safe in (False, True)
]


@dataclass(frozen=True, slots=True)
class Task:
    ordering: str
    safe: bool
    nodes: int
    seed: int
    messages: int
    horizon_ms: int
    relay: bool = False

    def faults(self) -> str:
        rng = random.Random(self.seed)
        nodes = [f"n{i}" for i in range(1, self.nodes + 1)]
        victims = (rng.sample(nodes, (self.nodes - 1) // 2)
                   if self.ordering == "chandra-toueg" else ["n1"])
        crashes = ",".join(f"crash={v}@{rng.randint(1, self.horizon_ms)}ms" for v in victims)
        return f"{NETWORK},{crashes}"

    def command(self) -> str:
        flags = (" --safe" if self.safe else "") + (" --relay" if self.relay else "")
        return (f"abcast sim --ordering {self.ordering} --nodes {self.nodes} --messages "
                f"{self.messages} --seed {self.seed} --faults {self.faults()}{flags}"
                " --out /tmp/replay")


@dataclass(frozen=True, slots=True)
class Outcome:
    task: Task
    violations: dict[str, int]
    complete: bool
    crashed: int
    packets_per_broadcast: float
    wall_s: float

    @property
    def clean(self) -> bool:
        return not self.violations and self.complete


def run_one(task: Task) -> Outcome:
    start = time.perf_counter()
    result = run_simulation(SimConfig(task.ordering, nodes=task.nodes, messages=task.messages,
                                      seed=task.seed, faults=task.faults(),
                                      options=OrderingOptions(safe=task.safe,
                                                              relay=task.relay)))
    rows = result.recorder.rows()
    crashed = {r.node for r in rows if r.kind == "crash"}
    alive = {r.node for r in rows} - crashed
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in alive}
    complete = result.quiescent and all(
        sent <= {(r.origin, r.seq) for r in result.recorder.rows_of(n) if r.kind == "deliver"}
        for n in alive)
    return Outcome(task, result.counts, complete, len(crashed), result.packets_per_broadcast,
                   time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seeds", type=int, default=500)
    p.add_argument("--messages", type=int, default=300)
    p.add_argument("--horizon-ms", type=int, default=1500, help="crashes fall in 1..this")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--budget-s", type=float, default=None,
                   help="stop after this many seconds and report the runs that finished")
    p.add_argument("--relay", action="store_true",
                   help="only the sequencer family, in relay mode (the origin sends to the "
                        "sequencer only)")
    p.add_argument("--ordering", default=None, help="only this ordering's rows")
    args = p.parse_args(argv)
    rows = [r for r in ROWS if r[0] != "chandra-toueg"] if args.relay else ROWS
    rows = [r for r in rows if args.ordering in (None, r[0])]
    todo = [Task(o, safe, n, seed, args.messages, args.horizon_ms, args.relay)
            for seed in range(1, args.seeds + 1) for o, safe, n in rows]
    console = Console(stderr=True)
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    progress = Progress(TextColumn("[bold]crash sweep"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not console.is_terminal)
    with progress, multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        bar = progress.add_task("runs", total=len(todo))
        for out in pool.imap_unordered(run_one, todo):
            outcomes.append(out)
            progress.update(bar, advance=1)
            if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
                pool.terminate()
                break
    print("| ordering | mode | n | seeds | crashes per run | unclean runs | violations "
          "| mean packets/broadcast | wall time (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ordering, safe, n in rows:
        mine = [o for o in outcomes if (o.task.ordering, o.task.safe, o.task.nodes)
                == (ordering, safe, n)]
        crashes = (n - 1) // 2 if ordering == "chandra-toueg" else 1
        mode = ("safe" if safe else "plain") + (" relay" if args.relay else "")
        print(f"| {ordering} | {mode} | {n} | {len(mine)} | {crashes} "
              f"| {sum(not o.clean for o in mine)} "
              f"| {sum(sum(o.violations.values()) for o in mine)} "
              f"| {sum(o.packets_per_broadcast for o in mine) / max(len(mine), 1):.2f} "
              f"| {sum(o.wall_s for o in mine):.0f} |")
    bad = [o for o in outcomes if not o.clean]
    partial = " PARTIAL (budget ran out)." if len(outcomes) < len(todo) else ""
    print(f"\n{len(outcomes)} of {len(todo)} runs, {args.messages} messages each, "
          f"{time.perf_counter() - started:.0f} s elapsed.{partial}")
    for o in bad[:20]:
        print(f"- {o.violations or 'incomplete'}: {o.task.command()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
