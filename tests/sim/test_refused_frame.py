"""A frame a layer refuses does not stall the group (docs/design.md §5, "Refusals").

Every node's stack has a `Chaff` layer (abcast.testing.refusals) between the reliable
channel and the ordering: it passes packets through, and ahead of every `EVERY`-th
multicast it sends a junk packet the receiving `Chaff` refuses (RemoteProtocolError) — a
peer sending what a layer above its channel refuses. The channel below has taken the
packet by then: numbered it as received and armed its delayed ack. When the stack
dropped the frame's outputs with the refusal (main before this test), that `SetTimer`
was lost while the channel's flag said armed, so the receiver never acked that sender
again: the sender's window (16 here) filled, its broadcasts waited for credit for ever
and the run stalled (AGREEMENT and VALIDITY: 172 of 600 deliveries at seed 1, 49 and 74
under faults at seeds 2 and 3). Now only the refused event stops and the ack is sent:
every run delivers everything, quiescent, no violation. A planted stack that drops a
refused frame's outputs, as the stack did, must stall the same runs.
"""

from __future__ import annotations

import pytest

from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.stack import Stack
from abcast.testing.refusals import Chaff, DroppingStack

EVERY = 10
NODES = 3
MESSAGES = 200
OPTIONS = OrderingOptions(channel=ChannelConfig(window=16))


def _run(
    seed: int, faults: str, stack: type[Stack] = Stack
) -> tuple[list[str], int, bool, int]:
    config = SimConfig("sequencer", nodes=NODES, messages=MESSAGES, seed=seed, faults=faults,
                       options=OPTIONS)
    chaff: list[Chaff] = []

    def make(node: NodeId, view: View) -> Stack:
        layers = build_stack(node, config.group, config.ordering, view, OPTIONS).layers
        at = next(i for i, layer in enumerate(layers) if isinstance(layer, ReliableChannel))
        chaff.append(Chaff(node, EVERY))
        layers.insert(at + 1, chaff[-1])
        channel = layers[at]
        assert isinstance(channel, ReliableChannel)
        channel.decode_above([layer.header_type for layer in layers[at + 1:]])
        return stack(node, config.group, layers, view)

    result = run_simulation(config, stack_factory=make)
    codes = sorted({v.code for v in result.violations})
    return codes, result.delivered, result.quiescent, sum(c.refused for c in chaff)


RUNS = [(1, ""), (2, "drop=0.05,dup=0.02,delay=1-40ms"), (3, "drop=0.05,dup=0.02,delay=1-40ms")]


@pytest.mark.parametrize(("seed", "faults"), RUNS)
def test_refused_frames_do_not_stall_the_group(seed: int, faults: str) -> None:
    codes, delivered, quiescent, refused = _run(seed, faults)
    assert refused > 0  # the junk was sent and refused...
    assert (codes, delivered, quiescent) == ([], MESSAGES * NODES, True)  # ...and harmless


@pytest.mark.parametrize(("seed", "faults"), RUNS)
def test_a_stack_dropping_a_refused_frames_outputs_stalls(seed: int, faults: str) -> None:
    codes, delivered, quiescent, _ = _run(seed, faults, DroppingStack)
    assert "VALIDITY" in codes and delivered < MESSAGES * NODES and not quiescent
