"""WAN evaluation of ordering "optimistic": compensated against plain opt-delivery.

Rules: five nodes, one per site of transport/wan_matrices/five_sites.json, each link's
one-way latency RTT/2 ± the file's jitter; a *placement* names the sequencer's site (n1)
and the sites that send (round robin, open loop, at `rate` messages per sender per
second). Per run, over the non-sequencer nodes (the sequencer final-delivers on receipt,
so its guesses are trivially right): `accuracy` — the share of opt-deliveries whose
position in the node's opt sequence equals the message's position in its final
sequence; `pairs in order` — the share of consecutive opt-deliveries that the final
order keeps in order; `window` — mean final − opt time; `final` — mean send →
final-delivery latency; `added` — mean send → opt-delivery latency minus the plain run's
at the same rate; `min_ratio` — the smallest per-site window ÷ final latency. Every run
must be clean for its claims (checked). Writes out/wan_optimistic.md (the table) and
.png (the plot). A benchmark, not a test: no time is compared against a limit.

The two default placements are the two sides of the window bound in docs/orderings.md:
`central` — the sequencer in virginia, every site sending — where the sequencer lies on
the short paths between the others and the window cannot exceed the smallest triangle
slack (5.5 ms at oregon); `remote` — the sequencer in tokyo, virginia, ireland and
frankfurt sending — where the final order costs a long detour and compensation keeps
most of it as window.

    .venv/bin/python bench/wan_optimistic.py
    .venv/bin/python bench/wan_optimistic.py --seconds 2 --rates 20,200 --placements remote
    .venv/bin/python bench/wan_optimistic.py --traces out/wan-traces && abcast report out/wan-traces
    .venv/bin/python bench/wan_optimistic.py --oracle --rates 20,200,2000 --placements remote

`--oracle` adds a variant that is not the algorithm but its bound: every node starts with
the best constant delays (`oracle_delays`: from the links' mean latencies) and never
corrects them: where adjusting delay[] can at best converge (a per-sender delay cannot
follow each message's own jitter), so where compensation already matches the oracle the
rest of the mis-ordering is the jitter's.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import sys
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from statistics import mean
from typing import Any
from unittest.mock import patch

from abcast.ids import NodeId
from abcast.ordering import sequencer_optimistic
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.sim import SimConfig, run_simulation
from abcast.sim.network import LinkModel
from abcast.transport.wan import EXAMPLE_MATRIX, load_matrix, node_links_us

NODES = 5
#: messages per sender per second: one per 50 ms up to one per 0.5 ms (the simulator
#: has no CPU cost, so "saturation" here is spacing well under the links' jitter)
RATES = (20, 50, 100, 200, 500, 1000, 2000)
#: (label, config): plain first (the baseline the others' added latency is against)
VARIANTS = (("plain", OptimisticConfig(compensate=False)),
            ("α=0.5", OptimisticConfig(alpha=0.5)),
            ("α=0.8", OptimisticConfig(alpha=0.8)),
            ("α=0.95", OptimisticConfig(alpha=0.95)))
#: --oracle: the best constant delays, never corrected (see above)
ORACLE = ("oracle", OptimisticConfig(alpha=0.95))


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the sequencer (n1) sits and which sites send; the other sites follow n1 in
    the file's order (n2, n3, ...)."""

    label: str
    sequencer: str
    senders: tuple[str, ...]

    def sites(self) -> dict[NodeId, str]:
        matrix = load_matrix(EXAMPLE_MATRIX)
        order = [self.sequencer, *(s for s in matrix.sites if s != self.sequencer)]
        return {f"n{i}": site for i, site in enumerate(order, start=1)}

    def links(self) -> tuple[tuple[NodeId, NodeId, LinkModel], ...]:
        sites = self.sites()
        matrix = dataclasses.replace(load_matrix(EXAMPLE_MATRIX),
                                     nodes=tuple(sites.items()))
        return tuple((a, b, LinkModel(lo, hi))
                     for a, b, lo, hi in node_links_us(matrix, list(sites)))

    def sender_nodes(self) -> tuple[NodeId, ...]:
        by_site = {site: node for node, site in self.sites().items()}
        return tuple(by_site[s] for s in self.senders)


def oracle_delays(placement: Placement) -> dict[NodeId, dict[NodeId, float]]:
    """Per node k (not the sequencer s), per sender i: L(i,s) + L(s,k) − L(i,k) over the
    mean one-way latencies (L(k,k) = 0: a node opt-delivers its own broadcast at once),
    less the smallest — each message opt-delivered the same time before its final
    delivery on average (docs/orderings.md, "Where the window comes from")."""
    mean_us: dict[tuple[NodeId, NodeId], float] = {}
    for a, b, link in placement.links():
        mean_us[(a, b)] = (link.lo_us + link.hi_us) / 2

    def one_way(a: NodeId, b: NodeId) -> float:
        return 0.0 if a == b else mean_us.get((a, b), mean_us.get((b, a), 0.0))

    seq = "n1"
    out: dict[NodeId, dict[NodeId, float]] = {}
    for k in placement.sites():
        if k == seq:
            continue
        delay = {i: one_way(i, seq) + one_way(seq, k) - one_way(i, k)
                 for i in placement.sender_nodes()}
        low = min(delay.values())
        out[k] = {i: d - low for i, d in delay.items()}
    return out


