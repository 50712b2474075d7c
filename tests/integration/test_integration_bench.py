"""`abcast bench` on real processes over loopback, tiny: one table cell, the baseline, the
lone message on each installed event loop and a two-point load curve over tcp, with the
verification run at its knee — the path the quick and full benches take, at a size that
runs in seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path

from abcast.evaluation.analysis import load_curves
from abcast.evaluation.cluster import installed_event_loops
from abcast.evaluation.grid import GridSpec, Phase, build_grid
from abcast.evaluation.report import write_report
from abcast.evaluation.results import is_clean
from abcast.evaluation.runner import BenchRunner, SilentProgress

TCP_TINY = GridSpec(
    orderings=("sequencer",), middlewares=("tcp",), table_nodes=(2,), table_messages=30,
    sizes=(), size_orderings=(), compare_nodes=2, baseline_messages=40, lone_messages=40,
    load_orderings=("sequencer",), load_nodes=(2,), load_rates=(100.0, 200.0),
    load_seconds=0.3, load_min_messages=30, load_max_messages=60, peers=(),
    ping_rounds=20, timeout_s=30.0,
)


def test_tiny_tcp_bench_runs_every_cell_clean(tmp_path: Path) -> None:
    grid = build_grid(TCP_TINY)
    result = asyncio.run(BenchRunner(grid, tmp_path, SilentProgress()).run())
    assert [r for r in result.runs if not is_clean(r)] == []
    assert {r.experiment.phase for r in result.runs} == {
        Phase.TABLE, Phase.BASELINE, Phase.LONE, Phase.FLOOR, Phase.LOAD, Phase.VERIFY}
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
