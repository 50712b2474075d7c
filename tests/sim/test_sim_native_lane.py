"""The native lane at scale: a seeded simulation under churn writes the same trace with
the lane (`SimConfig.native_lane`, abcast.runtime.lane) as without it.

Rules: each case is `bench/sweep_churn.py`'s run of the sequencer (its churn, cut-leader,
clean-split or flapping fault schedule drawn from the seed: a join, a leave, a crash and
healing partitions, under drop/dup/delay) over 3 to 5 nodes, in its --stream-channel
shape (acks carried, one tick for all links: the only shape whose frames the lane takes),
with net_trace on, so every protocol packet sent and received is a row. The run with the
lane must equal the Python run row for row, in order, and in its outcome
(`abcast.sim.harness.first_difference`); and the lane must have stepped many frames and
broadcasts and declined some (`abcast._lane.counts()`, reset before the run). A
difference is a lane bug: the failure names the case and the first differing row.
Stacks the lane is not for (SAFE delivery) and the simulator's default channel (per-link
timers) must have nothing taken. A bug planted in the lane (`_lane.plant`) makes the
comparison fail, and a switch turned on where the lane is not on is a ConfigError.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from abcast.errors import ConfigError
from abcast.ordering.registry import OrderingOptions
from abcast.runtime import lane
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import STREAM_SHAPE, churn_faults, flapping_faults
from abcast.sim.harness import first_difference

_lane: Any
try:
    from abcast import _lane
except ImportError:  # the extension is optional: a machine without a compiler
    _lane = None

needs_lane = pytest.mark.skipif(
    _lane is None, reason="abcast._lane is not built here (no C compiler or Python headers "
    "at set-up: the pure-Python path runs; bench/build_native.py builds it in a checkout)")

MESSAGES = 150

#: (seed, nodes, schedule): the schedules of bench/sweep_churn.py (plain, --cut-sequencer,
#: --clean-split, --flapping)
CASES = [
    (2, 5, "churn"), (5, 5, "flapping"), (14, 5, "flapping"), (8, 5, "cut-leader"),
    (11, 5, "clean-split"), (4, 4, "churn"), (7, 4, "flapping"), (16, 4, "flapping"),
    (10, 4, "cut-leader"), (20, 4, "cut-leader"), (13, 4, "clean-split"),
    (10, 3, "churn"), (2, 3, "cut-leader"), (12, 3, "flapping"),
]


def schedule(kind: str, seed: int, nodes: int) -> str:
    rng = random.Random(seed)
    if kind == "flapping":
        return flapping_faults(rng, nodes)
    return churn_faults(rng, nodes, cut_leader=kind == "cut-leader",
                        clean_split=kind == "clean-split")


def config(seed: int, nodes: int, kind: str, **options: Any) -> SimConfig:
    return SimConfig("sequencer", nodes=nodes, messages=MESSAGES, seed=seed,
                     faults=schedule(kind, seed, nodes), net_trace=True,
                     options=OrderingOptions(**{"channel": STREAM_SHAPE, **options}))


@pytest.fixture
def counts() -> Iterator[None]:
    """The lane on (a stale build fails here), no bug planted, its counts from zero."""
    if os.environ.get(lane.SWITCH) == "0":
        pytest.skip(f"the native lane is {lane.STATUS}")
    assert lane.RECEIVE is not None, f"the native lane is not on: {lane.STATUS}"
    _lane.plant(0)
    _lane.reset_counts()
    try:
        yield
    finally:
        _lane.plant(0)
        _lane.reset_counts()


def with_and_without(cfg: SimConfig) -> tuple[str | None, dict[str, int], int]:
    """(the first difference of the lane's run from the Python run, the lane's counts in
    its run, the run's broadcasts)."""
    python = run_simulation(cfg)
    _lane.reset_counts()
    native = run_simulation(dataclasses.replace(cfg, native_lane=True))
    return first_difference(python, native), _lane.counts(), python.broadcasts


@needs_lane
@pytest.mark.parametrize(("seed", "nodes", "kind"), CASES)
def test_the_lane_writes_the_python_paths_trace_under_churn(
        counts: None, seed: int, nodes: int, kind: str) -> None:
    cfg = config(seed, nodes, kind)
    differ, taken, broadcasts = with_and_without(cfg)
    assert differ is None, f"the lane diverged: {cfg!r}\n{differ}"
    # The lane did the work: most broadcasts (not those during a view change) and many
    # frames, and the faults made it decline (holes, duplicates, view changes, and every
    # control frame: heartbeats, flushes, joins).
    assert taken["broadcasts"] >= broadcasts // 2, (cfg, taken, broadcasts)
    assert taken["frames"] >= 10, (cfg, taken)
    assert taken["declined"] > 0, (cfg, taken)


@needs_lane
@pytest.mark.parametrize("where", ["safe", "per-link timers"])
def test_what_the_lane_is_not_for_takes_the_python_path(counts: None, where: str) -> None:
    """SAFE is not offered to the lane at all (`lane.eligible`); per-link timers are, and
    it declines every frame and broadcast (the channel's tick is never set)."""
    cfg = config(5, 5, "flapping", safe=True) if where == "safe" else dataclasses.replace(
        config(5, 5, "flapping"), options=OrderingOptions())
    differ, taken, _ = with_and_without(cfg)
    assert differ is None, f"{cfg!r}\n{differ}"
    assert taken["taken"] == 0, taken
    assert (taken["declined"] == 0) == (where == "safe"), taken


@needs_lane
def test_a_planted_lane_bug_shows_in_the_trace(counts: None) -> None:
    """A member's data at a member not kept (plant 6): the comparison above catches it."""
    cfg = config(4, 4, "churn")
    _lane.plant(6)
    differ, taken, _ = with_and_without(cfg)
    assert taken["frames"] > 0
    assert differ is not None


def test_the_switch_without_the_lane_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lane, "RECEIVE", None)
    monkeypatch.setattr(lane, "BROADCAST", None)
    monkeypatch.setattr(lane, "STATUS", "switched off (ABCAST_NATIVE_LANE=0)")
    with pytest.raises(ConfigError, match="native lane is not on: switched off"):
        run_simulation(dataclasses.replace(config(3, 3, "churn"), native_lane=True))
