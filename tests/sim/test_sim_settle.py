"""A simulated run settles only once no member of the latest view is still to install
it (abcast.sim.harness, `SimCluster.behind`; primary partition), as it waits for a
joiner still asking (tests/sim/test_flapping_seeds.py).

Found when the membership fixes moved `--flapping --orderings fifo` seed 9: n4 installed
view 6 at 6.99 s and the run settled at 7.0 s with the install on its way to n7 and n9
(VIEW_ORDER). Here n3 leaves and the links n1 -> n2 hold their packets from just after
n2 answered the flush until 7 s: on main the run ended at 6 s with n2 still in view 1.
"""

from __future__ import annotations

from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import judge


def test_the_run_waits_for_a_member_whose_install_is_held() -> None:
    result = run_simulation(SimConfig(
        "fifo", nodes=4, messages=40, seed=1,
        faults="delay=5-10ms,leave=n3@500ms,hold=n1>n2@516ms-7s"))
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent and result.end_us >= 7_000_000
    views = {n: [r.view_id for r in result.recorder.rows_of(n) if r.kind == "view"]
             for n in ("n1", "n2", "n4")}
    assert views == {"n1": [1, 2], "n2": [1, 2], "n4": [1, 2]}
