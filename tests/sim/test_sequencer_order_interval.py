"""The sequencer's order interval (`order_interval_ms`, ROMIOP's leader timer): one order
packet carries every id admitted during the interval; fewer order packets per broadcast
as the interval grows under load; the seeded crash and churn runs and an evs split keep
every property with a nonzero interval (a view change discards the interval's ids
unnumbered and the new sequencer numbers them once); and a planted interval timer that
forgets ids is caught by those runs."""

from __future__ import annotations

import random

import pytest
from test_sequencer_failover import crash_the_sequencer, survivors_got_everything
from test_sequencer_relay import clean

from abcast.codec import Packet
from abcast.effects import Deliver, Effect, Multicast, SetTimer
from abcast.errors import ConfigError
from abcast.events import BroadcastRequested, Received, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.ordering import sequencer_numbering
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import MAX_ORDER_IDS, SData, SOrder
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import churn_faults

FAMILY = ["sequencer", "causal-total"]
INTERVALS = [1.0, 10.0]


def _sequencer(interval_us: int) -> Sequencer:
    layer = Sequencer("n1", order_interval_us=interval_us)
    layer.handle(ViewInstalled(View(1, ("n1", "n2", "n3"))), 0)
    return layer


def _orders(effects: list[Effect]) -> list[SOrder]:
    return [e.header for e in effects if isinstance(e, Multicast) and type(e.header) is SOrder]


def test_one_order_packet_carries_every_id_of_the_interval() -> None:
    seq = _sequencer(10_000)
    effects = seq.handle(Received("n2", SData(1), Packet((), b"a")), 1_000)
    assert effects == [SetTimer(sequencer_numbering.ORDER_TIMER, 11_000)]
    effects = seq.handle(BroadcastRequested(1, b"own"), 2_000)
    effects += seq.handle(Received("n3", SData(1), Packet((), b"b")), 3_000)
    effects += seq.handle(Received("n2", SData(2), Packet((), b"c")), 4_000)
    assert _orders(effects) == [] and not any(isinstance(e, Deliver) for e in effects)
    assert seq.inspect().counters["interval_ids"] == 4
    fired = seq.handle(TimerFired(sequencer_numbering.ORDER_TIMER), 11_000)
    assert _orders(fired) == [SOrder(1, [("n2", 1), ("n1", 1), ("n3", 1), ("n2", 2)], [])]
    assert [(d.origin, d.seq) for d in fired if isinstance(d, Deliver)] == [
        ("n2", 1), ("n1", 1), ("n3", 1), ("n2", 2)]
    # The next admission arms the timer again; an empty interval sends nothing.
    assert seq.handle(TimerFired(sequencer_numbering.ORDER_TIMER), 12_000) == []
    again = seq.handle(Received("n3", SData(2), Packet((), b"d")), 13_000)
    assert again == [SetTimer(sequencer_numbering.ORDER_TIMER, 23_000)]


def test_a_take_over_admits_the_interval_again_once_and_arms_afresh() -> None:
    """A view change keeps the sequencer: its pending interval was never numbered, so
    take_over drops it and admits the held bodies again — each once, with a new timer
    even if the old one fired while this node was away (joining)."""
    seq = _sequencer(10_000)
    seq.handle(Received("n2", SData(1), Packet((), b"a")), 1_000)
    seq.handle(Received("n3", SData(1), Packet((), b"b")), 2_000)
    effects = sequencer_numbering.take_over(seq.st, 0, {})
    assert _orders(effects) == []
    assert effects == [SetTimer(sequencer_numbering.ORDER_TIMER, seq.st.now + 10_000)]
    assert sorted(seq.st.interval_ids) == [("n2", 1), ("n3", 1)]
    fired = seq.handle(TimerFired(sequencer_numbering.ORDER_TIMER), 12_000)
    assert [len(order.ids) for order in _orders(fired)] == [2]


def test_no_interval_orders_each_admission_at_once() -> None:
    seq = _sequencer(0)
    effects = seq.handle(Received("n2", SData(1), Packet((), b"a")), 1_000)
    assert _orders(effects) == [SOrder(1, [("n2", 1)], [])]
    assert not any(isinstance(e, SetTimer) and e.key == sequencer_numbering.ORDER_TIMER
                   for e in effects)


