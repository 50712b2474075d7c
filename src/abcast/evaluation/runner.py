"""Running the grid: pings, cluster runs, the verification runs at the knee, the scale
section's real-process runs and simulations, the peers, and then one Spark check of every
trace the bench wrote.

Rules: runs go one at a time (the machine has 2 cores; two runs at once would measure
each other; the scale section's simulations go `sim_jobs` at a time, in processes of
their own, after every real-process run), all against one in-process registry (a group
name per run). A load curve stops early once it is clearly past its knee
(`SATURATED_AFTER`); the PAIRED saturation runs, past it by design, all run. The
machine (cores, memory, load) is sampled as the scale section begins and ends, for its
report. Cluster runs go through abcast.evaluation.launcher.run_cluster on real
processes over loopback; traced runs write into `<out>/traces`, the one trace
directory Spark checks at the end with abcast.pipeline's `run_check` in one session. A
failed run is a measurement with its errors, never an exception that ends the bench.
Progress is reported through a `Progress` callback (the CLI draws rich bars from it);
this module prints nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from statistics import fmean
from typing import Final, Protocol

from abcast.checks import count_by_code
from abcast.evaluation.analysis import LoadPoint, load_curves
from abcast.evaluation.cluster import ClusterResult
from abcast.evaluation.grid import TABLE_PAYLOAD, Experiment, Grid, Phase, verification_run
from abcast.evaluation.launcher import run_cluster
from abcast.evaluation.peers import find_redis_server, run_peer
from abcast.evaluation.ping import ping
from abcast.evaluation.results import (
    BenchResult,
    Figures,
    Machine,
    PeerMeasurement,
    PingMeasurement,
    RunMeasurement,
)
from abcast.evaluation.sim_scale import SimScaleRun, run_sims
from abcast.registry.server import RegistryServer

log: Final = logging.getLogger(__name__)
TRACES_DIR: Final = "traces"
#: a load curve stops after this many rates in a row delivered below the offered rate
#: (or after one incomplete run): past the knee, higher rates only lengthen the queue
SATURATED_AFTER: Final = 2


class Progress(Protocol):
    def begin(self, section: str, total: int) -> None: ...
    def step(self, label: str) -> None: ...
    def advance(self) -> None: ...


class SilentProgress:
    def begin(self, section: str, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass

    def advance(self) -> None:
        pass


def measurement_of(exp: Experiment, result: ClusterResult) -> RunMeasurement:
    summary = result.summary()
    lat = result.latencies_ns
    throughput = summary["throughput_msgs_per_s"]
    p50, p99 = summary["latency_p50_us"], summary["latency_p99_us"]
    packets = summary["packets_per_broadcast"]
    return RunMeasurement(
        experiment=exp, run_id=result.run_id,
        figures=Figures(
            throughput=float(throughput) if isinstance(throughput, (int, float)) else None,
            mean_us=fmean(lat) / 1e3 if lat else None,
            p50_us=float(p50) if isinstance(p50, (int, float)) else None,
            p99_us=float(p99) if isinstance(p99, (int, float)) else None),
        complete=result.complete,
        packets_per_broadcast=float(packets) if isinstance(packets, (int, float)) else None,
        retransmissions=sum(o.retransmissions for o in result.outcomes),
        violations=count_by_code(result.violations),
        errors=tuple(result.errors),
        rss_kib=tuple(o.peak_rss_kib for o in result.outcomes),
        rss_at_go_kib=tuple(o.rss_at_go_kib for o in result.outcomes),
        cpu_s=sum(o.cpu_ns for o in result.outcomes) / 1e9 if result.outcomes else None)


async def run_experiment(exp: Experiment, traces: Path, timeout_s: float, *,
                         registry: str | None = None, group: str = "g") -> RunMeasurement:
    try:
        result = await run_cluster(exp.cluster_config(traces, timeout_s, registry=registry,
                                                      group=group))
    except Exception as exc:  # one broken cell is a gap in the table, not the end
        log.exception("run %s failed", exp.label())
        return RunMeasurement(exp, "", Figures(), False,
                              errors=(f"{type(exc).__name__}: {exc}",))
    return measurement_of(exp, result)


@dataclass(slots=True)
class BenchRunner:
    grid: Grid
    out: Path
    progress: Progress
    registry_url: str | None = None
    runs_made: int = 0
    phase_s: dict[str, float] = field(default_factory=dict)

    @property
    def traces(self) -> Path:
        return self.out / TRACES_DIR

    async def run(self) -> BenchResult:
        started = time.monotonic()
        self.traces.mkdir(parents=True, exist_ok=True)
        pings = await self._pings()
        # One registry for every run (a group name each) saves a process start per run.
        registry = RegistryServer()
        self.registry_url = await registry.start()
        try:
            runs: list[RunMeasurement] = []
            for phase in (Phase.TABLE, Phase.SIZES, Phase.BASELINE, Phase.LONE, Phase.FLOOR,
                          Phase.PAIRED, Phase.LOAD):
                runs += await self._phase(phase.value, list(self.grid.of(phase)))
            runs += await self._phase("verify", self._verification_runs(runs))
            scale = list(self.grid.of(Phase.SCALE))
            machine = sample_machine() if scale or self.grid.spec.sim_orderings else None
            runs += await self._phase("scale", scale)
        finally:
            await registry.close()
        sims = await self._sims()
        if machine is not None:
            machine = replace(machine, load_after=os.getloadavg())
        peers = await self._peers()
        return BenchResult(quick=False, runs=tuple(runs), peers=tuple(peers),
                           pings=tuple(pings), wall_s=time.monotonic() - started,
                           phase_s=dict(self.phase_s), sims=tuple(sims), machine=machine)

    async def _pings(self) -> list[PingMeasurement]:
        middlewares = self.grid.spec.middlewares
        self.progress.begin("ping (T_msg)", len(middlewares))
        pings = []
        started = time.monotonic()
        sizes = dict.fromkeys((TABLE_PAYLOAD, *self.grid.spec.ping_sizes))
        for scheme in middlewares:
            self.progress.step(f"ping {scheme}")
            for size in sizes:
                pings.append(await ping(scheme, self.grid.spec.ping_rounds, size))
            self.progress.advance()
        self.phase_s["ping"] = time.monotonic() - started
        return pings

    async def _phase(self, name: str, experiments: list[Experiment]) -> list[RunMeasurement]:
        if not experiments:
            return []
        self.progress.begin(name, len(experiments))
        started = time.monotonic()
        done: list[RunMeasurement] = []
        past_knee: dict[tuple[str, str, int], int] = {}  # load curve → runs fallen behind
        for exp in experiments:
            curve = (exp.ordering, exp.transport, exp.nodes)
            if exp.curve_point and past_knee.get(curve, 0) >= SATURATED_AFTER:
                self.progress.advance()  # saturated: higher rates only queue up more
                continue
            self.progress.step(exp.label())
            self.runs_made += 1
            run = await run_experiment(exp, self.traces, self.grid.spec.timeout_of(exp),
                                       registry=self.registry_url,
                                       group=f"bench-{self.runs_made}")
            done.append(run)
            if exp.curve_point and exp.rate is not None:
                tracking = LoadPoint(exp.rate, run.figures.throughput if run.complete
                                     else None).tracking
                past_knee[curve] = (0 if tracking else past_knee.get(curve, 0) + 1
                                    ) if run.complete else SATURATED_AFTER
            self.progress.advance()
        self.phase_s[name] = time.monotonic() - started
        return done

    def _verification_runs(self, runs: list[RunMeasurement]) -> list[Experiment]:
        """Per load curve, the untraced run at its knee (the lowest rate when it has
        none) again with tracing on."""
        by_point = {(r.experiment.ordering, r.experiment.transport, r.experiment.nodes,
                     r.experiment.rate): r
                    for r in runs if r.experiment.phase is Phase.LOAD}
        chosen = []
        for curve in load_curves(runs):
            rate = curve.knee.offered if curve.knee.offered is not None else (
                curve.points[0].offered)
            load_run = by_point.get((curve.ordering, curve.transport, curve.nodes, rate))
            if load_run is not None:
                chosen.append(verification_run(load_run.experiment, self.grid.spec))
        return chosen

    async def _sims(self) -> list[SimScaleRun]:
        """The scale section's simulated runs, each in a process of its own."""
        tasks = self.grid.spec.sim_tasks()
        if not tasks:
            return []
        self.progress.begin(f"simulated scale (n = {self.grid.spec.sim_nodes})", len(tasks))
        self.progress.step(f"{len(tasks)} orderings simulated at n = "
                           f"{self.grid.spec.sim_nodes}")
        started = time.monotonic()
        loop = asyncio.get_running_loop()

        def advance(_run: SimScaleRun) -> None:
            loop.call_soon_threadsafe(self.progress.advance)

        sims = await asyncio.to_thread(run_sims, tasks, self.grid.spec.sim_jobs, advance)
        self.phase_s["simulated scale"] = time.monotonic() - started
        return sims

    async def _peers(self) -> list[PeerMeasurement]:
        if not self.grid.peers:
            return []
        self.progress.begin("peers", len(self.grid.peers))
        redis_binary = find_redis_server()
        started = time.monotonic()
        done = []
        for exp in self.grid.peers:
            self.progress.step(exp.label())
            done.append(await run_peer(exp, self.grid.spec.timeout_s, redis_binary))
            self.progress.advance()
        self.phase_s["peers"] = time.monotonic() - started
        return done