@contextmanager
def fixed_delays(delays: dict[NodeId, dict[NodeId, float]]) -> Iterator[None]:
    """Within: every optimistic core starts with `delays[node]` and never corrects them,
    and the sequencer numbers its own messages at once (a variant for measuring, not the
    algorithm). A hold H on the sequencer's own messages would only add H to their
    delay everywhere: it moves the window, not the order, so the bound is taken at H = 0."""
    init = Sequencer.__init__

    def start(self: Sequencer, node: NodeId, *args: Any, **kwargs: Any) -> None:
        init(self, node, *args, **kwargs)
        if self.st.optimistic is not None:
            self.st.optimistic.delay.update(delays.get(node, {}))

    with (patch.object(Sequencer, "__init__", start),
          patch.object(sequencer_optimistic, "_learn", lambda *_: None),
          patch.object(sequencer_optimistic, "own_delay", lambda *_: 0)):
        yield


PLACEMENTS = {
    "central": Placement("central", "virginia",
                         ("virginia", "oregon", "ireland", "frankfurt", "tokyo")),
    "remote": Placement("remote", "tokyo", ("virginia", "ireland", "frankfurt")),
}


@dataclass(frozen=True, slots=True)
class Outcome:
    placement: str
    rate: int
    variant: str
    accuracy: float
    misordered: int  # opt position != final position
    out_of_order: int  # opt-deliveries less the longest run the final order keeps
    pairs: float  # share of consecutive opt-deliveries in final order
    window_ms: float
    final_ms: float
    opt_ms: float
    min_ratio: float
    clean: bool


def run(task: tuple[Placement, int, str, OptimisticConfig, float, float, int, str]
        ) -> Outcome:
    placement, rate, label, config, seconds, warmup, seed, traces = task
    senders = placement.sender_nodes()
    messages = round(rate * len(senders) * seconds)
    sim = SimConfig(
        "optimistic", nodes=NODES, messages=messages, seed=seed,
        rate=float(rate * len(senders)), links=placement.links(), senders=senders,
        options=OrderingOptions(optimistic=config))
    if label == ORACLE[0]:
        with fixed_delays(oracle_delays(placement)):
            result = run_simulation(sim)
    else:
        result = run_simulation(sim)
    if traces:
        result.write(traces)
    rows = result.recorder.rows()
    # judged: what was sent after the warm-up (compensation learns from final
    # deliveries, which begin one final latency into the run)
    sent = {(r.origin, r.seq): r.t_ns for r in rows
            if r.kind == "send" and r.t_ns >= warmup * 1e9}
    hits = total = ordered = adjacent = out_of_order = 0
    windows: dict[str, list[float]] = {}
    finals: dict[str, list[float]] = {}
    opts: list[float] = []
    for node in (f"n{i}" for i in range(2, NODES + 1)):
        mine = result.recorder.rows_of(node)
        opt = [(r.origin, r.seq, r.t_ns) for r in mine
               if r.kind == "opt_deliver" and (r.origin, r.seq) in sent]
        final = [(r.origin, r.seq, r.t_ns) for r in mine
                 if r.kind == "deliver" and (r.origin, r.seq) in sent]
        opt_pos = {(o, s): (i, t) for i, (o, s, t) in enumerate(opt)}
        final_pos = {(o, s): i for i, (o, s, _) in enumerate(final)}
        ranks = [final_pos[(o, s)] for o, s, _ in opt if (o, s) in final_pos]
        adjacent += max(0, len(ranks) - 1)
        out_of_order += len(ranks) - longest_increasing(ranks)
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
        placement.label, rate, label, hits / total if total else 0.0, total - hits,
        out_of_order,
        ordered / adjacent if adjacent else 0.0,
        mean(w for ws in windows.values() for w in ws),
        mean(f for fs in finals.values() for f in fs), mean(opts), min(ratios),
        not result.violations)


