"""The native lane's differential test (test_native_lane.py) is worth what it passes.

Each bug the C lane can plant (`_lane.plant(1..8)`, named in `_lane.PLANTS`: a detector
stamp or an owed ack not written, a delivered number kept, a clashing number taken, a
member's data dropped, ...) is caught by that test's comparison on a seeded history that
the lane without it passes (the plant made the difference). The same harness, run on the
lane's Python model (`lane_model.StandIn`), agrees with the Python path, is taken often,
and catches each of the model's planted bugs (1-6 the C lane's, 7 a reference kept),
also where the extension is not built: what the lane's comparisons find is the lane's,
and what they pass is not the harness's blind spot. And the lane takes exactly what the
model takes, frames and broadcasts, over the same histories: a lane that declined more
than it must passes every comparison and is only slower; this sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from lane_model import StandIn
from test_native_lane import OPTIONS, SEEDS, Lane, MismatchError, lane, run, taken_over

__all__ = ["lane"]  # the C lane's fixture, shared with test_native_lane.py


@contextmanager
def planted(lane: Lane, k: int) -> Iterator[None]:
    lane.plant(k)
    try:
        yield
    finally:
        lane.plant(0)


def caught_on(lane: Lane, k: int) -> str | None:
    """Where the first seed's history parts the groups with plant `k`, or None; the same
    history must not part them without it (the plant made the difference)."""
    for seed in SEEDS:
        try:
            with planted(lane, k):
                run(seed, lane, options=OPTIONS[seed % len(OPTIONS)])
        except MismatchError as exc:
            run(seed, lane, options=OPTIONS[seed % len(OPTIONS)])
            return str(exc)
    return None


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7, 8])
def test_each_planted_bug_of_the_lane_is_caught(lane: Lane, k: int) -> None:
    assert caught_on(lane, k), f"the lane's plant {k} went unseen"


# -- the harness itself, on the Python model -----------------------------------------


def test_the_stand_in_agrees_with_the_python_path_and_is_taken() -> None:
    """The harness against the Python model of the lane: equal, and taken often."""
    tally = taken_over(StandIn(), SEEDS[:4])
    assert tally.taken > 100 and tally.calls - tally.taken > 100, tally


def test_the_lane_takes_what_the_model_takes(lane: Lane) -> None:
    """No more and no fewer frames than `StandIn`'s predicate (the rules the lane's
    source states): a lane that declined more than it must (holes it need not fear, an
    ack it could take) passes every comparison of test_native_lane.py and is only
    slower; this sees it. A new frame kind in the lane needs its rule in the model too."""
    assert taken_over(lane, SEEDS[:4]) == taken_over(StandIn(), SEEDS[:4])


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7])
def test_the_harness_catches_the_stand_ins_planted_bugs(k: int) -> None:
    """Each bug the C lane can plant, planted in the model, is caught: what the lane's
    tests find is the lane's, and what they pass is not the harness's blind spot (this
    runs where the extension is not built too)."""
    assert caught_on(StandIn(), k), f"plant {k} went unseen"
