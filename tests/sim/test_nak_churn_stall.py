"""The NAK channel (IP multicast) under churn: a partition that heals plus a crash.

Found by a sweep of combinations the bench sweeps do not run ("skeen nak churn" and
"sequencer nak churn"; the same schedules over the reliable channel are clean). Seed 26
below: n2 is cut off 692 ms-3271 ms and removed, n3 crashes at 1280 ms. After the heal
n2 multicasts a stale flush message; at n4 the NAK channel takes the frame and arms its
"nak" timer, then the membership layer refuses the flush message (RemoteProtocolError)
and the stack drops the frame's outputs — the SetTimer with them. The channel's flag
said armed, so n4 never NAKed again: it missed n5's multicast 51 for good, waited for
ever on n5#26's final timestamp, and the others delivered what it never did
(AGREEMENT, VALIDITY, the run stalled). The channel now keeps each timer's due time and
sets an overdue one again (abcast.reliability.nak, its rules).

Seed 58 of `bench/sweep_churn.py --nak --orderings skeen` (8 nodes, n2 leaves, n4
crashes, n9 joins, n1 cut off): a prepare for view 4 from n3 reached n7 before n2's
install of view 3 (n2, leaving, coordinated it); n7 deferred it behind n2 and never
answered once view 3 left n2 out, so the flush never ended (VALIDITY 2, the run
stalled). tests/unit/test_membership_deferred_prepare.py has the rule.
"""

from __future__ import annotations

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import judge

CUT_AND_CRASH = "drop=0.03,delay=1-20ms,crash=n3@1280ms,partition=n2|n1+n3+n4+n5+n6@692ms-3271ms"


LEAVE_JOIN_CRASH_CUT = ("drop=0.03,dup=0.02,delay=1-20ms,join=n9@830ms,leave=n2@723ms,"
                        "crash=n4@589ms,partition=n1|n2+n3+n4+n5+n6+n7+n8@394ms-2814ms")


def _run(multicast: str, ip_multicast: bool, nodes: int = 6, seed: int = 26,
         faults: str = CUT_AND_CRASH) -> tuple[list[str], bool]:
    result = run_simulation(SimConfig("skeen", nodes=nodes, messages=200, seed=seed,
                                      faults=faults,
                                      options=OrderingOptions(multicast=multicast),
                                      ip_multicast=ip_multicast))
    violations, problems = judge(result)
    return [v.code for v in violations] + [p.code for p in problems], result.quiescent


def test_the_same_schedule_is_clean_over_the_reliable_channel() -> None:
    assert _run("reliable", False) == ([], True)


def test_a_heal_and_a_crash_over_the_nak_channel_stay_clean() -> None:
    assert _run("nak", True) == ([], True)


def test_a_prepare_that_overtook_the_install_before_it_is_answered() -> None:
    assert _run("nak", True, nodes=8, seed=58, faults=LEAVE_JOIN_CRASH_CUT) == ([], True)
