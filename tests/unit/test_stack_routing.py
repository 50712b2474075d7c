"""The stack's routing contract, which its fast paths must keep: effects are routed
breadth-first in emission order, subclasses of the per-message effects are routed like
them, and the wire layout of a frame stays the documented msgpack array."""

from __future__ import annotations

from typing import Any

import msgspec

from abcast.codec import WIRE_VERSION, Header, Packet, decode_envelope, encode_frame
from abcast.effects import Deliver, Effect, Send, SetTimer, Transmit, Up
from abcast.events import BroadcastRequested, Event, Received, SendRequested, ViewInstalled
from abcast.ids import View
from abcast.stack import Layer, Stack

VIEW = View(1, ("a", "b"))


class Low(Header, frozen=True):
    n: int


class High(Header, frozen=True):
    n: int


class LoudSend(Send, frozen=True, gc=False):
    """A subclass: must take the general route and still behave as a Send."""


class Bottom(Layer):
    name = "bottom"
    header_type = Low

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return [Send(to, Low(now), packet, control)]
            case Received(sender, Low(), inner):
                return [Up(sender, inner), SetTimer("idle", now + 5)]
            case _:
                return []


class Top(Layer):
    name = "top"
    header_type = High

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return [
                    Send("b", High(seq), Packet((), payload)),
                    Deliver(self.node, seq, payload),
                    LoudSend("b", High(seq + 100), Packet((), payload)),
                ]
            case Received(sender, High(n), inner):
                return [Deliver(sender, n, inner.payload)]
            case _:
                return []


def _stack(node: str) -> Stack:
    return Stack(node, "g", [Bottom(node), Top(node)], VIEW)


def _decoded(out: Transmit) -> tuple[Any, ...]:
    env = decode_envelope(out.data)
    return tuple(msgspec.msgpack.decode(raw) for raw in env.headers)


def test_effects_are_routed_breadth_first_in_emission_order() -> None:
    stack = _stack("a")
    stack.start(0)
    _, outputs = stack.broadcast(b"x", 7)
    # The top's Deliver goes out before either Send reaches the bottom; the two Sends
    # (the second one a subclass) keep their order.
    assert [type(o) for o in outputs] == [Deliver, Transmit, Transmit]
    first, second = outputs[1], outputs[2]
    assert isinstance(first, Transmit) and isinstance(second, Transmit)
    assert first.to == second.to == ("b",)
    assert _decoded(first) == (["Low", 7], ["High", 1])
    assert _decoded(second) == (["Low", 7], ["High", 101])


def test_a_frame_goes_up_the_stack_with_headers_popped_and_timers_namespaced() -> None:
    sender, receiver = _stack("a"), _stack("b")
    sender.start(0)
    receiver.start(0)
    _, outputs = sender.broadcast(b"hello", 3)
    frame = next(o for o in outputs if isinstance(o, Transmit))
    got = receiver.receive(decode_envelope(frame.data), 9)
    assert got == ([SetTimer((0, "idle"), 14), Deliver("a", 1, b"hello")], None)


def test_frame_layout_is_the_documented_array() -> None:
    """[version, group, sender, flags, [h0, h1, ...], payload]: peers depend on it."""
    data = encode_frame("g", "a", Packet((Low(1), High(2)), b"p"), control=True)
    assert msgspec.msgpack.decode(data) == [
        WIRE_VERSION, "g", "a", 1, [["Low", 1], ["High", 2]], b"p",
    ]


def test_install_view_reaches_every_layer() -> None:
    seen: list[str] = []

    class Watch(Bottom):
        def handle(self, event: Event, now: int) -> list[Effect]:
            if isinstance(event, ViewInstalled):
                seen.append(self.node)
            return super().handle(event, now)

    Stack("a", "g", [Watch("a"), Watch("a")], VIEW).start(0)
    assert seen == ["a", "a"]


def test_inspect_gives_one_snapshot_per_layer_bottom_first_and_changes_nothing() -> None:
    from abcast.snapshot import LayerSnapshot, to_builtins

    stack = Stack("a", "g", [Bottom("a"), Top("a")], VIEW)
    before = stack.inspect()
    assert [s.layer for s in before] == ["bottom", "top"]
    assert before == [LayerSnapshot(layer="bottom"), LayerSnapshot(layer="top")]
    assert stack.inspect() == before
    assert to_builtins(before)[0] == {
        "layer": "bottom", "phase": "", "clock": {}, "holdback": [], "counters": {}
    }
