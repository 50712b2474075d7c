"""A prepare deferred because a member its sender follows was still trusted is answered
once a view leaves that member out.

Found by the NAK channel's churn sweep (skeen, seed 58: tests/sim/test_nak_churn_stall.py):
n2, leaving, coordinated view 3 without itself; n3, the next coordinator, prepared view
4 (a joiner) and its prepare reached n7 before n2's install. n7 deferred it (n2 preceded
n3 and was not suspected), installed view 3, and kept it deferred for ever: only a
suspicion replayed deferred prepares, and nobody suspects a member that left. n3 waited
on n7's state, the flush never ended, and skeen's messages of view 3 were never delivered.
"""

from __future__ import annotations

from abcast.codec import EMPTY
from abcast.effects import Send
from abcast.events import Received, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership
from abcast.membership.wire import MInstall, MPrepare, MState
from abcast.ordering.unordered import Unordered


def test_a_deferred_prepare_is_answered_once_the_view_leaves_out_who_preceded_it() -> None:
    layer = Membership("n3", Unordered("n3"))
    layer.handle(ViewInstalled(View(3, ("n1", "n2", "n3", "n4"))), 0)
    # n1 (leaving) prepares view 4 without itself; n3 answers it
    answer = layer.handle(Received("n1", MPrepare(4, 1, ["n1", "n2", "n3", "n4"]), EMPTY), 1)
    assert [type(e.header) for e in answer if isinstance(e, Send)] == [MState]
    # n2 prepares view 5 (a join) before n1's install reaches n3: n1 still precedes n2
    assert layer.handle(Received("n2", MPrepare(5, 1, ["n2", "n3", "n4"]), EMPTY), 2) == []
    effects = layer.handle(Received("n1", MInstall(4, 1, ["n2", "n3", "n4"], []), EMPTY), 3)
    assert layer.view == View(4, ("n2", "n3", "n4"))
    states = [e for e in effects if isinstance(e, Send) and isinstance(e.header, MState)]
    assert [(s.to, s.header.target, s.header.view_id) for s in states] == [("n2", 5, 4)]
    assert layer.phase == "member, flushing"
