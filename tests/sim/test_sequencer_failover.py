"""Sequencer fail-over and SAFE delivery in the simulator: the sequencer crashing
mid-run, a partition cutting it off, the packet cost of SAFE, and a planted new
sequencer that forgets the messages nobody had numbered."""

from __future__ import annotations

import random

import pytest

from abcast.effects import Effect
from abcast.ordering import _flush_outcome, sequencer_numbering
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import SequencerState
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import judge

FAMILY = ["sequencer", "causal-total"]


def crash_the_sequencer(seed: int) -> str:
    return f"drop=0.05,delay=1-10ms,crash=n1@{random.Random(seed).randint(1, 1500)}ms"


def survivors_got_everything(result: SimResult) -> None:
    rows = result.recorder.rows()
    crashed = {r.node for r in rows if r.kind == "crash"}
    alive = sorted({r.node for r in rows} - crashed)
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in alive}
    for node in alive:
        got = {(r.origin, r.seq) for r in result.recorder.rows_of(node) if r.kind == "deliver"}
        assert sent <= got, f"{node} misses {sorted(sent - got)[:5]}"
    views = {tuple(r.members or () for r in result.recorder.rows_of(n) if r.kind == "view")
             for n in alive}
    assert len(views) == 1, views  # one view sequence, installed by every survivor
    assert "n1" not in next(iter(views))[-1]


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
@pytest.mark.parametrize("seed", range(2))
def test_the_sequencer_crashing_mid_run(ordering: str, safe: bool, seed: int) -> None:
    result = run_simulation(SimConfig(
        ordering, nodes=5, messages=150, seed=seed, faults=crash_the_sequencer(seed),
        options=OrderingOptions(safe=safe)))
    assert result.violations == [], result.counts
    assert ("uniform_agreement" in result.guarantees) == safe
    survivors_got_everything(result)


@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
def test_a_partition_cutting_off_the_sequencer(safe: bool) -> None:
    """The majority side moves on without n1; n1, alone, installs no view of its own.
    Once the partition heals it learns it was left out and stops (the membership layer's
    Isis rule: a member the group went on without was removed)."""
    result = run_simulation(SimConfig(
        "sequencer", nodes=5, messages=200, seed=4, options=OrderingOptions(safe=safe),
        faults="drop=0.02,delay=1-10ms,partition=n1|n2+n3+n4+n5@200ms-3s"))
    violations, problems = judge(result)
    assert violations == [] and problems == [], (violations[:3], problems[:3])
    assert result.quiescent
    n1 = result.recorder.rows_of("n1")
    assert [r.view_id for r in n1 if r.kind == "view"][:1] == [1]
    assert all("n1" not in (r.members or ()) for r in n1 if r.kind == "view" and r.view_id > 1)
    last = next(r for r in reversed(result.recorder.rows_of("n2")) if r.kind == "view")
    assert "n1" not in (last.members or ())
    # Over the whole trace nobody but the removed sequencer could be faulted.
    assert {v.nodes for v in result.violations} <= {("n1",)}, result.counts


@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_safe_costs_at_most_four_n_minus_one_packets_unbatched(n: int) -> None:
    """Data and order as without SAFE, plus at most one ack per member and one safe
    announcement per number (fewer when one ack covers two numbers)."""
    result = run_simulation(SimConfig(
        "sequencer", nodes=n, messages=8 * n, seed=n, net_trace=True,
        options=OrderingOptions(batch=1, safe=True)))
    assert result.violations == []
    assert 2 * (n - 1) < result.packets_per_broadcast <= 4 * (n - 1)


def test_safe_is_refused_where_there_is_no_safe_mode() -> None:
    from abcast.errors import ConfigError

    with pytest.raises(ConfigError, match="no safe mode"):
        run_simulation(SimConfig("fifo", nodes=3, messages=3, seed=1,
                                 options=OrderingOptions(safe=True)))


def _forgetful_take_over(
    st: SequencerState, last_number: int, deps: object
) -> list[Effect]:
    """The planted bug: number on from the fixed numbers, dropping what nobody numbered."""
    st.next_number = last_number + 1
    return []


def test_a_new_sequencer_that_forgets_unnumbered_messages_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_flush_outcome, "_admission_order", lambda *_: [])
    monkeypatch.setattr(sequencer_numbering, "take_over", _forgetful_take_over)
    found: dict[str, int] = {}
    for seed in range(6):
        result = run_simulation(SimConfig(
            "sequencer", nodes=5, messages=200, seed=seed, faults=crash_the_sequencer(seed)))
        for code, count in result.counts.items():
            found[code] = found.get(code, 0) + count
    assert found.get("VALIDITY", 0) + found.get("AGREEMENT", 0) > 0, found
