"""A null entry inside a nested column (a `members` list, a `deps` map) names no node and
no bound (docs/checks.md, "Fine print"). The schema allows such nulls and both readers
pass them on; before, the in-memory checks raised TypeError on them (sorting a member
list with None in it, comparing a None bound) while Spark judged the trace.
(tests/spark/test_spark_agrees_with_memory holds Spark to the same traces.)
"""

from __future__ import annotations

from abcast.testing import VIEW_CONSISTENCY, check_events, count_by_code
from abcast.testing.builders import null_entries
from abcast.trace.schema import GUARANTEES


def test_null_members_and_null_bounds_are_skipped() -> None:
    # n3's private start [n3, null] is its private start: it is admitted in view 2 with
    # n1#1 as state, so n2#1 (which depends on n1#1) breaks no causal order at n3.
    assert check_events(null_entries(), GUARANTEES) == []


def test_a_member_list_with_a_null_is_compared_without_it() -> None:
    found = check_events(null_entries(deviant=True), GUARANTEES)
    assert count_by_code(found) == {VIEW_CONSISTENCY: 1}
    assert [(v.nodes, v.positions) for v in found] == [(("n2", "n1"), (1,))]
