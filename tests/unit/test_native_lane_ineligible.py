"""The native lane declines, changing nothing, a stack `abcast.runtime.lane.eligible`
refuses: `_lane.receive` and `_lane.broadcast` answer None for a group of another
ordering, channel or option, whatever the frame, and never raise.

The runtime offers the lane only eligible stacks, but the lane's contract is "the step,
or None having changed nothing": before, a stack of another ordering under the runtime's
layers (causal, fifo, skeen, matrix, unordered, chandra-toueg) made both raise
AttributeError (`'Skeen' object has no attribute 'st'`) on a sequencer-shaped frame or a
broadcast, since the lane read attributes only a Sequencer has. Now it checks the layers'
types first (pointer compares on objects it holds anyway), as `eligible` does.

How: a group of three stacks of each kind is driven to a steady state (broadcasts from
every node, every frame delivered, timers on time, the channel's tick set); n3 is then
handed what the lane takes from an eligible stack in that state — a member's data and
the sequencer's order, forged on n3's state so that the channel's step would take them
(its next seq from the sender) — and a broadcast. Each answer must be None, and
everything reachable from the stack (`fingerprint`) as it was. The same frames and
broadcast on the runtime's own sequencer stack are taken: the forged frames are ones
the lane steps where it may. (A relay group is the runtime's shape with an option: its
forged bodyless order is an order as in a plain group, which the lane may take and
test_native_lane's comparison judges; it is not among these.)
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import random
import types
from collections import deque
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from lane_frames import order_frame
from stack_harness import Links, Timers, carry, fire_due
from test_native_lane import Lane, lane

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Output
from abcast.group.failure_detector import FD
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import RData
from abcast.runtime.lane import eligible
from abcast.runtime.stack_options import for_streams
from abcast.stack import Stack

__all__ = ["lane"]  # the C lane's fixture, shared with test_native_lane.py

NODES = ("n1", "n2", "n3")
GROUP = "g"
VIEW = View(1, NODES)
RUNTIME = for_streams(OrderingOptions())

#: stacks `eligible` refuses: (ordering, options)
INELIGIBLE: dict[str, tuple[str, OrderingOptions]] = {
    **{name: (name, RUNTIME) for name in ("causal", "fifo", "skeen", "matrix", "unordered",
                                          "chandra-toueg", "ticket")},
    "safe": ("sequencer", for_streams(OrderingOptions(safe=True))),
    "causal-total": ("causal-total", RUNTIME),
    "optimistic": ("optimistic", for_streams(OrderingOptions(optimistic=OptimisticConfig()))),
    "nak channel": ("sequencer", for_streams(OrderingOptions(), scheme="udp")),
    "basic channel": ("sequencer", dataclasses.replace(RUNTIME, multicast="basic")),
}


def steady(ordering: str, options: OrderingOptions) -> tuple[dict[NodeId, Stack], int]:
    """Three stacks after 30 rounds 7 ms apart of broadcasts from each, every frame
    delivered and every timer fired on time: the channel's tick set, every peer heard."""
    stacks = {node: build_stack(node, GROUP, ordering, VIEW, options) for node in NODES}
    links: Links = {}
    timers: Timers = {}
    now = 0

    def step(_label: str, node: NodeId, outputs: list[Output]) -> None:
        carry(node, outputs, links, timers, NODES)

    for node, stack in stacks.items():
        step("start", node, stack.start(now))
    for round_no in range(30):
        now += 7_000
        fire_due(stacks, timers, now, step)
        for node, stack in stacks.items():
            step("broadcast", node, stack.broadcast(b"m%d" % round_no, now)[1])
        for (_, dst), queue in list(links.items()):  # (replies to a new peer: next round)
            while queue:
                step("receive", dst, stacks[dst].receive(decode_envelope(queue.pop(0)), now)[0])
    return stacks, now


def next_in(stack: Stack, sender: NodeId) -> int:
    """The channel seq `stack` takes next from `sender` (1 where its channel is not the
    reliable one: a frame the lane must decline all the same)."""
    channel = stack.layers[1] if len(stack.layers) == 3 else None
    link = channel._in.get(sender) if isinstance(channel, OpenChannel) else None
    return 1 if link is None else link.high + 1


