"""Optimistic total order (the sequencer family's `optimistic` option): seeded runs under
loss, duplicates, delay and a sequencer crash are clean for every claimed guarantee,
LOCAL_ORDER included; a suggested delay out of bounds is the sender's error; and the
two planted bugs — an opt-delivery after the final one, compensation without its clamp
— are caught. The 200-seed sweep is bench/sweep_optimistic.py."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from abcast.codec import Packet
from abcast.effects import Deliver, Effect, Stage
from abcast.errors import RemoteProtocolError
from abcast.events import Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_optimistic
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_optimistic import MAX_SUGGEST_US
from abcast.ordering.sequencer_state import OptimisticConfig, OptimisticState
from abcast.ordering.sequencer_wire import OData, SOrder
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import judge
from abcast.testing import LOCAL_ORDER, TOTAL_ORDER, check_local_order
from abcast.trace.rows import EventRow

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"


def faults(seed: int, crash: bool) -> str:
    if not crash:
        return FAULTS
    return f"{FAULTS},crash=n1@{random.Random(seed).randint(50, 800)}ms"


@pytest.mark.parametrize("compensate", [True, False], ids=["compensated", "plain"])
@pytest.mark.parametrize(("n", "seed", "crash"), [(3, 1, False), (5, 2, True), (8, 3, True)])
def test_seeded_runs_are_clean(n: int, seed: int, crash: bool, compensate: bool) -> None:
    options = OrderingOptions(optimistic=OptimisticConfig(alpha=0.8, compensate=compensate))
    result = run_simulation(SimConfig("optimistic", nodes=n, messages=20 * n, seed=seed,
                                      faults=faults(seed, crash), options=options))
    assert "local_order" in result.guarantees and "total" in result.guarantees
    assert result.violations == [], result.violations[:3]
    rows = result.recorder.rows()
    opt = [r for r in rows if r.kind == "opt_deliver"]
    assert len(opt) >= result.broadcasts  # each message is tentatively delivered somewhere


def _member(node: NodeId = "n2") -> Sequencer:
    layer = Sequencer(node, optimistic=OptimisticConfig())
    layer.handle(ViewInstalled(View(1, ("n1", "n2", "n3"))), 0)
    return layer


@pytest.mark.parametrize("suggest", [-1, MAX_SUGGEST_US + 1, 10**15])
def test_an_absurd_suggested_delay_is_the_senders_error(suggest: int) -> None:
    layer = _member()
    with pytest.raises(RemoteProtocolError, match="suggested"):
        layer.handle(Received("n3", OData(1, suggest), Packet((), b"x")), 10)
    # ...and the node goes on: the same message with a sane suggestion is opt-delivered
    effects = layer.handle(Received("n3", OData(1, 0), Packet((), b"x")), 20)
    assert Deliver("n3", 1, b"x", Stage.OPTIMISTIC) in effects


def test_a_held_message_is_opt_delivered_just_before_its_final_delivery() -> None:
    layer = _member()
    opt = layer.st.optimistic
    assert opt is not None
    opt.delay["n3"] = 5_000.0
    held = layer.handle(Received("n3", OData(1, 0), Packet((), b"x")), 100)
    assert not any(isinstance(e, Deliver) for e in held)  # due at 5100 µs
    clock = layer.inspect().clock["optimistic"]
    assert clock["opt_held"] == 1 and clock["delay_us"] == {"n3": 5000}
    out = layer.handle(Received("n1", SOrder(1, [("n3", 1)]), Packet()), 200)
    stages = [e.stage for e in out if isinstance(e, Deliver)]
    assert stages == [Stage.OPTIMISTIC, Stage.FINAL]


# -- planted: an opt-delivery after the final one ------------------------------------------
def test_planted_opt_delivery_after_the_final_one_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug: a final delivery leaves the message held, so its opt-delivery timer
    still fires afterwards (every message held 30 ms, so that some are finals first)."""
    receive = sequencer_optimistic.receive

    def hold_long(opt: OptimisticState, mid: MsgId, payload: bytes, now: int) -> list[Effect]:
        opt.delay[mid.origin] = 30_000.0
        return receive(opt, mid, payload, now)

    monkeypatch.setattr(sequencer_optimistic, "receive", hold_long)
    monkeypatch.setattr(sequencer_optimistic, "scan", lambda opt, effects, now: effects)
    result = run_simulation(SimConfig("optimistic", nodes=5, messages=100, seed=7,
                                      faults=faults(7, crash=True)))
    found = check_local_order(result.recorder.rows())
    assert found and {v.code for v in found} == {LOCAL_ORDER}
    assert any(v.code == LOCAL_ORDER for v in result.violations)


# -- planted: compensation without its clamp --------------------------------------------
def _unclamped(delay: dict[NodeId, float], i: NodeId, j: NodeId, d: float,
               alpha: float) -> None:
    old = delay.get(i, 0.0)
    delay[i] = old * alpha + (old - d) * (1.0 - alpha)


