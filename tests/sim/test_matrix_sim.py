"""The `matrix` ordering in the simulator: clean under network faults (a small share of
`bench/sweep_orderings.py --orderings matrix`), in an open group under the membership
layer (join=/leave=: the members present throughout agree, a joiner ends with the
others' state, a leaver departs), through a crash (the survivors agree and go on), with
either heartbeat; and three planted broken variants — executing beyond the row minimum,
processing a stream out of order, keeping a crashed member's row in the clock — caught
by the same checks."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from abcast.ids import NodeId, View
from abcast.membership import Membership
from abcast.ordering._matrix_wire import MxWrite, StreamHeader
from abcast.ordering.matrix import Matrix, MatrixConfig, _Write
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import judge, present_throughout
from abcast.stack import Stack
from abcast.testing import TOTAL_ORDER, VALIDITY

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"
FIXED = OrderingOptions(matrix=MatrixConfig(adaptive=False))


def _clean(result: SimResult, where: str) -> None:
    assert result.violations == [], where
    assert result.quiescent, where


@pytest.mark.parametrize("nodes", [3, 5, 8])
def test_seeded_runs_under_network_faults_are_clean(nodes: int) -> None:
    for seed in (1, 2):
        result = run_simulation(SimConfig("matrix", nodes=nodes, messages=150, seed=seed,
                                          faults=FAULTS))
        _clean(result, f"abcast sim --ordering matrix --nodes {nodes} --seed {seed}")
        assert result.delivered == 150 * nodes
        assert len(set(result.app_states.values())) == 1


def test_fixed_heartbeats_and_partitions_that_heal() -> None:
    for faults, options in ((FAULTS, FIXED),
                            ("drop=0.05,delay=1-10ms,partition=n1+n2|n3+n4@100ms-900ms",
                             OrderingOptions())):
        result = run_simulation(SimConfig("matrix", nodes=4, messages=100, seed=4,
                                          faults=faults, options=options))
        _clean(result, faults)
        assert result.delivered == 100 * 4


OPEN_WORLD = [
    "join=n9@40ms",
    "leave=n2@60ms",
    "join=n9@30ms,leave=n2@35ms,join=n10@45ms,leave=n1@120ms",
    f"{FAULTS},join=n9@20ms,leave=n3@50ms,join=n10@150ms",
    f"{FAULTS},join=n9@20ms,leave=n2@40ms,leave=n3@45ms",
]


@pytest.mark.parametrize("faults", OPEN_WORLD)
@pytest.mark.parametrize("nodes", [3, 5])
def test_joiners_get_the_state_and_leavers_depart(faults: str, nodes: int) -> None:
    result = run_simulation(SimConfig("matrix", nodes=nodes, messages=300, seed=nodes,
                                      faults=faults))
    _clean(result, faults)
    joiners = {item.split("=")[1].split("@")[0] for item in faults.split(",")
               if item.startswith("join=")}
    leavers = {item.split("=")[1].split("@")[0] for item in faults.split(",")
               if item.startswith("leave=")}
    assert set(result.departed) == leavers
    staying = {f"n{i}" for i in range(1, nodes + 1)} - leavers | joiners
    assert set(result.app_states) == staying
    assert len(set(result.app_states.values())) == 1, "replica states differ"
    # A joiner was admitted mid-run: it installed a view with the others and delivered.
    rows = result.recorder.rows()
    for joiner in joiners:
        views = [r for r in rows if r.kind == "view" and r.node == joiner]
        assert any(len(r.members or ()) > 1 for r in views)
        assert any(r.kind == "deliver" and r.node == joiner for r in rows)


def test_a_leaver_whose_install_comes_late_still_departs() -> None:
    """n5 gives its state to the flush for view 3 (which lets it go), but the install is
    slow to reach it and the group installs view 4 meanwhile; told of view 4 first, n5
    must wait for view 3's install and depart, not stop as if removed (cut off)."""
    faults = ("drop=0.05,dup=0.02,delay=1-40ms,join=n20@152ms,join=n21@243ms,"
              "leave=n5@317ms,leave=n2@404ms,leave=n4@578ms")
    result = run_simulation(SimConfig("matrix", nodes=5, messages=300, seed=19,
                                      faults=faults))
    _clean(result, faults)
    assert set(result.departed) == {"n2", "n4", "n5"}
    assert not any(r.kind == "crash" for r in result.recorder.rows())


def test_a_one_node_group_delivers_alone_and_admits_a_joiner() -> None:
    result = run_simulation(SimConfig("matrix", nodes=1, messages=30, seed=1,
                                      faults="join=n2@0us"))
    _clean(result, "n=1")
    assert result.protocol_packets > 0  # the join itself: ask, welcome, heartbeats
    assert len(set(result.app_states.values())) == 1
    alone = run_simulation(SimConfig("matrix", nodes=1, messages=30, seed=1))
    assert alone.delivered == 30 and alone.protocol_packets == 0


