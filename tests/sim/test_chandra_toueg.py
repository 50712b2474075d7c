"""Chandra-Toueg atomic broadcast in the simulator: crashes of up to ⌊(n−1)/2⌋ nodes
(coordinators included) under loss, the thesis's 4(n−1) packet count, and a planted
minority-decision bug the checks must catch."""

from __future__ import annotations

import random

import pytest

from abcast.group.failure_detector import FailureDetectorLayer
from abcast.ids import NodeId, View
from abcast.ordering.chandra_toueg import ChandraToueg
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.channel import ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.stack import Stack


def crash_faults(n: int, seed: int, horizon_ms: int = 1_500) -> str:
    """⌊(n−1)/2⌋ distinct victims at random times, over loss and jitter."""
    rng = random.Random(seed)
    victims = rng.sample([f"n{i}" for i in range(1, n + 1)], (n - 1) // 2)
    crashes = ",".join(f"crash={v}@{rng.randint(1, horizon_ms)}ms" for v in victims)
    return f"drop=0.05,delay=1-10ms,{crashes}"


@pytest.mark.parametrize("n", [3, 5, 7])
@pytest.mark.parametrize("seed", range(4))
def test_tolerates_a_minority_of_crashes(n: int, seed: int) -> None:
    faults = crash_faults(n, seed)
    result = run_simulation(SimConfig("chandra-toueg", nodes=n, messages=200, seed=seed,
                                      faults=faults))
    assert result.violations == [], (faults, result.counts)
    crashed = {r.node for r in result.recorder.rows() if r.kind == "crash"}
    survivors = [f"n{i}" for i in range(1, n + 1) if f"n{i}" not in crashed]
    sent = {(r.origin, r.seq) for r in result.recorder.rows()
            if r.kind == "send" and r.node in survivors}
    for node in survivors:  # every correct node's broadcast reached every correct node
        got = {(r.origin, r.seq) for r in result.recorder.rows_of(node) if r.kind == "deliver"}
        assert sent <= got
    views = {node: [r.members for r in result.recorder.rows_of(node) if r.kind == "view"]
             for node in survivors}
    assert len({tuple(v) for v in views.values()}) == 1  # same view sequence everywhere
    assert views[survivors[0]][-1] == tuple(survivors)  # crashed members were removed


def test_the_coordinator_of_the_first_instance_crashing_at_once() -> None:
    result = run_simulation(SimConfig("chandra-toueg", nodes=5, messages=100, seed=1,
                                      faults="crash=n1@0ms,crash=n2@1ms"))
    # n1 and n2 each got one broadcast out before crashing; it reached the others
    assert result.violations == [] and result.broadcasts == 62
    assert result.delivered == 3 * 62


@pytest.mark.parametrize("n", range(2, 9))
def test_unbatched_failure_free_costs_four_n_minus_one_packets(n: int) -> None:
    result = run_simulation(SimConfig("chandra-toueg", nodes=n, messages=10 * n, seed=n,
                                      options=OrderingOptions(batch=1), net_trace=True))
    assert result.violations == []
    assert result.packets_per_broadcast == 4 * (n - 1)


def test_batching_costs_fewer_packets_under_load() -> None:
    result = run_simulation(SimConfig("chandra-toueg", nodes=5, messages=500, seed=3))
    assert result.violations == [] and result.packets_per_broadcast < 4 * 4


class _MinorityDecider(ChandraToueg):
    """The planted bug: a coordinator decides on its own acknowledgement alone."""

    @property
    def majority(self) -> int:
        return 1


def _minority_stack(node: NodeId, view: View) -> Stack:
    layers = [FailureDetectorLayer(node), ReliableChannel(node), _MinorityDecider(node)]
    return Stack(node, "g", layers, view)


def test_deciding_with_a_minority_is_caught() -> None:
    found: dict[str, int] = {}
    for seed in range(6):
        result = run_simulation(
            SimConfig("chandra-toueg", nodes=3, messages=150, seed=seed,
                      faults="delay=1-10ms,partition=n1|n2+n3@100ms-3s"),
            stack_factory=_minority_stack,
        )
        for code, count in result.counts.items():
            found[code] = found.get(code, 0) + count
    # n1, cut off, decides alone while n2 and n3 decide without it: the histories fork
    safety = ("TOTAL_ORDER", "UNIFORM_AGREEMENT", "AGREEMENT")
    assert sum(found.get(code, 0) for code in safety) > 0, found


def test_the_same_partition_is_harmless_with_majorities() -> None:
    for seed in range(3):
        result = run_simulation(SimConfig(
            "chandra-toueg", nodes=3, messages=150, seed=seed,
            faults="delay=1-10ms,partition=n1|n2+n3@100ms-3s"))
        assert result.violations == [], result.counts


def test_memory_is_collected_once_stable() -> None:
    stacks: list[Stack] = []

    def keep(node: NodeId, view: View) -> Stack:
        stacks.append(build_stack(node, "g", "chandra-toueg", view))
        return stacks[-1]

    run_simulation(SimConfig("chandra-toueg", nodes=3, messages=600, seed=2,
                             faults="drop=0.05"), stack_factory=keep)
    held = [s.layers[-1].bodies_held() for s in stacks if isinstance(s.layers[-1], ChandraToueg)]
    assert len(held) == 3 and max(held) < 600 * 0.2  # only the unstable tail remains
