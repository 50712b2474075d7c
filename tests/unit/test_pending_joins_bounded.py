"""Pending joins are bounded against a hostile member (issue #21): a member forwards join
asks (`MJoinFwd`) for joiners that do not exist, as many as it likes. The acting leader's
membership layer holds at most MAX_PENDING_JOINS of them for the next view; the rest are
dropped and counted (`joins_deferred`), and an honest joiner's retry asks again. A
planted layer without the bound holds every ask."""

from __future__ import annotations

import pytest

from abcast.codec import EMPTY
from abcast.events import Received, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership, join_leave
from abcast.membership.wire import MJoinFwd
from abcast.ordering.sequencer import Sequencer

ASKS = 10_000


def _flooded_leader() -> Membership:
    leader = Membership("n1", Sequencer("n1"))
    leader.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    for k in range(ASKS):
        leader.handle(Received("n2", MJoinFwd(f"x{k}"), EMPTY), 0)
    return leader


def test_forwarded_join_asks_for_strangers_stay_bounded_at_the_leader() -> None:
    leader = _flooded_leader()
    counters = leader.inspect().counters
    assert len(leader.s.join_requests) == join_leave.MAX_PENDING_JOINS
    assert counters["joins_deferred"] == ASKS - join_leave.MAX_PENDING_JOINS


def test_a_leader_without_the_bound_holds_every_ask(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(join_leave, "MAX_PENDING_JOINS", 10**9)
    assert len(_flooded_leader().s.join_requests) == ASKS