CRASHES = [
    f"{FAULTS},crash=n2@80ms",
    "drop=0.05,delay=1-30ms,crash=n3@40ms,join=n9@120ms",
    "delay=1-20ms,crash=n1@60ms,leave=n4@90ms",
]


@pytest.mark.parametrize("faults", CRASHES)
def test_survivors_of_a_crash_agree_and_go_on(faults: str) -> None:
    """A member crashes mid-run: the membership layer removes it, its row leaves the
    clock, the survivors deliver the same sequence and keep delivering after it."""
    result = run_simulation(SimConfig("matrix", nodes=5, messages=200, seed=3,
                                      faults=faults))
    violations, problems = judge(result)
    assert violations == [] and problems == [], (faults, violations[:2], problems[:2])
    assert result.quiescent, faults
    rows = result.recorder.rows()
    crashed = next(i.split("=")[1].split("@")[0] for i in faults.split(",")
                   if i.startswith("crash="))
    crash_at = next(r.t_ns for r in rows if r.kind == "crash" and r.node == crashed)
    present = present_throughout(rows, result.config.node_ids())
    sequences = {n: [(r.origin, r.seq) for r in result.recorder.rows_of(n)
                     if r.kind == "deliver"] for n in present}
    assert len(set(map(tuple, sequences.values()))) == 1, "survivors disagree"
    late = [r for r in rows if r.kind == "send" and r.t_ns > crash_at and r.node in present]
    assert late, "nothing was sent after the crash"
    assert {(r.origin, r.seq) for r in late} <= set(next(iter(sequences.values())))
    assert len(set(result.app_states.values())) == 1


# -- planted bugs ------------------------------------------------------------------------


class MatrixBeyondTheRowMinimum(Matrix):
    """Executes what its row's *maximum* allows: a stamp from one fast member suffices."""

    def bound(self) -> int | None:
        view = self.view
        if view is None:
            return None
        seen = [self.clock.direct(m) for m in view.members if m != self.node]
        return max([self.clock.time, *(ts for ts in seen if ts is not None)])


class MatrixWithoutStreamOrder(Matrix):
    """Takes each packet of an origin's stream as it arrives (no holdback by stream
    number): a later packet's stamp lets it execute past an earlier write in flight."""

    def __init__(self, node: NodeId, config: MatrixConfig | None = None) -> None:
        super().__init__(node, config)
        self._seen: dict[tuple[int, NodeId], set[int]] = {}

    def _on_stream(self, sender: NodeId, header: StreamHeader, payload: bytes) -> None:
        seen = self._seen.setdefault((header.view, sender), set())
        if header.n in seen:
            return
        seen.add(header.n)
        self.clock.set_direct(sender, header.ts)  # the maximum: never lowered
        if isinstance(header, MxWrite):
            self._push(_Write(header.ts, sender, header.seq, payload))


class MatrixKeepingTheDeadRow(Matrix):
    """Leaves a departed member's row and column in the clock at the view change: the
    row minimum stays at the crashed member's last stamp, and nothing after it is ever
    executed."""

    def _drop_departed(self, view: View) -> None:
        pass


BROKEN: dict[str, type[Matrix]] = {
    "beyond-the-row-minimum": MatrixBeyondTheRowMinimum,
    "without-stream-order": MatrixWithoutStreamOrder,
}


def _stack_of(core: type[Matrix]) -> Callable[[NodeId, View], Stack]:
    """The registry's matrix stack with `core` in the membership layer."""

    def make(node: NodeId, view: View) -> Stack:
        layers = build_stack(node, "g", "matrix", view).layers
        layers[-1] = Membership(node, core(node))
        return Stack(node, "g", layers, view)

    return make


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_the_checks_catch_a_broken_variant(name: str) -> None:
    core = BROKEN[name]
    for seed in (1, 2):
        config = SimConfig("matrix", nodes=4, messages=200, seed=seed, faults=FAULTS)
        result = run_simulation(config, stack_factory=_stack_of(core),
                                guarantees=get_ordering("matrix").guarantees)
        assert result.counts.get(TOTAL_ORDER, 0) > 0, (seed, result.counts)


def test_the_checks_catch_a_dead_row_left_in_the_clock() -> None:
    """The same crash runs, clean with the real core, leave the survivors stuck when the
    crashed member's row stays: what they sent after the crash is never delivered."""
    for faults in CRASHES[:2]:
        config = SimConfig("matrix", nodes=5, messages=200, seed=3, faults=faults)
        result = run_simulation(config, stack_factory=_stack_of(MatrixKeepingTheDeadRow))
        violations, _ = judge(result)
        assert any(v.code == VALIDITY for v in violations), (faults, result.counts)
