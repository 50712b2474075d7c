"""Seeds of `bench/sweep_churn.py --flapping` (primary partition: two to four
overlapping partitions, one or two joiners, a crash and a leave) that found a bug, each
clean now. The rules are driven by hand in tests/unit/test_membership_flush_fate.py.

- causal 158, 175 (virtual synchrony). At 175 n1 concludes view 2 with every state,
  n3's among them, just as a partition cuts n1 off: its install reaches n3 after the
  heal. n3 suspects n1, answers n2's flush for view 3, and n2, left with three of
  seven, gives it up. Its MAbort unfroze n3, which delivered in view 1 three messages
  view 2's members never delivered there (AGREEMENT, VIRTUAL_SYNCHRONY,
  SAME_VIEW_DELIVERY). Now a member stays frozen while a flush it answered may have
  installed (`pledged`, abcast.membership.layer).
- causal 126, matrix 161 with 5 nodes (the liveness that rule needs; clean on main by
  timing, stalled with the rule alone): a prepare held back while the member trusted
  the leaver before its sender stayed held after the install that let the leaver go;
  and a member frozen for a leaver's flush that installed elsewhere, a view behind and
  short of a majority, could ask nobody for the install. Now the held prepare is
  answered on the install, and such a member asks the members it trusts every
  stability period.
- skeen 136: a coordinator gave up its flush for view 4 (attempt 6) and started again
  from its view for view 3 (attempt 7); n2 took (3, 7) for older than (4, 6), dropped
  it, and the coordinator waited for ever (VALIDITY, stalled). A member now orders one
  coordinator's prepares by attempt. Over the NAK channel (`--nak --flapping`) the same
  seed stalled unordered and fifo the same way: n1's flush for view 3 (attempt 8), after
  its attempt 7 for view 4, was dropped by n2, n7 and n8, and view 2, whose n6 had
  crashed, stayed for good with the joiners outside (a review took it for the NAK
  channel's suspect rule, with which it was clean by timing).
- matrix 156 with 5 nodes: a coordinator whose own flush was overtaken by the install
  of a view it missed gave it up silently, and a member that had answered stayed
  frozen (VALIDITY, AGREEMENT, stalled). It sends the flush's MAbort now, as for an
  attempt it replaces.
- causal 13 with 5 nodes (the harness): n6 asks to join while its only reachable
  contact sits frozen in a minority; the run settled five seconds after the last
  delivery with n6 still on its way in, and compared its empty state (STATE). A run
  now settles only once no joiner is still asking (abcast.sim.harness).
"""

from __future__ import annotations

import random

import pytest

from abcast.ordering.registry import OrderingOptions
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import flapping_faults, judge


def _clean_run(ordering: str, nodes: int, seed: int, nak: bool = False) -> SimResult:
    options = OrderingOptions(multicast="nak") if nak else OrderingOptions()
    result = run_simulation(SimConfig(ordering, nodes=nodes, messages=200, seed=seed,
                                      faults=flapping_faults(random.Random(seed), nodes),
                                      options=options, ip_multicast=nak))
    violations, problems = judge(result)
    assert [v.code for v in violations] + [p.code for p in problems] == []
    assert result.quiescent
    return result


@pytest.mark.parametrize(("ordering", "nodes", "seed", "nak"), [
    ("causal", 8, 158, False), ("causal", 7, 175, False),  # an abort unfroze a pledged member
    ("causal", 5, 126, False), ("matrix", 5, 161, False),  # ...and it still gets its view
    ("skeen", 8, 136, False),  # a newer attempt for a lower view id is answered
    ("unordered", 8, 136, True),  # ...over the NAK channel too
    ("matrix", 5, 156, False),  # a flush overtaken by a missed install is aborted
])
def test_a_flapping_seed_that_found_a_membership_bug_is_clean(
        ordering: str, nodes: int, seed: int, nak: bool) -> None:
    _clean_run(ordering, nodes, seed, nak)


def test_the_run_waits_for_a_joiner_asking_when_deliveries_stop() -> None:
    result = _clean_run("causal", 5, 13)
    views = [r for r in result.recorder.rows_of("n6") if r.kind == "view"]
    assert views[-1].view_id > 0 and "n6" in (views[-1].members or ())
    assert len(set(result.app_states.values())) == 1
