"""The thesis's message counts (Table 1), reproduced exactly: in failure-free unbatched
runs every broadcast costs the model's number of protocol packets — sequencer 2(n−1),
Skeen 3(n−1), causal n−1, causal-total 2(n−1) — and a node sending to itself costs none.
Reliability traffic (acks, retransmissions) is control and not counted."""

from __future__ import annotations

import pytest

from abcast.ordering.registry import ORDERINGS, OrderingOptions
from abcast.sim import SimConfig, run_simulation

THESIS = {
    "causal": lambda n: n - 1,
    "sequencer": lambda n: 2 * (n - 1),
    "skeen": lambda n: 3 * (n - 1),
    "causal-total": lambda n: 2 * (n - 1),
}


@pytest.mark.parametrize("nodes", range(2, 9))
@pytest.mark.parametrize("ordering", sorted(THESIS))
def test_packets_per_broadcast_match_the_model(ordering: str, nodes: int) -> None:
    config = SimConfig(ordering, nodes=nodes, messages=12 * nodes, seed=nodes,
                       options=OrderingOptions(batch=1), net_trace=True)
    result = run_simulation(config)
    assert result.violations == []
    expected = THESIS[ordering](nodes)
    assert ORDERINGS[ordering].model_packets(nodes) == expected
    assert result.packets_per_broadcast == expected
    # The trace says the same: one net_send row per protocol packet, none to oneself.
    sends = [r for r in result.recorder.rows() if r.kind == "net_send"]
    assert len(sends) == expected * config.messages
    assert all(r.peer != r.node for r in sends)


@pytest.mark.parametrize("ordering", ["sequencer", "causal-total"])
def test_the_sequencers_own_messages_cost_the_same(ordering: str) -> None:
    """n1 is the sequencer: its messages go out as n−1 data + n−1 order packets too."""
    config = SimConfig(ordering, nodes=5, messages=1, seed=1, options=OrderingOptions(batch=1))
    result = run_simulation(config)
    assert result.broadcasts == 1
    assert result.protocol_packets == 2 * 4


def test_one_node_groups_send_nothing() -> None:
    for ordering in THESIS:
        result = run_simulation(SimConfig(ordering, nodes=1, messages=20, seed=1))
        assert result.delivered == 20
        assert result.protocol_packets == 0
        assert result.violations == []
