"""A frame that names the receiver itself as its sender is a peer's error, not ours.

A node never sends itself a frame over the network (a layer's `Send`/`Multicast` to its
own node is local misuse: LocalProtocolError, and the udp transport drops its own
multicasts looped back), so such a frame is forged or corrupted: a fuzzing harness found
one by flipping a bit of the sender (`n1` -> `n3`) of a frame arriving at n3. Before,
the layers took it as a stranger's: the failure detector probed the "stranger" with a
`Send` to n3, and the stack raised `LocalProtocolError("open-fd sent to itself")` out of
`receive` — out of the transport's delivery callback in a runtime — with the frame's
outputs lost midway; every ordering but ticket (no detector) did, over every channel. The
property now: `Stack.receive` refuses it (RemoteProtocolError, returned as its refusals
are, no outputs) before any layer sees it, so a history with a forged copy of every frame
n3 receives gives n3 exactly the outputs of the same history without them. A layer
sending to its own node still raises LocalProtocolError.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable

import msgspec
import pytest
from stack_harness import carry, fire_due

from abcast.codec import Header, Packet, decode_envelope
from abcast.effects import Deliver, Effect, Output, Send, Transmit
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.ordering.registry import ORDERINGS, OrderingOptions, build_stack
from abcast.runtime.stack_options import for_streams
from abcast.stack import Stack

VIEW = View(1, ("n1", "n2", "n3"))
ME = "n3"
CHANNELS = {
    "stream": for_streams(OrderingOptions()),  # tcp & co: the reliable channel
    "udp": for_streams(OrderingOptions(), scheme="udp"),  # the NAK channel
    "basic": dataclasses.replace(OrderingOptions(), multicast="basic"),
}
BROADCASTS = 6  # per node
ROUNDS = 40  # 7 ms apart: the detector's heartbeats and the channels' ticks fire too


def _flip_sender(frame: bytes) -> bytes:
    """The frame with one bit of its sender flipped: n1 -> n3 (msgpack str "n1" is
    a2 6e 31; 0x31 ^ 0x02 = "3")."""
    at = frame.index(b"\xa2n1") + 2
    return frame[:at] + bytes([frame[at] ^ 0x02]) + frame[at + 1:]


def test_a_bit_flipped_sender_naming_the_receiver_is_refused_and_changes_nothing() -> None:
    """The fuzzer's case: a runtime sequencer stack; n1's frames to n3 arrive at n3 with
    their sender flipped to n3. Each is refused with no output and n3's state as it
    was; the genuine frames then deliver n1's message."""
    n1, n3 = (build_stack(n, "g", "sequencer", VIEW, CHANNELS["stream"]) for n in ("n1", ME))
    n1.start(0)
    n3.start(0)
    _, out = n1.broadcast(b"x", 1_000)
    frames = [o.data for o in out if isinstance(o, Transmit) and ME in o.to]
    assert len(frames) == 2  # the data, then its order (n1 is the sequencer)
    before = n3.inspect()
    for data in frames:
        env = decode_envelope(_flip_sender(data))
        assert env.sender == ME
        outputs, refused = n3.receive(env, 2_000)
        assert outputs == []
        assert isinstance(refused, RemoteProtocolError) and ME in str(refused)
    assert n3.inspect() == before
    delivered = [o for data in frames for o in n3.receive(decode_envelope(data), 3_000)[0]
                 if isinstance(o, Deliver)]
    assert [(d.origin, d.payload) for d in delivered] == [("n1", b"x")]


def _history(ordering: str, options: OrderingOptions, forge: bool) -> tuple[list[Output], int]:
    """A 3-node group's history (broadcasts, frames FIFO per link, timers); n3's outputs.
    With `forge`, every frame n3 receives is preceded by a copy claiming n3 as its sender,
    each of which must be refused with no output. Returns n3's outputs and the forgeries."""
    stacks = {n: build_stack(n, "g", ordering, VIEW, options) for n in VIEW.members}
    links: dict[tuple[NodeId, NodeId], list[bytes]] = {}
    timers: dict[tuple[NodeId, Hashable], int] = {}
    mine: list[Output] = []
    forged = 0

    def step(_what: str, node: NodeId, outputs: list[Output]) -> None:
        carry(node, outputs, links, timers, VIEW.members)
        if node == ME:
            mine.extend(outputs)

    for node, stack in stacks.items():
        step("start", node, stack.start(0))
    now = 0
    for k in range(ROUNDS):
        now += 7_000
        if k < BROADCASTS:
            for node, stack in stacks.items():
                step("broadcast", node, stack.broadcast(f"{node}:{k}".encode(), now)[1])
        for (_, dst), queue in sorted(links.items()):
            while queue:
                env = decode_envelope(queue.pop(0))
                if forge and dst == ME:
                    claim = msgspec.structs.replace(env, sender=ME)
                    outputs, refused = stacks[ME].receive(claim, now)
                    assert outputs == [], outputs
                    assert isinstance(refused, RemoteProtocolError), refused
                    forged += 1
                outputs, refused = stacks[dst].receive(env, now)
                assert refused is None, refused
                step("receive", dst, outputs)
        fire_due(stacks, timers, now, step)
    return mine, forged


@pytest.mark.parametrize("channel", sorted(CHANNELS))
@pytest.mark.parametrize("ordering", sorted(ORDERINGS))
def test_forged_copies_claiming_the_receiver_change_none_of_its_outputs(
    ordering: str, channel: str,
) -> None:
    plain, _ = _history(ordering, CHANNELS[channel], forge=False)
    with_forgeries, forged = _history(ordering, CHANNELS[channel], forge=True)
    assert forged > 0
    assert any(isinstance(o, Deliver) for o in plain)  # the history did something
    assert with_forgeries == plain


class _Header(Header, frozen=True):
    pass


class _SelfSender(Layer):
    """Sends each broadcast to its own node: local misuse."""

    name = "self-sender"
    header_type = _Header

    def handle(self, event: Event, now: int) -> list[Effect]:
        if isinstance(event, BroadcastRequested):
            return [Send(self.node, _Header(), Packet((), event.payload))]
        return []


def test_a_layer_sending_to_its_own_node_is_still_local_misuse() -> None:
    stack = Stack(ME, "g", [_SelfSender(ME)], VIEW)
    stack.start(0)
    with pytest.raises(LocalProtocolError, match="sent to itself"):
        stack.broadcast(b"x", 1)
