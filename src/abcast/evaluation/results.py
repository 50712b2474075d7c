"""What a bench run measured: one record per cluster run, peer run and ping, and the whole.

Rules: plain frozen records with the measured figures in fixed units (latency in µs,
throughput in delivered messages per second — each broadcast counted once, however many
nodes deliver it), plus their JSON form (`bench.json` beside the report, so a report can
be re-rendered without re-running). Nothing here runs or analyses anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from abcast.evaluation.grid import TABLE_PAYLOAD, Experiment, PeerExperiment, Phase
from abcast.evaluation.sim_scale import SimScaleRun


@dataclass(frozen=True, slots=True)
class Figures:
    """Throughput and latency of one run; None where nothing was measured."""

    throughput: float | None = None  # messages/s, go → last delivery
    mean_us: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None


@dataclass(frozen=True, slots=True)
class RunMeasurement:
    experiment: Experiment
    run_id: str
    figures: Figures
    complete: bool
    packets_per_broadcast: float | None = None
    retransmissions: int = 0
    violations: dict[str, int] = field(default_factory=dict)  # the launcher's own check
    spark_violations: dict[str, int] | None = None  # None: not (yet) checked by Spark
    errors: tuple[str, ...] = ()
    rss_kib: tuple[int, ...] = ()  # each node process's peak RSS, in node order
    rss_at_go_kib: tuple[int, ...] = ()  # ...and its peak as the workload began
    cpu_s: float | None = None  # CPU time of all node processes together, go → report

    @property
    def checked_clean(self) -> bool | None:
        """Spark's verdict on a traced run (None when untraced or not checked)."""
        if self.spark_violations is None:
            return None
        return not any(self.spark_violations.values())


@dataclass(frozen=True, slots=True)
class PeerMeasurement:
    experiment: PeerExperiment
    figures: Figures
    complete: bool
    skipped: str | None = None  # why it did not run (e.g. redis-server is missing)
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PingMeasurement:
    """Round trips of one frame between two processes over one middleware."""

    transport: str
    rounds: int
    rtt_p50_us: float | None
    rtt_mean_us: float | None
    error: str | None = None
    size: int = TABLE_PAYLOAD  # frame bytes

    @property
    def t_msg_us(self) -> float | None:
        """One message's one-way time: half the median round trip."""
        return None if self.rtt_p50_us is None else self.rtt_p50_us / 2


@dataclass(frozen=True, slots=True)
class Machine:
    """What the scale section ran on, and how busy the machine was meanwhile."""

    cpus: int
    memory_gib: float
    python: str
    platform: str
    #: the 1-, 5- and 15-minute load averages as the section began and as it ended
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True, slots=True)
class BenchResult:
    quick: bool
    runs: tuple[RunMeasurement, ...]
    peers: tuple[PeerMeasurement, ...]
    pings: tuple[PingMeasurement, ...]
    wall_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)  # wall time of each section
    spark_s: float | None = None
    spark_error: str | None = None
    notes: tuple[str, ...] = ()
    sims: tuple[SimScaleRun, ...] = ()  # the scale section's simulated runs
    machine: Machine | None = None  # sampled around the scale section

    def of(self, phase: Phase) -> tuple[RunMeasurement, ...]:
        return tuple(r for r in self.runs if r.experiment.phase is phase)

    def t_msg_us(self) -> dict[str, float]:
        """The model's unit cost per middleware: from the pings at the tables' payload."""
        return {p.transport: t for p in self.pings
                if p.size == TABLE_PAYLOAD and (t := p.t_msg_us) is not None}


def save(result: BenchResult, path: Path) -> None:
    """bench.json: every record as it was measured."""
    path.write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1))


def load(path: Path) -> BenchResult:
    return msgspec.json.decode(path.read_bytes(), type=BenchResult)


def is_clean(run: RunMeasurement) -> bool:
    """The run delivered everything and no check found anything."""
    return run.complete and not any(run.violations.values()) and run.checked_clean is not False


def clean_runs(runs: Sequence[RunMeasurement]) -> list[RunMeasurement]:
    return [r for r in runs if is_clean(r)]
