"""Benchmark: what tracing costs at saturation — `abcast cluster` with `--trace off` and
`--trace on` at the same offered load, in interleaved pairs, so both see the same machine.

Rules: a round is one pair, off and on back to back (the order flips every round), each
an open-loop `abcast cluster` run at `--rate` broadcasts/s (default 1,000,000: more than
the group can order, so both sides run at saturation) whose `throughput_msgs_per_s` is
read from its JSON summary. The verdict is the median over rounds of each pair's on/off
throughput ratio (issue #23's target: >= 0.75): a pair shares the machine's load of the
moment, so the ratio cancels most of what other processes do, and the median drops the
rounds a burst of load hit one side only. Throughput spans the earliest "go" to the last
delivery, so the traced side's sealing and checking after the run are not in it (they
take longer than the run: a traced round costs minutes). `--src DIR` runs another
checkout's `src` (e.g. the commit before a change) with this interpreter.

`--mode cpu` measures what other load disturbs least: three real nodes (tcp on loopback)
in this process on one loop, each sending bursts of 64 and waiting for the group to
deliver them, traced through one StreamingSink (its thread included) or not; the figure
is this process's CPU time per delivered message, and the verdict the median of the pairs'
off/on CPU ratios (what the on/off throughput ratio is where CPU is what limits it). A
benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/trace_overhead.py [--mode cluster|cpu] [--rounds 5]
        [--messages 200000] [--rate 1000000] [--ordering sequencer] [--src DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from metrics_overhead import cpu_per_message  # bench/ is this script's sys.path[0]

from abcast.trace import StreamingSink, TraceRecorder


def throughput(args: argparse.Namespace, trace: bool, out: Path) -> float:
    cmd = [sys.executable, "-m", "abcast.cli", "cluster", "--nodes", str(args.nodes),
           "--ordering", args.ordering, "--messages", str(args.messages),
           "--rate", str(args.rate), "--trace", "on" if trace else "off",
           "--out", str(out), "--json"]
    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = str(Path(args.src).resolve())
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"abcast cluster failed ({proc.returncode})")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    violations = summary.get("violations")
    if trace and violations:
        print(f"  (the traced run has violations: {violations})", flush=True)
    return float(summary["throughput_msgs_per_s"])


async def cpu_per_delivery(messages: int, out: Path | None) -> float:
    """µs of this process's CPU per delivered message (metrics_overhead's three nodes on
    one loop), traced into `out` (the sink's thread included) or not."""
    sink = StreamingSink(out, "cpu") if out is not None else None
    if sink is not None:
        sink.warm_up()
    recorder = TraceRecorder("cpu", sink=sink, keep_rows=False) if sink else None
    try:
        sample = await cpu_per_message(messages, False, 0, recorder=recorder,
                                       settle_s=2 * sink.interval_s if sink else 0)
    finally:
        if sink is not None:
            sink.close()
    return sample.cpu_us_per_delivery


def cpu_mode(args: argparse.Namespace) -> None:
    ratios: list[float] = []
    with tempfile.TemporaryDirectory(prefix="abcast-trace-") as tmp:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {t: asyncio.run(cpu_per_delivery(
                args.messages, Path(tmp) / f"r{i}" if t else None)) for t in order}
            ratios.append(got[False] / got[True])
            print(f"round {i + 1}: off {got[False]:.2f} µs CPU/delivery, on "
                  f"{got[True]:.2f}, off/on {ratios[-1]:.3f}", flush=True)
    ratios.sort()
    print(f"CPU per delivery: off/on median of {len(ratios)} pair ratios "
          f"{statistics.median(ratios):.3f} (range {ratios[0]:.3f}–{ratios[-1]:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--src", default=None, help="run this checkout's src instead")
    parser.add_argument("--mode", choices=("cluster", "cpu"), default="cluster")
    args = parser.parse_args()
    if args.mode == "cpu":
        cpu_mode(args)
        return
    ratios: list[float] = []
    offs: list[float] = []
    ons: list[float] = []
    with tempfile.TemporaryDirectory(prefix="abcast-trace-") as tmp:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {t: throughput(args, t, Path(tmp) / f"r{i}-{t}") for t in order}
            offs.append(got[False])
            ons.append(got[True])
            ratios.append(got[True] / got[False])
            print(f"round {i + 1}: off {got[False]:,.0f} msgs/s, on {got[True]:,.0f} msgs/s, "
                  f"on/off {ratios[-1]:.3f}", flush=True)
    ratios.sort()
    print(f"throughput: off median {statistics.median(offs):,.0f} msgs/s "
          f"({min(offs):,.0f}–{max(offs):,.0f}), on median {statistics.median(ons):,.0f} "
          f"({min(ons):,.0f}–{max(ons):,.0f}); on/off median of {len(ratios)} pair ratios "
          f"{statistics.median(ratios):.3f} (range {ratios[0]:.3f}–{ratios[-1]:.3f})")


if __name__ == "__main__":
    main()
