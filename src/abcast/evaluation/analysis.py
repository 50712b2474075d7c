"""What the measurements mean: the thesis model beside each cell, the load curve's knee,
and abcast/peer ratios.

Rules: pure functions over the records of abcast.evaluation.results; no I/O.

The model (thesis §5.2): a TO-broadcast costs s·(n−1) messages (sequencer s = 2, Skeen
3, Chandra-Toueg 4), so its latency is T = s·(n−1)·T_msg + T_overhead, with T_msg the
one-way time of one message on that middleware (half a measured ping round trip).
T_overhead — what the model does not itemise (stack, scheduling, the loop) — is fitted
per ordering × middleware as the mean residual of the measured cells, which is the
least-squares intercept when the slope is fixed by the model; two more estimates stand
beside it: the intercept of the free least-squares line (slope measured), and the
smallest group's latency less the model's network time there. With a single n for a pair
the fit is exact by construction, so the model column is marked as such.

The knee: the offered load where delivered throughput stops tracking it. Points are
taken in rising offered rate; the knee is the last point whose delivered/offered ratio
is at least `TRACKING` before the first point that falls below it, and the saturation
throughput is the highest delivered throughput on the curve.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import fmean, median
from typing import Final

from abcast.evaluation.grid import Phase
from abcast.evaluation.results import (
    BenchResult,
    PeerMeasurement,
    RunMeasurement,
    clean_runs,
    is_clean,
)

#: messages per broadcast of the thesis model, as multiples of (n − 1)
MODEL_FACTOR: Final = {"sequencer": 2, "skeen": 3, "chandra-toueg": 4}
TRACKING: Final = 0.9


def model_factor(ordering: str) -> int | None:
    return MODEL_FACTOR.get(ordering)


# ---------------------------------------------------------------- the model column


@dataclass(frozen=True, slots=True)
class ModelCell:
    ordering: str
    transport: str
    nodes: int
    measured_us: float | None
    network_us: float | None  # s·(n−1)·T_msg
    predicted_us: float | None  # network + fitted T_overhead
    overhead_us: float | None
    fitted_points: int  # measured cells the overhead was fitted on

    @property
    def exact_by_fit(self) -> bool:
        return self.fitted_points == 1


def network_time_us(ordering: str, nodes: int, t_msg_us: float | None) -> float | None:
    factor = model_factor(ordering)
    if factor is None or t_msg_us is None:
        return None
    return factor * (nodes - 1) * t_msg_us


def model_cells(runs: Sequence[RunMeasurement], t_msg_us: dict[str, float]
                ) -> list[ModelCell]:
    """One cell per (ordering, transport, n) of `runs`, in that order, with the model's
    prediction. Runs that failed or were found in violation do not count."""
    measured: dict[tuple[str, str, int], float | None] = {}
    for run in runs:
        e = run.experiment
        key = (e.ordering, e.transport, e.nodes)
        value = run.figures.mean_us if is_clean(run) else None
        if measured.get(key) is None:
            measured[key] = value
    residuals: dict[tuple[str, str], list[float]] = {}
    for (ordering, transport, n), value in measured.items():
        network = network_time_us(ordering, n, t_msg_us.get(transport))
        if value is not None and network is not None:
            residuals.setdefault((ordering, transport), []).append(value - network)
    cells = []
    for (ordering, transport, n), value in sorted(measured.items()):
        network = network_time_us(ordering, n, t_msg_us.get(transport))
        points = residuals.get((ordering, transport), [])
        overhead = fmean(points) if points else None
        predicted = None if network is None or overhead is None else network + overhead
        cells.append(ModelCell(ordering, transport, n, value, network, predicted, overhead,
                               len(points)))
    return cells


@dataclass(frozen=True, slots=True)
class SlopeCheck:
    """Measured growth of latency with n against the model's s·T_msg."""

    ordering: str
    transport: str
    points: int
    measured_slope_us: float | None  # per extra node, least squares over n − 1
    model_slope_us: float | None  # s·T_msg
    #: T_overhead estimated two more ways: the intercept of the free least-squares line
    #: (slope measured, not the model's), and the smallest group's latency less the
    #: model's network time there
    free_fit_overhead_us: float | None = None
    smallest_n_overhead_us: float | None = None


