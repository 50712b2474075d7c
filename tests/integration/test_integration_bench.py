"""`abcast bench` on real processes over loopback, tiny: one table cell, the baseline, the
lone message on each installed event loop and a two-point load curve over tcp, with the
verification run at its knee — the path the quick and full benches take, at a size that
runs in seconds; and the full bench's scale section, as small."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from abcast.evaluation.analysis import load_curves, paired_lone, paired_saturation
from abcast.evaluation.cluster import installed_event_loops
from abcast.evaluation.grid import GridSpec, Phase, build_grid, scale_only
from abcast.evaluation.report import write_report
from abcast.evaluation.results import is_clean
from abcast.evaluation.runner import BenchRunner, SilentProgress
from abcast.evaluation.scale import scale_points

TCP_TINY = GridSpec(
    orderings=("sequencer",), middlewares=("tcp",), table_nodes=(2,), table_messages=30,
    sizes=(), size_orderings=(), compare_nodes=2, baseline_messages=40, lone_messages=40,
    load_orderings=("sequencer",), load_nodes=(2,), load_rates=(100.0, 200.0),
    load_seconds=0.3, load_min_messages=30, load_max_messages=60, peers=(),
    ping_rounds=20, timeout_s=30.0, paired_rounds=2,
)


def test_tiny_tcp_bench_runs_every_cell_clean(tmp_path: Path) -> None:
    grid = build_grid(TCP_TINY)
    result = asyncio.run(BenchRunner(grid, tmp_path, SilentProgress()).run())
    assert [r for r in result.runs if not is_clean(r)] == []
    assert {r.experiment.phase for r in result.runs} == {
        Phase.TABLE, Phase.BASELINE, Phase.LONE, Phase.FLOOR, Phase.PAIRED, Phase.LOAD,
        Phase.VERIFY}
    lone = result.of(Phase.LONE)
    assert [(r.experiment.relay, r.experiment.busy_poll_us, r.experiment.event_loop)
            for r in lone] == [(relay, poll, loop) for relay in (False, True)
                               for poll in TCP_TINY.lone_busy_poll_us
                               for loop in installed_event_loops()]
    assert all(r.figures.p50_us is not None for r in lone)
    (curve,) = load_curves(result.runs)
    assert all(p.delivered is not None for p in curve.points)
    assert result.pings  # one per ping size, over tcp only
    assert all(p.transport == "tcp" and p.error is None for p in result.pings)
    page = write_report(result, tmp_path / "report").read_text()
    assert "Table 4 — sequencer" in page and "| tcp |" in page
    assert "## A lone message" in page
    paired = paired_lone(result)  # two rounds, both clean, each with its ratio
    assert paired is not None and len(paired.rounds) == 2 and len(paired.p50_ratios) == 2
    assert "### Paired with the floor" in page
    saturation = paired_saturation(result)  # and as many of the saturation run
    assert saturation is not None and len(saturation.throughput_ratios) == 2
    assert saturation.cpu_median is not None
    assert "### Saturation paired with the floor" in page


SCALE_TINY = replace(
    scale_only(GridSpec()), ping_rounds=20,
    scale_orderings=("chandra-toueg",), scale_nodes=(2, 3), scale_rate=20_000.0,
    scale_messages=300, scale_lone_messages=30, scale_timeout_s=60.0,
    sim_orderings=("fifo", "chandra-toueg"), sim_nodes=4, sim_messages=8, sim_jobs=2,
)


def test_tiny_scale_section_measures_real_groups_and_simulations(tmp_path: Path) -> None:
    """The full bench's scale section at n = 2 and 3 (the real sizes are the bench's):
    real processes with their saturation, lone p50, CPU and RSS per node, the model
    beside them, the simulations clean, the machine sampled, all in the report."""
    grid = build_grid(SCALE_TINY)
    assert {e.phase for e in grid.experiments} == {Phase.SCALE}
    result = asyncio.run(BenchRunner(grid, tmp_path, SilentProgress()).run())
    assert [r for r in result.runs if not is_clean(r)] == []
    assert [r.experiment for r in result.runs] == list(grid.experiments)
    for run in result.runs:
        assert len(run.rss_kib) == run.experiment.nodes and min(run.rss_kib) > 0
        assert all(0 < go <= peak for go, peak in zip(run.rss_at_go_kib, run.rss_kib,
                                                      strict=True))
        assert run.cpu_s is not None and run.cpu_s > 0
    points = scale_points(result)
    assert [p.nodes for p in points] == [2, 3]
    for p in points:
        assert p.saturation and p.lone_p50_us and p.rss_mib and p.cores_busy
        assert p.model_saturation and p.model_p50_us
    assert points[0].saturation_of_model == pytest.approx(1.0)  # the anchor
    assert [(s.ordering, s.nodes, s.clean) for s in result.sims] == [
        ("fifo", 4, True), ("chandra-toueg", 4, True)]
    assert all(s.peak_rss_kib > 0 and s.wall_s > 0 for s in result.sims)
    assert result.machine is not None and result.machine.cpus >= 1
    page = write_report(result, tmp_path / "report").read_text()
    assert "## Scale" in page and "every ordering at n = 4" in page
    assert (tmp_path / "report" / "scale.png").is_file()
