"""The NAK channel (multicast="nak") in the simulator, on the IP-multicast network model.

Properties: a multicast is one packet on the wire, so the sequencer's unbatched broadcast
costs 2 protocol packets instead of 2(n−1), n = 3…8; under loss, duplication and
reordering every ordering above it stays clean and delivers everything, through joins,
leaves and crashes too; a minority cut off rejoins (chandra-toueg: it recovers; the
sequencer under evs: the partitions merge); stability frees
every buffer once the run is quiet; back-pressure holds a sender past its window and
loses nothing; a 10 MB broadcast is fragmented, its lost fragments NAKed one by one, and
it arrives identical everywhere; a planted variant that ignores NAKs is caught.
"""

from __future__ import annotations

import random

import pytest

from abcast.events import Event, Received
from abcast.ids import NodeId, View
from abcast.ordering.registry import ORDERINGS, OrderingOptions, build_stack
from abcast.reliability.nak import NakChannel, NakConfig, NNak
from abcast.sim import SimConfig, run_simulation
from abcast.sim.cluster import SimCluster
from abcast.sim.network import LinkModel, Network
from abcast.sim.scheduler import Scheduler
from abcast.stack import Stack
from abcast.trace.recorder import TraceRecorder

NAK = OrderingOptions(multicast="nak")
LOSSY = "drop=0.05,dup=0.02,delay=1-30ms"
CUT = "partition=n4+n5|n1+n2+n3@50ms-3s"


@pytest.mark.parametrize("nodes", range(3, 9))
def test_the_sequencer_costs_two_packets_per_broadcast_on_ip_multicast(nodes: int) -> None:
    opts = OrderingOptions(batch=1, multicast="nak")
    multicast = run_simulation(SimConfig("sequencer", nodes=nodes, messages=6 * nodes,
                                         seed=nodes, options=opts, ip_multicast=True,
                                         net_trace=True))
    unicast = run_simulation(SimConfig("sequencer", nodes=nodes, messages=6 * nodes,
                                       seed=nodes, options=opts, net_trace=True))
    for result in (multicast, unicast):
        assert result.violations == []
        assert result.delivered == 6 * nodes * nodes
    assert multicast.packets_per_broadcast == 2
    assert unicast.packets_per_broadcast == ORDERINGS["sequencer"].model_packets(nodes)
    sends = [r for r in multicast.recorder.rows() if r.kind == "net_send"]
    assert len(sends) == 2 * multicast.broadcasts and {r.peer for r in sends} == {"*"}


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("ordering", ["fifo", "causal", "sequencer", "skeen", "chandra-toueg"])
def test_every_ordering_stays_clean_over_a_lossy_multicast_network(
        ordering: str, seed: int) -> None:
    result = run_simulation(SimConfig(ordering, nodes=5, messages=150, seed=seed,
                                      faults=LOSSY, options=NAK, ip_multicast=True))
    assert result.violations == []
    assert result.delivered == 150 * 5
    assert result.retransmissions > 0  # the loss was real, and repaired


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("ordering", "faults"), [
    ("sequencer", "join=n6@30ms,drop=0.02"), ("sequencer", "leave=n2@40ms,drop=0.02"),
    ("sequencer", "crash=n1@40ms,drop=0.02"), ("chandra-toueg", "crash=n3@40ms,drop=0.02"),
    ("causal", "join=n6@30ms,drop=0.02"), ("matrix", "join=n6@30ms"),
    ("sequencer", f"{CUT},drop=0.02"),  # the minority is excluded and stops (Isis)
])
def test_membership_changes_over_multicast_stay_clean(ordering: str, faults: str,
                                                      seed: int) -> None:
    """A joiner starts each member's multicast stream where that member's digest says it
    began sending to it; leavers, crashed members and a minority cut off (under the
    sequencer it stops: it is excluded, it does not rejoin) stop holding stability back."""
    result = run_simulation(SimConfig(ordering, nodes=5, messages=120, seed=seed,
                                      faults=faults, options=NAK, ip_multicast=True))
    assert result.violations == []
    assert result.quiescent


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize(("ordering", "partitions"), [
    ("chandra-toueg", "primary"),  # the minority stops, recovers and rejoins
    ("sequencer", "evs"),  # each side goes on; the partitions merge when it heals
])
def test_a_minority_cut_off_rejoins_over_multicast(ordering: str, partitions: str,
                                                   seed: int) -> None:
    """A minority cut off for 3 s comes back: its members end in a view of all five (after
    a recover row under chandra-toueg, after a view of their own side under evs) and every
    claimed guarantee holds across the cut over the NAK channel."""
    opts = OrderingOptions(multicast="nak", partitions=partitions)
    result = run_simulation(SimConfig(ordering, nodes=5, messages=120, seed=seed,
                                      faults=f"{CUT},drop=0.02", options=opts,
                                      ip_multicast=True))
    assert result.violations == [] and result.quiescent
    rows = result.recorder.rows()
    for node in ("n4", "n5"):
        mine = [r for r in rows if r.node == node and r.kind in ("view", "recover")]
        kinds = [r.kind for r in mine]
        if partitions == "primary":
            assert "recover" in kinds
            mine = mine[kinds.index("recover"):]
        else:
            assert any(r.kind == "view" and r.members == ("n4", "n5") for r in mine)
        assert mine[-1].kind == "view" and mine[-1].members == ("n1", "n2", "n3", "n4", "n5")


