"""Basic (best-effort) multicast per group: `OrderingOptions(multicast="basic")` puts a
channel that sends each packet once under the ordering. Without loss such a group
delivers exactly like a reliable one (held to the reliable claims, which it meets); with
loss it loses messages — the reliable claims are then broken, which proves nothing is
retransmitted — but never crashes and keeps the safety properties it still claims."""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Send, Up
from abcast.errors import ConfigError
from abcast.events import Received, SendRequested, ViewInstalled
from abcast.ids import View
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.reliability.basic_channel import BasicChannel, BData
from abcast.reliability.channel import ReliableChannel
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.testing import check_events, count_by_code

BASIC = OrderingOptions(multicast="basic")
RELIABLE = OrderingOptions()


def _against_reliable_claims(result: SimResult) -> dict[str, int]:
    claims = get_ordering(result.config.ordering).claimed(RELIABLE)
    return count_by_code(check_events(result.recorder.rows(), claims, result.run_id))


def test_a_basic_group_claims_only_safety() -> None:
    for name in ("unordered", "fifo", "causal", "sequencer", "chandra-toueg", "matrix"):
        spec = get_ordering(name)
        basic, reliable = spec.claimed(BASIC), spec.claimed(RELIABLE)
        assert set(basic) == set(reliable) - {"validity", "agreement", "uniform_agreement"}
        assert "integrity" in basic
    with pytest.raises(ConfigError, match="multicast"):
        OrderingOptions(multicast="gossip")


@pytest.mark.parametrize("ordering", ["unordered", "fifo", "causal", "sequencer",
                                      "chandra-toueg"])
def test_without_loss_basic_delivers_like_reliable(ordering: str) -> None:
    config = SimConfig(ordering, nodes=4, messages=120, seed=3, faults="dup=0.05,delay=1-10ms",
                       options=BASIC)
    result = run_simulation(config)
    assert result.violations == []
    assert _against_reliable_claims(result) == {}  # the reliable claims hold too
    assert result.delivered == 4 * 120
    assert result.retransmissions == 0
    reliable = run_simulation(SimConfig(ordering, nodes=4, messages=120, seed=3,
                                        faults="dup=0.05,delay=1-10ms"))
    # the same protocol packets (up to batching, whose timing differs), and none of
    # the reliable channel's acks
    assert abs(result.protocol_packets - reliable.protocol_packets) <= (
        reliable.protocol_packets // 100)
    assert result.control_packets < reliable.control_packets


@pytest.mark.parametrize("ordering", ["unordered", "fifo", "causal", "sequencer", "skeen"])
def test_under_loss_basic_loses_messages_but_keeps_its_claims(ordering: str) -> None:
    config = SimConfig(ordering, nodes=4, messages=200, seed=5,
                       faults="drop=0.1,dup=0.05,delay=1-10ms", rate=400.0, options=BASIC)
    result = run_simulation(config)
    assert result.violations == [], result.counts  # integrity and order still hold
    assert result.quiescent
    assert result.delivered < 4 * 200
    lost = _against_reliable_claims(result)
    assert lost.get("AGREEMENT", 0) + lost.get("VALIDITY", 0) > 0


def test_the_standard_stack_swaps_the_channel() -> None:
    view = View(1, ("n1", "n2"))
    # the channel sits right under the ordering's slot (a failure detector may be below)
    assert isinstance(build_stack("n1", "g", "fifo", view, BASIC).layers[-2], BasicChannel)
    assert isinstance(build_stack("n1", "g", "fifo", view).layers[-2], ReliableChannel)
    layers = build_stack("n1", "g", "chandra-toueg", view, BASIC).layers
    assert [type(layer) for layer in layers][1] is BasicChannel
    assert isinstance(layers[1], BasicChannel) and layers[1].open_group


def test_the_basic_channel_drops_duplicates_and_gives_up_holes() -> None:
    channel = BasicChannel("n1", window=4)
    channel.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    sent = channel.handle(SendRequested("n2", Packet((), b"x")), 0)
    assert sent == [Send("n2", BData(1), Packet((), b"x"), False)]
    inner = Packet(("h",), b"p")

    def arrive(seq: int) -> bool:
        return channel.handle(Received("n2", BData(seq), inner), 0) == [Up("n2", inner)]

    assert arrive(1) and not arrive(1)  # a duplicate goes no further
    # seq 2 is lost: what comes above it still goes up, and after `window` of them the
    # hole is given up, so memory stays bounded
    assert all(arrive(s) for s in range(3, 9))
    assert channel.given_up == 1 and not arrive(2)
    assert channel.duplicates == 2
    # a stranger's packets do not pass a closed group's channel
    assert channel.handle(Received("n9", BData(1), inner), 0) == []
