"""A long-lived member's state does not grow with view changes (issue #21): in a churn run
(abcast.evaluation.retained.churn_sizes: three anchors; each cycle two members join, one
leaves, one crashes — four view changes), the retained bytes of each layer of an anchor's
stack after 40 cycles are those after 8, within 3 % (dict capacities and what
is in flight move a little). The load is light so that what is in flight is small.

The open channel remembers departed nodes (`_gone`) up to MAX_GONE: patched to 4 here, so
that the bound is reached within the run. The detector forgets a `NotMember` notice
after a period (`FailureDetectorLayer._forget_notices`); a planted detector that keeps
them grows. The membership layer (which holds the sequencer) forgets the suspicion of a
node the view it installs leaves out.
"""

from __future__ import annotations

import pytest

from abcast.evaluation.retained import churn_sizes
from abcast.group.failure_detector import FailureDetectorLayer
from abcast.ordering import _open_channel

GROWTH = 1.03
CYCLES = 40


@pytest.fixture(scope="module")
def sizes() -> dict[int, dict[str, int]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_open_channel, "MAX_GONE", 4)
        return dict(churn_sizes("sequencer", cycles=CYCLES, every=8, rate_per_s=5.0))


def test_the_open_channel_keeps_no_more_after_40_cycles_than_after_8(
        sizes: dict[int, dict[str, int]]) -> None:
    assert sizes[CYCLES]["OpenChannel"] <= GROWTH * sizes[8]["OpenChannel"], sizes


def test_the_detector_keeps_no_more_after_40_cycles_than_after_8(
        sizes: dict[int, dict[str, int]]) -> None:
    assert sizes[CYCLES]["OpenDetector"] <= GROWTH * sizes[8]["OpenDetector"], sizes


def test_the_membership_layer_keeps_no_more_after_40_cycles_than_after_8(
        sizes: dict[int, dict[str, int]]) -> None:
    assert sizes[CYCLES]["Membership"] <= GROWTH * sizes[8]["Membership"], sizes


def test_without_the_bound_the_open_channel_grows() -> None:
    # The planted variant: MAX_GONE never reached, every departed node kept.
    got = dict(churn_sizes("sequencer", cycles=CYCLES, every=8, rate_per_s=5.0))
    assert got[CYCLES]["OpenChannel"] > GROWTH * got[8]["OpenChannel"], got


def test_a_detector_that_keeps_every_notice_grows(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted variant: notices never forgotten, one entry per departed node.
    monkeypatch.setattr(FailureDetectorLayer, "_forget_notices", lambda self, now: None)
    got = dict(churn_sizes("sequencer", cycles=CYCLES, every=8, rate_per_s=5.0))
    assert got[CYCLES]["OpenDetector"] > GROWTH * got[8]["OpenDetector"], got
