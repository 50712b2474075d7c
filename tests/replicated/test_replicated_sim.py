"""Replicated objects as the simulator's application: over every total ordering and
under network faults the copies end equal and the trace checks are clean; the balance
is what the origins' outcomes say it must be; in a matrix group a joiner ends with the
others' object and a leaver departs."""

from __future__ import annotations

import random
from typing import Any

import pytest

from abcast.ids import NodeId
from abcast.replicated import Account, ReplicatedDict
from abcast.replicated.sim import simulate_replicas

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"


def bank_call(rng: random.Random, _node: NodeId) -> tuple[str, tuple[Any, ...]]:
    method = "deposit" if rng.random() < 0.5 else "withdraw"
    return method, (rng.randint(1, 100),)


@pytest.mark.parametrize("ordering", ["matrix", "sequencer", "skeen", "chandra-toueg",
                                      "optimistic"])
def test_accounts_agree_over_every_total_order(ordering: str) -> None:
    issued: dict[NodeId, list[tuple[str, int]]] = {}

    def call(rng: random.Random, node: NodeId) -> tuple[str, tuple[Any, ...]]:
        method, args = bank_call(rng, node)
        issued.setdefault(node, []).append((method, args[0]))
        return method, args

    run = simulate_replicas(Account, call, ordering=ordering, nodes=4, operations=120,
                            seed=11, faults=FAULTS)
    assert run.violations == []
    assert run.issued == 120
    assert run.converged and len(run.objects) == 4
    # Each caller got its own calls' results, in its own order: the balance is the
    # deposits minus the withdrawals their callers were told succeeded.
    expected = 0
    for node, calls in issued.items():
        outcomes = run.outcomes[node]
        assert [o.seq for o in outcomes] == list(range(1, len(calls) + 1))
        for (method, amount), outcome in zip(calls, outcomes, strict=True):
            if method == "deposit":
                expected += amount
            elif outcome.value is True:
                expected -= amount
    balances = {obj.balance for obj in run.objects.values()}
    assert balances == {expected} and expected >= 0


def test_a_joiner_gets_the_object_and_a_leaver_departs() -> None:
    def put(rng: random.Random, node: NodeId) -> tuple[str, tuple[Any, ...]]:
        return "put", (f"k{rng.randint(1, 20)}", [node, rng.randint(0, 9)])

    run = simulate_replicas(ReplicatedDict, put, ordering="matrix", nodes=4,
                            operations=300, seed=2,
                            faults=f"{FAULTS},join=n7@30ms,leave=n2@60ms,join=n8@90ms")
    assert run.violations == []
    assert set(run.objects) == {"n1", "n3", "n4", "n7", "n8"}
    assert run.departed == ("n2",)
    assert run.converged
    datas = [obj.data for obj in run.objects.values()]
    assert all(d == datas[0] for d in datas) and len(datas[0]) > 5


def test_fixed_heartbeats_converge_too() -> None:
    from abcast.ordering.matrix import MatrixConfig
    from abcast.ordering.registry import OrderingOptions

    run = simulate_replicas(Account, bank_call, ordering="matrix", nodes=3, operations=30,
                            seed=4, faults=FAULTS,
                            options=OrderingOptions(matrix=MatrixConfig(adaptive=False)))
    assert run.violations == [] and run.converged and run.issued == 30
    # a write waits for the others' periodic NOPEs: about a period each
    assert min(run.latencies_us) > 10_000