def sample_machine() -> Machine:
    """The machine as the scale section begins: cores, memory, interpreter, load."""
    pages, page_size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return Machine(cpus=os.cpu_count() or 1, memory_gib=pages * page_size / 2**30,
                   python=platform.python_version(), platform=platform.platform(terse=True),
                   load_before=os.getloadavg())


def spark_check(result: BenchResult, traces: Path, master: str | None = None,
                on_start: Callable[[], None] | None = None) -> BenchResult:
    """Check every traced run with the Spark pipeline (one session) and attach each run's
    violation counts; a Spark failure is reported in `spark_error`, runs stay unchecked.
    A session already running (tests share one) is used and left running."""
    traced = [r for r in result.runs if r.experiment.trace and r.run_id]
    if not traced:
        return result
    started = time.monotonic()
    try:
        from abcast.pipeline.commands import run_check
        from abcast.pipeline.io import preflight
        from abcast.pipeline.session import build_session

        if on_start is not None:
            on_start()
        from pyspark import SparkContext

        rows = preflight(str(traces))
        owned = SparkContext._active_spark_context is None  # a running session stays up
        spark = build_session(master, app_name="abcast-bench")
        try:
            outcome = run_check(spark, str(traces), rows)
        finally:
            if owned:
                spark.stop()
    except Exception as exc:
        log.exception("the Spark check failed")
        return replace(result, spark_error=f"{type(exc).__name__}: {exc}",
                       spark_s=time.monotonic() - started)
    checked = {claim.run_id for claim in outcome.runs}
    runs = tuple(
        replace(r, spark_violations=dict(outcome.verdict.of_run(r.run_id)))
        if r.experiment.trace and r.run_id in checked else r
        for r in result.runs)
    return replace(result, runs=runs, spark_s=time.monotonic() - started)
