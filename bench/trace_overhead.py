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
checkout's `src` (e.g. the commit before a change) with this interpreter. A benchmark,
not a test: it asserts nothing about time.

    .venv/bin/python bench/trace_overhead.py [--rounds 5] [--messages 200000]
        [--rate 1000000] [--ordering sequencer] [--src DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rate", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--src", default=None, help="run this checkout's src instead")
    args = parser.parse_args()
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
