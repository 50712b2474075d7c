"""The report's plots (PNG, matplotlib's Agg backend: no display needed).

Rules: each plot is drawn from the report's per-configuration rows, one series per
configuration family except the plot's x axis (ordering, transport, setting, and the
payload or the group size that is not on x), its label naming the ordering's model
(s in s·(n−1)); configurations are never averaged together. One colour per series, at
most MAX_SERIES series per figure: more are split over numbered files (`…_2.png`).
Group size and payload ticks are integers; simulated runs say their time is virtual. A
plot whose x axis would have a single value says so and is skipped, instead of drawing
a lone dot. This module draws and writes files; it computes no statistic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from abcast.pipeline.report import SIMULATED, ConfigRow, model_factor

LATENCY_VS_NODES: Final = "latency_vs_nodes.png"
LATENCY_VS_PAYLOAD: Final = "latency_vs_payload.png"
THROUGHPUT_VS_NODES: Final = "throughput_vs_nodes.png"
MAX_SERIES: Final = 6

Series = dict[str, list[tuple[float, float]]]


@dataclass(frozen=True, slots=True)
class PlotResult:
    title: str
    file_name: str | None  # None: skipped
    note: str


def series_label(c: ConfigRow, *, x: str) -> str:
    """The series a configuration belongs to on a plot whose x axis is `x`."""
    factor = model_factor(c.ordering, c.setting.options)
    parts = [c.ordering, c.transport + (" (virtual time)" if c.transport == SIMULATED else "")]
    if x != "payload":
        parts.append(f"{c.payload_bytes} B")
    if x != "nodes":
        parts.append(f"n={c.nodes}")
    parts.append(c.setting.label)
    model = f"model s={factor}" if factor is not None else "no model"
    return " · ".join(parts) + f" ({model})"


def _series(
    configs: Sequence[ConfigRow],
    x_name: str,
    x: Callable[[ConfigRow], float],
    y: Callable[[ConfigRow], float | None],
) -> Series:
    """series label -> its (x, y) points sorted by x."""
    out: Series = {}
    for c in configs:
        value = y(c)
        if value is not None:
            out.setdefault(series_label(c, x=x_name), []).append((x(c), value))
    return {label: sorted(points) for label, points in sorted(out.items())}


def _facets(series: Series) -> list[Series]:
    labels = list(series)
    return [{label: series[label] for label in labels[i:i + MAX_SERIES]}
            for i in range(0, len(labels), MAX_SERIES)] or [{}]


def _plot(
    out_dir: Path,
    file_name: str,
    title: str,
    series: Series,
    x_label: str,
    y_label: str,
) -> list[PlotResult]:
    xs = {x for points in series.values() for x, _ in points}
    if len(xs) < 2:
        shown = "no data" if not xs else f"a single {x_label} value"
        return [PlotResult(title, None, f"skipped ({shown})")]
    facets = [f for f in _facets(series) if len({x for p in f.values() for x, _ in p}) >= 2]
    results = []
    for number, facet in enumerate(facets, start=1):
        name = file_name if number == 1 else file_name.replace(".png", f"_{number}.png")
        shown = title if len(facets) == 1 else f"{title} ({number}/{len(facets)})"
        _draw(out_dir / name, shown, facet, x_label, y_label)
        results.append(PlotResult(shown, name, ""))
    return results


def _draw(path: Path, title: str, series: Series, x_label: str, y_label: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 5), dpi=100)
    colours = [f"C{i}" for i in range(10)]  # the default cycle: one colour per series
    try:
        for i, (label, points) in enumerate(series.items()):
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o",
                    color=colours[i], label=label)
        ax.set_title(title)
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="best")
        fig.tight_layout()
        fig.savefig(path, format="png")
    finally:
        plt.close(fig)


def draw_plots(configs: Sequence[ConfigRow], out_dir: Path) -> list[PlotResult]:
    """Latency vs n, latency vs payload size, throughput vs n."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        *_plot(out_dir, LATENCY_VS_NODES, "p50 latency vs group size",
               _series(configs, "nodes", lambda c: c.nodes, lambda c: c.latency.p50),
               "nodes", "p50 latency (ms)"),
        *_plot(out_dir, LATENCY_VS_PAYLOAD, "p50 latency vs payload size",
               _series(configs, "payload", lambda c: c.payload_bytes,
                       lambda c: c.latency.p50),
               "payload (bytes)", "p50 latency (ms)"),
        *_plot(out_dir, THROUGHPUT_VS_NODES, "throughput vs group size",
               _series(configs, "nodes", lambda c: c.nodes, lambda c: c.throughput),
               "nodes", "throughput (messages/s)"),
    ]
