"""The scale section's analysis and report, on planted figures: the model anchored at the
smallest n predicts every other n exactly when the runs follow it, a run that falls
over leaves its figures empty, and the report and its plot carry the section."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from abcast.evaluation.cli import bench, bench_failed
from abcast.evaluation.grid import Experiment, Phase
from abcast.evaluation.report import render_markdown, write_report
from abcast.evaluation.results import (
    BenchResult,
    Figures,
    Machine,
    PingMeasurement,
    RunMeasurement,
    load,
    save,
)
from abcast.evaluation.scale import scale_points
from abcast.evaluation.sim_scale import SimScaleRun

T_MSG = 40.0  # µs: a tcp ping of 80 µs round trip
OVERHEAD = 300.0
X3 = 120_000.0  # the sequencer's planted saturation at n = 3
SIZES = (3, 8, 16)
MESSAGES = 6000


def scale_runs(ordering: str, factor: int, *, fall_over_at: int | None = None
               ) -> list[RunMeasurement]:
    """Runs that follow the model exactly: X(n) = X3·2/(n−1), p50 = s·(n−1)·T_MSG + OVERHEAD,
    every node 50 MiB at its peak (the largest 60) and 45 at go, 2 CPU-seconds per run."""
    runs = []
    for n in SIZES:
        lone = Experiment(Phase.SCALE, ordering, "tcp", n, 64, 100, trace=False, serial=True)
        p50 = factor * (n - 1) * T_MSG + OVERHEAD
        runs.append(RunMeasurement(lone, f"lone-{n}", Figures(1000.0, p50, p50, 2 * p50),
                                   True, rss_kib=(40 * 1024,) * n, cpu_s=0.5))
        sat = Experiment(Phase.SCALE, ordering, "tcp", n, 64, MESSAGES, rate=1e6,
                         trace=False)
        complete = n != fall_over_at
        runs.append(RunMeasurement(sat, f"sat-{n}", Figures(X3 * 2 / (n - 1), 9e5, 8e5, 2e6),
                                   complete, rss_kib=(50 * 1024,) * (n - 1) + (60 * 1024,),
                                   rss_at_go_kib=(45 * 1024,) * n, cpu_s=2.0,
                                   errors=() if complete else ("timed out",)))
    return runs


def result_with(runs: list[RunMeasurement], sims: tuple[SimScaleRun, ...] = ()
                ) -> BenchResult:
    return BenchResult(False, tuple(runs), (), (PingMeasurement("tcp", 100, 2 * T_MSG,
                                                                2 * T_MSG),),
                       sims=sims, machine=Machine(2, 24.0, "3.11.2", "Linux",
                                                  (9.5, 8.0, 7.0), (10.5, 9.0, 7.5)))


def sim(ordering: str, delivered: int = 64 * 256) -> SimScaleRun:
    return SimScaleRun(ordering, 64, 256, 1, delivered, {}, 500_000, 6.0, 35.0, 30.0,
                       80 * 1024)


def test_runs_that_follow_the_model_are_predicted_exactly_from_the_smallest_n() -> None:
    points = scale_points(result_with(scale_runs("sequencer", 2)
                                      + scale_runs("chandra-toueg", 4)))
    assert [(p.ordering, p.nodes) for p in points] == [
        (o, n) for o in ("sequencer", "chandra-toueg") for n in SIZES]
    for p in points:
        assert p.saturation_of_model == pytest.approx(1.0)
        assert p.p50_of_model == pytest.approx(1.0)
        assert p.delivery_bound == pytest.approx(X3 * 3 / p.nodes)
        assert p.rss_mib == pytest.approx((50 + 10 / p.nodes, 60))
        assert p.rss_at_go_mib == pytest.approx(45)
        assert p.cpu_us_per_message == pytest.approx(2.0 / MESSAGES * 1e6)
        duration = MESSAGES / (X3 * 2 / (p.nodes - 1))
        assert p.cores_busy == pytest.approx(2.0 / duration)
        # 2 CPU-seconds for every run: on the machine's 2 free cores, MESSAGES per second
        assert p.free_cores_saturation == pytest.approx(MESSAGES)
        assert p.model_free_cores == pytest.approx(MESSAGES * 2 / (p.nodes - 1))
        assert p.status == "ok"


def test_a_saturation_run_that_fell_over_has_no_figures_and_says_why() -> None:
    points = scale_points(result_with(scale_runs("sequencer", 2, fall_over_at=16)))
    last = points[-1]
    assert last.saturation is None and last.saturation_of_model is None
    assert last.cpu_us_per_message is None and last.cores_busy is None
    assert last.free_cores_saturation is None
    assert last.model_saturation == pytest.approx(X3 * 2 / 15)  # the prediction stands
    assert last.p50_of_model == pytest.approx(1.0)
    assert "saturation INCOMPLETE timed out" in last.status
    # an anchor that fell over leaves the whole model column empty
    anchorless = scale_points(result_with(scale_runs("sequencer", 2, fall_over_at=3)))
    assert all(p.model_saturation is None for p in anchorless)


def test_without_a_tcp_ping_the_latency_model_is_empty_not_wrong() -> None:
    result = result_with(scale_runs("sequencer", 2))
    no_ping = BenchResult(False, result.runs, (), ())
    assert all(p.model_p50_us is None and p.model_saturation is not None
               for p in scale_points(no_ping))


def test_the_report_has_the_scale_section_with_machine_model_and_sims(tmp_path: Path
                                                                       ) -> None:
    result = result_with(scale_runs("sequencer", 2),
                         (sim("fifo"), sim("skeen", delivered=100)))
    page = render_markdown(result)
    section = page[page.index("## Scale"):]
    assert "2 CPUs, 24 GiB" in section and "9.5 / 8.0 / 7.0" in section
    assert "| sequencer | 16 | 16,000 | 16,000 | 1.00× |" in section
    assert "| 53 / 60 | 45 |" in section  # RSS per node at n = 3: (50+50+60)/3, largest 60
    assert "every ordering at n = 64" in section
    assert "| fifo | 64 | 16,384 / 16,384 |" in section and "| skeen | 64 | 100 / " in section
    assert "NO" in section.split("| skeen |")[1].split("\n")[0]
    written = write_report(result, tmp_path)
    assert "scale.png" in written.read_text() and (tmp_path / "scale.png").is_file()


def test_scale_figures_round_trip_and_an_unclean_simulation_fails_the_bench(
        tmp_path: Path) -> None:
    result = result_with(scale_runs("sequencer", 2), (sim("fifo"),))
    save(result, tmp_path / "bench.json")
    assert load(tmp_path / "bench.json") == result
    assert not bench_failed(result)
    assert bench_failed(result_with(scale_runs("sequencer", 2), (sim("fifo", 5),)))
    # a saturation run falling over is a finding, not a failure; a lone run is a failure
    assert not bench_failed(result_with(scale_runs("sequencer", 2, fall_over_at=16)))


def test_scale_only_is_the_full_benchs_section_and_refuses_quick() -> None:
    outcome = CliRunner().invoke(bench, ["--quick", "--scale-only"])
    assert outcome.exit_code == 2 and "--quick has none" in outcome.output
