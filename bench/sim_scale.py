"""Scale: every ordering simulated at 64 nodes (or --nodes), one seeded run each, with
the time and memory it took — the simulated half of the full bench's scale section
(abcast.evaluation.sim_scale), run alone.

Rules: those of abcast.evaluation.sim_scale (one run per ordering, each in a fresh
process of its own, clean = no violation and every node delivered every message).
Writes out/sim_scale.md; exits 1 when a run is not clean. A benchmark, not a test.

    .venv/bin/python bench/sim_scale.py
    .venv/bin/python bench/sim_scale.py --nodes 32 --messages 128 --orderings fifo,skeen
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from abcast.evaluation.sim_scale import (
    SIM_HEADER,
    SIM_MESSAGES,
    SIM_NODES,
    SimTask,
    run_sims,
    sim_table,
)
from abcast.ordering.registry import ORDERINGS


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=SIM_NODES)
    parser.add_argument("--messages", type=int, default=SIM_MESSAGES,
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
    tasks = [SimTask(o, args.nodes, args.messages, args.seed) for o in orderings]
    columns = (TextColumn("[bold]simulating"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with Progress(*columns) as progress:
        bar = progress.add_task("runs", total=len(tasks))
        runs = run_sims(tasks, args.jobs, on_done=lambda _run: progress.advance(bar))
    lines = [f"{args.nodes} nodes, {args.messages} broadcasts per run, seed {args.seed}, "
             f"{args.jobs} at a time", "",
             "| " + " | ".join(SIM_HEADER) + " |", "|" + "---|" * len(SIM_HEADER)]
    lines += ["| " + " | ".join(row) + " |" for row in sim_table(runs)]
    table = "\n".join(lines)
    print(table)
    out = Path(args.out).with_suffix(".md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(table + "\n")
    return 0 if all(r.clean for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
