"""Sweep the `matrix` ordering in an open group: network faults plus random join= and
leave= schedules, many seeds; every run must be clean.

Rules: one task = one `run_simulation` (n, seed) in a worker process; the schedule is
drawn from `random.Random(seed)`: one or two joiners (n20, n21) at 0–400 ms and one to
n−2 leavers at 0–600 ms, on top of `drop=0.05,dup=0.02,delay=1-40ms`. A run is clean when
the checks find nothing (integrity, validity, agreement — a joiner is owed what was
delivered in the views it installed —, fifo, total), every leaver departed, and every
node still running (the members present throughout and the joiners) holds the same
application state. Prints one Markdown table (per n: runs, clean, mean deliveries, mean
packets per broadcast, wall time) and the replay command of every run that is not
clean; exit code 1 if there is one. The network-only sweep is
`bench/sweep_orderings.py --orderings matrix`.

    .venv/bin/python bench/sweep_matrix_open.py --seeds 200
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import re
import sys
import time
from dataclasses import dataclass

from abcast.sim import SimConfig, run_simulation

NETWORK = "drop=0.05,dup=0.02,delay=1-40ms"


@dataclass(frozen=True, slots=True)
class Task:
    nodes: int
    seed: int
    messages: int

    def faults(self) -> str:
        rng = random.Random(self.seed * 1_000 + self.nodes)
        items = [f"join=n{20 + j}@{rng.randint(0, 400)}ms" for j in range(rng.randint(1, 2))]
        leavers = rng.sample(range(1, self.nodes + 1), rng.randint(1, max(1, self.nodes - 2)))
        items += [f"leave=n{who}@{rng.randint(0, 600)}ms" for who in leavers]
        return ",".join([NETWORK, *items])

    def command(self) -> str:
        return (f"abcast sim --ordering matrix --nodes {self.nodes} --messages "
                f"{self.messages} --seed {self.seed} --faults {self.faults()} --out /tmp/replay")


@dataclass(frozen=True, slots=True)
class Outcome:
    task: Task
    problems: tuple[str, ...]
    delivered: int
    packets_per_broadcast: float
    wall_s: float


def run_one(task: Task) -> Outcome:
    start = time.perf_counter()
    faults = task.faults()
    result = run_simulation(SimConfig("matrix", nodes=task.nodes, messages=task.messages,
                                      seed=task.seed, faults=faults))
    problems: list[str] = []
    if result.violations:
        problems.append(f"violations {result.counts}")
    if not result.quiescent:
        problems.append("did not settle")
    leavers = set(re.findall(r"leave=(n\d+)", faults))
    if leavers - set(result.departed):
        problems.append(f"not departed: {sorted(leavers - set(result.departed))}")
    if len(set(result.app_states.values())) > 1:
        problems.append("replica states differ")
    expected = task.nodes + faults.count("join=") - len(leavers)
    if len(result.app_states) != expected:
        problems.append(f"running at the end: {sorted(result.app_states)}")
    return Outcome(task, tuple(problems), result.delivered, result.packets_per_broadcast,
                   time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=lambda s: [int(x) for x in s.split(",")], default=[3, 5, 8])
    p.add_argument("--seeds", type=int, default=200)
    p.add_argument("--messages", type=int, default=300)
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args(argv)
    tasks = [Task(n, seed, args.messages) for seed in range(1, args.seeds + 1)
             for n in args.nodes]
    outcomes: list[Outcome] = []
    with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
        for i, outcome in enumerate(pool.imap_unordered(run_one, tasks), 1):
            outcomes.append(outcome)
            if i % max(1, len(tasks) // 20) == 0:
                print(f"sweep: {i}/{len(tasks)} runs", file=sys.stderr, flush=True)
    print("| n | runs | clean | mean deliveries | mean packets/broadcast | wall time (s) |")
    print("|---|---|---|---|---|---|")
    for n in args.nodes:
        mine = [o for o in outcomes if o.task.nodes == n]
        clean = sum(not o.problems for o in mine)
        print(f"| {n} | {len(mine)} | {clean} | {sum(o.delivered for o in mine) / len(mine):.0f} "
              f"| {sum(o.packets_per_broadcast for o in mine) / len(mine):.2f} "
              f"| {sum(o.wall_s for o in mine):.1f} |")
    bad = [o for o in outcomes if o.problems]
    for o in bad:
        print(f"- NOT CLEAN ({'; '.join(o.problems)}): {o.task.command()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
