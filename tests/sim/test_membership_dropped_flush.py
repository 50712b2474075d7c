"""A coordinator whose own flush is overtaken by the install of a view it missed tells
that flush's members it is off.

Found by `bench/sweep_churn.py --flapping --nodes 5 --orderings matrix`, seed 156. n1
(leaving) installs view 2 = {n2, n5, n6}; the install reaches n5 but not n2, cut off
with n1 until 7.1 s. n2 stays frozen in view 1 and, on the heal, coordinates a flush
for view 3 that n5 answers from view 2; n5's copy of the install reaches n2 before that
answer. n2 installs view 2 and gives its own flush up (`adopt`) — and, before, told
nobody: n5 stayed frozen for it, its own broadcast was never delivered by it (VALIDITY,
AGREEMENT) and the run stalled. Now the coordinator sends the flush's MAbort
(abcast.membership.layer, `on_install`), n5 resumes, and the run is clean.
"""

from __future__ import annotations

import random

from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults, judge


def test_a_flush_given_up_for_a_missed_install_is_aborted_at_its_members() -> None:
    config = SimConfig("matrix", nodes=5, messages=200, seed=156,
                       faults=flapping_faults(random.Random(156), 5))
    result = run_simulation(config)
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent
