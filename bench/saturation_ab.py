"""Benchmark: saturation and CPU per delivered message of several source trees (commits),
interleaved, so that every tree sees the same machine.

Rules: each tree is a checkout's root (`git worktree add /tmp/old <commit>`); its `src`
goes first on PYTHONPATH of a child process running on this interpreter and venv, so
only abcast's code differs. A round runs every tree once, in alternating order; the
verdict is the median over rounds. Two figures per run: throughput (ordered msgs/s,
which other work on the machine disturbs most) and µs of CPU per delivery (the figure
that survives load). `--mode cluster` (default) runs `abcast cluster` (n = 3, tcp,
tracing off, open loop at `--rate`) and takes the nodes' own CPU from go to their report
(a tree too old to report it shows none); `--floor` adds the do-nothing floor
(abcast.evaluation.floor, from the last tree) as one more entry. `--mode cpu` runs
three nodes in one process (bench/metrics_overhead.cpu_per_message, bursts of
`--burst`): no start-up, no other processes, the runtime path alone.
A benchmark, not a test: it asserts nothing about time.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/saturation_ab.py --trees /tmp/before,. [--floor]
        [--mode cluster|cpu] [--ordering sequencer] [--rounds 4] [--messages 300000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent

CLUSTER = """
import asyncio, json, sys, tempfile
from pathlib import Path
from abcast.evaluation.cluster import ClusterConfig
from abcast.evaluation.launcher import run_cluster
ordering, messages, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
extra = {"floor": True} if sys.argv[4] == "1" else {}
config = ClusterConfig(nodes=3, ordering=ordering, transport="tcp", messages=messages,
                       out=Path(tempfile.mkdtemp(prefix="abcast-ab-")), payload=64,
                       rate=rate, trace=False, timeout_s=300, **extra)
result = asyncio.run(run_cluster(config))
summary = result.summary()
cpu_ns = sum(getattr(o, "cpu_ns", 0) for o in result.outcomes)
print(json.dumps({"msgs_per_s": summary["throughput_msgs_per_s"],
                  "delivered": summary["delivered"], "cpu_ns": cpu_ns,
                  "errors": summary["errors"]}))
"""

CPU = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[4])
from metrics_overhead import cpu_per_message
sample = asyncio.run(cpu_per_message(int(sys.argv[1]), False, 0.0, burst=int(sys.argv[2])))
print(json.dumps({"msgs_per_s": sample.msgs_per_s, "cpu_us": sample.cpu_us_per_delivery}))
"""


def run_one(tree: Path, floor: bool, args: argparse.Namespace) -> tuple[float, float | None]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    if args.mode == "cpu":
        cmd = [sys.executable, "-c", CPU, str(args.messages), str(args.burst), "", str(BENCH)]
    else:
        cmd = [sys.executable, "-c", CLUSTER, args.ordering, str(args.messages),
               str(args.rate), "1" if floor else "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"{tree}: the run failed ({proc.returncode})")
    got = json.loads(lines[-1])
    if args.mode == "cpu":
        return float(got["msgs_per_s"]), float(got["cpu_us"])
    cpu = got["cpu_ns"] / 1e3 / got["delivered"] if got["cpu_ns"] else None
    return float(got["msgs_per_s"]), cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", required=True, help="checkout roots, comma-separated")
    parser.add_argument("--mode", choices=("cluster", "cpu"), default="cluster")
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--floor", action="store_true", help="cluster mode: add the floor")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rate", type=float, default=1_000_000.0)
    parser.add_argument("--burst", type=int, default=512, help="cpu mode: each node's burst")
    args = parser.parse_args()
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    entries = [(t, False, f"{t.name or t} {args.ordering}") for t in trees]
    if args.floor and args.mode == "cluster":
        entries.insert(0, (trees[-1], True, "floor"))
    results: dict[str, list[tuple[float, float | None]]] = {label: [] for *_, label in entries}
    for i in range(args.rounds):
        for tree, floor, label in entries if i % 2 == 0 else entries[::-1]:
            msgs, cpu = run_one(tree, floor, args)
            results[label].append((msgs, cpu))
            shown = "-" if cpu is None else f"{cpu:.3f}"
            print(f"round {i + 1} {label}: {msgs:,.0f} msgs/s, {shown} µs CPU/delivery",
                  flush=True)
    for label, got in results.items():
        msgs = [m for m, _ in got]
        cpus = [c for _, c in got if c is not None]
        cpu = f"{statistics.median(cpus):.3f} µs CPU/delivery" if cpus else "no CPU figure"
        print(f"{label}: median {statistics.median(msgs):,.0f} msgs/s "
              f"({min(msgs):,.0f}–{max(msgs):,.0f}), {cpu}")


if __name__ == "__main__":
    main()
