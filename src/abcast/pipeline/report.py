"""`abcast report`: what the traces say about performance, as Spark transforms plus the
small tables they reduce to, the fitted latency model and the markdown page.

Rules: the Spark part is pure transforms (`latency_rows`, `run_stats`, `config_stats`,
`optimistic_stats`) that reduce a trace to a handful of rows per run; `collect_report`
brings only those rows to the driver; fitting and rendering are plain Python on them.
Latency is a deliver row's t_ns minus its origin's send t_ns; percentiles are
`percentile_approx` (relative error 1e-4). Packets per broadcast are net_send rows over
sent messages, next to the model of the run's own ordering and options (the registry's
thesis model; relay: n). A configuration is everything that changes what is measured:
ordering, transport, nodes, payload, workload, faults and the ordering's options — runs
differing in any of them are never averaged together, and the latency model is fitted
per configuration family (all but nodes). Runs over the simulator (`transport` sim)
are in virtual time, and say so. Plots live in abcast.pipeline.plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from abcast.pipeline.checks import MESSAGE_KEY, join_on

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

PERCENTILE_ACCURACY: Final = 10_000
NS_PER_MS: Final = 1_000_000.0
#: what makes two runs comparable: every one of these equal (faults, options may be null)
CONFIG_KEY: Final = ("ordering", "transport", "nodes", "payload_bytes", "workload", "faults",
                     "options")
#: a configuration family: all of CONFIG_KEY but the group size (one latency fit each)
FAMILY_KEY: Final = tuple(k for k in CONFIG_KEY if k != "nodes")
#: the transport the simulator writes: its times are virtual
SIMULATED: Final = "sim"


def _option_set(options: str | None) -> set[str]:
    return set((options or "").split())


def model_factor(ordering: str, options: str | None = None) -> int | None:
    """s in the model's s·(n−1) packets per broadcast (and latency slope), or None when
    the ordering has no such model. Relay sends n packets, one hop more than the
    origin's own n−1: s = 1."""
    from abcast.ordering.registry import ORDERINGS

    spec = ORDERINGS.get(ordering.lower().replace("_", "-"))
    if spec is None:
        return None
    if "relay" in _option_set(options):
        return 1
    return spec.model_packets(2)


def model_packets(ordering: str, nodes: int, options: str | None = None) -> int | None:
    """Packets per broadcast of a failure-free unbatched run of this ordering with these
    options: the registry's model, n for relay, None for safe (a bound, not a figure)."""
    from abcast.ordering.registry import ORDERINGS

    spec = ORDERINGS.get(ordering.lower().replace("_", "-"))
    opts = _option_set(options)
    if spec is None or "safe" in opts:
        return None
    if "relay" in opts:
        return nodes
    return spec.model_packets(nodes)


# ---------------------------------------------------------------- Spark transforms


def latency_rows(events: DataFrame) -> DataFrame:
    """One row per deliver row whose message was sent: run_id, node, `latency_ns`."""
    from pyspark.sql import functions as F

    kind, has_id = F.col("kind"), F.col("origin").isNotNull() & F.col("seq").isNotNull()
    sends = (events.where((kind == "send") & (F.col("node") == F.col("origin")) & has_id)
             .groupBy(*MESSAGE_KEY).agg(F.min("t_ns").alias("send_t_ns")))
    deliveries = events.where((kind == "deliver") & has_id).select(*MESSAGE_KEY, "node", "t_ns")
    joined = join_on(deliveries, sends, [(k, k) for k in MESSAGE_KEY])
    return joined.select("run_id", "node",
                         (F.col("t_ns") - F.col("send_t_ns")).alias("latency_ns"))


def _latency_aggregates(latency: Column) -> list[Column]:
    from pyspark.sql import functions as F

    quantiles = F.percentile_approx(latency, F.array(F.lit(0.5), F.lit(0.95), F.lit(0.99)),
                                    PERCENTILE_ACCURACY)
    return [quantiles.alias("latency_q"), F.max(latency).alias("latency_max"),
            F.avg(latency).alias("latency_mean")]


