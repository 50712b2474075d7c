"""RepMI's four scenarios in the simulator: matrix clocks (fixed and adaptive heartbeats)
against the sequencer, in milliseconds of simulated time per write.

Rules: OneToMany = one node (the last, nN) writes, the others only hold replicas; ManyToMany =
every node writes. Each writer issues its next write once the previous one has executed
on its own copy (RepMI's synchronous invocation), until K writes went out in all; the
object is the Counter battery. ms/op is the mean time from issuing a write to its
execution on the writer's copy. Intra-cluster links are the simulator's default LAN
(200–1000 µs one way); inter-cluster links come from the RTT table
src/abcast/transport/wan_matrices/five_sites.json (n1 → first site, n2 → second, …,
one-way = RTT/2 ± jitter), set per link with `Network.set_link`. Simulated time is
deterministic: the same arguments print the same table. Packets/op counts protocol
packets (heartbeats included; the channel's acks are control traffic and are not).
With the fixed period every node's heartbeat timer starts at t = 0, so the phases are
aligned and a OneToMany write issued right after the previous one executed waits one
whole period for the others' NOPEs (with random phases it would wait for the last of
n−1 of them, (n−1)/n of a period on average).

    .venv/bin/python bench/repmi_scenarios.py                  # n = 5, K = 200
    .venv/bin/python bench/repmi_scenarios.py --nodes 3 --operations 100
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import dataclass

from abcast.ids import NodeId
from abcast.ordering.matrix import MatrixConfig
from abcast.ordering.registry import OrderingOptions
from abcast.replicated.batteries import Counter
from abcast.replicated.sim import simulate_replicas
from abcast.sim.network import LinkModel
from abcast.transport.wan import EXAMPLE_MATRIX, link_latency_us, load_matrix

FIXED_PERIOD_US = 300_000


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    ordering: str
    heartbeat: str
    options: OrderingOptions


VARIANTS = (
    Variant("matrix", "matrix", "fixed 300 ms",
            OrderingOptions(matrix=MatrixConfig(period_us=FIXED_PERIOD_US, adaptive=False))),
    Variant("matrix", "matrix", "adaptive",
            OrderingOptions(matrix=MatrixConfig(period_us=FIXED_PERIOD_US, adaptive=True))),
    Variant("sequencer", "sequencer", "—", OrderingOptions()),
)


@dataclass(frozen=True, slots=True)
class Row:
    scenario: str
    links: str
    variant: Variant
    ms_per_op: float
    p50_ms: float
    packets_per_op: float
    converged: bool
    clean: bool


def wan_links(nodes: tuple[NodeId, ...]) -> dict[tuple[NodeId, NodeId], LinkModel]:
    matrix = load_matrix(EXAMPLE_MATRIX)
    links: dict[tuple[NodeId, NodeId], LinkModel] = {}
    for a in nodes:
        for b in nodes:
            if a != b:
                lo, hi = link_latency_us(matrix, matrix.site_of(a), matrix.site_of(b))
                links[(a, b)] = LinkModel(lo, hi)
    return links


def add_one(_rng: random.Random, _node: NodeId) -> tuple[str, tuple[int, ...]]:
    return "add", (1,)


def run(scenario: str, wan: bool, variant: Variant, nodes: int, operations: int,
        seed: int) -> Row:
    ids = tuple(f"n{i}" for i in range(1, nodes + 1))
    # the lone writer is the last node: n1 is the sequencer, whose own writes skip the
    # round trip (and, on the WAN, the last site is the farthest)
    writers = ids[-1:] if scenario == "OneToMany" else ids
    result = simulate_replicas(
        Counter, add_one, ordering=variant.ordering, nodes=nodes, operations=operations,
        seed=seed, options=variant.options, writers=writers,
        links=wan_links(ids) if wan else None,
    )
    lat = result.latencies_us or [0]
    return Row(scenario, "inter-cluster (WAN)" if wan else "intra-cluster (LAN)", variant,
               statistics.fmean(lat) / 1000, statistics.median(lat) / 1000,
               result.protocol_packets / max(1, result.issued), result.converged,
               not result.violations and result.issued == operations)


def table(rows: list[Row]) -> str:
    lines = ["| scenario | links | ordering | heartbeat | ms/op (mean) | ms/op (p50) "
             "| packets/op | replicas equal, checks clean |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = "yes" if r.converged and r.clean else "**NO**"
        lines.append(f"| {r.scenario} | {r.links} | {r.variant.label} | {r.variant.heartbeat} "
                     f"| {r.ms_per_op:.2f} | {r.p50_ms:.2f} | {r.packets_per_op:.1f} | {ok} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", type=int, default=5)
    p.add_argument("--operations", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    rows = [run(scenario, wan, variant, args.nodes, args.operations, args.seed)
            for wan in (False, True)
            for scenario in ("OneToMany", "ManyToMany")
            for variant in VARIANTS]
    print(f"n = {args.nodes}, K = {args.operations} writes, seed {args.seed} "
          "(simulated time)\n")
    print(table(rows))
    print()
    for wan in (False, True):
        for scenario in ("OneToMany", "ManyToMany"):
            fixed, adaptive = (r for r in rows if r.scenario == scenario
                               and (r.links.startswith("inter")) == wan
                               and r.variant.ordering == "matrix")
            print(f"- {scenario}, {fixed.links}: adaptive heartbeats cut ms/op "
                  f"{fixed.ms_per_op / adaptive.ms_per_op:.1f}× against the fixed period "
                  f"({fixed.ms_per_op:.2f} → {adaptive.ms_per_op:.2f} ms)")
    return 0 if all(r.converged and r.clean for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