def longest_increasing(ranks: list[int]) -> int:
    """The length of the longest increasing subsequence (patience sorting): the most
    opt-deliveries that were in final order; the rest had to be out of it."""
    tails: list[int] = []
    for r in ranks:
        at = bisect_left(tails, r)
        if at == len(tails):
            tails.append(r)
        else:
            tails[at] = r
    return len(tails)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="Traffic per run in (simulated) seconds.")
    parser.add_argument("--warmup", type=float, default=1.0,
                        help="Judge only messages sent after this many seconds.")
    parser.add_argument("--rates", default=",".join(map(str, RATES)))
    parser.add_argument("--placements", default=",".join(PLACEMENTS),
                        help=f"Comma-separated, of: {', '.join(PLACEMENTS)}.")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="out/wan_optimistic")
    parser.add_argument("--traces", default="",
                        help="Also write each run's trace here (for abcast report).")
    parser.add_argument("--oracle", action="store_true",
                        help="Add the best constant delays, never corrected (a bound).")
    args = parser.parse_args()
    variants = (*VARIANTS, ORACLE) if args.oracle else VARIANTS
    rates = [int(r) for r in args.rates.split(",")]
    try:
        placements = [PLACEMENTS[p] for p in args.placements.split(",")]
    except KeyError as exc:
        parser.error(f"unknown placement {exc}; choose from {', '.join(PLACEMENTS)}")
    if not 0 <= args.warmup < args.seconds:
        parser.error("--warmup must be at least 0 and below --seconds")
    tasks = [(placement, rate, label, config, args.seconds, args.warmup, args.seed,
              args.traces)
             for placement in placements for rate in rates for label, config in variants]
    with multiprocessing.Pool(args.jobs) as pool:
        outcomes = pool.map(run, tasks)
    sections = [section(placement, [o for o in outcomes if o.placement == placement.label],
                        rates, variants) for placement in placements]
    text = "\n\n".join(sections)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text(
        f"five_sites.json, {args.seconds:g} s of traffic per run, judged after "
        f"{args.warmup:g} s, seed {args.seed}; accuracy and window over the "
        f"non-sequencer nodes\n\n{text}\n")
    plot(outcomes, placements, out.with_suffix(".png"), variants)
    return 0 if all(o.clean for o in outcomes) else 1


def section(placement: Placement, outcomes: list[Outcome], rates: list[int],
            variants: tuple[tuple[str, OptimisticConfig], ...] = VARIANTS) -> str:
    by = {(o.rate, o.variant): o for o in outcomes}
    lines = [f"### {placement.label}: sequencer in {placement.sequencer}, senders "
             f"{', '.join(placement.senders)}", "",
             "| msgs/sender/s | variant | accuracy | mis-placed | out of order "
             "| pairs in order | window ms | final ms | added ms | min window/final | clean |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        added = o.opt_ms - by[(o.rate, "plain")].opt_ms
        lines.append(f"| {o.rate} | {o.variant} | {o.accuracy:.1%} | {o.misordered} | "
                     f"{o.out_of_order} | {o.pairs:.1%} | "
                     f"{o.window_ms:.1f} | {o.final_ms:.1f} | {added:+.1f} | "
                     f"{o.min_ratio:.2f} | {'yes' if o.clean else 'NO'} |")
    lines.append("")
    for label, _ in variants[1:]:
        mis = sum(by[(r, label)].misordered for r in rates)
        plain = sum(by[(r, "plain")].misordered for r in rates)
        out = sum(by[(r, label)].out_of_order for r in rates)
        plain_out = sum(by[(r, "plain")].out_of_order for r in rates)
        worst = min(by[(r, "plain")].accuracy <= by[(r, label)].accuracy for r in rates)
        lines.append(f"- {label}: over the sweep {mis} mis-placed opt-deliveries (plain "
                     f"{plain}, {plain / max(mis, 1):.1f}× as many) and {out} out of order "
                     f"(plain {plain_out}, {plain_out / max(out, 1):.1f}×); accuracy at "
                     f"least plain's at every rate: {'yes' if worst else 'no'}")
    return "\n".join(lines)


def plot(outcomes: list[Outcome], placements: list[Placement], path: Path,
         variants: tuple[tuple[str, OptimisticConfig], ...] = VARIANTS) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(placements), 2, figsize=(11, 4 * len(placements)),
                             squeeze=False)
    for (left, right), placement in zip(axes, placements, strict=True):
        for label, _ in variants:
            mine = sorted((o for o in outcomes
                           if o.variant == label and o.placement == placement.label),
                          key=lambda o: o.rate)
            left.plot([o.rate for o in mine], [o.accuracy for o in mine], marker="o",
                      label=label)
            right.plot([o.rate for o in mine], [o.window_ms for o in mine], marker="o",
                       label=label)
        for ax, title in ((left, "accuracy (opt position = final)"),
                          (right, "optimistic window (ms)")):
            ax.set_xscale("log")
            ax.set_xlabel("messages per sender per second")
            ax.set_title(f"{placement.label} (sequencer in {placement.sequencer}): {title}")
            ax.legend()
    fig.suptitle("ordering optimistic on five_sites.json (non-sequencer nodes)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