@pytest.mark.parametrize("ordering", FAMILY)
def test_packets_per_broadcast_fall_with_the_interval_under_load(ordering: str) -> None:
    """Open loop at 2,000 broadcasts/s over n = 3: per-event ordering costs 2(n−1) = 4
    packets a broadcast; a 1 ms interval orders ~3 ids a packet (2.7), 10 ms ~20 (2.1)."""
    ppb = []
    for interval in [0.0, 1.0, 10.0]:
        result = run_simulation(SimConfig(
            ordering, nodes=3, messages=400, seed=2, rate=2_000.0,
            options=OrderingOptions(order_interval_ms=interval)))
        clean(result)
        ppb.append(result.packets_per_broadcast)
    assert ppb[0] == pytest.approx(2 * (3 - 1), abs=0.2)
    assert ppb[0] > ppb[1] > ppb[2] > 2.0, ppb  # data is n−1 = 2 whatever the interval


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("interval", INTERVALS)
@pytest.mark.parametrize("seed", range(2))
def test_the_sequencer_crashing_mid_run(ordering: str, interval: float, seed: int) -> None:
    """The dead sequencer's interval ids were never numbered: the flush must find their
    bodies and the new sequencer number each once."""
    result = run_simulation(SimConfig(
        ordering, nodes=5, messages=150, seed=seed, faults=crash_the_sequencer(seed),
        options=OrderingOptions(safe=seed % 2 == 1, order_interval_ms=interval)))
    assert result.violations == [], result.counts
    survivors_got_everything(result)


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("interval", INTERVALS)
def test_seeded_churn_keeps_every_property(ordering: str, interval: float) -> None:
    for seed in range(1, 4):
        nodes = random.Random(seed).choice((6, 7, 8))
        result = run_simulation(SimConfig(
            ordering, nodes=nodes, messages=120, seed=seed,
            faults=churn_faults(random.Random(seed), nodes),
            options=OrderingOptions(safe=seed % 2 == 0, relay=seed == 3,
                                    order_interval_ms=interval)))
        clean(result)


def test_an_interval_is_refused_without_a_sequencer() -> None:
    with pytest.raises(ConfigError, match="no sequencer to time"):
        run_simulation(SimConfig("skeen", nodes=3, messages=3, seed=1,
                                 options=OrderingOptions(order_interval_ms=5)))
    with pytest.raises(ConfigError, match="order_interval_ms"):
        OrderingOptions(order_interval_ms=-1)


@pytest.mark.parametrize("batch", [0, MAX_ORDER_IDS + 1])
def test_a_batch_the_order_packet_cannot_carry_is_refused_at_the_options(batch: int) -> None:
    """A library caller gets the CLI's bound too: at the options, not as a node's crash."""
    with pytest.raises(ConfigError, match="batch must be between 1 and"):
        OrderingOptions(batch=batch)
    assert OrderingOptions(batch=MAX_ORDER_IDS).batch == MAX_ORDER_IDS


_original_on_order_timer = sequencer_numbering.on_order_timer


def _forgetful_on_order_timer(st: SequencerState) -> list[Effect]:
    """The planted bug: an interval timer that drops the interval's last id."""
    if len(st.interval_ids) > 1:
        st.interval_ids.pop()
    return _original_on_order_timer(st)


def test_an_interval_timer_that_forgets_ids_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sequencer_numbering, "on_order_timer", _forgetful_on_order_timer)
    found: dict[str, int] = {}
    for seed in range(3):
        result = run_simulation(SimConfig(
            "sequencer", nodes=3, messages=120, seed=seed, rate=2_000.0,
            options=OrderingOptions(order_interval_ms=1.0)))
        for code, count in result.counts.items():
            found[code] = found.get(code, 0) + count
        if not result.quiescent:
            found["STALLED"] = found.get("STALLED", 0) + 1
    assert found, "three loaded runs and not one forgotten id noticed"


def test_an_evs_split_heals_with_an_interval() -> None:
    """Both sides' sequencers time their orders; the merge settles what each held."""
    result = run_simulation(SimConfig(
        "sequencer", nodes=6, messages=180, seed=3, rate=60.0, stall_us=4_000_000,
        faults="drop=0.02,delay=1-15ms,partition=n1+n2+n3|*@300ms-2300ms",
        options=OrderingOptions(partitions="evs", order_interval_ms=10.0)))
    clean(result, settles=False)
    last = {row.node: row.members for row in result.recorder.rows() if row.kind == "view"}
    assert len({tuple(m or ()) for m in last.values()}) == 1, last
