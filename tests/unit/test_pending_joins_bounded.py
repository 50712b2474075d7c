"""Pending joins are bounded against a hostile member (issue #21): a member forwards join
asks (`SJoinFwd`) for joiners that do not exist, as many as it likes. The sequencer's
leader keeps each in `SequencerState.join_requests` (ordering/sequencer_join.py, being
rewritten by #19) with no limit; the membership layer's `_join_requests` likewise. The
strict xfail below is the property the fix must pass: after 10,000 forwarded asks the
leader holds at most MAX_GUESTS of them (the open channel's bound on strangers it talks to).
"""

from __future__ import annotations

import contextlib

import pytest

from abcast.errors import AbcastError
from abcast.ids import View
from abcast.ordering import sequencer_join
from abcast.ordering._open_channel import MAX_GUESTS
from abcast.ordering.sequencer import Sequencer


@pytest.mark.xfail(strict=True, reason="join_requests has no bound (sequencer_join.py, #19)")
def test_forwarded_join_asks_for_strangers_stay_bounded_at_the_leader() -> None:
    core = Sequencer("n1")
    st = core.st
    st.view, st.others = View(1, ("n1", "n2")), ("n2",)
    for k in range(10_000):
        with contextlib.suppress(AbcastError):  # refusing one is a fine answer
            sequencer_join.on_join_ask(st, f"x{k}")
    assert len(st.join_requests) <= MAX_GUESTS
