"""Benchmark: what Prometheus metrics cost at saturation, with and without metrics side
by side, alternating, so both see the same machine.

Rules: `--mode cluster` (default) runs the same closed-loop `abcast cluster` twice per
round (metrics off, then on; the order flips every round), tracing off, and reads
`throughput_msgs_per_s` from the JSON summary. `--mode cpu` runs three real nodes (tcp on
loopback) in this process on one loop, each sending bursts of 64 and waiting for the
group to deliver them, and reads the process CPU time per ordered message — the figure
saturation throughput is the inverse of on a CPU-bound machine, and one that other load
disturbs far less than wall time; with metrics on, every node's /metrics is scraped every
`--scrape-every` seconds (Prometheus' default is 15; 0: never).
Both print every pair, the range of each side and the on/off ratio. A benchmark, not a
test: it asserts nothing about time.

    .venv/bin/python bench/metrics_overhead.py [--mode cluster|cpu] [--rounds 3]
        [--messages 300000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from abcast import Group, Node


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


async def _scrape_every(period_s: float, nodes: list[Node]) -> None:
    while True:
        await asyncio.sleep(period_s)
        for node in nodes:
            host, _, rest = (node.metrics_url or "").removeprefix("http://").partition(":")
            reader, writer = await asyncio.open_connection(host, int(rest.split("/")[0]))
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            await reader.read()
            writer.close()


async def cpu_per_message(messages: int, metrics: bool, scrape_s: float,
                          burst: int = 64) -> float:
    """µs of this process's CPU per ordered message (three nodes, one loop)."""
    ids = ("n1", "n2", "n3")
    nodes = [Node("tcp://127.0.0.1:0", node=n, metrics_port=0 if metrics else None)
             for n in ids]
    for node in nodes:
        await node.start()
    delivered = [0, 0]  # so far, wanted
    reached = asyncio.Event()

    def count(_delivery: object) -> None:
        delivered[0] += 1
        if delivered[0] == delivered[1]:
            reached.set()

    groups = [Group("g", ordering="sequencer", host=node, on_deliver=count,
                    peers={o.id: o.address for o in nodes if o is not node})
              for node in nodes]
    await asyncio.gather(*(g.open() for g in groups))
    scraper = (asyncio.create_task(_scrape_every(scrape_s, nodes)) if metrics and scrape_s
               else None)
    payload = b"x" * 64
    rounds = messages // (burst * len(groups))
    started = time.process_time()
    for _ in range(rounds):
        delivered[1] = delivered[0] + burst * len(groups) * len(groups)
        reached.clear()
        for g in groups:
            for _ in range(burst):
                g.broadcast_nowait(payload)
        await reached.wait()
    cpu = time.process_time() - started
    if scraper is not None:
        scraper.cancel()
    for g in groups:
        await g.close()
    for node in nodes:
        await node.close()
    return cpu / (rounds * burst * len(groups)) * 1e6


def main_cpu(args: argparse.Namespace) -> None:
    off: list[float] = []
    on: list[float] = []
    for i in range(args.rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {m: asyncio.run(cpu_per_message(args.messages, m, args.scrape_every))
               for m in order}
        off.append(got[False])
        on.append(got[True])
        print(f"round {i + 1}: off {got[False]:.2f} µs/msg, on {got[True]:.2f} µs/msg, "
              f"on/off {got[True] / got[False]:.3f}", flush=True)
    print(f"off: {min(off):.2f}–{max(off):.2f} µs/msg; on: {min(on):.2f}–{max(on):.2f} "
          f"µs/msg; mean on/off {sum(on) / sum(off):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--mode", choices=("cluster", "cpu"), default="cluster")
    parser.add_argument("--scrape-every", type=float, default=1.0,
                        help="cpu mode: seconds between scrapes of every node (0: none)")
    args = parser.parse_args()
    if args.mode == "cpu":
        main_cpu(args)
        return
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
