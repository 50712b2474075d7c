"""The sequencer family in relay mode (`relay=True`: the origin sends to the sequencer
only, whose order packet carries the bodies): the same properties as broadcast-broadcast
under the sequencer crashing mid-run, seeded churn and drawn interleavings of join,
leave and crash, an evs split that heals; its packet count; a wire order whose bodies do
not match its ids; and a planted origin that forgets its message once the sequencer has
it, which only a fail-over can expose and these runs must catch."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_churn_sweep import interleavings
from test_sequencer_failover import crash_the_sequencer, survivors_got_everything

from abcast.codec import Packet
from abcast.effects import Deliver, Effect, Multicast
from abcast.errors import ConfigError, RemoteProtocolError
from abcast.events import Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_numbering
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import RELAY_ORDER_BYTES, SData, SOrder
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import churn_faults, judge

FAMILY = ["sequencer", "causal-total"]
RELAY = OrderingOptions(relay=True)


def clean(result: SimResult, *, settles: bool = True) -> None:
    violations, problems = judge(result)
    assert violations == [] and problems == [], (result.config.faults, violations[:3],
                                                 problems[:3])
    assert result.quiescent or not settles, result.config.faults


@pytest.mark.parametrize("ordering", FAMILY)
@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
@pytest.mark.parametrize("seed", range(3))
def test_the_sequencer_crashing_mid_run(ordering: str, safe: bool, seed: int) -> None:
    """Messages the dead sequencer had not numbered live only at their origins now: the
    flush must find them there."""
    result = run_simulation(SimConfig(
        ordering, nodes=5, messages=150, seed=seed, faults=crash_the_sequencer(seed),
        options=OrderingOptions(safe=safe, relay=True)))
    assert result.violations == [], result.counts
    survivors_got_everything(result)


@pytest.mark.parametrize("ordering", FAMILY)
def test_seeded_churn_keeps_every_property(ordering: str) -> None:
    for seed in range(1, 5):
        nodes = random.Random(seed).choice((6, 7, 8))
        result = run_simulation(SimConfig(
            ordering, nodes=nodes, messages=120, seed=seed,
            faults=churn_faults(random.Random(seed), nodes),
            options=OrderingOptions(safe=seed % 2 == 0, relay=True)))
        clean(result)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(faults=interleavings(("n1", "n1", "n1", "n2", "n3", "n4", "n5")),
       ordering=st.sampled_from(FAMILY))
def test_drawn_interleavings_of_join_leave_and_crash(faults: str, ordering: str) -> None:
    """test_churn_sweep's drawn join, leave and crash, close together, in relay mode, the
    sequencer (n1) drawn most often: its unnumbered messages are only at their origins."""
    result = run_simulation(SimConfig(ordering, nodes=5, messages=80, seed=len(faults),
                                      faults=faults, options=RELAY))
    clean(result)
    assert "n6" in result.app_states, faults


def test_an_evs_split_heals_into_one_view() -> None:
    """Under evs the stability timers keep ticking, so the run is judged, not settled."""
    result = run_simulation(SimConfig(
        "sequencer", nodes=6, messages=180, seed=3, rate=60.0, stall_us=4_000_000,
        faults="drop=0.02,delay=1-15ms,partition=n1+n2+n3|*@300ms-2300ms",
        options=OrderingOptions(partitions="evs", relay=True)))
    clean(result, settles=False)
    last = {row.node: row.members for row in result.recorder.rows() if row.kind == "view"}
    assert len({tuple(m or ()) for m in last.values()}) == 1, last


@pytest.mark.parametrize("n", [2, 3, 5])
def test_n_packets_per_broadcast_and_n_minus_one_for_the_sequencers_own(n: int) -> None:
    """Unbatched and failure-free, round robin: the sequencer's own messages cost n−1
    order packets, everyone else's one data packet more."""
    result = run_simulation(SimConfig("sequencer", nodes=n, messages=10 * n, seed=n,
                                      options=OrderingOptions(batch=1, relay=True)))
    assert result.violations == []
    assert result.packets_per_broadcast == pytest.approx(((n - 1) + (n - 1) * n) / n)


