"""Benchmark: what Prometheus metrics cost at saturation — `abcast cluster` with and
without `--metrics`, side by side, alternating, so both see the same machine.

Rules: each round runs the same closed-loop cluster twice (metrics off, then on; the
order flips every round), tracing off, and reads `throughput_msgs_per_s` from the JSON
summary. It prints every pair and the range of each side, and the on/off ratio per
round. It is a benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/metrics_overhead.py [--rounds 3] [--messages 300000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def run_once(args: argparse.Namespace, metrics: bool, out: Path) -> float:
    cmd = [sys.executable, "-m", "abcast.cli", "cluster", "--nodes", str(args.nodes),
           "--ordering", args.ordering, "--messages", str(args.messages), "--trace", "off",
           "--out", str(out), "--json"] + (["--metrics"] if metrics else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"abcast cluster failed ({proc.returncode})")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(summary["throughput_msgs_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ordering", default="sequencer")
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    with tempfile.TemporaryDirectory(prefix="abcast-metrics-") as tmp:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {m: run_once(args, m, Path(tmp) / f"r{i}-{m}") for m in order}
            off.append(got[False])
            on.append(got[True])
            print(f"round {i + 1}: off {got[False]:,.0f} msgs/s, on {got[True]:,.0f} msgs/s, "
                  f"on/off {got[True] / got[False]:.3f}", flush=True)
    print(f"off: {min(off):,.0f}–{max(off):,.0f} msgs/s; on: {min(on):,.0f}–{max(on):,.0f} "
          f"msgs/s; mean on/off {sum(on) / sum(off):.3f}")


if __name__ == "__main__":
    main()
