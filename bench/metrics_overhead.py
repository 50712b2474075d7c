"""Benchmark: what Prometheus metrics cost at saturation, with and without metrics side
by side, in interleaved pairs, so both see the same machine.

Rules: a round is one pair, metrics off and on back to back (the order flips every
round); each side yields two figures, throughput (ordered msgs/s) and CPU time per
delivered message (µs, every process involved). The verdict is the median over rounds
of each pair's on/off ratio — a pair shares the machine's load of the moment, so the
ratio cancels most of what other processes do, and the median drops the rounds a burst
of load hit one side only. CPU per message is the figure that other load disturbs
least; throughput is what the issue's 5 % is about.

`--mode cluster` (default) runs the closed-loop `abcast cluster` (tracing off: its
node processes, launched as `abcast cluster` launches them) and reads its
`throughput_msgs_per_s`; its CPU time is what the node processes report they spent from
go to their report (start-up and imports, which metrics on or off barely change, left
out). `--mode cpu` runs three real
nodes (tcp on loopback) in this process on one loop, each sending bursts of 64 and
waiting for the group to deliver them, and reads this process's CPU time; with metrics
on, every node's /metrics is scraped every `--scrape-every` seconds (Prometheus' default
is 15; 0: never). `--mode toggle` runs that workload once per round with metrics on and
switches the counting off and on burst by burst (`--burst` broadcasts per node; 1 makes
every batch one message, the closed loop's case), so both sides share the load of the
same milliseconds. A benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/metrics_overhead.py [--mode cluster|cpu] [--rounds 7]
        [--messages 300000] [--burst 64]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from abcast import Group, Node
from abcast.evaluation.cluster import ClusterConfig
from abcast.evaluation.launcher import run_cluster
from abcast.trace import TraceRecorder


@dataclass(frozen=True, slots=True)
class Sample:
    """One side of one round."""

    msgs_per_s: float
    cpu_us_per_delivery: float


def run_once(args: argparse.Namespace, metrics: bool, out: Path) -> Sample:
    """One `abcast cluster` run (tracing off): its throughput, and its node processes'
    CPU from go to their report (start-up and imports left out) per delivery."""
    config = ClusterConfig(nodes=args.nodes, ordering=args.ordering, transport="tcp",
                           messages=args.messages, out=out, trace=False, metrics=metrics)
    result = asyncio.run(run_cluster(config))
    if not result.complete:
        raise SystemExit(f"abcast cluster did not complete: {result.errors}")
    summary = result.summary()
    cpu_ns = sum(o.cpu_ns for o in result.outcomes)
    return Sample(float(summary["throughput_msgs_per_s"]),  # type: ignore[arg-type]
                  cpu_ns / (result.delivered or 1) / 1e3)


async def _scrape_every(period_s: float, nodes: list[Node]) -> None:
    while True:
        await asyncio.sleep(period_s)
        for node in nodes:
            host, _, rest = (node.metrics_url or "").removeprefix("http://").partition(":")
            reader, writer = await asyncio.open_connection(host, int(rest.split("/")[0]))
            writer.write(b"GET /metrics HTTP/1.1\r\n\r\n")
            await reader.read()
            writer.close()


class _Trio:
    """Three nodes over tcp on this loop, one sequencer group, and bursts of broadcasts
    from each, awaited until every node delivered them all."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.groups: list[Group] = []
        self._delivered, self._wanted = 0, 0
        self._reached = asyncio.Event()

    async def open(self, metrics: bool, recorder: TraceRecorder | None = None) -> _Trio:
        self.nodes = [Node("tcp://127.0.0.1:0", node=n, metrics_port=0 if metrics else None,
                           recorder=recorder)
                      for n in ("n1", "n2", "n3")]
        for node in self.nodes:
            await node.start()
        self.groups = [Group("g", ordering="sequencer", host=node, on_deliver=self._count,
                             peers={o.id: o.address for o in self.nodes if o is not node})
                       for node in self.nodes]
        await asyncio.gather(*(g.open() for g in self.groups))
        return self

    def _count(self, _delivery: object) -> None:
        self._delivered += 1
        if self._delivered == self._wanted:
            self._reached.set()

    async def burst(self, size: int, payload: bytes = b"x" * 64) -> int:
        """`size` broadcasts from every node, all delivered everywhere; the messages."""
        groups = self.groups
        self._wanted = self._delivered + size * len(groups) * len(groups)
        self._reached.clear()
        for g in groups:
            for _ in range(size):
                g.broadcast_nowait(payload)
        await self._reached.wait()
        return size * len(groups)

    async def close(self) -> None:
        for g in self.groups:
            await g.close()
        for node in self.nodes:
            await node.close()


