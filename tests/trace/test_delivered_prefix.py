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


RUNS = st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 40), st.integers(1, 8)),
                max_size=60)


@settings(max_examples=300, deadline=None)
@given(RUNS)
def test_runs_noted_at_once_give_the_plain_definitions(runs: list[tuple[str, int, int]]) -> None:
    # a delivered batch is noted as one run (the runtime's recording of batches)
    prefix = DeliveredPrefix()
    notes: list[tuple[str, int]] = []
    for origin, first, count in runs:
        prefix.note_run(origin, first, count)
        notes += [(origin, seq) for seq in range(first, first + count)]
        assert prefix.deps("me") == _reference(notes)
    kept = {o: len(starts) for o, (starts, _) in prefix._runs.items()}
    gaps = {o: _gaps_above(notes, o) for o in kept}
    assert kept == gaps  # one run per gap, never more


def _gaps_above(notes: list[tuple[str, int]], origin: str) -> int:
    """How many maximal runs of delivered numbers lie above the prefix."""
    seqs = sorted({seq for o, seq in notes if o == origin})
    k = _reference(notes).get(origin, 0)
    above = [seq for seq in seqs if seq > k]
    return sum(1 for i, seq in enumerate(above) if i == 0 or above[i - 1] != seq - 1)


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