def compensation_faults(step: object) -> list[str]:
    """What a compensation step gets wrong over random corrections: a negative delay
    (a message cannot be opt-delivered before it arrived), or a relative shift between
    the two senders other than the rule's −(1 − α)·d."""
    rng = random.Random(11)
    found: list[str] = []
    for _ in range(2000):
        delay = {"a": rng.uniform(0, 5e4), "b": rng.uniform(0, 5e4)}
        alpha = rng.choice([0.5, 0.8, 0.95])
        d = rng.uniform(-1e5, 1e5)
        before = delay["a"] - delay["b"]
        step(delay, "a", "b", d, alpha)  # type: ignore[operator]
        if min(delay.values()) < 0:
            found.append("negative delay")
        elif abs((delay["a"] - delay["b"]) - (before - (1 - alpha) * d)) > 1e-6:
            found.append("shift")
    return found


def test_compensation_keeps_delays_non_negative_and_the_shift_exact() -> None:
    assert compensation_faults(sequencer_optimistic.compensate) == []


def test_planted_compensation_without_its_clamp_is_caught() -> None:
    assert "negative delay" in compensation_faults(_unclamped)


# -- a sequencer cut off in a minority, without --safe -------------------------------------
CUT_OFF = "drop=0.03,dup=0.02,delay=1-20ms,partition=n1+n5|n2+n3+n4@300ms-1500ms"


def _stopped(rows: list[EventRow], node: str) -> int:
    """When `node` stopped (its crash row: a cut-off member stops, the Isis rule); it
    never comes back (no recover row)."""
    assert not [r for r in rows if r.node == node and r.kind == "recover"]
    return min(r.t_ns for r in rows if r.node == node and r.kind == "crash")


def test_a_cut_off_sequencer_stops_and_its_window_is_the_plain_sequencers() -> None:
    """n1 (the sequencer) and n5 are cut off at 300 ms. Without --safe n1 final-delivers
    a few messages in that minority before it learns it was left out (the plain
    sequencer's window, docs/orderings.md); then both stop. Every whole-trace TOTAL_ORDER
    unit pairs n1 or n5 with a majority member over a message the first delivered in the
    window — in the minority, or in the last 50 ms before the cut, whose orders were still
    in flight (links take 1–20 ms, a retransmission more) and lost with it; there is no
    LOCAL_ORDER unit; the members present throughout are clean, and --safe (no delivery
    before a majority has the order) is clean over the whole trace."""
    config = SimConfig("optimistic", nodes=5, messages=60, seed=7, faults=CUT_OFF)
    result = run_simulation(config)
    rows = result.recorder.rows()
    cut = {"n1", "n5"}
    stopped = {n: _stopped(rows, n) for n in cut}
    in_window = {(n, (r.group, r.origin, r.seq)) for n in cut for r in rows
                 if r.node == n and r.kind == "deliver"
                 and 250_000_000 <= r.t_ns < stopped[n]}
    total = [v for v in result.violations if v.code == TOTAL_ORDER]
    assert total  # the case is exercised
    for v in total:
        (p, q), pair = v.nodes, v.messages
        assert len(cut & {p, q}) == 1, v
        n = (cut & {p, q}).pop()
        assert any((n, m) in in_window for m in pair), v
    assert {v.code for v in result.violations} == {TOTAL_ORDER}
    assert judge(result) == ([], [])  # the members present throughout
    safe = run_simulation(replace(config, options=OrderingOptions(safe=True)))
    assert safe.violations == []


def test_the_churn_sweeps_seed_6_is_clean_now_that_cut_off_members_stop() -> None:
    """The churn sweep's seed 6: n1 (the sequencer) and n8 cut off at 298 ms while n1
    still held its own n1#4 for the members' suggested delay. When cut-off members
    rejoined, n1's and n8's second incarnations got the minority's messages again
    (TOTAL_ORDER 16 over the whole trace, and a LOCAL_ORDER unit that judged one
    incarnation's opt-delivery against the other's final delivery). Now they stop: the
    whole trace is clean, with and without --safe."""
    faults = ("drop=0.03,dup=0.02,delay=1-20ms,join=n9@1201ms,leave=n4@963ms,"
              "crash=n2@764ms,partition=n1+n8|n2+n3+n4+n5+n6+n7@298ms-3155ms")
    config = SimConfig("optimistic", nodes=8, messages=200, seed=6, faults=faults)
    for options in (OrderingOptions(), OrderingOptions(safe=True)):
        result = run_simulation(replace(config, options=options))
        rows = result.recorder.rows()
        for n in ("n1", "n8"):
            _stopped(rows, n)
        assert result.violations == []
        assert judge(result) == ([], [])
