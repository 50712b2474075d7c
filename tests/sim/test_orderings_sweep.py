"""A small share of the full sweep (bench/sweep_orderings.py): every new ordering, seeded
runs under loss, duplication and reordering delays, must end with zero violations and
every message delivered everywhere; partitions that heal are survived too (by the
orderings without a failure detector)."""

from __future__ import annotations

import pytest

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"
ORDERINGS = ("causal", "sequencer", "skeen", "causal-total")
MESSAGES = 300


@pytest.mark.parametrize("nodes", [3, 5, 8])
@pytest.mark.parametrize("ordering", ORDERINGS)
def test_seeded_runs_under_network_faults_are_clean(ordering: str, nodes: int) -> None:
    for seed in (1, 2, 3):
        config = SimConfig(ordering, nodes=nodes, messages=MESSAGES, seed=seed, faults=FAULTS)
        result = run_simulation(config)
        where = f"abcast sim --ordering {ordering} --nodes {nodes} --seed {seed} ..."
        assert result.violations == [], where
        assert result.delivered == MESSAGES * nodes, where
        assert result.quiescent, where


@pytest.mark.parametrize("batch", [1, 3, None])
def test_batched_sequencer_under_open_loop_load_is_clean(batch: int | None) -> None:
    """Open loop, faster than the network settles: origins have many messages in flight,
    the sequencer's FIFO admission releases several at once and batches them."""
    config = SimConfig("sequencer", nodes=4, messages=400, seed=7, faults=FAULTS,
                       rate=4_000.0, options=OrderingOptions(batch=batch))
    result = run_simulation(config)
    assert result.violations == []
    assert result.delivered == 400 * 4
    if batch == 1:
        assert result.packets_per_broadcast == 2 * 3
    else:
        assert result.packets_per_broadcast < 2 * 3  # some order packets carried several ids


# The sequencer family runs over a failure detector now (sequencer fail-over): there a
# partition longer than the detector's timeout means suspicions and a view change, which
# is the fail-over tests' business, not this one's.
@pytest.mark.parametrize("ordering", ["causal", "skeen"])
def test_partitions_that_heal_are_survived(ordering: str) -> None:
    for faults in ("drop=0.05,delay=1-10ms,partition=n1+n2|n3+n4@100ms-900ms",
                   "partition=n1>n3@50ms-700ms"):
        result = run_simulation(SimConfig(ordering, nodes=4, messages=200, seed=3,
                                          faults=faults))
        assert result.violations == [], faults
        assert result.delivered == 200 * 4, faults


def test_skeen_survives_a_crash_its_flush_settles_the_pending_stamps() -> None:
    for seed in (1, 2, 3):
        result = run_simulation(SimConfig("skeen", nodes=4, messages=150, seed=seed,
                                          faults=f"drop=0.05,crash=n2@{40 * seed}ms"))
        assert result.violations == [], (seed, result.counts)
        assert result.quiescent, seed
