"""Benchmark: how much CPU per message a group can spend and keep a lone message's p50
within a given ratio of the floor's — the floor with CPU added per frame, measured.

Rules: a round runs the floor's lone-message run (`abcast cluster --serial`'s workload,
n = 3, tcp, tracing off, abcast.evaluation.floor) with a busy loop of `b` µs added in
each node process per frame read and per frame written, for each `b` of `--budgets`, and
abcast's own run beside them, in alternating order. A `sitecustomize` this script puts
first on the node processes' PYTHONPATH wraps the floor's `FloorNode.on_frame`
and `FloorNode._write` (nothing in abcast knows of it). `--where` says where the added
work sits: `before` spins before the frame is handled and before each write (all of it
on the critical path, like a slower parser and encoder), `after` spins after each
write and after each frame is handled (none of it on the path of the frame just
written, like bookkeeping done once the packets are out: acks, timers, delivery to the
application); `split` is half of each.

Each run prints its p50, the group's CPU per message (every node process's CPU time
from go to its report, over the messages, as `evaluation.analysis.cpu_us_per_message`)
and both as ratios to the unmodified floor's of the same round. The table says how the
p50 grows with the CPU a message costs the group: the budget a steady-state lane must
meet (docs/performance.md §4). A benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/floor_budget.py [--rounds 3] [--messages 3000]
                                           [--budgets 0,5,10,15,20] [--where split]
                                           [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from pathlib import Path

from lone_path import serial_run  # (bench/: this script's directory is on sys.path)

#: run in every floor process before abcast is imported
SITECUSTOMIZE = '''
import os, sys, time
budget_ns = int(float(os.environ.get("ABCAST_FLOOR_BUDGET_US", "0")) * 1000)
where = os.environ.get("ABCAST_FLOOR_BUDGET_WHERE", "split")
is_floor = "node" not in sys.argv and "--run-id" in sys.argv
if budget_ns and is_floor:
    # The floor runs as __main__ (a fresh copy of its module): its node class is patched
    # when the workload is built around a node of it.
    import abcast.evaluation.worker as worker
    clock = time.perf_counter_ns
    before_ns = {"before": budget_ns, "after": 0, "split": budget_ns // 2}[where]
    after_ns = budget_ns - before_ns

    def spin(ns):
        if ns:
            end = clock() + ns
            while clock() < end:
                pass

    def wrap(method):
        def wrapper(*args):
            spin(before_ns)
            try:
                return method(*args)
            finally:
                spin(after_ns)
        return wrapper

    run_init = worker._Run.__init__

    def patched_init(self, config, node):
        kind = type(node)
        if not getattr(kind, "_budget_patched", False):
            kind._budget_patched = True
            kind.on_frame = wrap(kind.on_frame)
            kind._write = wrap(kind._write)
        run_init(self, config, node)

    worker._Run.__init__ = patched_init
'''


async def lone_run(messages: int, loop: str, floor: bool, budget_us: float,
                   where: str) -> tuple[float, float]:
    """One serial run: (p50 µs, the group's CPU µs per message)."""
    result = await serial_run(messages, loop, floor, {
        "ABCAST_FLOOR_BUDGET_US": str(budget_us), "ABCAST_FLOOR_BUDGET_WHERE": where})
    p50 = result.summary()["latency_p50_us"]
    # as evaluation.analysis.cpu_us_per_message, from the outcomes themselves
    cpu = sum(o.cpu_ns for o in result.outcomes) / messages / 1e3 if result.outcomes else 0
    if not isinstance(p50, float) or not cpu:
        raise SystemExit(f"a {'floor' if floor else 'sequencer'} run measured no latency or CPU")
    return p50, cpu


async def main(args: argparse.Namespace) -> None:
    site = Path(tempfile.mkdtemp(prefix="floor-budget-site-"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    budgets = [float(b) for b in args.budgets.split(",")]
    if 0.0 not in budgets:
        budgets.insert(0, 0.0)
    labels = [f"floor +{b:g} µs" for b in budgets] + ["abcast"]
    p50s: dict[str, list[float]] = {label: [] for label in labels}
    cpus: dict[str, list[float]] = {label: [] for label in labels}
    p50_ratio: dict[str, list[float]] = {label: [] for label in labels}
    cpu_ratio: dict[str, list[float]] = {label: [] for label in labels}
    for round_ in range(args.rounds):
        order = list(zip(labels, [*budgets, None], strict=True))
        for label, budget in order if round_ % 2 == 0 else order[::-1]:
            p50, cpu = await lone_run(args.messages, args.loop, budget is not None,
                                      budget or 0.0, args.where)
            p50s[label].append(p50)
            cpus[label].append(cpu)
        base_p50, base_cpu = p50s[labels[0]][-1], cpus[labels[0]][-1]
        for label in labels:
            p50_ratio[label].append(p50s[label][-1] / base_p50)
            cpu_ratio[label].append(cpus[label][-1] / base_cpu)
        print(f"round {round_ + 1}: " + ", ".join(
            f"{label} {p50s[label][-1]:.0f} µs ({p50_ratio[label][-1]:.2f}x)"
            for label in labels), flush=True)

    print(f"\nmedians over {args.rounds} rounds ({args.loop}, added work {args.where}; "
          "ratios to the unmodified floor of the same round):")
    print(f"  {'run':<16} {'p50 µs':>7} {'p50 ÷ floor':>12} {'CPU µs/msg':>11}"
          f" {'CPU ÷ floor':>12}")
    for label in labels:
        print(f"  {label:<16} {statistics.median(p50s[label]):7.0f}"
              f" {statistics.median(p50_ratio[label]):12.2f}"
              f" {statistics.median(cpus[label]):11.0f}"
              f" {statistics.median(cpu_ratio[label]):12.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--budgets", default="0,5,10,15,20",
                        help="µs of CPU added per frame read and per frame written")
    parser.add_argument("--where", choices=("before", "after", "split"), default="split")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    asyncio.run(main(parser.parse_args()))
