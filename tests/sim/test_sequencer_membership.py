"""Dynamic groups for the sequencer family in the simulator: joins with state transfer,
graceful leaves, crashes and partitions, alone and interleaved. Every run is held to the
claimed guarantees (the whole trace when nobody is cut off, else among the members
present throughout) and to the membership properties of abcast.sim.churn (one member
list per view id, view sequences, virtual synchrony, same-view delivery, equal states at
the end); planted bugs — a coordinator whose cut is one message early, a membership layer
that lets the next view's orders into the flush — must be caught."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from abcast.effects import Effect
from abcast.errors import LocalProtocolError
from abcast.events import Event, ViewInstalled
from abcast.ids import NodeId, View
from abcast.membership import FlushMessage, JoinCut, Membership
from abcast.ordering import sequencer_view
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer import Sequencer
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import judge, membership_problems
from abcast.stack import Stack

FAMILY = ["sequencer", "causal-total"]
NET = "drop=0.03,dup=0.02,delay=1-20ms"


def simulate(ordering: str, nodes: int, faults: str, *, seed: int = 1, safe: bool = False,
             messages: int = 150) -> SimResult:
    config = SimConfig(ordering, nodes=nodes, messages=messages, seed=seed, faults=faults,
                       options=OrderingOptions(safe=safe))
    return run_simulation(config)


def views_of(result: SimResult, node: NodeId) -> list[tuple[int, tuple[str, ...]]]:
    return [(r.view_id or 0, tuple(r.members or ()))
            for r in result.recorder.rows_of(node) if r.kind == "view"]


def delivered(result: SimResult, node: NodeId) -> list[tuple[str, int]]:
    return [(r.origin or "", r.seq or 0) for r in result.recorder.rows_of(node)
            if r.kind == "deliver"]


def clean(result: SimResult, *, whole_trace: bool = True) -> None:
    violations, problems = judge(result)
    if whole_trace:  # nobody was cut off: every node is judged, joiners and leavers too
        assert result.violations == [], result.counts
    assert violations == [], [v.detail for v in violations[:5]]
    assert problems == [], problems[:5]
    assert result.quiescent


# -- join --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
@pytest.mark.parametrize("nodes", [3, 5])
def test_a_joiner_starts_from_the_cut_and_ends_with_the_others_state(
    ordering: str, safe: bool, nodes: int
) -> None:
    joiner = f"n{nodes + 1}"
    result = simulate(ordering, nodes, f"{NET},join={joiner}@60ms", safe=safe, seed=nodes)
    clean(result)
    assert set(result.app_states) == {f"n{i}" for i in range(1, nodes + 2)}
    # It installed the group's view, delivered only what was ordered after the cut —
    # some, not all — and nothing twice; its state (snapshot + those) equals the others'.
    assert [len(m) for _, m in views_of(result, joiner)] == [1, nodes + 1]
    got = delivered(result, joiner)
    assert 0 < len(got) < len(delivered(result, "n1"))
    assert len(set(got)) == len(got)
    assert got == delivered(result, "n1")[-len(got):]


def test_a_one_node_group_admits_a_joiner_and_the_last_member_can_leave() -> None:
    result = simulate("sequencer", 1, "join=n2@5ms,leave=n1@40ms", messages=30)
    clean(result)
    assert views_of(result, "n2")[-1] == (3, ("n2",))
    assert result.departed == ("n1",)
    alone = simulate("sequencer", 1, "leave=n1@10ms", messages=30)
    assert alone.departed == ("n1",) and alone.violations == []


def test_joining_twice_or_without_contacts_is_refused() -> None:
    stack = build_stack("n1", "g", "sequencer", View(1, ("n1", "n2")))
    stack.start(0)
    with pytest.raises(LocalProtocolError, match="cannot join now"):
        stack.join(("n2",), 0)
    alone = build_stack("n3", "g", "sequencer", View(0, ("n3",)))
    alone.start(0)
    with pytest.raises(LocalProtocolError, match="contact"):
        alone.join(("n3",), 0)


# -- leave -------------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("leaver", ["n1", "n3"], ids=["the-sequencer", "a-member"])
def test_a_leaver_delivers_the_old_view_then_departs(ordering: str, leaver: str) -> None:
    result = simulate(ordering, 5, f"{NET},leave={leaver}@80ms", seed=3)
    clean(result)
    assert result.departed == (leaver,)
    # Everyone else moved on together, and the leaver saw exactly the old view's messages.
    final = views_of(result, "n2")[-1]
    assert leaver not in final[1] and len(final[1]) == 4
    in_old_view = {m for r in result.recorder.rows_of("n2")
                   if r.kind == "deliver" and r.view_id == 1 for m in [(r.origin, r.seq)]}
    assert set(delivered(result, leaver)) == in_old_view


# -- interleavings -----------------------------------------------------------------------------

INTERLEAVINGS = {
    "join-and-leave-together": "join=n6@50ms,leave=n2@50ms",
    "the-sequencer-leaves-while-a-join-waits": "join=n6@40ms,leave=n1@41ms",
    "a-join-while-the-sequencer-crashes": "join=n6@100ms,crash=n1@98ms",
    "the-contact-crashes-before-it-answers": "join=n6@30ms,crash=n1@31ms",
    "the-joiner-crashes-while-joining": "join=n6@60ms,crash=n6@61ms",
    "a-leave-then-a-crash-then-a-join": "leave=n3@30ms,crash=n2@60ms,join=n6@90ms",
    "two-joiners-and-two-leavers": "join=n6@20ms,join=n7@25ms,leave=n4@30ms,leave=n5@35ms",
}


@pytest.mark.parametrize("name", sorted(INTERLEAVINGS))
@pytest.mark.parametrize("ordering", FAMILY)
def test_interleaved_joins_leaves_and_crashes(name: str, ordering: str) -> None:
    faults = f"{NET},{INTERLEAVINGS[name]}"
    for seed in (1, 2):
        result = simulate(ordering, 5, faults, seed=seed, messages=100)
        violations, problems = judge(result)
        assert violations == [], (seed, [v.detail for v in violations[:3]])
        assert problems == [], (seed, problems[:3])
        assert result.quiescent, seed
        joiners = [i.split("=")[1].split("@")[0] for i in faults.split(",")
                   if i.startswith("join=")]
        crashed = {r.node for r in result.recorder.rows() if r.kind == "crash"}
        for joiner in set(joiners) - crashed:
            assert joiner in result.app_states and len(views_of(result, joiner)) > 1


# -- partitions --------------------------------------------------------------------------------


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
def test_a_cut_off_minority_blocks_then_stops(ordering: str, safe: bool) -> None:
    """The majority removes n1 (the sequencer) and n2 and goes on under a new sequencer;
    on heal the minority learns it was removed and stops (the membership layer's rule:
    a member the group went on without was cut off), having delivered nothing apart."""
    result = simulate(ordering, 5, f"{NET},partition=n1+n2|n3+n4+n5@100ms-2500ms",
                      safe=safe, seed=7)
    clean(result, whole_trace=False)
    for node in ("n1", "n2"):
        assert node not in result.app_states
        assert all(len(members) != 2 for _, members in views_of(result, node))
    assert set(result.app_states) == {"n3", "n4", "n5"}
    # The majority delivered in a view of its own while the minority was cut off.
    majority_views = {v for v, members in views_of(result, "n3") if len(members) == 3}
    assert any(r.node == "n3" and r.kind == "deliver" and r.view_id in majority_views
               for r in result.recorder.rows())


# -- planted bugs ------------------------------------------------------------------------------


class CutOneEarly(Sequencer):
    """Gives joiners a cut one delivery earlier than the snapshot: the joiner delivers
    the last message before the cut again, on top of a state that holds it."""

    def join_cut(self) -> JoinCut:
        cut = super().join_cut()
        st = self.st
        number = st.delivered_through()
        if number < 1 or number not in st.log:
            return cut
        mid, body = st.log[number]
        return JoinCut({**cut.delivered, mid.origin: mid.seq - 1},
                       {**cut.clock, sequencer_view.THROUGH: number - 1},
                       [FlushMessage(mid.origin, mid.seq, body, stamp=number),
                        *cut.messages])


class DeliversTheOutcomeLate(Sequencer):
    """Delivers the flush's outcome only once the next view is installed: what a member
    lacked of the old view it delivers in the new one."""

    late: list[Effect] = []

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        self.late = super().conclude(outcome)
        return []

    def handle(self, event: Event, now: int) -> list[Effect]:
        effects = super().handle(event, now)
        if isinstance(event, ViewInstalled) and self.late:
            effects, self.late = [*self.late, *effects], []
        return effects


@pytest.mark.parametrize(("core", "layer", "code"), [
    (CutOneEarly, Membership, "STATE"),
    (DeliversTheOutcomeLate, Membership, "SAME_VIEW_DELIVERY")])
def test_the_membership_checks_catch_a_broken_variant(core: type, layer: type,
                                                      code: str) -> None:
    found: set[str] = set()
    for seed in range(1, 7):
        config = SimConfig("causal-total", nodes=4, messages=200, seed=seed,
                           faults=f"{NET},join=n5@{40 + 10 * seed}ms")

        def make(node: NodeId, view: View, config: SimConfig = config) -> Stack:
            stack = build_stack(node, "g", "causal-total", view, config.options)
            top = layer(node, core(node, causal=True))
            layers = [*stack.layers[:-1], top]
            return Stack(node, "g", layers, view)

        result = run_simulation(config, stack_factory=make)
        found |= {p.code for p in membership_problems(result)}
        if code in found:
            break
    assert code in found, found
