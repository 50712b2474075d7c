"""What a `partition=` fault cuts: exactly the links between the nodes it names (a node on
neither side — one left out of the list, or a joiner — keeps its links to both: a partial
partition), or with `*` as a side, every link between that side and everyone else,
joiners included (a clean split). Both kinds of run must keep every property."""

from __future__ import annotations

import random

import pytest

from abcast.errors import ConfigError
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import churn_faults, judge
from abcast.sim.faults import Partition, parse_faults
from abcast.sim.network import REST, Network


def test_a_star_side_parses_and_is_not_a_node_name() -> None:
    plan = parse_faults("partition=n2+n1|*@1s-4s,partition=*>n3@0ms-1ms")
    assert plan.partitions == (
        Partition(("n1", "n2"), (REST,), 1_000_000, 4_000_000),
        Partition((REST,), ("n3",), 0, 1_000, one_way=True),
    )
    assert plan.nodes_named() == {"n1", "n2", "n3"}


@pytest.mark.parametrize("text", ["partition=*|*@0ms-1ms", "partition=n1+*|n2@0ms-1ms"])
def test_a_star_must_stand_alone_on_one_side(text: str) -> None:
    with pytest.raises(ConfigError, match=r"\*"):
        parse_faults(text)


def test_named_sides_leave_a_node_on_neither_side_linked_to_both() -> None:
    net = Network(random.Random(1))
    net.partition(("a",), ("b",))
    assert net.blocked("a", "b") and net.blocked("b", "a")
    assert not net.blocked("a", "bridge") and not net.blocked("bridge", "b")


def test_a_star_side_cuts_every_other_node_even_one_that_starts_later() -> None:
    net = Network(random.Random(1))
    net.partition(("a", "b"), (REST,))
    for other in ("c", "joiner"):
        assert net.blocked("a", other) and net.blocked(other, "b")
    assert not net.blocked("a", "b") and not net.blocked("c", "joiner")
    net.heal(("a", "b"), (REST,))
    assert not net.blocked("a", "joiner")


def test_one_way_star_sides_cut_one_direction() -> None:
    net = Network(random.Random(1))
    net.partition(("a",), (REST,), one_way=True)  # a's packets are lost
    assert net.blocked("a", "c") and not net.blocked("c", "a")
    net.partition((REST,), ("b",), one_way=True)  # packets to b are lost
    assert net.blocked("c", "b") and not net.blocked("b", "c")
    net.heal(("a",), (REST,), one_way=True)
    net.heal((REST,), ("b",), one_way=True)
    assert not any(net.blocked(x, y) for x in "abc" for y in "abc")


def test_cuts_nest_a_star_partition_healing_leaves_the_named_one() -> None:
    net = Network(random.Random(1))
    net.partition(("a",), ("b",))
    net.partition(("a",), (REST,))
    net.heal(("a",), (REST,))
    assert net.blocked("a", "b") and not net.blocked("a", "c")


@pytest.mark.parametrize("ordering", ["sequencer", "causal-total"])
@pytest.mark.parametrize("clean_split", [False, True], ids=["bridged", "clean"])
def test_the_sequencer_cut_off_with_and_without_a_bridging_joiner(
    ordering: str, clean_split: bool
) -> None:
    faults = churn_faults(random.Random(11), 6, cut_leader=True, clean_split=clean_split,
                          partition_ms=(3_000, 5_000))
    assert ("|*@" in faults) == clean_split
    result = run_simulation(SimConfig(ordering, nodes=6, messages=300, seed=11, faults=faults))
    violations, problems = judge(result)
    assert violations == [] and problems == [], (faults, violations[:3], problems[:3])
    assert result.quiescent, faults
    # n1, the sequencer, was removed by the majority and stops once it learns it (the
    # membership layer's rule); the joiners not crashed are in, in a later view
    assert "n1" not in result.app_states, faults
    joiners = [i.split("=")[1].split("@")[0] for i in faults.split(",")
               if i.startswith("join=")]
    crashed = {r.node for r in result.recorder.rows() if r.kind == "crash"}
    for joiner in set(joiners) - crashed:
        assert joiner in result.app_states
