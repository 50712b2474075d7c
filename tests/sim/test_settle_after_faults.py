"""A simulated run is not settled while its fault schedule still plays out.

Found by `bench/sweep_churn.py --nak --flapping`: over IP multicast the 200-message
workload was delivered within a second, and the harness called the run settled 5 s
after the last delivery, at 6 s, while a partition scheduled until 8.8 s still held a
member cut off (not yet excluded) or a joiner not yet welcomed: the judge then saw
unequal views or states (unordered, fifo, causal seeds 9, 24, 33, 50; chandra-toueg 17
over either channel) where the protocol had done nothing wrong. The run now ends once
nothing was delivered for settle_us after the later of the last delivery and the last
scheduled fault.
"""

from __future__ import annotations

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import judge

CUT_LONG_AFTER_THE_WORKLOAD = "drop=0.02,delay=1-5ms,partition=n3|n1+n2+n4@300ms-7000ms"


def test_a_member_cut_off_after_the_last_delivery_is_judged_after_the_heal() -> None:
    config = SimConfig("unordered", nodes=4, messages=20, seed=3,
                       faults=CUT_LONG_AFTER_THE_WORKLOAD,
                       options=OrderingOptions(multicast="nak"), ip_multicast=True)
    result = run_simulation(config)
    assert result.quiescent
    assert result.end_us >= 7_000_000 + config.settle_us
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []


FLAPPING_24 = ("drop=0.03,dup=0.02,delay=1-20ms,"
               "partition=n1+n2+n7|n3+n4+n5+n6+n8@1868ms-4815ms,"
               "partition=n1+n5+n6|n2+n3+n4+n7+n8@2787ms-6533ms,"
               "partition=n3|n1+n2+n4+n5+n6+n7+n8@3560ms-6787ms,"
               "partition=n2+n6|n1+n3+n4+n5+n7+n8@5107ms-8760ms,"
               "join=n9@2790ms,join=n10@2501ms,crash=n2@5316ms,leave=n5@3006ms")


def test_the_flapping_sweeps_seed_24_is_judged_once_its_faults_are_over() -> None:
    """Judged at 6 s (main), the joiners n9 and n10 held another state than the rest."""
    config = SimConfig("unordered", nodes=8, messages=200, seed=24, faults=FLAPPING_24,
                       options=OrderingOptions(multicast="nak"), ip_multicast=True)
    result = run_simulation(config)
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent and result.end_us >= 8_760_000 + config.settle_us