def _stacks(ordering: str, opts: OrderingOptions, into: dict[NodeId, Stack]):  # type: ignore[no-untyped-def]
    def make(node: NodeId, view: View) -> Stack:
        stack = into[node] = build_stack(node, "g", ordering, view, opts)
        return stack
    return make


def _nak(stack: Stack) -> NakChannel:
    (layer,) = [x for x in stack.layers if isinstance(x, NakChannel)]
    return layer


def test_stability_frees_every_buffer_and_back_pressure_loses_nothing() -> None:
    stacks: dict[NodeId, Stack] = {}
    opts = OrderingOptions(multicast="nak", nak=NakConfig(window_bytes=2_000))
    config = SimConfig("fifo", nodes=4, messages=400, seed=7, payload=200, faults=LOSSY,
                       options=opts, ip_multicast=True, rate=5_000)  # open loop: bursts
    result = run_simulation(config, stack_factory=_stacks("fifo", opts, stacks))
    assert result.violations == [] and result.delivered == 400 * 4
    layers = [_nak(s) for s in stacks.values()]
    assert sum(x.held_back_packets for x in layers) > 0  # the window did hold senders
    for layer in layers:
        snap = layer.inspect()
        assert snap.counters["unstable_bytes"] == 0  # quiet: everything was freed
        assert snap.counters["held_above_gaps"] == 0
        # bounded by the window plus one message (its room check is per message)
        assert layer.peak_unstable_bytes <= 2_000 + 2 * 400


def test_a_10_mb_broadcast_survives_5_percent_loss_in_fragments() -> None:
    stacks: dict[NodeId, Stack] = {}
    config = SimConfig("sequencer", nodes=4, messages=4, seed=3, payload=10_000_000,
                       faults="drop=0.05,delay=1-5ms", options=NAK, ip_multicast=True)
    result = run_simulation(config, stack_factory=_stacks("sequencer", NAK, stacks))
    assert result.violations == [] and result.delivered == 4 * 4
    # every member applied the same four 10 MB payloads in the same order
    assert len(set(result.app_states.values())) == 1
    assert sum(_nak(s).naks_sent for s in stacks.values()) > 0


class _Deaf(NakChannel):
    """Planted bug: a sender that ignores every NAK."""

    def handle(self, event: Event, now: int) -> list:  # type: ignore[type-arg]
        if isinstance(event, Received) and isinstance(event.header, NNak):
            return []
        return super().handle(event, now)


def test_a_channel_that_ignores_naks_is_caught() -> None:
    def make(node: NodeId, view: View) -> Stack:
        layers = list(build_stack(node, "g", "fifo", view, NAK).layers)
        at = next(i for i, layer in enumerate(layers) if isinstance(layer, NakChannel))
        deaf = _Deaf(node, NAK.nak, open_group=True)  # in the channel's slot
        deaf.decode_above([layer.header_type for layer in layers[at + 1:]])
        layers[at] = deaf
        return Stack(node, "g", layers, view)

    config = SimConfig("fifo", nodes=4, messages=100, seed=1, faults="drop=0.05",
                       options=NAK, ip_multicast=True, max_time_us=3_000_000)
    result = run_simulation(config, stack_factory=make)
    assert result.delivered < 100 * 4
    assert {v.code for v in result.violations} & {"VALIDITY", "AGREEMENT"}


def test_fifo_over_the_nak_channel_keeps_what_it_hands_up_above_a_gap() -> None:
    """The NAK channel hands a packet up once, as soon as it is whole, up to
    `nak.max_holdback` above a gap: FIFO's holdback must reach as far, whatever `holdback`
    says, or what it refused is lost for good (n1's first packet to n2 is lost, then a
    burst of 1,500 follows it: with a holdback of 1,024, n2 delivered 1,024 of 1,501)."""
    options = OrderingOptions(multicast="nak", holdback=1024)
    scheduler = Scheduler()
    network = Network(random.Random(1), LinkModel(1_000, 2_000))
    recorder = TraceRecorder("fifo-nak")
    cluster = SimCluster(scheduler, network, recorder)
    members = ("n1", "n2", "n3")
    for node in members:
        cluster.add(build_stack(node, "g", "fifo", View(1, members), options))
    scheduler.at(99_000, lambda: network.partition(("n1",), ("n2",), True))
    scheduler.at(100_000, lambda: cluster.broadcast("n1", b"first"))
    scheduler.at(100_100, lambda: network.heal(("n1",), ("n2",), True))

    def burst() -> None:
        for k in range(1500):
            cluster.broadcast("n1", b"m%d" % k)

    scheduler.at(100_200, burst)
    scheduler.run(5_000_000)
    delivered = {node: sum(1 for row in recorder.rows_of(node)
                           if row.kind == "deliver" and row.origin == "n1")
                 for node in members}
    assert delivered == {"n1": 1501, "n2": 1501, "n3": 1501}
