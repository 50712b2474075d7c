"""The membership layer under churn (a share of `bench/sweep_churn.py`): a join, a leave,
a crash and a partition that heals, under drop/dup/delay, over 6–8 nodes, for every
ordering whose views it keeps — every property its claims name, every member present
throughout delivering every message, equal states at the end. A planted flush that
forgets the messages of senders it leaves out must be caught by the same checks."""

from __future__ import annotations

from typing import Any

import pytest
from test_churn_sweep import assert_clean_churn, churn_run

from abcast.ids import NodeId, View
from abcast.membership import FlushMessage, Membership
from abcast.ordering.fifo import Fifo
from abcast.ordering.registry import build_stack
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import judge
from abcast.stack import Stack

SEEDS = range(1, 7)
ORDERINGS = ["unordered", "fifo", "causal", "skeen", "matrix"]


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_seeded_churn_keeps_every_claim_and_view_property(ordering: str) -> None:
    for seed in SEEDS:
        result = churn_run(ordering, seed)
        where = f"{ordering} seed {seed}: {result.config.faults}"
        assert_clean_churn(result, where)
        rows = result.recorder.rows()
        assert any(r.kind == "view" and r.node == f"n{result.config.nodes + 1}"
                   and r.view_id for r in rows), (where, "the joiner was never admitted")


class _ForgetfulMembership(Membership):
    """The planted bug: the outcome drops the messages of senders the flush leaves out
    (the crashed), so survivors that lacked one never deliver it."""

    def outcome(self, flush: Any) -> list[FlushMessage]:
        kept = set(flush.members)
        return [m for m in super().outcome(flush) if m.origin in kept]


def _forgetful_stack(node: NodeId, view: View) -> Stack:
    stack = build_stack(node, "g", "fifo", view)
    stack.layers[-1] = _ForgetfulMembership(node, Fifo(node))
    return Stack(node, "g", stack.layers, view)


def test_a_flush_that_forgets_a_crashed_senders_messages_is_caught() -> None:
    caught = 0
    for seed in range(1, 9):
        config = SimConfig("fifo", nodes=5, messages=150, seed=seed,
                           faults=f"drop=0.2,delay=1-30ms,crash=n3@{100 + 40 * seed}ms")
        result = run_simulation(config, stack_factory=_forgetful_stack)
        violations, _ = judge(result)
        caught += any(v.code == "AGREEMENT" for v in violations)
        right = run_simulation(config)
        assert judge(right) == ([], []), seed
    assert caught, "the planted forgetful flush went unnoticed"


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_stability_keeps_the_views_log_small(ordering: str) -> None:
    """What every member delivered leaves each member's log (no flush can need it)."""
    stacks: list[Stack] = []

    def make(node: NodeId, view: View) -> Stack:
        stacks.append(build_stack(node, "g", ordering, view))
        return stacks[-1]

    result = run_simulation(SimConfig(ordering, nodes=4, messages=300, seed=2,
                                      faults="drop=0.02"), stack_factory=make)
    assert result.violations == [] and result.quiescent
    logged = [stack.inspect()[-1].counters["logged_this_view"] for stack in stacks]
    assert logged == [0, 0, 0, 0]