def slope_checks(cells: Iterable[ModelCell], t_msg_us: dict[str, float]) -> list[SlopeCheck]:
    by_pair: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for c in cells:
        if c.measured_us is not None:
            by_pair.setdefault((c.ordering, c.transport), []).append(
                (float(c.nodes - 1), c.measured_us))
    checks = []
    for (ordering, transport), points in sorted(by_pair.items()):
        factor = model_factor(ordering)
        t_msg = t_msg_us.get(transport)
        model = None if factor is None or t_msg is None else factor * t_msg
        slope = least_squares_slope(points)
        free = None if slope is None else (
            fmean(y for _, y in points) - slope * fmean(x for x, _ in points))
        x0, y0 = min(points)
        smallest = None if model is None else y0 - model * x0
        checks.append(SlopeCheck(ordering, transport, len(points), slope, model, free,
                                 smallest))
    return checks


def least_squares_slope(points: Sequence[tuple[float, float]]) -> float | None:
    xs = [x for x, _ in points]
    if len(set(xs)) < 2:
        return None
    mx, my = fmean(xs), fmean(y for _, y in points)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


# ---------------------------------------------------------------- the knee


@dataclass(frozen=True, slots=True)
class LoadPoint:
    offered: float  # broadcasts/s
    delivered: float | None  # messages/s; None when the run failed
    p50_us: float | None = None

    @property
    def tracking(self) -> bool:
        return self.delivered is not None and self.delivered >= TRACKING * self.offered


@dataclass(frozen=True, slots=True)
class Knee:
    offered: float | None  # the last offered rate delivered in full; None: none was
    saturation: float | None  # the highest delivered throughput on the curve
    saturated: bool  # False: the curve never stopped tracking (the knee lies beyond it)


def find_knee(points: Iterable[LoadPoint]) -> Knee:
    curve = sorted(points, key=lambda p: p.offered)
    delivered = [p.delivered for p in curve if p.delivered is not None]
    saturation = max(delivered) if delivered else None
    knee: float | None = None
    for point in curve:
        if not point.tracking:
            return Knee(knee, saturation, True)
        knee = point.offered
    return Knee(knee, saturation, False)


@dataclass(frozen=True, slots=True)
class LoadCurve:
    ordering: str
    nodes: int
    points: tuple[LoadPoint, ...]
    knee: Knee
    transport: str = "tcp"


def load_curves(runs: Sequence[RunMeasurement], phase: Phase = Phase.LOAD
                ) -> list[LoadCurve]:
    """One curve per (ordering, middleware, n) of the open-loop runs (abcast's, or with
    `phase=Phase.FLOOR` the floor's)."""
    by_curve: dict[tuple[str, str, int], list[LoadPoint]] = {}
    for run in runs:
        e = run.experiment
        if e.phase is not phase or e.rate is None:
            continue
        delivered = run.figures.throughput if run.complete else None
        by_curve.setdefault((e.ordering, e.transport, e.nodes), []).append(
            LoadPoint(e.rate, delivered, run.figures.p50_us))
    return [LoadCurve(o, n, tuple(sorted(pts, key=lambda p: p.offered)), find_knee(pts), t)
            for (o, t, n), pts in sorted(by_curve.items())]


# ---------------------------------------------------------------- the floor


