"""Sweep: ordering "optimistic" under loss, duplicates, delay and sequencer crashes.

Rules: one task = one seeded `run_simulation` (n = 3, 5, 8 in turn; compensated and
plain in turn; every other seed crashes the sequencer n1 at a time drawn from the seed).
A run is clean when the in-memory checks find nothing for the guarantees it claims —
integrity, validity, agreement, fifo, total and local_order — and it has opt-deliveries.
Prints one line per unclean run (its replay command) and a table; exit 1 on any. A
benchmark, not a test: it never compares times against a limit.

    .venv/bin/python bench/sweep_optimistic.py               # 210 seeds
    .venv/bin/python bench/sweep_optimistic.py --seeds 30 --messages 60
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import sys
from collections import Counter
from dataclasses import dataclass

from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.sim import SimConfig, run_simulation

NETWORK = "drop=0.05,dup=0.02,delay=1-40ms"
SIZES = (3, 5, 8)


@dataclass(frozen=True, slots=True)
class Task:
    seed: int
    messages: int

    @property
    def nodes(self) -> int:
        return SIZES[self.seed % len(SIZES)]

    @property
    def compensate(self) -> bool:
        return self.seed % 2 == 0

    @property
    def crash(self) -> bool:
        return (self.seed // 2) % 2 == 0

    def faults(self) -> str:
        if not self.crash:
            return NETWORK
        return f"{NETWORK},crash=n1@{random.Random(self.seed).randint(20, 1500)}ms"

    def config(self) -> SimConfig:
        options = OrderingOptions(optimistic=OptimisticConfig(compensate=self.compensate))
        return SimConfig("optimistic", nodes=self.nodes, messages=self.messages,
                         seed=self.seed, faults=self.faults(), options=options)


def run(task: Task) -> tuple[Task, list[str], int]:
    result = run_simulation(task.config())
    opt = sum(1 for r in result.recorder.rows() if r.kind == "opt_deliver")
    problems = [f"{v.code} {v.nodes} {v.messages[:2]}" for v in result.violations]
    if opt == 0:
        problems.append("no opt-deliveries")
    return task, problems, opt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=210)
    parser.add_argument("--messages", type=int, default=120)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    tasks = [Task(seed, args.messages) for seed in range(args.seeds)]
    runs: Counter[tuple[int, bool, bool]] = Counter()
    bad: Counter[tuple[int, bool, bool]] = Counter()
    opt_rows = 0
    with multiprocessing.Pool(args.jobs) as pool:
        for task, problems, opt in pool.imap_unordered(run, tasks):
            key = (task.nodes, task.crash, task.compensate)
            runs[key] += 1
            opt_rows += opt
            if problems:
                bad[key] += 1
                print(f"UNCLEAN seed {task.seed}: {problems[:3]} — abcast sim --ordering "
                      f"optimistic --nodes {task.nodes} --messages {task.messages} --seed "
                      f"{task.seed} --faults {task.faults()}", flush=True)
    print("\n| n | sequencer crash | compensated | runs | clean |")
    print("|---|---|---|---|---|")
    for key in sorted(runs):
        n, crash, comp = key
        print(f"| {n} | {'yes' if crash else 'no'} | {'yes' if comp else 'no'} | "
              f"{runs[key]} | {runs[key] - bad[key]} |")
    total, unclean = sum(runs.values()), sum(bad.values())
    print(f"\n{total} runs, {total - unclean} clean, {opt_rows} opt_deliver rows; "
          f"network {NETWORK}")
    return 1 if unclean else 0


if __name__ == "__main__":
    sys.exit(main())
