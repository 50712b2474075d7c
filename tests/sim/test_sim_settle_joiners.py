"""A simulated run settles only once no joiner is still asking to be admitted.

`bench/sweep_churn.py --flapping --nodes 5 --orderings causal`, seed 13: n6 asks to join
at 3.6 s while its only reachable contact, n5, sits frozen in a minority; the partition
heals at 6.6 s, n1 and n5 install view 5, and the run settled five seconds after the
last delivery, at 7.1 s, with n6 still on its way in (view 0). Its empty state was then
compared with the members' (STATE) — a run cut short, not a membership bug. Now the
harness waits for the joiner (abcast.sim.harness, `SimCluster.joining`): it is
admitted with the members' state and the run is clean; one that never gets in stalls
the run, which the sweeps count as incomplete.
"""

from __future__ import annotations

import random

from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults, judge


def test_the_run_waits_for_a_joiner_asking_when_deliveries_stop() -> None:
    config = SimConfig("causal", nodes=5, messages=200, seed=13,
                       faults=flapping_faults(random.Random(13), 5))
    result = run_simulation(config)
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent
    views = [r for r in result.recorder.rows_of("n6") if r.kind == "view"]
    assert views[-1].view_id > 0 and "n6" in (views[-1].members or ())
    assert len(set(result.app_states.values())) == 1
