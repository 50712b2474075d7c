"""WAN evaluation of ordering "optimistic": compensated against plain opt-delivery.

Rules: five nodes, one per site of transport/wan_matrices/five_sites.json (n1, the
sequencer, in virginia), each link's one-way latency RTT/2 ± the file's jitter; every
node sends (round robin, open loop) at `rate` messages per sender per second. Per run,
over the non-sequencer nodes (the sequencer final-delivers on receipt, so its guesses
are trivially right): `accuracy` — the share of opt-deliveries whose position in the
node's opt sequence equals the message's position in its final sequence; `pairs in
order` — the share of consecutive opt-deliveries that the final order keeps in order;
`window` — mean final − opt time; `final` — mean send → final-delivery latency;
`added` — mean send → opt-delivery latency minus the plain run's at the same rate;
`min_ratio` — the smallest per-site window ÷ final latency. Every run must be clean for
its claims (checked). Writes out/wan_optimistic.md (the table) and .png (the plot). A
benchmark, not a test: no time is compared against a limit.

    .venv/bin/python bench/wan_optimistic.py
    .venv/bin/python bench/wan_optimistic.py --messages 300 --rates 20,200
    .venv/bin/python bench/wan_optimistic.py --traces out/wan-traces && abcast report out/wan-traces
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import mean

from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.sim import SimConfig, run_simulation
from abcast.sim.network import LinkModel
from abcast.transport.wan import EXAMPLE_MATRIX, load_matrix, node_links_us

NODES = 5
SEQUENCER = "n1"
#: messages per sender per second: one per 50 ms up to one per 0.5 ms (the simulator
#: has no CPU cost, so "saturation" here is spacing well under the links' jitter)
RATES = (20, 50, 100, 200, 500, 1000, 2000)
#: (label, config): plain first (the baseline the others' added latency is against)
VARIANTS = (("plain", OptimisticConfig(compensate=False)),
            ("α=0.5", OptimisticConfig(alpha=0.5)),
            ("α=0.8", OptimisticConfig(alpha=0.8)),
            ("α=0.95", OptimisticConfig(alpha=0.95)))


def wan_links() -> tuple[tuple[str, str, LinkModel], ...]:
    ids = [f"n{i}" for i in range(1, NODES + 1)]
    return tuple((a, b, LinkModel(lo, hi))
                 for a, b, lo, hi in node_links_us(load_matrix(EXAMPLE_MATRIX), ids))


@dataclass(frozen=True, slots=True)
class Outcome:
    rate: int
    variant: str
    accuracy: float
    misordered: int
    pairs: float  # share of consecutive opt-deliveries in final order
    window_ms: float
    final_ms: float
    opt_ms: float
    min_ratio: float
    clean: bool


def run(task: tuple[int, str, OptimisticConfig, int, int, str]) -> Outcome:
    rate, label, config, messages, seed, traces = task
    result = run_simulation(SimConfig(
        "optimistic", nodes=NODES, messages=messages, seed=seed, rate=float(rate * NODES),
        links=wan_links(), options=OrderingOptions(optimistic=config)))
    if traces:
        result.write(traces)
    rows = result.recorder.rows()
    sent = {(r.origin, r.seq): r.t_ns for r in rows if r.kind == "send"}
    hits = total = ordered = adjacent = 0
    windows: dict[str, list[float]] = {}
    finals: dict[str, list[float]] = {}
    opts: list[float] = []
    for node in (f"n{i}" for i in range(2, NODES + 1)):
        mine = result.recorder.rows_of(node)
        opt = [(r.origin, r.seq, r.t_ns) for r in mine if r.kind == "opt_deliver"]
        final = [(r.origin, r.seq, r.t_ns) for r in mine if r.kind == "deliver"]
        opt_pos = {(o, s): (i, t) for i, (o, s, t) in enumerate(opt)}
        final_pos = {(o, s): i for i, (o, s, _) in enumerate(final)}
        ranks = [final_pos[(o, s)] for o, s, _ in opt if (o, s) in final_pos]
        adjacent += max(0, len(ranks) - 1)
        ordered += sum(a < b for a, b in pairwise(ranks))
        for i, (o, s, t) in enumerate(final):
            if (o, s) not in opt_pos:
                continue
            at, t_opt = opt_pos[(o, s)]
            total += 1
            hits += at == i
            windows.setdefault(node, []).append((t - t_opt) / 1e6)
            finals.setdefault(node, []).append((t - sent[(o, s)]) / 1e6)
            opts.append((t_opt - sent[(o, s)]) / 1e6)
    ratios = [mean(windows[n]) / mean(finals[n]) for n in windows if mean(finals[n]) > 0]
    return Outcome(
        rate, label, hits / total if total else 0.0, total - hits,
        ordered / adjacent if adjacent else 0.0,
        mean(w for ws in windows.values() for w in ws),
        mean(f for fs in finals.values() for f in fs), mean(opts), min(ratios),
        not result.violations)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="out/wan_optimistic")
    parser.add_argument("--traces", default="",
                        help="Also write each run's trace here (for abcast report).")
    args = parser.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    tasks = [(rate, label, config, args.messages, args.seed, args.traces)
             for rate in rates for label, config in VARIANTS]
    with multiprocessing.Pool(args.jobs) as pool:
        outcomes = pool.map(run, tasks)
    by = {(o.rate, o.variant): o for o in outcomes}
    lines = ["| msgs/sender/s | variant | accuracy | mis-ordered | pairs in order | window ms "
             "| final ms | added ms | min window/final | clean |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        added = o.opt_ms - by[(o.rate, "plain")].opt_ms
        lines.append(f"| {o.rate} | {o.variant} | {o.accuracy:.1%} | {o.misordered} | "
                     f"{o.pairs:.1%} | "
                     f"{o.window_ms:.1f} | {o.final_ms:.1f} | {added:+.1f} | "
                     f"{o.min_ratio:.2f} | {'yes' if o.clean else 'NO'} |")
    for label, _ in VARIANTS[1:]:
        mis = sum(by[(r, label)].misordered for r in rates)
        plain = sum(by[(r, "plain")].misordered for r in rates)
        lines.append(f"\n{label}: {mis} mis-ordered opt-deliveries over the sweep, plain "
                     f"{plain} ({plain / max(mis, 1):.1f}× as many)")
    table = "\n".join(lines)
    print(table)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(
        f"five_sites.json, {NODES} senders, {args.messages} messages per run, seed "
        f"{args.seed}; accuracy and window over the non-sequencer nodes\n\n{table}\n")
    plot(outcomes, rates, out.with_suffix(".png"))
    return 0 if all(o.clean for o in outcomes) else 1


def plot(outcomes: list[Outcome], rates: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, _ in VARIANTS:
        mine = sorted((o for o in outcomes if o.variant == label), key=lambda o: o.rate)
        left.plot([o.rate for o in mine], [o.accuracy for o in mine], marker="o", label=label)
        right.plot([o.rate for o in mine], [o.window_ms for o in mine], marker="o",
                   label=label)
    for ax, title in ((left, "accuracy (opt position = final)"),
                      (right, "optimistic window (ms)")):
        ax.set_xscale("log")
        ax.set_xlabel("messages per sender per second")
        ax.set_title(title)
        ax.legend()
    fig.suptitle("ordering optimistic on five_sites.json (non-sequencer nodes)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