@dataclass(frozen=True, slots=True)
class Floor:
    """The floor's figures of one bench run (abcast.evaluation.floor), to divide by."""

    saturation: dict[tuple[str, int], float]  # (transport, n) → its highest delivered rate
    lone: dict[str | None, RunMeasurement]  # event loop → its lone-message run

    def saturation_ratio(self, curve: LoadCurve) -> tuple[float | None, float | None]:
        """(the floor's saturation beside `curve`, the curve's saturation over it)."""
        floor = self.saturation.get((curve.transport, curve.nodes))
        return floor, ratio(curve.knee.saturation, floor)

    def lone_of(self, run: RunMeasurement) -> RunMeasurement | None:
        """The floor's lone-message run on `run`'s event loop and n."""
        floor = self.lone.get(run.experiment.event_loop)
        return floor if floor is not None and floor.experiment.nodes == run.experiment.nodes \
            else None

    def lone_ratios(self, run: RunMeasurement) -> tuple[float | None, float | None]:
        """(p50, p99) of a lone-message run over the floor's on the same loop."""
        floor = self.lone_of(run)
        if floor is None:
            return None, None
        return (ratio(run.figures.p50_us, floor.figures.p50_us),
                ratio(run.figures.p99_us, floor.figures.p99_us))

    def lone_cpu_ratio(self, run: RunMeasurement) -> float | None:
        """A lone-message run's CPU per message over the floor's on the same loop."""
        return ratio(cpu_us_per_message(run), cpu_us_per_message(self.lone_of(run)))


def floor_of(result: BenchResult) -> Floor:
    """The floor's saturation per (transport, n) and its clean lone runs per event loop."""
    saturation = {(c.transport, c.nodes): c.knee.saturation
                  for c in load_curves(result.runs, Phase.FLOOR)
                  if c.knee.saturation is not None}
    lone = {r.experiment.event_loop: r for r in clean_runs(result.of(Phase.FLOOR))
            if r.experiment.serial}
    return Floor(saturation, lone)


@dataclass(frozen=True, slots=True)
class PairedRound:
    """One PAIRED round: the floor's run and the sequencer's, back to back (both lone
    messages, or both saturation runs)."""

    floor: RunMeasurement
    ours: RunMeasurement

    @property
    def p50_ratio(self) -> float | None:
        return ratio(self.ours.figures.p50_us, self.floor.figures.p50_us)

    @property
    def p99_ratio(self) -> float | None:
        return ratio(self.ours.figures.p99_us, self.floor.figures.p99_us)

    @property
    def cpu_ratio(self) -> float | None:
        """CPU per message over the floor's; at the same n and with every message
        delivered everywhere, also the ratio of CPU per delivery."""
        return ratio(cpu_us_per_message(self.ours), cpu_us_per_message(self.floor))

    @property
    def throughput_ratio(self) -> float | None:
        """The sequencer's delivered rate over the floor's: of a saturation pair, the
        saturation ratio issue 23 sets its target on."""
        return ratio(self.ours.figures.throughput, self.floor.figures.throughput)


@dataclass(frozen=True, slots=True)
class Paired:
    """The PAIRED rounds of one kind (`paired_lone`, `paired_saturation`) whose two runs
    are both clean. Each median is taken over the rounds' own ratios (abcast's over the
    floor's of the same round), so a drift of the machine's speed between rounds
    cancels."""

    event_loop: str | None
    rounds: tuple[PairedRound, ...]
    left_out: int  # rounds with an incomplete or violating run
    group: tuple[str, str, int]  # (ordering, transport, n) of the sequencer's runs

    @property
    def p50_ratios(self) -> list[float]:
        return _known([p.p50_ratio for p in self.rounds])

    @property
    def throughput_ratios(self) -> list[float]:
        return _known([p.throughput_ratio for p in self.rounds])

    @property
    def p50_median(self) -> float | None:
        return _median([p.p50_ratio for p in self.rounds])

    @property
    def p99_median(self) -> float | None:
        return _median([p.p99_ratio for p in self.rounds])

    @property
    def cpu_median(self) -> float | None:
        return _median([p.cpu_ratio for p in self.rounds])

    @property
    def throughput_median(self) -> float | None:
        return _median([p.throughput_ratio for p in self.rounds])


def _known(values: Sequence[float | None]) -> list[float]:
    return [v for v in values if v is not None]


def _median(values: Sequence[float | None]) -> float | None:
    known = _known(values)
    return median(known) if known else None


def paired_lone(result: BenchResult) -> Paired | None:
    """The PAIRED rounds of the lone message; None when the bench ran none."""
    return _paired([r for r in result.of(Phase.PAIRED) if r.experiment.serial])