def _counts(events: DataFrame) -> DataFrame:
    """Per run: deliver rows, delivered messages, sent messages, net_send rows, time span."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    has_id = F.col("origin").isNotNull() & F.col("seq").isNotNull()
    per_run = events.groupBy("run_id").agg(
        F.sum((kind == "deliver").cast("bigint")).alias("deliveries"),
        F.sum(((kind == "send") & (F.col("node") == F.col("origin")) & has_id).cast("bigint"))
        .alias("sent"),
        F.sum((kind == "net_send").cast("bigint")).alias("net_sends"),
        (F.max("t_ns") - F.min("t_ns")).alias("span_ns"))
    delivered = (events.where((kind == "deliver") & has_id).select(*MESSAGE_KEY).distinct()
                 .groupBy("run_id").agg(F.count("*").alias("delivered_messages")))
    return join_on(per_run, delivered, [("run_id", "run_id")], "left")


def run_stats(events: DataFrame, runs: DataFrame) -> DataFrame:
    """One row per run with events: its runs row, counts, `throughput` (delivered
    messages per second of the run's duration) and latency aggregates (ns)."""
    from pyspark.sql import functions as F

    latency = latency_rows(events).groupBy("run_id").agg(*_latency_aggregates(F.col("latency_ns")))
    counted = join_on(_counts(events), latency, [("run_id", "run_id")], "left")
    with_run = join_on(counted, runs.select("run_id", *CONFIG_KEY, "duration_ns"),
                       [("run_id", "run_id")])
    seconds = F.when(F.col("duration_ns") > 0, F.col("duration_ns")).otherwise(
        F.col("span_ns")) / 1e9
    return with_run.withColumn(
        "throughput", F.when(seconds > 0, F.coalesce(F.col("delivered_messages"), F.lit(0))
                             / seconds))


def config_stats(events: DataFrame, runs: DataFrame) -> DataFrame:
    """One row per configuration (CONFIG_KEY): runs, deliveries, mean throughput of its
    runs, latency aggregates over all its deliveries, packets."""
    from pyspark.sql import functions as F

    config_of = runs.select("run_id", *CONFIG_KEY)
    latency = join_on(latency_rows(events), config_of, [("run_id", "run_id")]).groupBy(
        *CONFIG_KEY).agg(*_latency_aggregates(F.col("latency_ns")))
    per_run = run_stats(events, runs).groupBy(*CONFIG_KEY).agg(
        F.count("*").alias("runs"), F.sum("deliveries").alias("deliveries"),
        F.avg("throughput").alias("throughput"), F.sum("sent").alias("sent"),
        F.sum("net_sends").alias("net_sends"))
    return join_on(per_run, latency, [(k, k) for k in CONFIG_KEY], "left",
                   null_safe=CONFIG_KEY)


def optimistic_stats(events: DataFrame) -> DataFrame:
    """Per run with opt_deliver rows: `pairs` ((node, message) with an optimistic and a
    final delivery), `accuracy` (share whose opt_deliver position equals the final
    position) and the window final t_ns − opt t_ns (`window_q` p50/p95, `window_max`)."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    rows = events.where(kind.isin("opt_deliver", "deliver") & F.col("origin").isNotNull()
                        & F.col("seq").isNotNull())
    opt, final = kind == "opt_deliver", kind == "deliver"
    per_pair = rows.groupBy(*MESSAGE_KEY, "node").agg(
        F.min(F.when(opt, F.col("index"))).alias("opt_index"),
        F.min(F.when(opt, F.col("t_ns"))).alias("opt_t"),
        F.min(F.when(final, F.col("index"))).alias("final_index"),
        F.min(F.when(final, F.col("t_ns"))).alias("final_t"),
    ).where(F.col("opt_t").isNotNull() & F.col("final_t").isNotNull())
    window = F.col("final_t") - F.col("opt_t")
    return per_pair.groupBy("run_id").agg(
        F.count("*").alias("pairs"),
        F.avg((F.col("opt_index") == F.col("final_index")).cast("double")).alias("accuracy"),
        F.percentile_approx(window, F.array(F.lit(0.5), F.lit(0.95)), PERCENTILE_ACCURACY)
        .alias("window_q"),
        F.max(window).alias("window_max"))


# ---------------------------------------------------------------- driver-side tables


@dataclass(frozen=True, slots=True)
class Latency:
    """Milliseconds; None when no delivery had a matching send."""

    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None
    mean: float | None


@dataclass(frozen=True, slots=True)
class Setting:
    """What a configuration holds fixed besides ordering, transport, nodes and payload."""

    workload: str
    faults: str | None
    options: str | None

    @property
    def label(self) -> str:
        parts = [self.workload]
        if self.options:
            parts.append(self.options)
        if self.faults:
            parts.append(f"faults {self.faults}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class RunRow:
    run_id: str
    ordering: str
    transport: str
    nodes: int
    payload_bytes: int
    setting: Setting
    deliveries: int
    throughput: float | None
    latency: Latency
    packets_per_broadcast: float | None
    model_packets: int | None


@dataclass(frozen=True, slots=True)
class ConfigRow:
    ordering: str
    transport: str
    nodes: int
    payload_bytes: int
    setting: Setting
    runs: int
    deliveries: int
    throughput: float | None
    latency: Latency
    packets_per_broadcast: float | None
    model_packets: int | None


@dataclass(frozen=True, slots=True)
class OptimisticRow:
    run_id: str
    pairs: int
    accuracy: float
    window_p50_ms: float | None
    window_p95_ms: float | None
    window_max_ms: float | None


@dataclass(frozen=True, slots=True)
class Fit:
    """T = s·(n−1)·T_msg + T_overhead, least squares of mean latency (ms) over the runs
    of one configuration family."""

    ordering: str
    transport: str
    payload_bytes: int
    setting: Setting
    points: int
    slope_ms: float | None
    intercept_ms: float | None
    factor: int | None

    @property
    def negative(self) -> bool:
        """A negative T_overhead: latency does not grow linearly with n−1 here (too few
        sizes, or a cost the model lacks); the line is no measurement of T_overhead."""
        return self.intercept_ms is not None and self.intercept_ms < 0

    @property
    def t_msg_ms(self) -> float | None:
        if self.slope_ms is None or not self.factor:
            return None
        return self.slope_ms / self.factor


@dataclass(frozen=True, slots=True)
class Report:
    source: str
    events: int
    runs: tuple[RunRow, ...]
    configs: tuple[ConfigRow, ...]
    optimistic: tuple[OptimisticRow, ...]
    fits: tuple[Fit, ...]


def _ms(value: float | None) -> float | None:
    return None if value is None else value / NS_PER_MS


def _latency(row: object) -> Latency:
    q = row["latency_q"]  # type: ignore[index]
    return Latency(
        p50=_ms(q[0]) if q else None, p95=_ms(q[1]) if q else None,
        p99=_ms(q[2]) if q else None, max=_ms(row["latency_max"]),  # type: ignore[index]
        mean=_ms(row["latency_mean"]))  # type: ignore[index]


def _packets(net_sends: int | None, sent: int | None) -> float | None:
    # Without net_* rows (they are off by default) there is nothing to count.
    if not net_sends or not sent:
        return None
    return net_sends / sent


def _family(row: RunRow) -> tuple[str, str, int, Setting]:
    return (row.ordering, row.transport, row.payload_bytes, row.setting)


def fit_latency(runs: Sequence[RunRow]) -> tuple[Fit, ...]:
    """One least-squares line per configuration family through (n−1, mean latency)."""
    by_family: dict[tuple[str, str, int, Setting], list[tuple[float, float]]] = {}
    for run in runs:
        if run.latency.mean is not None:
            by_family.setdefault(_family(run), []).append(
                (float(run.nodes - 1), run.latency.mean))
    fits = []
    for family, points in sorted(by_family.items(), key=lambda kv: _family_order(kv[0])):
        ordering, transport, payload, setting = family
        xs = [x for x, _ in points]
        slope = intercept = None
        if len(set(xs)) >= 2:
            mean_x = sum(xs) / len(xs)
            mean_y = sum(y for _, y in points) / len(points)
            sxx = sum((x - mean_x) ** 2 for x in xs)
            sxy = sum((x - mean_x) * (y - mean_y) for x, y in points)
            slope = sxy / sxx
            intercept = mean_y - slope * mean_x
        fits.append(Fit(ordering, transport, payload, setting, len(points), slope, intercept,
                        model_factor(ordering, setting.options)))
    return tuple(fits)


def _family_order(family: tuple[str, str, int, Setting]) -> tuple[str, str, int, str]:
    ordering, transport, payload, setting = family
    return (ordering, transport, payload, setting.label)


def _setting(r: object) -> Setting:
    return Setting(r["workload"], r["faults"], r["options"])  # type: ignore[index]


def collect_report(events: DataFrame, runs: DataFrame, source: str, event_count: int) -> Report:
    """Run the transforms and bring their few rows back (the only actions here)."""
    run_rows = tuple(sorted((RunRow(
        run_id=r["run_id"], ordering=r["ordering"], transport=r["transport"],
        nodes=int(r["nodes"]), payload_bytes=int(r["payload_bytes"]), setting=_setting(r),
        deliveries=int(r["deliveries"] or 0), throughput=r["throughput"], latency=_latency(r),
        packets_per_broadcast=_packets(r["net_sends"], r["sent"]),
        model_packets=model_packets(r["ordering"], int(r["nodes"]), r["options"]),
    ) for r in run_stats(events, runs).collect()), key=lambda r: r.run_id))
    config_rows = tuple(sorted((ConfigRow(
        ordering=r["ordering"], transport=r["transport"], nodes=int(r["nodes"]),
        payload_bytes=int(r["payload_bytes"]), setting=_setting(r), runs=int(r["runs"]),
        deliveries=int(r["deliveries"] or 0), throughput=r["throughput"], latency=_latency(r),
        packets_per_broadcast=_packets(r["net_sends"], r["sent"]),
        model_packets=model_packets(r["ordering"], int(r["nodes"]), r["options"]),
    ) for r in config_stats(events, runs).collect()),
        key=lambda c: (c.ordering, c.transport, c.payload_bytes, c.setting.label, c.nodes)))
    optimistic = tuple(sorted((OptimisticRow(
        run_id=r["run_id"], pairs=int(r["pairs"]), accuracy=float(r["accuracy"]),
        window_p50_ms=_ms(r["window_q"][0]) if r["window_q"] else None,
        window_p95_ms=_ms(r["window_q"][1]) if r["window_q"] else None,
        window_max_ms=_ms(r["window_max"]),
    ) for r in join_on(optimistic_stats(events), runs.select("run_id"),
                       [("run_id", "run_id")], "left_semi").collect()),
        key=lambda o: o.run_id))
    return Report(source=source, events=event_count, runs=run_rows, configs=config_rows,
                  optimistic=optimistic, fits=fit_latency(run_rows))


# ---------------------------------------------------------------- markdown


def _num(value: float | int | None, digits: int = 3) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" for _ in header) + "|"]
    # a `|` in a cell (a partition fault) would end the cell: escaped, it stays text
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |"
              for row in rows]
    return lines


def _transport(transport: str) -> str:
    return f"{transport} (virtual time)" if transport == SIMULATED else transport


def _model(model: int | None, setting: Setting) -> str:
    # The model is of a failure-free run: beside a run with faults it is a reference only.
    return _num(model) + (" †" if model is not None and setting.faults else "")


def render_markdown(report: Report, plots: Sequence[tuple[str, str | None, str]]) -> str:
    """The report page. `plots`: (title, file name or None when skipped, note)."""
    latency_header = ["p50 ms", "p95 ms", "p99 ms", "max ms"]

    def lat(lat_: Latency) -> list[str]:
        return [_num(lat_.p50), _num(lat_.p95), _num(lat_.p99), _num(lat_.max)]

    simulated = any(r.transport == SIMULATED for r in report.runs)
    lines = ["# abcast report", "",
             f"Traces: `{report.source}` — {len(report.runs)} runs, {report.events:,} events.",
             "", "Latency: a deliver row's t_ns minus its origin's send t_ns. Packets per "
             "broadcast: net_send rows / sent messages (— without net_* rows), next to the "
             "model of the run's ordering and options (the thesis's s·(n−1); relay: n; safe: "
             "no single figure). A configuration is ordering, transport, nodes, payload, "
             "workload, options and faults: runs differing in any of them are not averaged "
             "together."]
    if simulated:
        lines += ["", "Runs over `sim` are simulated: their latencies, durations and "
                  "throughputs are in the simulator's virtual time, not comparable with "
                  "real runs."]
    lines += ["", "## Runs", ""]
    lines += _table(
        ["run", "ordering", "transport", "nodes", "payload B", "setting", "deliveries",
         "throughput msg/s", *latency_header, "packets/bcast", "model"],
        [[r.run_id, r.ordering, _transport(r.transport), str(r.nodes), str(r.payload_bytes),
          r.setting.label, _num(r.deliveries), _num(r.throughput, 1), *lat(r.latency),
          _num(r.packets_per_broadcast, 2), _model(r.model_packets, r.setting)]
         for r in report.runs])
    lines += ["", "## By configuration", ""]
    lines += _table(
        ["ordering", "transport", "nodes", "payload B", "setting", "runs", "deliveries",
         "throughput msg/s", *latency_header, "packets/bcast", "model"],
        [[c.ordering, _transport(c.transport), str(c.nodes), str(c.payload_bytes),
          c.setting.label, str(c.runs), _num(c.deliveries), _num(c.throughput, 1),
          *lat(c.latency), _num(c.packets_per_broadcast, 2),
          _model(c.model_packets, c.setting)] for c in report.configs])
    if any(c.setting.faults and c.model_packets is not None for c in report.configs):
        lines += ["", "† the model is of a failure-free run; this configuration injects "
                  "faults, so its figures are beside the model, not a measure of it."]
    lines += ["", "## Optimistic delivery", ""]
    if report.optimistic:
        lines += _table(
            ["run", "(node, message) pairs", "accuracy", "window p50 ms", "window p95 ms",
             "window max ms"],
            [[o.run_id, _num(o.pairs), f"{o.accuracy:.1%}", _num(o.window_p50_ms),
              _num(o.window_p95_ms), _num(o.window_max_ms)] for o in report.optimistic])
    else:
        lines.append("No opt_deliver rows in these traces.")
    lines += ["", "## Fitted latency model T = s·(n−1)·T_msg + T_overhead", "",
              "Least squares of each run's mean latency against n−1, per configuration "
              "family (everything but n equal).", ""]
    lines += _table(
        ["ordering", "transport", "payload B", "setting", "runs", "slope s·T_msg ms",
         "intercept T_overhead ms", "s (model)", "T_msg ms"],
        [[f.ordering, _transport(f.transport), str(f.payload_bytes), f.setting.label,
          str(f.points), _num(f.slope_ms),
          _num(f.intercept_ms) + (" (negative: no fit)" if f.negative else ""),
          _num(f.factor), _num(f.t_msg_ms)] for f in report.fits])
    if any(f.slope_ms is None for f in report.fits):
        lines += ["", "— : fewer than two distinct group sizes in that family."]
    if any(f.negative for f in report.fits):
        lines += ["", "A negative T_overhead means mean latency does not grow linearly "
                  "with n−1 in those runs (too few sizes, noise, or costs the model "
                  "lacks); that line measures neither T_msg nor T_overhead."]
    lines += ["", "## Plots", ""]
    for title, file_name, note in plots:
        lines.append(f"![{title}]({file_name})" if file_name else f"- {title}: {note}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
