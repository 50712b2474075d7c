"""A member that missed the install of a view whose coordinator then died.

Found by a sweep of combinations the bench sweeps do not run (the sequencer crashing
during a join; /tmp/cores/sweep_mix.py "sequencer seqcrash-join", seed 85). n1 installs
view 2 = {n1, n2, n3, n4} (n4 joins) and crashes at 97 ms; its install reaches n3 and
n4, not n2. n2, still in view 1, coordinates the next flush; n3 answers from view 2.
Before, n2 concluded anyway: it settled reports of two views (n2 never delivered what
n3 delivered in view 1: AGREEMENT, SAME_VIEW_DELIVERY), went from view 1 to view 3
while n3 went through view 2 (VIEW_ORDER), and left the live joiner n4 out, which then
stopped. Now a state from a member a view ahead stops the flush, n2 asks that member
for the install it missed, installs view 2 and flushes from there: view 3 is
{n2, n3, n4} at every member (abcast.membership.flush_coordinator). Under evs the rule
holds for a view whose flush the coordinator answered (an evs id names one coordinator's
view); any other view ahead may be another side's, which the merge settles.
"""

from __future__ import annotations

import random

import pytest

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults, judge

JOIN_THEN_CRASH = "drop=0.03,dup=0.02,delay=1-20ms,join=n4@71ms,crash=n1@97ms"


@pytest.mark.parametrize(("ordering", "seed"), [("causal", 38), ("sequencer", 85)])
def test_a_member_that_missed_the_dead_coordinators_install_catches_up(
        ordering: str, seed: int) -> None:
    result = run_simulation(SimConfig(ordering, nodes=3, messages=200, seed=seed,
                                      faults=JOIN_THEN_CRASH))
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent
    views = {r.node: [v.view_id for v in result.recorder.rows_of(r.node) if v.kind == "view"]
             for r in result.recorder.rows() if r.node in ("n2", "n3")}
    assert views["n2"] == views["n3"]
    last = [r for r in result.recorder.rows() if r.kind == "view" and r.node == "n2"][-1]
    assert last.members == ("n2", "n3", "n4")  # the joiner is kept


@pytest.mark.parametrize("rate", [40.0, 5.0])
def test_under_evs_a_view_we_answered_the_flush_of_is_caught_up(rate: float) -> None:
    """`bench/sweep_churn.py --evs --flapping`, seed 11 (7 nodes). Under evs a member's
    view id may be another side's, which the merge settles: the rule above, applied to
    any view ahead, stopped flushes for such views, skipped a view and ended with the
    sides apart (rate 40: VIEW_ORDER, STATE), and it was made primary partition's. Then
    at rate 5: n1 installs view 1660140 at 2.196 s, reaching n5, n6 and n9; the cut of
    n1 at 2.207 s keeps it from n2, n3 and n4, which answered that flush. n2 coordinates
    from view 611564 and n5, n6, n9 answer from 1660140: it settled both views' reports
    in one outcome, which n3 and n4 delivered in 611564 and n5, n6, n9 in 1660140 —
    messages n5 and n6 had sent in 1660140 (SAME_VIEW_DELIVERY, 6 units). Under evs a
    view whose flush we answered is of our lineage: n2 now asks for its install, n2, n3
    and n4 install 1660140 and the side flushes from there. Caught up, n8 (admitted by
    1660140, its welcome cut off) is welcomed again by the next view; n1's welcome comes
    after the heal and n8 refuses 1660140, which the members no longer take for a
    joiner two sides admitted (`MInstall.fresh`): they suspected n8 for good and
    answered no merge (VIEW_ORDER, STATE)."""
    config = SimConfig("sequencer", nodes=7, messages=200, seed=11,
                       faults=flapping_faults(random.Random(11), 7),
                       options=OrderingOptions(partitions="evs"), rate=rate,
                       stall_us=8_000_000)
    result = run_simulation(config)
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    if rate == 5.0:
        went = {r.node: [v.view_id for v in result.recorder.rows_of(r.node) if v.kind == "view"]
                for r in result.recorder.rows() if r.node in ("n2", "n3", "n4")}
        assert all(1660140 in ids for ids in went.values()), went
