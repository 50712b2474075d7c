"""The bench report's client/server section: tables and three plots from an `RpcBench`.

Rules: rendering only (every figure comes from abcast.evaluation.rpc_bench, which this
module runs for the bench: `run_rpc_section`, or `python -m abcast.evaluation.rpc_report
OUT [--quick]` for this section alone). Plots use matplotlib's Agg backend through
abcast.evaluation.report's `_save`; without matplotlib the section has its tables only.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from abcast.evaluation.report import Plot, _ms, _save, _table
from abcast.evaluation.rpc_bench import RpcBench, RpcSpec, Timing, quick_rpc_spec, run_rpc_bench


def _cell(t: Timing | None) -> str:
    if t is None:
        return "—"
    failed = f" ({t.requests - t.ok} not OK)" if t.ok < t.requests else ""
    return f"{_ms(t.mean_us)} / {_ms(t.p50_us)}{failed}"


def _size(payload: int) -> str:
    return f"{payload // 1024} KB" if payload >= 1024 and payload % 1024 == 0 else f"{payload} B"


def render_rpc(result: RpcBench, plots: list[Plot]) -> str:
    lines = ["## Client/server: requests, Case A vs Case B, reply consolidation", "",
             "A replicated echo service (`abcast serve --echo`, sequencer, tcp); the "
             "client is no group member. Case A (`--path direct`): the request goes to "
             "every server and the view's leader (the sequencer) proposes it into the "
             "order; Case B (`via-member`): one contact proposes it. Cells: mean / "
             "p50 ms of sequential requests (64-byte payload).", ""]
    sizes = sorted({t.nodes for t in result.t_request})
    if sizes:
        rows = []
        for vote in ("first", "all"):
            for path, name in (("direct", "Case A"), ("via-member", "Case B")):
                row = [f"{name}, vote {vote}"]
                for n in sizes:
                    row.append(_cell(next((t for t in result.t_request if (
                        t.nodes, t.path, t.vote) == (n, path, vote)), None)))
                rows.append(row)
            ratios = [result.ratio_b_over_a(n, vote) for n in sizes]
            rows.append([f"B / A (p50), vote {vote}",
                         *("—" if r is None else f"{r:.2f}×" for r in ratios)])
        lines += ["### T_request", ""]
        lines += _table(["", *(f"n = {n}" for n in sizes)], rows)
    for run in result.saturation:
        lines += [f"### Saturation: {run.clients} clients, {run.servers} servers, "
                  f"{run.path}", "",
                  f"{run.requests:,} requests in {run.seconds:g} s ({run.rate:,.0f}/s; "
                  f"{run.ok:,} OK). CPU time per process over the run; the sequencer's "
                  f"share of all of it: "
                  + ("—" if run.sequencer_share is None else f"{run.sequencer_share:.0%}"),
                  ""]
        total = sum(p.cpu_s for p in run.processes) or 1.0
        lines += _table(["process", "role", "CPU s", "share"], [
            [p.node + (" (sequencer)" if p.sequencer else ""), p.role, f"{p.cpu_s:.2f}",
             f"{p.cpu_s / total:.0%}"] for p in run.processes])
    if result.consolidation:
        lines += ["### Consolidation cost", "",
                  "Mean / p50 ms of a request whose payload every server echoes, by vote "
                  "(Case B).", ""]
        payloads = sorted({t.payload for t in result.consolidation})
        rows = []
        for n in sorted({t.nodes for t in result.consolidation}):
            for vote in dict.fromkeys(t.vote for t in result.consolidation):
                rows.append([f"n = {n}", vote, *(_cell(next((t for t in result.consolidation
                                                            if (t.nodes, t.vote, t.payload)
                                                            == (n, vote, p)), None))
                                                 for p in payloads)])
        lines += _table(["servers", "vote", *(_size(p) for p in payloads)], rows)
    lines += [f"![{p.title}]({p.file_name})" for p in plots]
    lines += [*(f"- {note}" for note in result.notes), ""]
    return "\n".join(lines)


def draw_rpc_plots(result: RpcBench, out: Path) -> list[Plot]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots = []
    if result.t_request:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for path, name in (("direct", "Case A"), ("via-member", "Case B")):
            for vote, style in (("first", "o-"), ("all", "s--")):
                pts = sorted((t.nodes, t.mean_us) for t in result.t_request
                             if (t.path, t.vote) == (path, vote) and t.mean_us is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], style,
                            label=f"{name}, {vote}")
        ax.set(xlabel="servers", ylabel="mean T_request (ms)",
               title="T_request: Case A vs Case B (sequencer, tcp)")
        ax.legend()
        plots.append(_save(fig, out, "rpc_t_request.png", "T_request vs servers"))
    if result.saturation:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        width = 0.8 / len(result.saturation)
        for k, run in enumerate(result.saturation):
            clients = iter(range(1, len(run.processes) + 1))
            names = [p.node + ("*" if p.sequencer else "") if p.role == "server"
                     else f"client {next(clients)}" for p in run.processes]
            xs = [i + k * width for i in range(len(names))]
            ax.bar(xs, [p.cpu_s for p in run.processes], width, label=run.path)
            ax.set_xticks([i + width * (len(result.saturation) - 1) / 2
                           for i in range(len(names))], names)
        ax.set(ylabel="CPU s", title="Saturation: CPU per process (* sequencer)")
        ax.legend()
        plots.append(_save(fig, out, "rpc_saturation.png", "CPU time per process"))
    if result.consolidation:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for n in sorted({t.nodes for t in result.consolidation}):
            for vote in dict.fromkeys(t.vote for t in result.consolidation):
                pts = sorted((t.payload, t.mean_us) for t in result.consolidation
                             if (t.nodes, t.vote) == (n, vote) and t.mean_us is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], "o-",
                            label=f"{vote}, n={n}")
        ax.set(xscale="log", xlabel="payload (bytes)", ylabel="mean request time (ms)",
               title="Consolidation cost: first vs all vs percent(51)")
        ax.legend(fontsize=7, ncol=2)
        plots.append(_save(fig, out, "rpc_consolidation.png", "Consolidation cost"))
    return plots


def write_rpc_section(result: RpcBench, out: Path) -> str:
    """The section's markdown (plots written into `out`)."""
    return render_rpc(result, draw_rpc_plots(result, out))


