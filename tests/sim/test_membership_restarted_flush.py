"""A coordinator that gives its flush up and starts again from its view: its members
answer the new attempt, whatever view id it aims at.

Found by `bench/sweep_churn.py --flapping --orderings skeen`, seed 136 (8 nodes, view 2
of seven after n5 left, n6 crashed). n1 aims its flush at view 4 (attempt 6: a member's
state said it had answered another coordinator for view 3), then, short of a majority,
gives it up. After the heal it starts again from view 2: attempt 7, for view 3. n2 had
answered attempt 6 and took the new prepare for an older one — (3, 7) <= (4, 6) — and
dropped it: n1 waited for n2's state for ever, every member's last broadcast stayed
undelivered (VALIDITY) and the run stalled. Now a member answers a newer attempt of the
coordinator it answered, even for a lower view id (abcast.membership.layer,
`_on_prepare`); and a coordinator that replaces its flush by a new attempt sends the old
one's MAbort, so that no member stays frozen for it (`pledged`).
"""

from __future__ import annotations

import random

from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults, judge


def test_a_newer_attempt_for_a_lower_view_id_is_answered() -> None:
    config = SimConfig("skeen", nodes=8, messages=200, seed=136,
                       faults=flapping_faults(random.Random(136), 8))
    result = run_simulation(config)
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent
