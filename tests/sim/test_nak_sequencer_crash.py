"""The sequencer crashing under loss over the NAK channel (multicast="nak").

Property: total order (and every other claimed guarantee) holds when the sequencer
crashes at 40 ms into a 3,000 msgs/s run on a lossy network. The view change settles
what the survivors report; it may assume of the channel what the ack-based channel
gives: every packet a crashed sender got through is handed up. A channel that holds a
packet above a gap the dead sender will never repair keeps the sequencer's last orders
from the flush, the survivors renumber what it had numbered and delivered, and the
checker sees TOTAL_ORDER — the planted variant below (the channel before the fix)
must be caught on the same seeds. The default run takes 6 seeds at drop 0.1 on both
network models; the long sweep (30 seeds × drop 0.05 and 0.1, both network models) is
marked slow.
"""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Effect
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.nak import NakChannel, NData
from abcast.reliability.nak_streams import InStream
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.stack import Stack

NAK = OrderingOptions(multicast="nak")


def _run(seed: int, drop: float, ip_multicast: bool = False,
         channel: type[NakChannel] = NakChannel) -> SimResult:
    def make(node: NodeId, view: View) -> Stack:
        layers = list(build_stack(node, "g", "sequencer", view, NAK).layers)
        if channel is not NakChannel:
            at = next(i for i, layer in enumerate(layers) if isinstance(layer, NakChannel))
            planted = channel(node, NAK.nak, open_group=True)
            planted.decode_above([layer.header_type for layer in layers[at + 1:]])
            layers[at] = planted
        return Stack(node, "g", layers, view)

    return run_simulation(SimConfig(
        "sequencer", nodes=5, messages=300, seed=seed, rate=3000, options=NAK,
        faults=f"crash=n1@40ms,drop={drop}", ip_multicast=ip_multicast,
        max_time_us=10_000_000), stack_factory=make)


class _HoldsAboveGaps(NakChannel):
    """Planted bug (the channel before the fix): a packet above a gap waits for it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._aside: dict[tuple[NodeId, int], dict[int, tuple[NData, Packet]]] = {}

    def _accept(self, sender: NodeId, st: InStream, header: NData, inner: Packet) -> list[Effect]:
        aside = self._aside.setdefault((sender, header.stream), {})
        if header.seq > st.next:
            st.known = max(st.known, header.seq)
            aside.setdefault(header.seq, (header, inner))
            return []
        effects = super()._accept(sender, st, header, inner)
        while st.next in aside:
            effects += super()._accept(sender, st, *aside.pop(st.next))
        return effects


@pytest.mark.parametrize("ip_multicast", [False, True])  # both network models, as the sweep
@pytest.mark.parametrize("seed", range(6))
def test_the_sequencer_crashing_under_loss_keeps_total_order(seed: int,
                                                             ip_multicast: bool) -> None:
    result = _run(seed, 0.1, ip_multicast)
    assert result.violations == []


def test_a_channel_holding_packets_above_a_dead_senders_gap_is_caught() -> None:
    codes = {v.code for seed in range(6)
             for v in _run(seed, 0.1, channel=_HoldsAboveGaps).violations}
    assert "TOTAL_ORDER" in codes


@pytest.mark.slow
@pytest.mark.parametrize("ip_multicast", [False, True])
@pytest.mark.parametrize("drop", [0.05, 0.1])
def test_a_sweep_of_sequencer_crashes_under_loss_stays_clean(drop: float,
                                                             ip_multicast: bool) -> None:
    bad = {seed: sorted({v.code for v in result.violations})
           for seed in range(30) if (result := _run(seed, drop, ip_multicast)).violations}
    assert bad == {}
