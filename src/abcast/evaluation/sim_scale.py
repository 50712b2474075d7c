"""Simulated runs at scale: every ordering in the deterministic simulator at 64 nodes (or
any n), one seeded run each, with the time and memory it took. The full `abcast bench`
runs them in its scale section; `bench/sim_scale.py` runs them alone.

Rules: one run per ordering, closed round-robin workload, no faults, the registry's
stack (`run_simulation`); each run in a fresh worker process of its own (spawned, not
forked: it carries nothing of the parent's), `jobs` at a time. A run counts as clean
when no check found anything for the guarantees its ordering claims and every node
delivered every message. Each record has the deliveries, the simulated events, the
virtual time, and the worker's wall time, CPU time (user + system: what the run cost,
whatever else the machine did meanwhile) and peak RSS (abcast.evaluation.rss). A
measurement, not a test: nothing is compared against a time limit. At 64 nodes the
crash-tolerant orderings' failure detectors dominate: 64 × 63 heartbeats per period for
as long as the run lasts.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Final

from abcast.evaluation.rss import peak_rss_kib

SIM_NODES: Final = 64
SIM_MESSAGES: Final = 256


@dataclass(frozen=True, slots=True)
class SimTask:
    ordering: str
    nodes: int = SIM_NODES
    messages: int = SIM_MESSAGES  # broadcasts, round robin over the nodes
    seed: int = 1


@dataclass(frozen=True, slots=True)
class SimScaleRun:
    """One simulated run and what it cost the process that ran it."""

    ordering: str
    nodes: int
    messages: int
    seed: int
    delivered: int  # deliveries over all nodes
    violations: dict[str, int]  # by code, for the ordering's claims
    events: int  # simulated events processed
    virtual_s: float
    wall_s: float
    cpu_s: float
    peak_rss_kib: int
    error: str | None = None  # the run raised instead of ending

    @property
    def expected(self) -> int:
        return self.messages * self.nodes

    @property
    def clean(self) -> bool:
        return (self.error is None and not any(self.violations.values())
                and self.delivered == self.expected)


def simulate(task: SimTask) -> SimScaleRun:
    """Run one simulation here and measure it (in a worker process of `run_sims`)."""
    from abcast.sim import SimConfig, run_simulation  # the worker's import, not the grid's

    cpu_started = time.process_time()
    started = time.perf_counter()
    error: str | None = None
    try:
        result = run_simulation(SimConfig(task.ordering, nodes=task.nodes,
                                          messages=task.messages, seed=task.seed))
    except Exception as exc:  # a run that raises is a finding in the table
        error = f"{type(exc).__name__}: {exc}"
    wall = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    peak_kib = peak_rss_kib()
    if error is not None:
        return SimScaleRun(task.ordering, task.nodes, task.messages, task.seed, 0, {}, 0,
                           0.0, wall, cpu, peak_kib, error)
    return SimScaleRun(task.ordering, task.nodes, task.messages, task.seed,
                       result.delivered, result.counts, result.events, result.end_us / 1e6,
                       wall, cpu, peak_kib)


def run_sims(tasks: Sequence[SimTask], jobs: int = 1,
             on_done: Callable[[SimScaleRun], None] | None = None) -> list[SimScaleRun]:
    """Every task in a fresh spawned process, `jobs` at a time; the records in the
    tasks' order. `on_done` sees each as it finishes."""
    done: dict[SimTask, SimScaleRun] = {}
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=spawn,
                             max_tasks_per_child=1) as pool:
        futures = {pool.submit(simulate, task): task for task in tasks}
        for future in as_completed(futures):
            task = futures[future]
            try:
                run = future.result()
            except Exception as exc:  # the worker process itself died
                run = SimScaleRun(task.ordering, task.nodes, task.messages, task.seed, 0,
                                  {}, 0, 0.0, 0.0, 0.0, 0, f"{type(exc).__name__}: {exc}")
            done[task] = run
            if on_done is not None:
                on_done(run)
    return [done[task] for task in tasks]


def sim_table(runs: Sequence[SimScaleRun]) -> list[list[str]]:
    """The rows of the table `bench/sim_scale.py` prints and the report shows."""
    return [[r.ordering, str(r.nodes), f"{r.delivered:,} / {r.expected:,}",
             str(sum(r.violations.values())), f"{r.events:,}", f"{r.virtual_s:.1f}",
             f"{r.wall_s:.1f}", f"{r.cpu_s:.1f}", f"{r.peak_rss_kib / 1024:.0f}",
             "yes" if r.clean else f"NO{': ' + r.error if r.error else ''}"] for r in runs]


SIM_HEADER: Final = ("ordering", "n", "delivered", "violations", "events", "virtual s",
                     "wall s", "CPU s", "peak RSS MB", "clean")