def offers(stack: Stack) -> list[tuple[str, bytes, NodeId]]:
    """(what, frame, peer): what the lane takes at a member of an eligible stack in this
    state — n2's data, and n1's (the sequencer's) order of it — forged on `stack`'s
    channel state."""
    data = encode_frame(GROUP, "n2", Packet((FD, RData(next_in(stack, "n2"), 0), SData(10_000)),
                                            b"forged"))
    order = order_frame(GROUP, "n1", next_in(stack, "n1"), 0, SOrder(10_000, [("n2", 10_000)]))
    return [("n2's data", data, "n2"), ("n1's order", order, "n1")]


_SKIPPED = (types.FunctionType, types.MethodType, types.BuiltinFunctionType,
            types.BuiltinMethodType, functools.partial, type, types.ModuleType,
            msgspec.msgpack.Decoder, msgspec.msgpack.Encoder, random.Random)


def fingerprint(obj: Any, seen: set[int] | None = None) -> Any:
    """Everything reachable from `obj` (attributes, slots, items, in their order) as
    nested tuples of plain values; bound methods, types, codecs and RNGs left out."""
    seen = set() if seen is None else seen
    if obj is None or isinstance(obj, (bool, int, float, str, bytes, enum.Enum)):
        return obj
    if isinstance(obj, _SKIPPED):
        return type(obj).__name__
    if id(obj) in seen:
        return ("seen", type(obj).__name__)
    seen.add(id(obj))
    kind = type(obj).__name__
    if isinstance(obj, (list, tuple, deque)):
        return (kind, tuple(fingerprint(item, seen) for item in obj))
    if isinstance(obj, dict):
        return (kind, tuple((fingerprint(k, seen), fingerprint(v, seen)) for k, v in obj.items()))
    if isinstance(obj, (set, frozenset)):
        return (kind, tuple(sorted(repr(fingerprint(item, seen)) for item in obj)))
    names: list[str] = list(getattr(type(obj), "__struct_fields__", ()))
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    fields = [(name, fingerprint(getattr(obj, name), seen)) for name in names
              if name not in ("__dict__", "__weakref__") and hasattr(obj, name)]
    fields += [(name, fingerprint(value, seen))
               for name, value in getattr(obj, "__dict__", {}).items()]
    return (kind, tuple(fields)) if fields or hasattr(obj, "__dict__") else (kind, repr(obj))


def declines(lane: Lane, stack: Stack, call: Callable[[], object]) -> None:
    before = fingerprint(stack)
    declined = lane.counts()["declined"]
    assert call() is None
    assert lane.counts()["declined"] == declined + 1
    assert fingerprint(stack) == before, "the lane changed the stack it declined"


@pytest.mark.parametrize("name", sorted(INELIGIBLE))
def test_the_lane_declines_a_stack_eligible_refuses_and_changes_nothing(
    lane: Lane, name: str,
) -> None:
    ordering, options = INELIGIBLE[name]
    stacks, now = steady(ordering, options)
    stack = stacks["n3"]
    assert not eligible(stack)
    for _what, frame, peer in offers(stack):
        declines(lane, stack, lambda f=frame, p=peer: lane.receive(f, p, {GROUP: ("tag", stack)},
                                                                   now + 1))
    declines(lane, stack, lambda: lane.broadcast(stack, b"payload", now + 1))


def test_the_same_offers_are_taken_from_the_runtimes_stack(lane: Lane) -> None:
    """The control: on an eligible stack in the same state, the lane takes each offer
    (and changes the stack: `fingerprint` sees a step)."""
    stacks, now = steady("sequencer", RUNTIME)
    stack = stacks["n3"]
    assert eligible(stack)
    for what, frame, peer in offers(stack):
        before = fingerprint(stack)
        assert lane.receive(frame, peer, {GROUP: ("tag", stack)}, now + 1) is not None, what
        assert fingerprint(stack) != before, what
    before = fingerprint(stack)
    assert lane.broadcast(stack, b"payload", now + 1) is not None
    assert fingerprint(stack) != before
