"""A refusal stops only the refused event (the stack's rules, docs/design.md §5).

A layer above the reliable channel refuses some packets (RemoteProtocolError). The
property: `Stack.receive` then returns exactly what a twin stack returns whose top
layer ignores those packets instead (returns no effect) — same outputs in the same
order, same layer states — with the refusal beside them; and once the network settles
the sender holds nothing unacked and the receiver delivered every other packet once.
Histories (Hypothesis): messages of one to three parts (a middle layer hands each part
up separately, so one frame makes several events, some refused), frames delivered,
duplicated and dropped in any order, timers fired as they fall due. A planted stack
that drops a refused frame's outputs (what `receive` did before) must be caught.
Before, the refused packet's ack timer was lost with the frame's outputs while the
channel's flag said armed: the receiver never acked that sender again, and the sender
retransmitted for ever. The runtime's driver carries the outputs out before it raises
(the ack leaves); edge cases: headers that do not decode, an `Up` with no header left.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.codec import Header, Packet, decode_envelope
from abcast.effects import CancelTimer, Deliver, Effect, Output, Send, SetTimer, Transmit, Up
from abcast.errors import DecodeError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, SendRequested
from abcast.ids import NodeId, View
from abcast.reliability.channel import ReliableChannel
from abcast.runtime.driver import GroupDriver
from abcast.stack import Layer, Stack
from abcast.testing.refusals import DroppingStack
from abcast.testing.virtual_loop import NetHost, VirtualLoop

VIEW = View(1, ("a", "b"))
REFUSED = b"!"  # a part starting with it is refused by `Picky` (ignored by `Lenient`)


class Parts(Header, frozen=True):
    pass


class Top(Header, frozen=True):
    pass


class Splitter(Layer):
    """Sends a message's parts joined by b"|"; hands each received part up on its own."""

    name = "splitter"
    header_type = Parts

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return [Send(to, Parts(), packet, control)]
            case BroadcastRequested(_, payload):  # as a top: a packet with no header above
                return [Send("b", Parts(), Packet((), payload))]
            case Received(sender, Parts(), inner):
                return [Up(sender, Packet(inner.headers, part))
                        for part in inner.payload.split(b"|")]
        return []


class Lenient(Layer):
    """The top: sends each broadcast to b; delivers each part, ignoring refused ones."""

    name = "top"
    header_type = Top

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.delivered = 0
        self.refusals = 0

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(_, payload):
                return [Send("b", Top(), Packet((), payload))]
            case Received(sender, Top(), inner):
                if inner.payload.startswith(REFUSED):
                    self.refusals += 1
                    return self.refuse(sender)
                self.delivered += 1
                return [Deliver(sender, self.delivered, inner.payload)]
        return []

    def refuse(self, sender: NodeId) -> list[Effect]:
        return []


class Picky(Lenient):
    """Refuses them."""

    def refuse(self, sender: NodeId) -> list[Effect]:
        raise RemoteProtocolError(f"{sender} sent a refused part")


def _stack(node: NodeId, top: type[Lenient], stack: type[Stack] = Stack) -> Stack:
    return stack(node, "g", [ReliableChannel(node), Splitter(node), top(node)], VIEW)


class Timers:
    def __init__(self) -> None:
        self.due: dict[tuple[str, Hashable], int] = {}

    def carry(self, node: str, outputs: list[Output]) -> list[bytes]:
        """Note the timers; return the frames sent."""
        frames = []
        for out in outputs:
            if isinstance(out, Transmit):
                frames.append(out.data)
            elif isinstance(out, SetTimer):
                self.due[(node, out.key)] = out.at
            elif isinstance(out, CancelTimer):
                self.due.pop((node, out.key), None)
        return frames


