"""The report's plots (PNG, matplotlib's Agg backend: no display needed).

Rules: each plot is drawn from the report's per-configuration rows, one line per
ordering; a plot whose x axis would have a single value says so and is skipped, instead
of drawing a lone dot. This module draws and writes files; it computes no statistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from abcast.pipeline.report import ConfigRow

LATENCY_VS_NODES: Final = "latency_vs_nodes.png"
LATENCY_VS_PAYLOAD: Final = "latency_vs_payload.png"
THROUGHPUT_VS_NODES: Final = "throughput_vs_nodes.png"


@dataclass(frozen=True, slots=True)
class PlotResult:
    title: str
    file_name: str | None  # None: skipped
    note: str


def _series(
    configs: Sequence[ConfigRow],
    x: Callable[[ConfigRow], float],
    y: Callable[[ConfigRow], float | None],
) -> dict[str, list[tuple[float, float]]]:
    """ordering -> sorted (x, mean y) points (configs differing elsewhere are averaged)."""
    sums: dict[tuple[str, float], list[float]] = {}
    for c in configs:
        value = y(c)
        if value is not None:
            sums.setdefault((c.ordering, x(c)), []).append(value)
    out: dict[str, list[tuple[float, float]]] = {}
    for (ordering, xv), values in sorted(sums.items()):
        out.setdefault(ordering, []).append((xv, sum(values) / len(values)))
    return out


def _plot(
    out_dir: Path,
    file_name: str,
    title: str,
    series: dict[str, list[tuple[float, float]]],
    x_label: str,
    y_label: str,
) -> PlotResult:
    xs = {x for points in series.values() for x, _ in points}
    if len(xs) < 2:
        shown = "no data" if not xs else f"a single {x_label} value"
        return PlotResult(title, None, f"skipped ({shown})")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    try:
        for ordering, points in sorted(series.items()):
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=ordering)
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / file_name, format="png")
    finally:
        plt.close(fig)
    return PlotResult(title, file_name, "")


def draw_plots(configs: Sequence[ConfigRow], out_dir: Path) -> list[PlotResult]:
    """Latency vs n per ordering, latency vs payload size, throughput vs n."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        _plot(out_dir, LATENCY_VS_NODES, "p50 latency vs group size",
              _series(configs, lambda c: c.nodes, lambda c: c.latency.p50),
              "nodes", "p50 latency (ms)"),
        _plot(out_dir, LATENCY_VS_PAYLOAD, "p50 latency vs payload size",
              _series(configs, lambda c: c.payload_bytes, lambda c: c.latency.p50),
              "payload (bytes)", "p50 latency (ms)"),
        _plot(out_dir, THROUGHPUT_VS_NODES, "throughput vs group size",
              _series(configs, lambda c: c.nodes, lambda c: c.throughput),
              "nodes", "throughput (messages/s)"),
    ]
