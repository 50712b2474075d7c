"""The node's garbage-collection knob (abcast.runtime.loop): modes, thresholds, the meter.

Thresholds are the process's: every test puts back what it found."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from abcast.errors import ConfigError
from abcast.runtime.loop import TUNED_THRESHOLDS, GcMeter, freeze_gc, gc_mode, tune_gc
from abcast.runtime.node import Node


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)


def test_mode_from_argument_then_environment_then_tuned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ABCAST_GC", raising=False)
    assert gc_mode() == "tuned"
    monkeypatch.setenv("ABCAST_GC", "python")
    assert gc_mode() == "python"
    assert gc_mode("tuned") == "tuned"  # the argument wins


def test_unknown_mode_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="gc mode"):
        Node("mem://", node="n1", gc="off")
    monkeypatch.setenv("ABCAST_GC", "fast")
    with pytest.raises(ConfigError, match="ABCAST_GC"):
        Node("mem://", node="n1")


def test_tuned_sets_the_thresholds_python_leaves_them() -> None:
    gc.set_threshold(700, 10, 10)
    tune_gc("python")
    freeze_gc("python")  # nothing frozen either
    assert gc.get_threshold() == (700, 10, 10)
    tune_gc("tuned")
    assert gc.get_threshold() == TUNED_THRESHOLDS


def test_a_starting_node_applies_its_mode() -> None:
    async def main() -> tuple[int, int, int]:
        node = Node("mem://", node="n1", gc="tuned")
        assert gc.get_threshold() == (700, 10, 10)  # not before it starts
        await node.start()
        try:
            return gc.get_threshold()
        finally:
            await node.close()

    gc.set_threshold(700, 10, 10)
    assert asyncio.run(main()) == TUNED_THRESHOLDS


def test_meter_counts_collections_per_generation_and_detaches() -> None:
    with GcMeter() as meter:
        gc.collect(0)
        gc.collect(2)
        gc.collect(2)
    counted = list(meter.collections)
    gc.collect(1)  # after the meter let go: not counted
    assert meter.collections == counted
    assert counted[0] >= 1
    assert counted[2] == 2
    assert all(c >= 0 for c in meter.cpu_ns)
    assert meter.max_ns[2] <= meter.cpu_ns[2]
    meter.reset()
    assert meter.collections == [0, 0, 0]
    assert meter._callback not in gc.callbacks
