"""udp:// (IP multicast on loopback + the NAK channel) against tcp://, on real processes
(issue 18). Every run is an `abcast cluster` run (runtime.launcher): n node processes
and a registry on 127.0.0.1.

Usage: .venv/bin/python bench/udp_multicast.py [--only counts,saturation,loss,basic,big]
           [--nodes 2,3,...] [--sixteen] [--messages N] [--json FILE]

Sections (each prints a markdown table; nothing is asserted):

- counts: packets per broadcast and frame bytes on the wire per broadcast, sequencer with
  `--batch 1` and one message in flight (`--serial`: nothing is batched), udp vs tcp for
  each n. A udp group write counts as one packet (what the wire carries); acks, digests
  and NAKs are control packets and not counted, as everywhere.
- saturation: the closed round-robin workload (the cluster command's default), trace off:
  throughput and the p50 of every delivery's latency, udp vs tcp, side by side per n.
- loss: udp with 1 % and 5 % of datagrams dropped at every receiver (the transport's
  `loss` option): NAKs per 1,000 delivered messages, throughput, p50, peak RSS per node,
  and the most a node's NAK channel held for retransmission.
- basic: n = 3, no loss: unreliable multicast (multicast="basic") vs NAK vs tcp, the
  ROMIOP paper's reliable-vs-unreliable comparison.
- big: the issue's acceptance run: 5 processes, sequencer, 5 % loss, 20,000 messages,
  traced and checked (every trace check), peak memory per node.

The CPU is shared: figures are noisy; compare columns measured side by side (ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from abcast.evaluation.cluster import ClusterConfig, ClusterResult
from abcast.evaluation.launcher import run_cluster
from abcast.ordering.registry import OrderingOptions

SECTIONS = ("counts", "saturation", "loss", "basic", "big")


def run(nodes: int, transport: str, messages: int, out: Path, *, serial: bool = False,
        batch: int | None = None, multicast: str = "reliable", loss: float = 0.0,
        trace: bool = False) -> tuple[dict[str, Any], ClusterResult]:
    options = OrderingOptions(batch=batch, multicast=multicast)
    config = ClusterConfig(
        nodes=nodes, ordering="sequencer", transport=transport, messages=messages,
        out=out / f"{transport}-{multicast}-n{nodes}-l{loss}", serial=serial, trace=trace,
        options=options, transport_options=f"loss={loss}" if loss else "", timeout_s=300,
    )
    config.validate()
    result = asyncio.run(run_cluster(config))
    summary = result.summary()
    outcomes = result.outcomes
    broadcasts = max(1, sum(o.broadcasts for o in outcomes))
    delivered = max(1, summary["delivered"])  # type: ignore[call-overload]
    summary.update(
        bytes_per_broadcast=round(sum(o.bytes_out for o in outcomes) / broadcasts, 1),
        naks_per_1000=round(1000 * sum(o.naks for o in outcomes) / delivered, 2),
        peak_rss_mib=round(max((o.peak_rss_kib for o in outcomes), default=0) / 1024, 1),
        peak_unstable_kib=round(max((o.peak_unstable_bytes for o in outcomes), default=0)
                                / 1024, 1),
    )
    return summary, result


def _row(cells: list[object]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(title: str, head: list[str], rows: list[list[object]]) -> None:
    print(f"\n### {title}\n")
    print(_row(head))
    print(_row(["---"] * len(head)))
    for r in rows:
        print(_row(r))
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SECTIONS[:4]))
    parser.add_argument("--nodes", default="2,3,4,5,6,7,8")
    parser.add_argument("--sixteen", action="store_true", help="also n = 16 in counts")
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    only = set(args.only.split(","))
    sizes = [int(n) for n in args.nodes.split(",")]
    out = Path(tempfile.mkdtemp(prefix="udp-bench-"))
    record: dict[str, list[dict[str, Any]]] = {}

    if "counts" in only:
        rows = []
        for n in sizes + ([16] if args.sixteen else []):
            line: list[object] = [n]
            for transport in ("udp", "tcp"):
                s, _ = run(n, transport, 20 * n, out, serial=True, batch=1)
                record.setdefault("counts", []).append(s)
                line += [s["packets_per_broadcast"], s["bytes_per_broadcast"]]
            line.append(2 * (n - 1))
            rows.append(line)
        _table("packets per broadcast (sequencer, --batch 1, one message in flight)",
               ["n", "udp packets", "udp bytes", "tcp packets", "tcp bytes", "model 2(n-1)"],
               rows)

    if "saturation" in only:
        rows = []
        for n in sizes:
            udp, _ = run(n, "udp", args.messages, out)
            tcp, _ = run(n, "tcp", args.messages, out)
            record.setdefault("saturation", []).extend([udp, tcp])
            ratio = (udp["throughput_msgs_per_s"] or 0) / max(1, tcp["throughput_msgs_per_s"] or 1)
            rows.append([n, udp["throughput_msgs_per_s"], tcp["throughput_msgs_per_s"],
                         round(ratio, 2), udp["latency_p50_us"], tcp["latency_p50_us"],
                         udp["packets_per_broadcast"], tcp["packets_per_broadcast"]])
        _table("saturation (closed round-robin, trace off)",
               ["n", "udp msgs/s", "tcp msgs/s", "udp/tcp", "udp p50 µs", "tcp p50 µs",
                "udp pkts/bcast", "tcp pkts/bcast"], rows)

    if "loss" in only:
        rows = []
        for n in (3, 5):
            for loss in (0.0, 0.01, 0.05):
                s, _ = run(n, "udp", args.messages, out, loss=loss)
                record.setdefault("loss", []).append(s)
                rows.append([n, f"{loss:.0%}", s["delivered"], s["naks_per_1000"],
                             s["retransmissions"], s["throughput_msgs_per_s"],
                             s["latency_p50_us"], s["peak_rss_mib"], s["peak_unstable_kib"]])
        _table("udp under injected loss (NAK channel)",
               ["n", "loss", "delivered", "NAKs / 1000 msgs", "retransmissions", "msgs/s",
                "p50 µs", "peak RSS MiB", "peak unstable KiB"], rows)

    if "basic" in only:
        rows = []
        for name, transport, multicast in (("udp basic", "udp", "basic"),
                                           ("udp nak", "udp", "nak"),
                                           ("tcp reliable", "tcp", "reliable")):
            s, _ = run(3, transport, args.messages, out, multicast=multicast)
            record.setdefault("basic", []).append(s)
            rows.append([name, s["delivered"], s["throughput_msgs_per_s"],
                         s["latency_p50_us"], s["packets_per_broadcast"]])
        _table("unreliable vs reliable multicast (n = 3, no loss)",
               ["stack", "delivered", "msgs/s", "p50 µs", "pkts/bcast"], rows)

    if "big" in only:
        s, result = run(5, "udp", 20_000, out, loss=0.05, trace=True)
        record["big"] = [s]
        _table("5 processes, sequencer, 5 % loss, 20,000 messages, traced",
               ["delivered", "violations", "NAKs / 1000", "msgs/s", "p50 µs",
                "peak RSS MiB (max node)", "peak unstable KiB (max node)", "complete"],
               [[s["delivered"], s["violations"] or "none", s["naks_per_1000"],
                 s["throughput_msgs_per_s"], s["latency_p50_us"], s["peak_rss_mib"],
                 s["peak_unstable_kib"], result.complete]])

    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=1, default=str))


if __name__ == "__main__":
    main()
