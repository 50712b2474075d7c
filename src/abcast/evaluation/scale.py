"""What the scale section's real-process runs mean: saturation and a lone message's p50
against n, the thesis model's prediction beside each, CPU and memory per node.

Rules: pure functions over abcast.evaluation.results; no I/O. One `ScalePoint` per
(ordering, n) of the Phase.SCALE runs. The smallest n of an ordering is the model's
anchor (`anchor`): its measured figures are the model's by construction, and every
other n is predicted from them.

- Saturation: the thesis model's cost of a TO-broadcast is s·(n−1) messages
  (abcast.evaluation.analysis.MODEL_FACTOR). All n processes here share the same few
  cores, so the model predicts the group's throughput to fall as the messages per
  broadcast rise: X(n) = X(n₀)·(n₀−1)/(n−1). Beside it the cost the model leaves out,
  one delivery per node per message (X(n₀)·n₀/n, the milder slope).
- Lone-message p50: s·(n−1)·T_msg + T_overhead, with T_msg the bench's tcp ping (half
  the median round trip) and T_overhead the anchor's p50 less s·(n₀−1)·T_msg.
- CPU: every node process's CPU time from `go` to its report, summed, per message; and
  that sum over the run's span (go → last delivery): the cores the group kept busy. Fewer
  cores busy than the machine has means it waited for them — here, for other work. The
  machine's cores over the CPU per message is the saturation the group would reach with
  every core to itself (`free_cores_saturation`), with its own model column anchored
  the same way: the figure to compare across benches on a shared machine.
- Memory: each node process's peak RSS (abcast.evaluation.rss: VmHWM), its mean and largest over the
  group, of the saturation run (the one that queues the most), and the mean of its peak
  as the workload began (the interpreter, the imports, the open group): the difference
  is what the run's traffic added.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean

from abcast.evaluation.analysis import (
    cores_busy,
    cpu_us_per_message,
    model_factor,
    network_time_us,
    ratio,
)
from abcast.evaluation.grid import Phase
from abcast.evaluation.results import BenchResult, RunMeasurement, is_clean


@dataclass(frozen=True, slots=True)
class ScalePoint:
    ordering: str
    nodes: int
    lone: RunMeasurement | None
    saturation_run: RunMeasurement | None
    model_saturation: float | None = None  # X(n₀)·(n₀−1)/(n−1)
    delivery_bound: float | None = None  # X(n₀)·n₀/n
    model_p50_us: float | None = None  # s·(n−1)·T_msg + T_overhead
    cpus: int | None = None  # the machine's cores
    model_free_cores: float | None = None  # free_cores_saturation(n₀)·(n₀−1)/(n−1)

    @property
    def saturation(self) -> float | None:
        run = self.saturation_run
        return run.figures.throughput if run is not None and run.complete else None

    @property
    def lone_p50_us(self) -> float | None:
        run = self.lone
        return run.figures.p50_us if run is not None and is_clean(run) else None

    @property
    def saturation_of_model(self) -> float | None:
        return ratio(self.saturation, self.model_saturation)

    @property
    def p50_of_model(self) -> float | None:
        return ratio(self.lone_p50_us, self.model_p50_us)

    @property
    def cpu_us_per_message(self) -> float | None:
        return cpu_us_per_message(self.saturation_run)

    @property
    def free_cores_saturation(self) -> float | None:
        """The machine's cores over the CPU per message: msg/s with every core free."""
        cpu = self.cpu_us_per_message
        return None if cpu is None or not self.cpus or cpu <= 0 else self.cpus / cpu * 1e6

    @property
    def free_cores_of_model(self) -> float | None:
        return ratio(self.free_cores_saturation, self.model_free_cores)

    @property
    def cores_busy(self) -> float | None:
        return cores_busy(self.saturation_run)

    @property
    def rss_mib(self) -> tuple[float, float] | None:
        """(mean, largest) peak RSS per node of the saturation run, MiB."""
        return _rss(self.saturation_run)

    @property
    def rss_at_go_mib(self) -> float | None:
        """Mean peak RSS per node of the saturation run as its workload began, MiB."""
        run = self.saturation_run
        if run is None or not run.rss_at_go_kib:
            return None
        return fmean(run.rss_at_go_kib) / 1024

    @property
    def status(self) -> str:
        runs = [r for r in (self.lone, self.saturation_run) if r is not None]
        bad = [r for r in runs if not is_clean(r)]
        if not bad:
            return "ok"
        return "; ".join(f"{'lone' if r.experiment.serial else 'saturation'} INCOMPLETE "
                         + "; ".join(r.errors)[:160] for r in bad)


def _rss(run: RunMeasurement | None) -> tuple[float, float] | None:
    if run is None or not run.rss_kib:
        return None
    return fmean(run.rss_kib) / 1024, max(run.rss_kib) / 1024


def scale_points(result: BenchResult) -> list[ScalePoint]:
    """One point per (ordering, n) of the scale runs, rising n per ordering, with the
    model predicted from each ordering's smallest n."""
    t_msg = result.t_msg_us().get("tcp")
    cpus = result.machine.cpus if result.machine is not None else None
    by_key: dict[tuple[str, int], dict[bool, RunMeasurement]] = {}
    for run in result.of(Phase.SCALE):
        e = run.experiment
        by_key.setdefault((e.ordering, e.nodes), {})[e.serial] = run
    points: list[ScalePoint] = []
    for ordering in dict.fromkeys(o for o, _ in by_key):
        sizes = sorted(n for o, n in by_key if o == ordering)
        raw = [ScalePoint(ordering, n, by_key[ordering, n].get(True),
                          by_key[ordering, n].get(False), cpus=cpus) for n in sizes]
        points += predict(raw, t_msg)
    return points


def predict(points: list[ScalePoint], t_msg_us: float | None) -> list[ScalePoint]:
    """`points` (one ordering, rising n) with the model's figures, anchored at the first."""
    if not points:
        return []
    anchor = points[0]
    n0, factor = anchor.nodes, model_factor(anchor.ordering)
    x0, p0, free0 = anchor.saturation, anchor.lone_p50_us, anchor.free_cores_saturation
    network0 = network_time_us(anchor.ordering, n0, t_msg_us)
    overhead = None if p0 is None or network0 is None else p0 - network0
    predicted = []
    for p in points:
        network = network_time_us(p.ordering, p.nodes, t_msg_us)
        predicted.append(ScalePoint(
            p.ordering, p.nodes, p.lone, p.saturation_run,
            model_saturation=None if x0 is None or factor is None
            else x0 * (n0 - 1) / (p.nodes - 1),
            delivery_bound=None if x0 is None else x0 * n0 / p.nodes,
            model_p50_us=None if network is None or overhead is None else network + overhead,
            cpus=p.cpus,
            model_free_cores=None if free0 is None or factor is None
            else free0 * (n0 - 1) / (p.nodes - 1)))
    return predicted
