"""A Hypothesis state machine for the membership layer: five simulated nodes running
`unordered`, `fifo`, `causal` or `skeen` under drop/dup/delay (abcast.sim.cluster, the
simulator's driver),
and rules that broadcast, let time pass, crash a member, start a joiner, ask a member
to leave, cut a minority off and heal it — in any order and at any moment, a flush
included. At teardown the network heals and the run settles; then the claims hold among
the members present throughout, VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY and
SAME_VIEW_DELIVERY hold over every incarnation, every member present throughout
delivered every message one of them broadcast, and the running nodes hold equal states.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

from abcast.ids import View
from abcast.ordering.registry import build_stack, get_ordering
from abcast.sim.churn import checked_rows, present_throughout, view_problems
from abcast.sim.cluster import SimCluster
from abcast.sim.network import LinkModel, Network
from abcast.sim.scheduler import Scheduler
from abcast.testing import check_events
from abcast.trace.recorder import TraceRecorder

INITIAL = tuple(f"n{i}" for i in range(1, 6))
SETTLE_US = 20_000_000


class MembershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ordering = "fifo"
        self.scheduler = Scheduler()
        self.network = Network(random.Random(7), LinkModel(1_000, 20_000), 0.03, 0.02)
        self.recorder = TraceRecorder("machine")
        self.cluster = SimCluster(self.scheduler, self.network, self.recorder)
        self.cluster.commutative_state = True
        self.crashed: set[str] = set()
        self.leaving: set[str] = set()
        self.joiners = 0
        self.cut: tuple[str, ...] = ()

    @initialize(ordering=st.sampled_from(["unordered", "fifo", "causal", "skeen"]))
    def start(self, ordering: str) -> None:
        self.ordering = ordering
        view = View(1, INITIAL)
        for node in INITIAL:
            self.cluster.add(build_stack(node, "g", ordering, view))

    def _running(self) -> list[str]:
        return [n for n in self.cluster.alive() if n not in self.leaving]

    @rule(which=st.integers(0, 7), count=st.integers(1, 4))
    def broadcast(self, which: int, count: int) -> None:
        running = [n for n in self._running()
                   if self.cluster.nodes[n].stack.layers[-1].status == "member"]
        if running:
            node = running[which % len(running)]
            for _ in range(count):
                self.cluster.broadcast(node, b"m")

    @rule(ms=st.integers(1, 400))
    def wait(self, ms: int) -> None:
        self.scheduler.run(self.scheduler.now + ms * 1_000)

    @precondition(lambda self: not self.crashed)
    @rule(which=st.integers(0, 4))
    def crash(self, which: int) -> None:
        node = INITIAL[which]
        if node not in self.leaving:
            self.crashed.add(node)
            self.cluster.crash(node)

    @precondition(lambda self: self.joiners < 2)
    @rule()
    def join(self) -> None:
        self.joiners += 1
        node = f"n{len(INITIAL) + self.joiners}"
        stack = build_stack(node, "g", self.ordering, View(0, (node,)))
        self.cluster.join(stack, tuple(self.cluster.alive()))

    @precondition(lambda self: not self.leaving)
    @rule(which=st.integers(0, 4))
    def leave(self, which: int) -> None:
        node = INITIAL[which]
        if node not in self.crashed:
            self.leaving.add(node)
            self.cluster.leave(node)

    @precondition(lambda self: not self.cut)
    @rule(which=st.integers(0, 4))
    def partition(self, which: int) -> None:
        self.cut = (INITIAL[which],)
        self.network.partition(self.cut, [n for n in INITIAL if n not in self.cut])

    @precondition(lambda self: bool(self.cut))
    @rule()
    def heal(self) -> None:
        self.network.heal(self.cut, [n for n in INITIAL if n not in self.cut])
        self.cut = ()

    def teardown(self) -> None:
        if self.cut:
            self.heal()
        self.scheduler.run(self.scheduler.now + SETTLE_US)
        rows = self.recorder.rows()
        claims = get_ordering(self.ordering).guarantees
        present = present_throughout(rows, INITIAL)
        violations = check_events(checked_rows(rows, present), claims, "machine")
        assert violations == [], [v.detail for v in violations[:3]]
        problems = view_problems(rows)
        assert problems == [], problems[:3]
        sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in present}
        for node in present:
            got = {(r.origin, r.seq) for r in rows if r.kind == "deliver" and r.node == node}
            assert sent <= got, node
        states = {n.app_state for name, n in self.cluster.nodes.items()
                  if not n.stopped and name not in self.leaving}
        assert len(states) <= 1


FULL = settings(max_examples=60, stateful_step_count=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])
TestMembershipMachine = MembershipMachine.TestCase
TestMembershipMachine.settings = settings(FULL, max_examples=25)  # the default run's share


@pytest.mark.slow
def test_the_membership_machine_over_all_its_examples() -> None:
    run_state_machine_as_test(MembershipMachine, settings=FULL)


@pytest.fixture(autouse=True)
def _quiet_bad_frames(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR", logger="abcast.sim")