def paired_saturation(result: BenchResult) -> Paired | None:
    """The PAIRED rounds of the saturation run; None when the bench ran none."""
    return _paired([r for r in result.of(Phase.PAIRED) if r.experiment.rate is not None])


def _paired(runs: Sequence[RunMeasurement]) -> Paired | None:
    """`runs`' rounds, each of two clean runs."""
    if not runs:
        return None
    by_round: dict[int, dict[bool, RunMeasurement]] = {}
    for run in runs:
        by_round.setdefault(run.experiment.round, {})[run.experiment.floor] = run
    rounds = tuple(PairedRound(pair[True], pair[False]) for _, pair in sorted(by_round.items())
                   if len(pair) == 2 and is_clean(pair[True]) and is_clean(pair[False]))
    loops = {run.experiment.event_loop for run in runs}
    e = runs[0].experiment
    return Paired(loops.pop() if len(loops) == 1 else None, rounds,
                  len(by_round) - len(rounds), (e.ordering, e.transport, e.nodes))


# ---------------------------------------------------------------- peers


@dataclass(frozen=True, slots=True)
class PeerRatio:
    ordering: str
    peer: str
    abcast_throughput: float | None
    peer_throughput: float | None
    abcast_p50_us: float | None
    peer_p50_us: float | None

    @property
    def throughput_ratio(self) -> float | None:
        return ratio(self.abcast_throughput, self.peer_throughput)

    @property
    def p50_ratio(self) -> float | None:
        """abcast p50 / peer p50: below 1, abcast answers sooner."""
        return ratio(self.abcast_p50_us, self.peer_p50_us)


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either is unknown or b is not positive."""
    return None if a is None or b is None or b <= 0 else a / b


def cpu_us_per_message(run: RunMeasurement | None) -> float | None:
    """Every node process's CPU time from go to its report, summed, over the run's
    messages (µs); None for an incomplete run or one that reported no CPU."""
    if run is None or not run.complete or not run.cpu_s or not run.experiment.messages:
        return None
    return run.cpu_s / run.experiment.messages * 1e6


def cores_busy(run: RunMeasurement | None) -> float | None:
    """The node processes' CPU time over the run's span (go → last delivery): how many
    of the machine's cores the run kept busy on average."""
    cpu = cpu_us_per_message(run)
    if cpu is None or run is None or not run.figures.throughput:
        return None
    return cpu * run.figures.throughput / 1e6


def _peer_figures(peers: Sequence[PeerMeasurement], name: str
                  ) -> tuple[float | None, float | None]:
    """(saturation throughput from its open-loop runs, p50 from its closed-loop run)."""
    ran = [p for p in peers if p.experiment.peer == name and p.complete and p.skipped is None]
    loads = [p.figures.throughput for p in ran
             if p.experiment.rate is not None and p.figures.throughput is not None]
    closed = [p.figures.p50_us for p in ran
              if p.experiment.rate is None and p.figures.p50_us is not None]
    return (max(loads) if loads else None, closed[0] if closed else None)


def peer_ratios(result: BenchResult) -> list[PeerRatio]:
    """abcast (saturation throughput and closed-loop p50 at the peers' n and payload)
    against every peer that ran, per ordering."""
    curves = load_curves(result.runs)
    baselines = {r.experiment.ordering: r for r in clean_runs(result.of(Phase.BASELINE))}
    peer_names = sorted({p.experiment.peer for p in result.peers if p.skipped is None})
    ratios = []
    for ordering in sorted({r.experiment.ordering for r in result.of(Phase.BASELINE)}):
        base = baselines.get(ordering)
        if base is None:
            continue
        n = base.experiment.nodes
        saturations = [c.knee.saturation for c in curves
                       if (c.ordering, c.transport, c.nodes) == (
                           ordering, base.experiment.transport, n) and c.knee.saturation]
        throughput = max(saturations) if saturations else None
        for name in peer_names:
            peer_throughput, peer_p50 = _peer_figures(result.peers, name)
            ratios.append(PeerRatio(ordering, name, throughput, peer_throughput,
                                    base.figures.p50_us, peer_p50))
    return ratios