def test_relay_is_refused_without_a_sequencer() -> None:
    with pytest.raises(ConfigError, match="no sequencer to relay through"):
        run_simulation(SimConfig("skeen", nodes=3, messages=3, seed=1, options=RELAY))


def _member(node: NodeId) -> Sequencer:
    layer = Sequencer(node, relay=True)
    layer.handle(ViewInstalled(View(1, ("n1", "n2", "n3"))), 0)
    return layer


def test_an_order_with_bodies_not_matching_its_ids_is_refused() -> None:
    layer = _member("n2")
    order = SOrder(1, [("n3", 1), ("n3", 2)], [b"one"])
    with pytest.raises(RemoteProtocolError, match="2 ids with 1 bodies"):
        layer.handle(Received("n1", order, Packet()), 0)


def test_an_order_delivers_its_bodies_and_ignores_one_already_held() -> None:
    layer = _member("n2")
    own = layer.handle(Received("n1", SOrder(1, [("n3", 1)], [b"first"]), Packet()), 0)
    assert [(d.origin, d.seq, d.payload) for d in own if isinstance(d, Deliver)] == [
        ("n3", 1, b"first")]
    layer.handle(Received("n3", SData(2), Packet((), b"kept")), 0)  # held before its order
    again = layer.handle(Received("n1", SOrder(2, [("n3", 2)], [b"other"]), Packet()), 0)
    assert [d.payload for d in again if isinstance(d, Deliver)] == [b"kept"]


@pytest.mark.parametrize(("body", "orders"), [
    (b"x" * 64, [3]), (b"x" * 100_000, [2, 1]), (b"x" * 600_000, [1, 1, 1])])
def test_bodies_released_together_leave_in_order_packets_of_bounded_bytes(
    body: bytes, orders: list[int],
) -> None:
    """n2's messages 2 and 3 wait for its message 1 (origin order): then all three are
    numbered in one event, in as few order packets as RELAY_ORDER_BYTES allows."""
    sequencer = _member("n1")
    for seq in (2, 3, 1):
        effects = sequencer.handle(Received("n2", SData(seq), Packet((), body)), 0)
    sent = [e.header for e in effects if isinstance(e, Multicast)]
    assert [len(order.ids) for order in sent] == orders
    assert [mid for order in sent for mid in order.ids] == [("n2", 1), ("n2", 2), ("n2", 3)]
    assert all(order.bodies == [body] * len(order.ids) for order in sent)
    assert all(sum(map(len, order.bodies)) <= RELAY_ORDER_BYTES or len(order.ids) == 1
               for order in sent)


def _forgetful_broadcast(st: SequencerState, seq: int, payload: bytes) -> list[Effect]:
    """The planted bug: an origin that drops its body once the sequencer has it. The
    order brings it back while the sequencer lives; only a fail-over can miss it."""
    effects = _original_broadcast(st, seq, payload)
    if st.view is not None and st.view.leader != st.node:
        st.bodies.pop(MsgId(st.node, seq), None)
    return effects


_original_broadcast = sequencer_numbering.broadcast


def test_an_origin_that_forgets_its_relayed_message_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sequencer_numbering, "broadcast", _forgetful_broadcast)
    found: dict[str, int] = {}
    for seed in range(6):
        result = run_simulation(SimConfig(
            "sequencer", nodes=5, messages=200, seed=seed, faults=crash_the_sequencer(seed),
            options=RELAY))
        for code, count in result.counts.items():
            found[code] = found.get(code, 0) + count
        if not result.quiescent:
            found["STALLED"] = found.get("STALLED", 0) + 1
    assert found, "six sequencer crashes and not one lost message"