def rpc_summary_lines(result: RpcBench) -> list[str]:
    made, ok = result.counts
    lines = [f"client/server: {made:,} requests, {made - ok:,} not OK"]
    for n in sorted({t.nodes for t in result.t_request}):
        cells = {(t.path, t.vote): t for t in result.t_request if t.nodes == n}
        a, b = cells.get(("direct", "first")), cells.get(("via-member", "first"))
        ratio = result.ratio_b_over_a(n)
        lines.append(f"client/server n={n}: T_request p50 (vote first) Case A "
                     f"{_ms(a.p50_us if a else None)} ms, Case B "
                     f"{_ms(b.p50_us if b else None)} ms (B/A "
                     f"{'—' if ratio is None else f'{ratio:.2f}×'})")
    for run in result.saturation:
        share = run.sequencer_share
        lines.append(f"client/server saturation ({run.clients} clients, {run.servers} servers,"
                     f" {run.path}): {run.rate:,.0f} requests/s, sequencer "
                     f"{'—' if share is None else f'{share:.0%}'} of all CPU time")
    for t in result.consolidation:
        if t.payload in (min(p.payload for p in result.consolidation),
                         max(p.payload for p in result.consolidation)):
            lines.append(f"client/server consolidation n={t.nodes} {t.vote} "
                         f"{_size(t.payload)}: p50 {_ms(t.p50_us)} ms, mean {_ms(t.mean_us)}")
    return lines


@dataclass(frozen=True, slots=True)
class RpcSection:
    lines: tuple[str, ...]  # the summary
    failed: bool  # a request of the section was not OK


def run_rpc_section(quick: bool, out: Path, page: Path, console: object = None) -> RpcSection:
    """Run the section, write rpc.json and its plots into `out`, append it to `page` (the
    bench's report.md), and return its summary."""
    printer = getattr(console, "print", None)
    if callable(printer):
        printer("client/server section (abcast serve processes) …")
    result = asyncio.run(run_rpc_bench(quick_rpc_spec() if quick else RpcSpec(), logs=out))
    (out / "rpc.json").write_text(json.dumps(result.to_json(), indent=1))
    section = write_rpc_section(result, out)
    with page.open("a") as f:
        f.write("\n" + section)
    return RpcSection(tuple(rpc_summary_lines(result)), result.failed)


def main() -> None:
    """`python -m abcast.evaluation.rpc_report OUT [--quick]`: this section alone."""
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-rpc")
    out.mkdir(parents=True, exist_ok=True)
    page = out / "rpc.md"
    page.write_text("")
    section = run_rpc_section("--quick" in sys.argv, out, page)
    for line in section.lines:
        print(line)
    print(f"report: {page}")
    sys.exit(1 if section.failed else 0)


if __name__ == "__main__":
    main()
