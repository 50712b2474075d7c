"""A Hypothesis state machine for the `matrix` ordering: 3–4 stacks wired through a
packet pool (abcast.testing.pool). Rules: broadcast from a node, deliver / drop /
duplicate an in-flight packet, fire an armed timer (heartbeats, retransmissions), let
time pass. After every step: no duplicate or unknown delivery, each origin's messages
in order (FIFO), every node's deliveries a prefix of one common sequence (total order).
At teardown the pool is driven until every node has every message (the heartbeats never
stop, so "until quiet" is "until complete"), and the official checks find nothing. A
planted bug — executing as soon as the own clock allows, ignoring the row minimum —
must be found by the same machine.
"""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from abcast.ids import View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.matrix import Matrix, MatrixConfig
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.stack import Layer, Stack
from abcast.testing.pool import PacketPool

MAX_BROADCASTS = 12
MAX_FLUSH_STEPS = 50_000


class MatrixMachine(RuleBasedStateMachine):
    core: ClassVar[type[Matrix]] = Matrix
    adaptive: ClassVar[bool] = True

    def __init__(self) -> None:
        super().__init__()
        self.pool: PacketPool | None = None

    def _pool(self) -> PacketPool:
        assert self.pool is not None
        return self.pool

    @initialize(nodes=st.integers(3, 4))
    def start(self, nodes: int) -> None:
        config = MatrixConfig(adaptive=self.adaptive)
        view = View(1, tuple(f"n{i}" for i in range(1, nodes + 1)))
        layers: list[list[Layer]] = [[OpenChannel(n), self.core(n, config)]
                                     for n in view.members]
        stacks = [Stack(n, "g", ls, view) for n, ls in zip(view.members, layers, strict=True)]
        self.pool = PacketPool(stacks, get_ordering("matrix").claimed(OrderingOptions()))

    @precondition(lambda self: self.pool is not None and len(self.pool.sent) < MAX_BROADCASTS)
    @rule(which=st.integers(0, 3), payload=st.binary(max_size=4))
    def broadcast(self, which: int, payload: bytes) -> None:
        pool = self._pool()
        pool.broadcast(pool.nodes[which % len(pool.nodes)], payload)

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(picks=st.lists(st.integers(0, 1_000), min_size=1, max_size=8))
    def deliver(self, picks: list[int]) -> None:
        pool = self._pool()
        for pick in picks:
            if not pool.in_flight:
                return
            pool.deliver(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(pick=st.integers(0, 1_000))
    def drop(self, pick: int) -> None:
        pool = self._pool()
        pool.drop(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.in_flight))
    @rule(pick=st.integers(0, 1_000))
    def duplicate(self, pick: int) -> None:
        pool = self._pool()
        pool.duplicate(pick % len(pool.in_flight))

    @precondition(lambda self: self.pool is not None and bool(self.pool.timers()))
    @rule(pick=st.integers(0, 1_000))
    def fire_timer(self, pick: int) -> None:
        pool = self._pool()
        armed = pool.timers()
        pool.fire(armed[pick % len(armed)])

    @rule(us=st.integers(0, 400_000))
    def let_time_pass(self, us: int) -> None:
        if self.pool is not None:
            self.pool.advance(us)

    @invariant()
    def safety_so_far(self) -> None:
        if self.pool is not None:
            assert not self.pool.problems, "safety: " + "; ".join(self.pool.problems)

    def teardown(self) -> None:
        pool = self.pool
        if pool is None:
            return
        steps = 0
        while pool.missing():
            assert steps < MAX_FLUSH_STEPS, f"not complete after {steps} steps"
            steps += 1
            if pool.in_flight:
                pool.deliver(0)
            else:
                pool.fire(pool.timers()[0])
        assert not pool.problems, "safety: " + "; ".join(pool.problems)
        assert pool.violations() == []
        first, *rest = pool.deliveries.values()
        assert all(seq == first for seq in rest)


class FixedMatrixMachine(MatrixMachine):
    adaptive = False


SETTINGS = settings(max_examples=60, stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("machine", [MatrixMachine, FixedMatrixMachine],
                         ids=["adaptive", "fixed"])
def test_matrix_state_machine(machine: type[MatrixMachine]) -> None:
    machine.TestCase.settings = SETTINGS
    machine.TestCase().runTest()


class MatrixIgnoringTheRowMinimum(Matrix):
    """Executes whatever its own clock has passed, without waiting for the others."""

    def bound(self) -> int | None:
        return self.clock.time


class BrokenMatrixMachine(MatrixMachine):
    core = MatrixIgnoringTheRowMinimum


def test_the_state_machine_finds_the_planted_bug() -> None:
    BrokenMatrixMachine.TestCase.settings = settings(
        max_examples=300, stateful_step_count=40, deadline=None, database=None,
        phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
    with pytest.raises(AssertionError, match=r"safety: .*\(total order\)"):
        BrokenMatrixMachine.TestCase().runTest()
