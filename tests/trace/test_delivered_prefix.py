"""`DeliveredPrefix` (abcast.trace.recorder) computes the same prefixes as the plain
definition — the highest k with 1..k delivered, per origin — whatever the order, gaps
and duplicates; and what it keeps above a gap is one run per gap, not one entry per
message (issue #21: a gap that never filled kept every later message of its origin, the
soak's RSS growth on long-lived members). A planted variant that forgets a run must fail
the equality."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.trace.recorder import DeliveredPrefix

NOTES = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 40)),
                 max_size=200)


def _reference(notes: list[tuple[str, int]]) -> dict[str, int]:
    seen: dict[str, set[int]] = {}
    for origin, seq in notes:
        seen.setdefault(origin, set()).add(seq)
    prefixes = {}
    for origin, seqs in seen.items():
        k = 0
        while k + 1 in seqs:
            k += 1
        prefixes[origin] = k
    return {o: k for o, k in prefixes.items() if k > 0}


@settings(max_examples=300, deadline=None)
@given(NOTES)
def test_the_prefixes_are_the_plain_definitions(notes: list[tuple[str, int]]) -> None:
    prefix = DeliveredPrefix()
    for i, (origin, seq) in enumerate(notes):
        prefix.note(origin, seq)
        assert prefix.deps("me") == _reference(notes[:i + 1])


def test_a_gap_that_never_fills_keeps_one_run_not_every_message() -> None:
    prefix = DeliveredPrefix()
    prefix.note("a", 1)
    for seq in range(3, 100_003):  # #2 was given up by a view change
        prefix.note("a", seq)
    assert prefix.deps("me") == {"a": 1} and prefix.above() == 1
    prefix.note("a", 2)
    assert prefix.deps("me") == {"a": 100_002} and prefix.above() == 0


def test_a_planted_prefix_that_forgets_runs_is_caught() -> None:
    class Forgetful(DeliveredPrefix):
        def note(self, origin: str, seq: int) -> None:
            super().note(origin, seq)
            self._runs.clear()  # keeps nothing above a gap

    notes = [("a", 2), ("a", 1)]
    planted = Forgetful()
    for origin, seq in notes:
        planted.note(origin, seq)
    assert planted.deps("me") != _reference(notes)
