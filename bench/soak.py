"""The soak: a 5-node sequencer group over tcp (real processes) under steady load with churn
— every minute a SIGKILL, a graceful leave (each followed by a join) and a member cut off
(SIGSTOP past the failure detector's timeout: the group installs a view without it; then
SIGCONT: it is admitted again, or replaced when the group removed it; the partition that
heals, as far as one can be made on loopback) — for `--minutes` of real time, RSS and
open fds of every process sampled every second (abcast.evaluation.soak says what is
judged and how).

Writes, into `--out`: the trace (events/, runs.parquet: `abcast check <out>` judges it
with Spark), `soak.md` (the report), `soak.json` (every sample and figure) and `soak.png`
(RSS over time per process, kills and leaves marked). Exits 1 unless every check is
clean, the live members' states are equal and no anchor's RSS grows. It loads both cores
for its whole duration: run it alone.

    .venv/bin/python bench/soak.py [--minutes 10] [--out out/soak]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from abcast.checks import count_by_code
from abcast.evaluation.soak import Sample, SoakConfig, SoakResult, heap_slopes, run_soak


def plot(result: SoakResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(11, 5.5))
    by_process: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for s in result.samples:
        by_process.setdefault((s.label, s.pid), []).append((s.t_s, s.rss_kib / 1024))
    anchors = {t.label for t in result.trends}
    for (label, _pid), points in sorted(by_process.items(), key=lambda kv: kv[1][0][0]):
        xs, ys = zip(*points, strict=True)
        steady = label in anchors
        ax.plot(xs, ys, linewidth=1.6 if steady else 0.9, alpha=1.0 if steady else 0.6,
                label=label if steady else None)
        ax.annotate(label, (xs[-1], ys[-1]), fontsize=7, alpha=0.7)
    colors = {"SIGKILL": "red", " left": "grey", " paused": "blue"}
    for t, what in result.events:
        for word, color in colors.items():
            if word in what:
                ax.axvline(t, color=color, linewidth=0.6, linestyle="--", alpha=0.6)
    ax.axvspan(0, result.config.warmup_s, color="grey", alpha=0.08, label="warm-up")
    ax.set_xlabel("time since the group was up (s); red: SIGKILL, grey: graceful leave, "
                  "blue: cut off (SIGSTOP)")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title(f"soak: {result.config.nodes}-node {result.config.ordering} over tcp, "
                 f"{result.duration_s / 60:.1f} min")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def per_process(result: SoakResult) -> list[tuple[str, int, float, float, int, int, int, int]]:
    """(label, pid, first and last sample time, peak and final RSS KiB, final and peak
    fds) per process, by start."""
    rows: dict[tuple[str, int], list[Sample]] = {}
    for s in result.samples:
        rows.setdefault((s.label, s.pid), []).append(s)
    out = []
    for (label, pid), samples in rows.items():
        out.append((label, pid, samples[0].t_s, samples[-1].t_s,
                    max(s.rss_kib for s in samples), samples[-1].rss_kib,
                    samples[-1].fds, max(s.fds for s in samples)))
    return sorted(out, key=lambda r: r[2])


def report(result: SoakResult, command: str) -> str:
    c = result.config
    lines = [f"# Soak: {c.nodes}-node {c.ordering} over tcp, {result.duration_s / 60:.1f} min",
             "", f"`{command}`", ""]
    verdict = "clean" if result.clean else "NOT clean"
    lines += [f"**Verdict: {verdict}.** Trace checks ({len(result.violations)} violations"
              f"{': ' + str(count_by_code(result.violations)) if result.violations else ''}); "
              f"live members' states equal: {result.states_equal}; errors: "
              f"{result.errors or 'none'}.", ""]
    kills = sum("SIGKILL" in w for _, w in result.events)
    leaves = sum(" left" in w for _, w in result.events)
    joins = sum("joined" in w for _, w in result.events) - c.nodes
    pauses = [w for _, w in result.events if " paused" in w]
    back = sum(" back in" in w for _, w in result.events)
    last = result.reports[0] if result.reports else {"count": "?", "digest": "?"}
    cut = (f" {len(pauses)} members cut off for {c.cut_off_s:g} s (SIGSTOP, then SIGCONT): "
           f"{back} came back, {len(pauses) - back} were removed and replaced;" if pauses else "")
    lines += [f"Churn: {kills} SIGKILLs, {leaves} graceful leaves,{cut} {joins} joins after the "
              f"first {c.nodes}. Final log: {last['count']} appends, digest "
              f"`{str(last['digest'])[:16]}…` on every live member.", ""]
    lines += ["## Growth after warm-up (least-squares slope, anchors and registry)", "",
              "| process | samples | window s | mean RSS MiB | RSS slope KiB/min | "
              "growth over window | fd slope /min | trend |", "|---|---|---|---|---|---|---|---|"]
    for t in result.trends:
        growth = t.rss_slope_kib_per_min * t.window_s / 60
        lines.append(f"| {t.label} | {t.samples} | {t.window_s:.0f} | {t.rss_mean_kib / 1024:.1f} "
                     f"| {t.rss_slope_kib_per_min:+.1f} | {growth / max(t.rss_mean_kib, 1):+.1%} "
                     f"| {t.fd_slope_per_min:+.2f} | {'GROWS' if t.growing else 'none'} |")
    heap = c.out / "heap"
    if heap.is_dir():
        lines += ["", "## Where the anchors' memory went (--heap: samples every 5 s after "
                  "warm-up; KiB)", "", "| anchor | what | first | last | slope KiB/min |",
                  "|---|---|---|---|---|"]
        for t in result.trends:
            path = heap / f"{t.label}-heap.jsonl"
            if t.label == "registry" or not path.exists():
                continue
            for what, (first, last, slope) in heap_slopes(path, c.warmup_s).items():
                lines.append(f"| {t.label} | {what} | {first:,.0f} | {last:,.0f} | {slope:+,.0f} |")
    lines += ["", "## Every process", "",
              "| process | pid | lived s | peak RSS MiB | final RSS MiB | final fds | peak fds "
              "| deliveries |", "|---|---|---|---|---|---|---|---|"]
    for label, pid, first, last, peak, final, fds, peak_fds in per_process(result):
        lines.append(f"| {label} | {pid} | {first:.0f}–{last:.0f} | {peak / 1024:.1f} | "
                     f"{final / 1024:.1f} | {fds} | {peak_fds} | "
                     f"{result.deliveries.get(label, '')} |")
    lines += ["", f"Deliveries in the trace, all nodes: {sum(result.deliveries.values()):,}.",
              "", "## Events", ""]
    lines += [f"- {t:.1f} s: {what}" for t, what in result.events]
    lines += ["", "![RSS over time](soak.png)", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("out/soak"))
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--churn-every", type=float, default=60.0, help="seconds")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds")
    parser.add_argument("--pause-every", type=float, default=60.0,
                        help="seconds between cutting a member off (SIGSTOP past the "
                             "detector's timeout, then SIGCONT); 0: never")
    parser.add_argument("--heap", action="store_true",
                        help="members sample what holds memory outside Python objects "
                             "(glibc, pymalloc, Arrow, mappings) into OUT/heap; the report "
                             "gives the anchors' slopes of each")
    args = parser.parse_args()
    if args.out.exists():
        shutil.rmtree(args.out)
    if args.heap:
        (args.out / "heap").mkdir(parents=True)
        os.environ["ABCAST_SOAK_HEAP"] = str((args.out / "heap").resolve())
    config = SoakConfig(out=args.out, minutes=args.minutes, nodes=args.nodes,
                        kill_every_s=args.kill_every, churn_every_s=args.churn_every,
                        pause_every_s=args.pause_every or None,
                        warmup_s=min(args.warmup, args.minutes * 30))
    result = asyncio.run(run_soak(config))
    plot(result, args.out / "soak.png")
    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    text = report(result, command)
    (args.out / "soak.md").write_text(text)
    (args.out / "soak.json").write_text(json.dumps({
        "clean": result.clean, "states_equal": result.states_equal, "errors": result.errors,
        "violations": count_by_code(result.violations), "deliveries": result.deliveries,
        "events": result.events, "reports": result.reports,
        "trends": [dataclasses.asdict(t) for t in result.trends],
        "samples": [dataclasses.asdict(s) for s in result.samples]}, indent=1))
    print(text)
    sys.exit(0 if result.clean else 1)


if __name__ == "__main__":
    main()
