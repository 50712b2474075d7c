"""The experiment grid: the thesis's table cells, the sweeps, the verification twin."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from abcast.errors import ConfigError
from abcast.evaluation import runner
from abcast.evaluation.cluster import installed_event_loops
from abcast.evaluation.grid import (
    MIDDLEWARES,
    ORDERINGS,
    TABLE_NODES,
    TABLE_PAYLOAD,
    Experiment,
    GridSpec,
    Phase,
    build_grid,
    full_spec,
    quick_spec,
    scale_only,
    verification_run,
)
from abcast.evaluation.results import Figures, RunMeasurement
from abcast.evaluation.runner import BenchRunner, SilentProgress
from abcast.ordering.registry import ORDERINGS as ORDERINGS_REGISTERED


def test_full_table_is_every_ordering_by_middleware_by_n_closed_and_traced() -> None:
    grid = build_grid(full_spec())
    table = grid.of(Phase.TABLE)
    cells = {(e.ordering, e.transport, e.nodes) for e in table}
    assert cells == {(o, m, n) for o in ORDERINGS for m in MIDDLEWARES for n in TABLE_NODES}
    assert len(table) == len(cells)
    assert all(e.payload == TABLE_PAYLOAD and e.closed_loop and e.trace for e in table)


def test_size_sweep_spans_10_bytes_to_64_kib() -> None:
    sizes = {e.payload for e in build_grid(full_spec()).of(Phase.SIZES)}
    assert min(sizes) == 10 and max(sizes) == 64 * 1024


def test_the_full_sweeps_cover_every_middleware_the_quick_one_tcp() -> None:
    full, quick = build_grid(full_spec()), build_grid(quick_spec())
    assert {e.transport for e in full.of(Phase.SIZES)} == set(MIDDLEWARES)
    load = full.of(Phase.LOAD)
    assert {e.transport for e in load} == set(MIDDLEWARES)
    spec = full_spec()
    assert {e.nodes for e in load if e.transport == spec.sweep_transport} == set(
        spec.load_nodes)
    assert {e.nodes for e in load if e.transport != spec.sweep_transport} == {
        spec.compare_nodes}
    assert {e.transport for e in (*quick.of(Phase.SIZES), *quick.of(Phase.LOAD))} == {"tcp"}


@pytest.mark.parametrize("spec", [quick_spec(), full_spec()], ids=["quick", "full"])
def test_load_runs_are_open_loop_untraced_and_rise_per_curve(spec: GridSpec) -> None:
    grid = build_grid(spec)
    load = grid.of(Phase.LOAD)
    assert load and all(not e.trace and e.rate is not None for e in load)
    curves: dict[tuple[str, str, int], list[float]] = {}
    for e in load:
        assert e.rate is not None
        curves.setdefault((e.ordering, e.transport, e.nodes), []).append(e.rate)
    for rates in curves.values():
        assert rates == sorted(rates) and len(set(rates)) == len(rates) >= 3
    # the peers are compared at the baseline's n and payload
    base = grid.of(Phase.BASELINE)
    assert {(p.nodes, p.payload) for p in grid.peers} == {(b.nodes, b.payload) for b in base}


def test_the_lone_message_runs_one_in_flight_on_every_installed_loop() -> None:
    for spec in (quick_spec(), full_spec()):
        lone = build_grid(spec).of(Phase.LONE)
        assert {(e.ordering, e.event_loop, e.relay, e.busy_poll_us) for e in lone} == {
            (o, loop, relay, poll) for o in spec.load_orderings
            for loop in installed_event_loops()
            for relay in ((False, True) if o == "sequencer" else (False,))
            for poll in spec.lone_busy_poll_us}
        assert 0 in spec.lone_busy_poll_us and any(spec.lone_busy_poll_us)
        assert all(e.serial and not e.trace and e.rate is None for e in lone)
        assert {(e.nodes, e.payload, e.transport) for e in lone} == {
            (spec.compare_nodes, spec.compare_payload, spec.sweep_transport)}
        for e in lone:
            config = e.cluster_config(Path("out"), 10.0)
            assert config.serial and config.event_loop == e.event_loop
            assert config.options.relay == e.relay
            assert ("busy_poll_us" in config.bind_url()) == bool(e.busy_poll_us)
            config.validate()
    mem = build_grid(replace(quick_spec(), sweep_transport="mem", lone_relay=False))
    # in-process: the launcher's own loop, no sockets to poll
    assert [(e.event_loop, e.busy_poll_us) for e in mem.of(Phase.LONE)
            if e.ordering == "sequencer"] == [(None, 0)]
    with pytest.raises(ConfigError, match="event loops"):
        build_grid(replace(quick_spec(), lone_loops=("trio",)))
    with pytest.raises(ConfigError, match="busy-poll"):
        build_grid(replace(quick_spec(), lone_busy_poll_us=(-1,)))


def test_quick_grid_is_a_reduction_of_the_full_one() -> None:
    quick, full = build_grid(quick_spec()), build_grid(full_spec())
    assert len(quick.experiments) < len(full.experiments)
    assert {e.ordering for e in quick.of(Phase.TABLE)} == set(ORDERINGS)
    assert {e.transport for e in quick.of(Phase.TABLE)} == set(MIDDLEWARES)
    assert any(p.rate is None for p in quick.peers) and any(p.rate for p in quick.peers)


def test_open_loop_message_count_follows_rate_within_bounds() -> None:
    spec = replace(full_spec(), load_seconds=2.0, load_min_messages=500,
                   load_max_messages=10_000)
    assert spec.load_messages(100) == 500
    assert spec.load_messages(1000) == 2000
    assert spec.load_messages(1e6) == 10_000


def test_verification_run_is_the_traced_twin_of_a_load_run() -> None:
    spec = quick_spec()
    load = build_grid(spec).of(Phase.LOAD)[0]
    twin = verification_run(load, spec)
    assert twin.phase is Phase.VERIFY and twin.trace
    assert (twin.rate, twin.messages, twin.nodes, twin.payload) == (
        load.rate, load.messages, load.nodes, load.payload)
    with pytest.raises(ConfigError):
        verification_run(build_grid(spec).of(Phase.TABLE)[0], spec)


@pytest.mark.parametrize("change", [
    {"orderings": ("no-such-ordering",)},
    {"peers": ("zookeeper",)},
    {"table_nodes": (1, 2)},
    {"load_rates": (4000.0, 2000.0)},
    {"load_rates": (0.0, 10.0)},
    {"load_timeout_s": 0.0},
])
def test_bad_specs_are_refused(change: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        build_grid(replace(full_spec(), **change))  # type: ignore[arg-type]


@pytest.mark.parametrize("spec", [quick_spec(), full_spec()], ids=["quick", "full"])
def test_the_floor_runs_beside_the_lone_message_and_every_tcp_load_curve(
    spec: GridSpec,
) -> None:
    grid = build_grid(spec)
    floor = grid.of(Phase.FLOOR)
    assert all(e.floor and e.variant == "floor" and e.transport == "tcp" and not e.trace
               for e in floor)
    lone_loops = {e.event_loop for e in grid.of(Phase.LONE)}
    assert {e.event_loop for e in floor if e.serial} == lone_loops
    for n in spec.load_nodes:
        rates = [e.rate for e in floor if e.nodes == n and e.rate is not None]
        # every rate abcast is offered, and higher ones: the floor saturates far beyond
        assert set(spec.load_rates) < set(rates) and max(rates) > max(spec.load_rates)
        assert all(e.messages <= spec.floor_max_messages for e in floor)
    phases = [e.phase for e in grid.experiments]
    # in the same minutes as what it is the floor of: after the lone runs, before the load
    assert phases.index(Phase.FLOOR) > max(i for i, p in enumerate(phases) if p is Phase.LONE)
    assert max(i for i, p in enumerate(phases) if p is Phase.FLOOR) < phases.index(Phase.LOAD)
    assert not build_grid(replace(spec, floor=False)).of(Phase.FLOOR)


@pytest.mark.parametrize("spec", [quick_spec(), full_spec()], ids=["quick", "full"])
def test_the_paired_rounds_alternate_the_sequencer_and_the_floor_back_to_back(
    spec: GridSpec,
) -> None:
    grid = build_grid(spec)
    paired = grid.of(Phase.PAIRED)
    # the lone message's rounds, then the saturation run's, as many of each
    assert len(paired) == 4 * spec.paired_rounds > 0
    lone, saturation = paired[:2 * spec.paired_rounds], paired[2 * spec.paired_rounds:]
    loop = "uvloop" if "uvloop" in installed_event_loops() else "asyncio"
    assert all(e.ordering == "sequencer" and not e.trace and not e.relay and not e.busy_poll_us
               and e.transport == "tcp" and e.nodes == spec.compare_nodes
               and e.payload == spec.compare_payload for e in paired)
    assert all(e.serial and e.event_loop == loop and e.rate is None for e in lone)
    # the saturation run as the load curve's runs are made (the default loop, their
    # message bound: no longer than its top run), offered above all of its rates
    top = max(e.messages for e in grid.of(Phase.LOAD) if e.nodes == spec.compare_nodes)
    assert all(not e.serial and e.event_loop is None and e.rate == spec.paired_rate
               and e.messages == spec.load_messages(spec.paired_rate) <= top
               for e in saturation)
    assert spec.paired_rate > max(spec.load_rates)
    for runs in (lone, saturation):
        for round_ in range(spec.paired_rounds):
            pair = runs[2 * round_:2 * round_ + 2]
            assert {e.round for e in pair} == {round_}
            assert replace(pair[0], floor=False) == replace(pair[1], floor=False)
            # the floor first in even rounds, the sequencer first in odd ones
            assert [e.floor for e in pair] == (
                [True, False] if round_ % 2 == 0 else [False, True])
    # a saturation pair is past saturation by design: a fall-over is a finding, and the
    # runner never leaves it out as a load curve's point past the knee
    assert all(e.open_loop_load and not e.curve_point for e in saturation)
    assert not any(e.open_loop_load for e in lone)
    # beside the floor's other runs, in the order the runner takes the phases
    phases = [e.phase for e in grid.experiments]
    assert max(i for i, p in enumerate(phases) if p is Phase.FLOOR) < phases.index(
        Phase.PAIRED) < phases.index(Phase.LOAD)
    assert "round 2" in paired[2].label() and "serial" in paired[2].label()
    assert f"{spec.paired_rate:,.0f}/s" in saturation[2].label()
    assert saturation[2].label() != paired[2].label()
    for without in (replace(spec, floor=False), replace(spec, paired_rounds=0),
                    replace(spec, load_orderings=("skeen",))):
        assert not build_grid(without).of(Phase.PAIRED)
    with pytest.raises(ConfigError, match="paired_rounds"):
        build_grid(replace(spec, paired_rounds=-1))
    with pytest.raises(ConfigError, match="paired_rate"):
        build_grid(replace(spec, paired_rate=0.0))


def test_the_runner_makes_every_paired_saturation_run_but_cuts_a_curve_past_its_knee(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every run here delivers half its offered rate (the paired ones are offered far
    above saturation): a load curve stops after SATURATED_AFTER such points, but each
    PAIRED round needs both its runs, so none of them is left out."""
    made: list[Experiment] = []

    async def fake_run(exp: Experiment, *_: object, **__: object) -> RunMeasurement:
        made.append(exp)
        return RunMeasurement(exp, "fake", Figures(throughput=(exp.rate or 2000.0) / 2),
                              True)

    monkeypatch.setattr(runner, "run_experiment", fake_run)
    grid = build_grid(quick_spec())
    bench = BenchRunner(grid, tmp_path, SilentProgress())
    paired = asyncio.run(bench._phase("paired", list(grid.of(Phase.PAIRED))))
    assert [r.experiment for r in paired] == made == list(grid.of(Phase.PAIRED))
    made.clear()
    load = asyncio.run(bench._phase("load", list(grid.of(Phase.LOAD))))
    assert len(load) == runner.SATURATED_AFTER < len(grid.of(Phase.LOAD))