async def cpu_per_message(messages: int, metrics: bool, scrape_s: float,
                          burst: int = 64, recorder: TraceRecorder | None = None,
                          settle_s: float = 0.0) -> Sample:
    """Ordered msgs/s and µs of this process's CPU per delivered message (three nodes,
    one loop; traced by `recorder` when given — bench/trace_overhead.py — and measured
    `settle_s` past the last delivery, so a trace sink's thread has written it all)."""
    trio = await _Trio().open(metrics, recorder)
    scraper = (asyncio.create_task(_scrape_every(scrape_s, trio.nodes)) if metrics and scrape_s
               else None)
    ordered = 0
    started, wall = time.process_time(), time.perf_counter()
    for _ in range(messages // (burst * len(trio.groups))):
        ordered += await trio.burst(burst)
    wall = time.perf_counter() - wall
    await asyncio.sleep(settle_s)
    cpu = time.process_time() - started
    if scraper is not None:
        scraper.cancel()
    await trio.close()
    return Sample(ordered / wall, cpu / (ordered * len(trio.groups)) * 1e6)


async def toggled(messages: int, burst: int, seed: int = 0) -> tuple[Sample, Sample]:
    """(off, on) from one run of three nodes with metrics on (no scrape), whose counting
    is switched off or on for each burst by a seeded coin (the node's `traffic`, the
    drivers' `meter` set to None and back; a fixed pattern would line up with the
    protocol's own periods, an ack every k packets), each burst's CPU and wall time going
    to its side: the two sides share the machine's load at a millisecond's grain."""
    trio = await _Trio().open(metrics=True)
    kept = [(node, node.traffic, node.multicast_traffic) for node in trio.nodes]
    meters = [(d, d.meter) for node in trio.nodes for d in node.drivers()]

    def switch(on: bool) -> None:
        for node, traffic, multicast in kept:
            node.traffic, node.multicast_traffic = (traffic, multicast) if on else (None, None)
        for driver, meter in meters:
            driver.meter = meter if on else None

    cpu, wall, msgs = [0.0, 0.0], [0.0, 0.0], [0, 0]
    coin = random.Random(seed)
    for _ in range(messages // (burst * len(trio.groups))):
        on = coin.random() < 0.5
        switch(on)
        c, w = time.process_time(), time.perf_counter()
        msgs[on] += await trio.burst(burst)
        cpu[on] += time.process_time() - c
        wall[on] += time.perf_counter() - w
    switch(True)
    await trio.close()
    off, on_ = (Sample(msgs[m] / wall[m], cpu[m] / (msgs[m] * len(trio.groups)) * 1e6)
                for m in (0, 1))
    return off, on_


def interleaved(rounds: int, measure: Callable[[int, bool], Sample]) -> None:
    """`rounds` pairs, off/on then on/off alternately; every pair and the medians."""
    pairs: list[tuple[Sample, Sample]] = []
    for i in range(rounds):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {m: measure(i, m) for m in order}
        off, on = got[False], got[True]
        pairs.append((off, on))
        print(f"round {i + 1}: off {off.msgs_per_s:,.0f} msgs/s {off.cpu_us_per_delivery:.2f} "
              f"µs/delivery; on {on.msgs_per_s:,.0f} msgs/s {on.cpu_us_per_delivery:.2f} "
              f"µs/delivery; on/off {on.msgs_per_s / off.msgs_per_s:.3f} throughput, "
              f"{on.cpu_us_per_delivery / off.cpu_us_per_delivery:.3f} CPU", flush=True)
    for label, unit, get in (("throughput", "msgs/s", lambda s: s.msgs_per_s),
                             ("CPU per delivery", "µs", lambda s: s.cpu_us_per_delivery)):
        offs, ons = [get(a) for a, _ in pairs], [get(b) for _, b in pairs]
        ratios = sorted(get(b) / get(a) for a, b in pairs)
        print(f"{label}: off median {statistics.median(offs):,.2f} {unit} "
              f"({min(offs):,.2f}–{max(offs):,.2f}), on median {statistics.median(ons):,.2f} "
              f"{unit} ({min(ons):,.2f}–{max(ons):,.2f}); on/off median of {len(ratios)} "
              f"pair ratios {statistics.median(ratios):.3f} "
              f"(range {ratios[0]:.3f}–{ratios[-1]:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--mode", choices=("cluster", "cpu", "toggle"), default="cluster")
    parser.add_argument("--burst", type=int, default=64,
                        help="toggle mode: broadcasts per node per burst")
    parser.add_argument("--scrape-every", type=float, default=1.0,
                        help="cpu mode: seconds between scrapes of every node (0: none)")
    args = parser.parse_args()
    if args.mode == "toggle":
        blocks = [asyncio.run(toggled(args.messages, args.burst, seed=i))
                  for i in range(args.rounds)]
        interleaved(args.rounds, lambda i, m: blocks[i][m])
        return
    if args.mode == "cpu":
        interleaved(args.rounds, lambda _i, m: asyncio.run(
            cpu_per_message(args.messages, m, args.scrape_every)))
        return
    with tempfile.TemporaryDirectory(prefix="abcast-metrics-") as tmp:
        interleaved(args.rounds, lambda i, m: run_once(args, m, Path(tmp) / f"r{i}-{m}"))


if __name__ == "__main__":
    main()
