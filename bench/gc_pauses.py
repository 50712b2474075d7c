"""Benchmark: garbage collection in node processes, CPython's settings against abcast's
"tuned" ones (abcast.runtime.loop: raised thresholds, heap frozen after start-up), with
the floor's lone-message latency beside them.

Rules: a round runs, back to back, the floor's lone-message run, then abcast's lone
(serial) and saturation (closed loop) runs once with ABCAST_GC=python and once with
ABCAST_GC=tuned (the order of the two flips every round), n = 3, tcp, tracing off. Each
node process counts its collections per generation and their CPU time
(`abcast.runtime.loop.GcMeter`: `gc.callbacks` and `time.thread_time_ns`, so other
processes' load does not count) from `go` to the end; the figures here are per 1,000
deliveries, summed over the nodes, so they hold however loaded the machine is. Latency
(p50/p99 of the lone runs, with the ratio to the floor's in the same round) is printed
too, with the load average: on a shared machine it is the noisy figure. A benchmark, not
a test: it asserts nothing about time.

    .venv/bin/python bench/gc_pauses.py [--rounds 2] [--lone 2000] [--saturation 30000]
        [--ordering sequencer]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from abcast.evaluation.cluster import ClusterConfig, ClusterResult, percentile
from abcast.evaluation.launcher import run_cluster

MODES = ("python", "tuned")


@dataclass(frozen=True, slots=True)
class Figures:
    """One run: GC per 1,000 deliveries (all nodes) and lone-message latency."""

    deliveries: int
    collections_per_k: tuple[float, float, float]  # gen0, gen1, gen2
    gc_cpu_us_per_k: float
    max_pause_us: tuple[float, float, float]
    p50_us: float | None
    p99_us: float | None

    def line(self, label: str, floor: Figures | None) -> str:
        c0, c1, c2 = self.collections_per_k
        m0, m1, m2 = self.max_pause_us
        text = (f"{label:<26} {self.deliveries:>7} deliveries  collections/1k "
                f"{c0:6.2f} {c1:5.2f} {c2:5.2f}  GC CPU {self.gc_cpu_us_per_k:8.0f} µs/1k  "
                f"max {m0:5.0f} {m1:6.0f} {m2:7.0f} µs")
        if self.p50_us is not None and self.p99_us is not None:
            text += f"  p50 {self.p50_us:5.0f} p99 {self.p99_us:6.0f} µs"
            if floor is not None and floor.p50_us and floor.p99_us:
                text += (f" ({self.p50_us / floor.p50_us:.2f}x, "
                         f"{self.p99_us / floor.p99_us:.2f}x floor)")
        return text


def figures(result: ClusterResult, lone: bool) -> Figures:
    if not result.complete:
        raise SystemExit(f"run {result.run_id} incomplete: {result.errors}")
    deliveries = max(1, sum(o.delivered for o in result.outcomes))
    per_k = 1000 / deliveries

    def total(values: list[list[int]], g: int) -> int:
        return sum(v[g] for v in values if v)

    counts = [o.gc_collections for o in result.outcomes]
    cpu = [o.gc_cpu_ns for o in result.outcomes]
    longest = [o.gc_max_ns for o in result.outcomes]
    lat = sorted(result.latencies_ns)
    p50, p99 = percentile(lat, 50), percentile(lat, 99)
    return Figures(
        deliveries=deliveries,
        collections_per_k=(total(counts, 0) * per_k, total(counts, 1) * per_k,
                           total(counts, 2) * per_k),
        gc_cpu_us_per_k=sum(total(cpu, g) for g in range(3)) * per_k / 1000,
        max_pause_us=(max((v[0] for v in longest if v), default=0) / 1000,
                      max((v[1] for v in longest if v), default=0) / 1000,
                      max((v[2] for v in longest if v), default=0) / 1000),
        p50_us=p50 / 1000 if lone and p50 is not None else None,
        p99_us=p99 / 1000 if lone and p99 is not None else None,
    )


async def run(config: ClusterConfig, mode: str | None) -> ClusterResult:
    if mode is not None:
        os.environ["ABCAST_GC"] = mode
    return await run_cluster(config)


async def main(args: argparse.Namespace) -> None:
    print(f"load average at start: {os.getloadavg()[0]:.1f}")
    out = Path(tempfile.mkdtemp(prefix="gc-pauses-"))
    lone = ClusterConfig(nodes=3, ordering=args.ordering, transport="tcp", out=out,
                         trace=False, messages=args.lone, serial=True)
    saturation = replace(lone, messages=args.saturation, serial=False)
    floor_cfg = replace(lone, floor=True)
    collected: dict[str, list[Figures]] = {}
    for r in range(args.rounds):
        floor = figures(await run(floor_cfg, None), lone=True)
        print(f"round {r + 1}  load {os.getloadavg()[0]:.1f}")
        print("  " + floor.line("floor lone", None))
        modes = MODES if r % 2 == 0 else tuple(reversed(MODES))
        for mode in modes:
            f = figures(await run(lone, mode), lone=True)
            collected.setdefault(f"{mode} lone", []).append(f)
            print("  " + f.line(f"{mode} lone", floor))
        for mode in modes:
            f = figures(await run(saturation, mode), lone=False)
            collected.setdefault(f"{mode} saturation", []).append(f)
            print("  " + f.line(f"{mode} saturation", None))
    print("medians over rounds (collections gen0 gen1 gen2 per 1k deliveries, GC CPU):")
    for label, runs in collected.items():
        c = [statistics.median(f.collections_per_k[g] for f in runs) for g in range(3)]
        cpu = statistics.median(f.gc_cpu_us_per_k for f in runs)
        print(f"  {label:<18} {c[0]:6.2f} {c[1]:5.2f} {c[2]:5.2f}  {cpu:8.0f} µs/1k")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--lone", type=int, default=2000)
    parser.add_argument("--saturation", type=int, default=30_000)
    parser.add_argument("--ordering", default="sequencer")
    asyncio.run(main(parser.parse_args()))