def run_history(messages: list[list[bool]], schedule: list[int],
                stack: type[Stack] = Stack) -> None:
    """Broadcast `messages` from a to b (each part refused or not) and play `schedule`
    (each number picks an action and a frame), then let the network settle; assert the
    property at every step and at the end."""
    a, b, twin = _stack("a", Lenient), _stack("b", Picky, stack), _stack("b", Lenient)
    timers, now = Timers(), 0
    to_b: list[bytes] = []
    to_a: list[bytes] = []
    for stack_ in (a, b, twin):
        stack_.start(now)
    for i, refused in enumerate(messages):
        parts = b"|".join((REFUSED if r else b"") + b"m%d.%d" % (i, j)
                          for j, r in enumerate(refused))
        to_b += timers.carry("a", a.broadcast(parts, now)[1])

    twin_top = twin.layers[-1]
    assert isinstance(twin_top, Lenient)

    def arrive_at_b(data: bytes) -> None:
        ignored = twin_top.refusals
        got, refused = b.receive(decode_envelope(data), now)
        want, none = twin.receive(decode_envelope(data), now)
        assert none is None
        assert got == want  # the outputs of everything but the refused events
        assert (refused is not None) == (twin_top.refusals > ignored)
        to_a.extend(timers.carry("b", got))

    def fire_next() -> None:
        nonlocal now
        (node, key), at = min(timers.due.items(), key=lambda item: (item[1], repr(item[0])))
        del timers.due[(node, key)]
        now = max(now, at)
        if node == "a":
            to_b.extend(timers.carry("a", a.fire(key, now)))
            return
        got = b.fire(key, now)
        assert got == twin.fire(key, now)
        to_a.extend(timers.carry("b", got))

    for pick in schedule:
        action, index = pick % 5, pick // 5
        wire = to_b if to_b and (index % 2 or not to_a) else to_a
        if action == 4 or not wire:
            if timers.due:
                fire_next()
            continue
        frame = wire[index % len(wire)]
        if action == 2:  # lost
            wire.remove(frame)
            continue
        if action != 3:  # else duplicated: it stays on the wire
            wire.remove(frame)
        if wire is to_b:
            arrive_at_b(frame)
        else:
            to_b.extend(timers.carry("a", a.receive(decode_envelope(frame), now)[0]))
    for _ in range(2_000):  # settle: every frame arrives, timers fire as they fall due
        if to_b:
            arrive_at_b(to_b.pop(0))
        elif to_a:
            to_b.extend(timers.carry("a", a.receive(decode_envelope(to_a.pop(0)), now)[0]))
        elif timers.due:
            fire_next()
        else:
            break
    assert a.in_flight() == 0  # every packet acked, the refused ones included
    assert [layer.inspect() for layer in b.layers] == [layer.inspect() for layer in twin.layers]
    accepted = sum(not r for refused in messages for r in refused)
    top = b.layers[-1]
    assert isinstance(top, Picky) and top.delivered == accepted


@settings(max_examples=150, deadline=None)
@given(messages=st.lists(st.lists(st.booleans(), min_size=1, max_size=3), min_size=1,
                         max_size=6),
       schedule=st.lists(st.integers(0, 999), max_size=40))
def test_a_refusal_stops_only_the_refused_event(messages: list[list[bool]],
                                                schedule: list[int]) -> None:
    run_history(messages, schedule)


def test_a_stack_dropping_a_refused_frames_outputs_is_caught() -> None:
    with pytest.raises(AssertionError):
        run_history([[True]], [], DroppingStack)
    with pytest.raises(AssertionError):  # a refused part with others, frames reordered
        run_history([[False], [False, True, False], [False]], [1, 6, 0, 4, 11], DroppingStack)


def _frame(parts: bytes) -> bytes:
    sender = _stack("a", Lenient)
    sender.start(0)
    (out,) = [o for o in sender.broadcast(parts, 0)[1] if isinstance(o, Transmit)]
    return out.data


def test_the_ack_of_a_refused_packet_is_armed_and_later_refusals_are_noted() -> None:
    b = _stack("b", Picky)
    b.start(0)
    outputs, refused = b.receive(decode_envelope(_frame(b"!x|y|!z")), 5)
    assert outputs == [SetTimer((0, ("ack", "a")), 5 + 2_000), Deliver("a", 1, b"y")]
    assert isinstance(refused, RemoteProtocolError)
    assert refused.__notes__ == ["also refused: a sent a refused part"]


def test_headers_that_do_not_decode_are_refused_with_no_output() -> None:
    b = Stack("b", "g", [ReliableChannel("b"), Splitter("b")], VIEW)  # one layer short
    b.start(0)
    outputs, refused = b.receive(decode_envelope(_frame(b"x")), 5)
    assert outputs == [] and isinstance(refused, DecodeError)


def test_an_up_with_no_header_left_is_the_layer_above_refusing_in_its_turn() -> None:
    b = _stack("b", Picky)
    b.start(0)
    sender = Stack("a", "g", [ReliableChannel("a"), Splitter("a")], VIEW)  # no top header
    sender.start(0)
    (out,) = [o for o in sender.broadcast(b"x|y", 0)[1] if isinstance(o, Transmit)]
    outputs, refused = b.receive(decode_envelope(out.data), 5)
    assert outputs == [SetTimer((0, ("ack", "a")), 5 + 2_000)]  # the channel took it
    assert isinstance(refused, RemoteProtocolError)
    assert "no header for layer top" in str(refused)
    assert refused.__notes__ == [f"also refused: {refused}"]  # y, the second part


def test_the_driver_carries_out_a_refused_frames_outputs_then_raises() -> None:
    """The runtime's receive path: the ack of the refused packet leaves b after the
    delayed-ack wait, and a, given it, holds nothing unacked."""
    loop = VirtualLoop()
    host = NetHost("b", loop)
    driver = GroupDriver(host, _stack("b", Picky))
    driver._loop = loop  # type: ignore[assignment]  # the virtual loop stands in
    driver._apply(driver.stack.start(0))
    a = _stack("a", Lenient)
    a.start(0)
    (out,) = [o for o in a.broadcast(b"!x", 0)[1] if isinstance(o, Transmit)]
    with pytest.raises(RemoteProtocolError, match="refused part"):
        driver.receive(decode_envelope(out.data))  # the caller drops the link then
    loop.advance_to(10_000)
    (ack,) = host.links.pop(("b", "a"))
    a.receive(decode_envelope(ack), loop.now)
    assert a.in_flight() == 0
