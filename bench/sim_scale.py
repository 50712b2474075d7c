"""Scale: every ordering simulated at 64 nodes (or --nodes), one seeded run each, with
the time and memory it took.

Rules: one run per ordering, closed round-robin workload, no faults, the registry's
stack (`run_simulation`); each run in its own worker process (so its peak RSS is its
own). A run counts when it is clean for every guarantee its ordering claims and every
node delivered every message; the table gives its deliveries, simulated events, virtual
time, wall time and the worker's peak RSS. Writes out/sim_scale.md. A benchmark, not a
test: nothing is compared against a time limit. At 64 nodes the crash-tolerant orderings'
failure detectors dominate: 64 × 63 heartbeats per period for as long as the run lasts.

    .venv/bin/python bench/sim_scale.py
    .venv/bin/python bench/sim_scale.py --nodes 32 --messages 128 --orderings fifo,skeen
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from abcast.ordering.registry import ORDERINGS
from abcast.sim import SimConfig, run_simulation


@dataclass(frozen=True, slots=True)
class Outcome:
    ordering: str
    delivered: int
    expected: int
    violations: int
    events: int
    virtual_s: float
    wall_s: float
    peak_rss_mb: float

    @property
    def clean(self) -> bool:
        return self.violations == 0 and self.delivered == self.expected


def run(task: tuple[str, int, int, int]) -> Outcome:
    ordering, nodes, messages, seed = task
    started = time.perf_counter()
    result = run_simulation(SimConfig(ordering, nodes=nodes, messages=messages, seed=seed))
    wall = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: KiB
    return Outcome(ordering, result.delivered, messages * nodes, len(result.violations),
                   result.events, result.end_us / 1e6, wall, peak_kb / 1024)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--messages", type=int, default=256,
                        help="Broadcasts per run (round robin over the nodes).")
    parser.add_argument("--orderings", default=",".join(ORDERINGS))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="out/sim_scale")
    args = parser.parse_args()
    orderings = args.orderings.split(",")
    unknown = [o for o in orderings if o not in ORDERINGS]
    if unknown:
        parser.error(f"unknown orderings {unknown}; choose from {', '.join(ORDERINGS)}")
    tasks = [(o, args.nodes, args.messages, args.seed) for o in orderings]
    outcomes: list[Outcome] = []
    columns = (TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with (Progress(*columns) as progress,
          multiprocessing.Pool(args.jobs, maxtasksperchild=1) as pool):
        bar = progress.add_task("runs", total=len(tasks))
        for outcome in pool.imap_unordered(run, tasks):
            outcomes.append(outcome)
            progress.advance(bar)
    outcomes.sort(key=lambda o: orderings.index(o.ordering))
    lines = [f"{args.nodes} nodes, {args.messages} broadcasts per run, seed {args.seed}", "",
             "| ordering | delivered | violations | events | virtual s | wall s "
             "| peak RSS MB | clean |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {o.ordering} | {o.delivered:,} / {o.expected:,} | {o.violations} | "
              f"{o.events:,} | {o.virtual_s:.1f} | {o.wall_s:.1f} | {o.peak_rss_mb:.0f} | "
              f"{'yes' if o.clean else 'NO'} |" for o in outcomes]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    return 0 if all(o.clean for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