def test_open_loop_runs_get_the_shorter_timeout() -> None:
    spec = replace(full_spec(), timeout_s=100.0, load_timeout_s=10.0)
    grid = build_grid(spec)
    assert {spec.timeout_of(e) for e in grid.of(Phase.LOAD)} == {10.0}
    floor_curve = [e for e in grid.of(Phase.FLOOR) if e.rate is not None]
    assert floor_curve and {spec.timeout_of(e) for e in floor_curve} == {10.0}
    others = [e for e in grid.experiments if not e.open_loop_load and e.phase is not Phase.SCALE]
    assert {spec.timeout_of(e) for e in others} == {100.0}
    # a paired saturation run stuck past saturation holds the bench no longer than a
    # load curve's
    paired = [e for e in grid.of(Phase.PAIRED) if e.rate is not None]
    assert paired and {spec.timeout_of(e) for e in paired} == {10.0}
    twin = verification_run(grid.of(Phase.LOAD)[0], spec)
    assert spec.timeout_of(twin) == 100.0  # at the knee it must finish: no excuse
    # 16 processes take most of a minute to start on a loaded machine: their own timeout
    assert {spec.timeout_of(e) for e in grid.of(Phase.SCALE)} == {spec.scale_timeout_s}


def test_the_scale_section_is_the_full_benchs_only() -> None:
    full, quick = build_grid(full_spec()), build_grid(quick_spec())
    assert not quick.of(Phase.SCALE) and not quick.spec.sim_tasks()
    scale = full.of(Phase.SCALE)
    assert {(e.ordering, e.nodes, e.serial) for e in scale} == {
        (o, n, serial) for o in ("sequencer", "chandra-toueg") for n in (3, 8, 12, 16)
        for serial in (False, True)}
    assert len(scale) == 16
    assert all(e.transport == "tcp" and not e.trace for e in scale)
    assert all(e.open_loop_load for e in scale if not e.serial)  # may fall over: a finding
    sims = full.spec.sim_tasks()
    assert {t.ordering for t in sims} == set(ORDERINGS_REGISTERED)
    assert {t.nodes for t in sims} == {64}
    # after every other run of the grid
    assert [e.phase for e in full.experiments][-len(scale):] == [Phase.SCALE] * len(scale)


def test_scale_only_keeps_the_scale_section_and_the_tcp_ping_its_model_needs() -> None:
    spec = scale_only(full_spec())
    grid = build_grid(spec)
    assert grid.experiments == full_spec_scale() and not grid.peers
    assert spec.middlewares == ("tcp",) and spec.sim_tasks() == full_spec().sim_tasks()


def full_spec_scale() -> tuple[Experiment, ...]:
    return build_grid(full_spec()).of(Phase.SCALE)


@pytest.mark.parametrize("bad", [
    {"scale_nodes": (8, 3)}, {"scale_nodes": (1, 4)}, {"scale_rate": 0.0},
    {"sim_orderings": ("fifo",), "sim_nodes": 1}, {"scale_orderings": ("nope",)},
])
def test_scale_knobs_are_checked(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        build_grid(replace(full_spec(), **bad))  # type: ignore[arg-type]
