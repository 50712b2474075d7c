"""The --faults parser: every item, and a clear ConfigError for each kind of mistake."""

from __future__ import annotations

import pytest

from abcast.errors import ConfigError
from abcast.sim.faults import Crash, Hold, Join, Leave, Partition, parse_faults


def test_parses_every_kind() -> None:
    plan = parse_faults(
        "drop=0.1,dup=0.05,delay=1-30ms,crash=n2@300ms,partition=n1+n2|n3@1s-2.5s,"
        "partition=n4>n5@100us-200us,join=n9@2s,leave=n3@700ms"
    )
    assert (plan.drop, plan.dup, plan.delay_us) == (0.1, 0.05, (1_000, 30_000))
    assert plan.crashes == (Crash("n2", 300_000),)
    assert plan.partitions == (
        Partition(("n1", "n2"), ("n3",), 1_000_000, 2_500_000),
        Partition(("n4",), ("n5",), 100, 200, one_way=True),
    )
    assert plan.joins == (Join("n9", 2_000_000),) and plan.leaves == (Leave("n3", 700_000),)
    assert plan.kinds() == {"drop", "dup", "delay", "crash", "partition", "join", "leave"}


def test_parses_hold_both_ways_and_one_way() -> None:
    plan = parse_faults("hold=n1|n2+n3@10ms-50ms,hold=n2>n3@1s-2s")
    assert plan.holds == (Hold(("n1",), ("n2", "n3"), 10_000, 50_000),
                          Hold(("n2",), ("n3",), 1_000_000, 2_000_000, one_way=True))
    assert plan.holds[0].links() == (("n1", "n2"), ("n1", "n3"), ("n2", "n1"), ("n3", "n1"))
    assert plan.holds[1].links() == (("n2", "n3"),)
    assert plan.kinds() == {"hold"} and plan.nodes_named() == {"n1", "n2", "n3"}


def test_a_held_link_delays_but_loses_nothing() -> None:
    """Every ordering tolerates `hold` (it is in NETWORK_FAULTS): the run is clean."""
    from abcast.sim import SimConfig, run_simulation

    for ordering in ("fifo", "sequencer"):
        result = run_simulation(SimConfig(ordering=ordering, nodes=3, messages=60, seed=4,
                                          faults="hold=n1|n2+n3@2ms-40ms"))
        assert not result.violations and result.summary()["delivered"] == 180


def test_empty_means_no_faults() -> None:
    assert parse_faults("").kinds() == set() and parse_faults(None).kinds() == set()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("drop", "not KEY=VALUE"),
        ("drop=1.5", "must be in"),
        ("drop=abc", "bad probability"),
        ("delay=30-1ms", "backwards"),
        ("delay=5ms", "bad delay"),
        ("crash=n2", "NODE@TIME"),
        ("crash=n2@soon", "bad time"),
        ("partition=n1|n2", "SIDES@T1-T2"),
        ("partition=n1+n2@1s-2s", "two sides"),
        ("partition=n1|n1@1s-2s", "both sides"),
        ("partition=n1|n2@2s-1s", "must end after"),
        ("melt=n1@1s", "unknown fault"),
        ("hold=n1|*@1s-2s", "both sides"),
        ("crash=1n@1s", "bad node name"),
    ],
)
def test_mistakes_are_named(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_faults(text)
