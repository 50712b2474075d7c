"""Chandra-Toueg: a member the majority removed — a partition's minority, or a member
falsely suspected because its packets were lost — comes back once it can be heard again:
it is admitted by consensus like any joiner, gets a snapshot, and goes on. The trace
shows the removed incarnation as crashed and the new one as recovered; the claimed
checks, the view checks and the replicated states hold over the whole run."""

from __future__ import annotations

import pytest
from planted_open_channel import forgotten_for_good

from abcast.ids import NodeId
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import membership_problems
from abcast.trace.rows import EventRow

NET = "drop=0.03,dup=0.02,delay=1-15ms"
MS = 1_000_000  # t_ns per simulated millisecond


def run(nodes: int, seed: int, faults: str, messages: int = 500, rate: float = 100) -> SimResult:
    config = SimConfig("chandra-toueg", nodes=nodes, messages=messages, seed=seed,
                       faults=faults, rate=rate)
    result = run_simulation(config)
    where = f"abcast sim --ordering chandra-toueg --nodes {nodes} --seed {seed} --faults {faults}"
    assert result.violations == [], (where, result.counts)
    assert membership_problems(result) == [], where
    assert result.quiescent, where
    return result


def rows_of(result: SimResult, node: NodeId) -> list[EventRow]:
    return [r for r in result.recorder.rows() if r.node == node]


def last_view(result: SimResult, node: NodeId) -> tuple[NodeId, ...]:
    views = [r.members for r in rows_of(result, node) if r.kind == "view"]
    assert views and views[-1] is not None
    return views[-1]


def assert_came_back(result: SimResult, node: NodeId, everyone: list[NodeId]) -> None:
    """Removed once, then a member again that delivers what is ordered after its return
    and ends with the others' state."""
    rows = rows_of(result, node)
    kinds = [r.kind for r in rows]
    assert "crash" in kinds and "recover" in kinds, f"{node} was never removed and readmitted"
    back = kinds.index("recover")
    assert any(r.kind == "deliver" for r in rows[back:]), f"{node} delivered nothing after"
    for other in everyone:
        assert node in last_view(result, other), f"{other}'s view leaves {node} out"
    assert len({last_view(result, n) for n in everyone}) == 1
    assert set(result.app_states) == set(everyone)
    assert len(set(result.app_states.values())) == 1, "replicated states differ"


@pytest.mark.parametrize(("nodes", "minority", "seed"), [
    (5, ["n4", "n5"], 1),
    (5, ["n1", "n2"], 2),  # the first coordinators
    (6, ["n2", "n5"], 3),
    (7, ["n5", "n6", "n7"], 4),
    (7, ["n1", "n4", "n7"], 5),
])
def test_ct_rejoin_a_removed_minority_is_a_member_again_after_the_heal(
    nodes: int, minority: list[NodeId], seed: int,
) -> None:
    everyone = [f"n{i}" for i in range(1, nodes + 1)]
    majority = [n for n in everyone if n not in minority]
    cut = f"partition={'+'.join(minority)}|{'+'.join(majority)}@200ms-2500ms"
    result = run(nodes, seed, f"{NET},{cut}")
    rows = result.recorder.rows()
    for node in minority:
        assert_came_back(result, node, everyone)
    for node in majority:
        assert "crash" not in [r.kind for r in rows_of(result, node)]
    # While cut off, the minority decided nothing: of the majority's broadcasts made
    # during the partition, its removed incarnation delivered none.
    during = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in majority
              and 200 * MS <= r.t_ns < 2_500 * MS}
    for node in minority:
        mine = rows_of(result, node)
        first = mine[: [r.kind for r in mine].index("crash")]
        assert during and not during & {(r.origin, r.seq) for r in first if r.kind == "deliver"}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ct_rejoin_a_falsely_suspected_member_is_removed_and_comes_back(seed: int) -> None:
    # n3 hears everyone but nobody hears it (its packets are lost for 2 s): the others
    # suspect it, wrongly, and remove it; it learns so and asks back, heard after the heal.
    everyone = [f"n{i}" for i in range(1, 6)]
    result = run(5, seed, f"{NET},partition=n3>*@300ms-2300ms")
    assert_came_back(result, "n3", everyone)
    assert [n for n in everyone if "crash" in [r.kind for r in rows_of(result, n)]] == ["n3"]


def test_ct_rejoin_a_rejoiner_sends_again_what_the_group_had_not_decided() -> None:
    # Every broadcast of a removed member is delivered in the end: those the group had
    # not decided when it removed the member are sent again, with the same ids, once it
    # is back (else its later broadcasts would wait for them for ever: FIFO).
    result = run(5, 7, f"{NET},partition=n4+n5|n1+n2+n3@200ms-2500ms")
    rows = result.recorder.rows()
    got = {(r.origin, r.seq) for r in rows_of(result, "n1") if r.kind == "deliver"}
    for node in ("n4", "n5"):
        sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node == node}
        during = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node == node
                  and 200 * MS <= r.t_ns < 2_500 * MS}
        assert during and sent <= got, f"n1 lacks {sorted(sent - got)[:5]}"


@pytest.mark.parametrize("planted", [False, True])
def test_ct_rejoin_a_minority_cut_off_longer_than_the_linger_comes_back(
        planted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The minority is cut off 14.5 s, longer than the open channel's linger (10 s): the
    majority's channels forget its members. They used to be gone for good there — every
    packet of theirs dropped for ever, so they could never rejoin (the run: VALIDITY and
    AGREEMENT units, the majority's view without them to the end). Forgotten as a silent
    guest is, with their link numbers kept, they are admitted again after the heal."""
    if planted:
        forgotten_for_good(monkeypatch)
    everyone = [f"n{i}" for i in range(1, 6)]
    faults = f"{NET},partition=n4+n5|n1+n2+n3@500ms-15000ms"
    if planted:
        config = SimConfig("chandra-toueg", nodes=5, messages=300, seed=1, faults=faults,
                           rate=10)
        result = run_simulation(config)
        assert "n4" not in last_view(result, "n1") and result.violations
        return
    result = run(5, 1, faults, messages=300, rate=10)
    for node in ("n4", "n5"):
        assert_came_back(result, node, everyone)
