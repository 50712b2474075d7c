"""Regressions: churn runs of the sequencer family that stalled or broke a guarantee, now
run under the membership layer (abcast.membership).

1. A prepare that overtook the view it belongs to. Seven nodes; n8 joins, n3 crashes,
n5 leaves, and n1+n2 (n1 the sequencer) are cut off from n4+n6+n7 for 2.5 s, with n8 on
neither side (it hears both). A flush once waited for ever for a member that dropped a
prepare from a node outside its view (the membership layer keeps such a prepare until
the view in between is installed, `Membership._early`).

2. Two memberships under one view id, when a coordinator is cut off right after it
   concluded a flush (`MState.prior`).

(The old engine's own regressions — welcomes into views left behind, rejoiners' resent
broadcasts — concerned its rejoin, which the membership layer does not do: a member the
group went on without stops.)
"""

from __future__ import annotations

import random

import pytest

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import flapping_faults, judge, present_throughout

STALLED = ("drop=0.03,dup=0.02,delay=1-20ms,crash=n3@800ms,join=n8@300ms,leave=n5@1200ms,"
           "partition=n1+n2|n4+n6+n7@1500ms-4000ms")


def stalled_run(ordering: str, safe: bool) -> SimResult:
    return run_simulation(SimConfig(ordering, nodes=7, messages=400, seed=5, faults=STALLED,
                                    options=OrderingOptions(safe=safe)))


@pytest.mark.parametrize("ordering", ["sequencer", "causal-total"])
@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
def test_the_stalled_churn_run_now_settles_with_every_property(ordering: str, safe: bool) -> None:
    result = stalled_run(ordering, safe)
    assert result.quiescent, result.summary()
    violations, problems = judge(result)
    assert violations == [], [v.detail for v in violations[:3]]
    assert problems == [], problems[:3]
    rows = result.recorder.rows()
    present = present_throughout(rows, result.config.node_ids())
    assert {"n4", "n6", "n7"} <= present
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in present}
    for node in present:
        got = {(r.origin, r.seq) for r in result.recorder.rows_of(node) if r.kind == "deliver"}
        assert sent <= got, (node, sorted(sent - got)[:5])
    # The cut-off members stopped, the joiner is in, and all end in one state.
    assert {"n4", "n6", "n7", "n8"} <= set(result.app_states)
    assert len(set(result.app_states.values())) == 1


def test_a_coordinator_cut_off_right_after_concluding_does_not_share_its_view_id() -> None:
    """n1 collects every state for the view that lets n5 go, concludes and installs
    view 2 — and is cut off before its MInstall leaves. The others, who had answered
    it, later run their own flush: it used to install a different view 2 (one id, two
    member lists). A member that answered another coordinator for a target first says
    so (`MState.prior`), and the flush takes the next id."""
    faults = flapping_faults(random.Random(10), 8)
    assert "partition=n1+n5|" in faults and "leave=n5@362ms" in faults
    result = run_simulation(SimConfig("sequencer", nodes=8, messages=400, seed=10,
                                      faults=faults, options=OrderingOptions(safe=True)))
    violations, problems = judge(result)
    assert violations == [] and problems == [], (violations[:3], problems[:3])
    assert result.violations == [], result.counts
    lists: dict[int, set[tuple[str, ...]]] = {}
    for r in result.recorder.rows():
        if r.kind == "view" and r.view_id:
            lists.setdefault(r.view_id, set()).add(tuple(r.members or ()))
    assert all(len(m) == 1 for m in lists.values()), lists
