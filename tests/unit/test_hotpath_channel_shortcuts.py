"""The reliable channel's shortcuts (`pass_up`, `pass_down_each`) under the histories that
test their guards: holes and duplicates, a small window (packets waiting for credit, a
carried ack releasing them), fragments, forged acks above what was sent, guests (frames
from nodes outside the view), a leave, and the ticket stack, where the channel is the
bottom layer and its `pass_up` is the stack's first shortcut.

Rules: two groups of three stacks (the runtime's stream channel at a 1 ms tick) are
driven through one seeded history, one as built and one with the channel's shortcuts
taken off the stack (the stack's attributes cleared, so the same classes run); every
stack call must give equal outputs and refusals, and every stack must end in an equal
state, the channel's links (holes, owed acks, unacked packets with their deadlines and
tries, credit queues, RTOs), its tick and its peer sets included. Planted shortcuts, each
with one guard removed, must be caught. tests/unit/test_hotpath_stack.py covers the
detector's shortcuts and steady histories.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

import pytest
from stack_harness import carry, channel_links, fire_due

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Output
from abcast.group.failure_detector import FD
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer_wire import SData
from abcast.reliability.channel import RData, ReliableChannel
from abcast.runtime.stack_options import STREAM_CHANNEL, for_streams
from abcast.stack import Stack

NODES = ("n1", "n2", "n3")
GROUP = "g"


@dataclasses.dataclass(frozen=True)
class History:
    window: int = 1024
    frame_bytes: int = 4 * 1024 * 1024
    reorder: float = 0.3  # a frame other than a link's oldest arrives
    drop: float = 0.05
    dup: float = 0.05
    big: float = 0.0  # a broadcast of 3-9 kB (fragments below 4 kB frames)
    forge: float = 0.02  # a frame's channel header carries an ack of 10**6
    guest: float = 0.0  # a frame re-sent as from a node outside the view
    leave_at: int | None = None  # the step at which a node leaves


HISTORIES = {
    "holes": History(reorder=0.6, drop=0.2, dup=0.2),
    "credit": History(window=4),
    "fragments": History(frame_bytes=4096, big=0.2),
    "guests": History(guest=0.15),
    "leave": History(leave_at=150),
    "everything": History(window=4, frame_bytes=4096, big=0.15, drop=0.15, dup=0.1,
                          reorder=0.5, guest=0.05, leave_at=200),
}


def options(history: History, ordering: str) -> OrderingOptions:
    channel = dataclasses.replace(STREAM_CHANNEL, tick_us=1_000, window=history.window,
                                  frame_bytes=history.frame_bytes)
    ticket = "n1" if ordering == "ticket" else ""
    return for_streams(OrderingOptions(channel=channel, ticket=ticket))


def channel_of(stack: Stack) -> ReliableChannel:
    return next(layer for layer in stack.layers if isinstance(layer, ReliableChannel))


def state(stack: Stack) -> list[object]:
    channel = channel_of(stack)
    return [*stack.inspect(), *channel_links(channel), channel._tick_set,
            sorted(channel._steady), sorted(channel._members)]


def without_channel_shortcuts(stack: Stack) -> None:
    channel = channel_of(stack)
    stack._pass_up2 = stack._pass_down_each = None
    if stack.layers[0] is channel:  # the ticket stack: the channel is the bottom layer
        stack._pass_up = None


def run(seed: int, ordering: str, history: History, shortcuts: bool, steps: int = 400,
        ) -> tuple[list[object], list[list[object]]]:
    """Every stack call's outputs (and refusal) and the final states, for one history."""
    rng = random.Random(seed)
    stacks = {n: build_stack(n, GROUP, ordering, View(1, NODES), options(history, ordering))
              for n in NODES}
    if not shortcuts:
        for stack in stacks.values():
            without_channel_shortcuts(stack)
    links: dict[tuple[NodeId, NodeId], list[bytes]] = {}
    timers: dict[tuple[NodeId, Hashable], int] = {}
    log: list[object] = []
    now = 0

    def step(label: str, node: NodeId, outputs: list[Output], refused: object = None) -> None:
        log.append((label, node, outputs, None if refused is None else str(refused)))
        carry(node, outputs, links, timers, stacks)

    def attempt(label: str, node: NodeId, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except Exception as exc:  # an ordering refusing a call: alike on both sides
            log.append((label, node, repr(exc)))
            return None

    for node, stack in stacks.items():
        step("start", node, stack.start(now))
    for i in range(steps):
        if i == history.leave_at:
            node = rng.choice(NODES)
            outputs = attempt("leave", node, partial(stacks[node].leave, now))
            if outputs is not None:
                step("leave", node, outputs)
            continue
        roll = rng.random()
        if roll < 0.25:
            node = rng.choice(NODES)
            size = rng.randint(3000, 9000) if rng.random() < history.big else rng.randint(0, 40)
            payload = rng.randbytes(size)
            sent = attempt("broadcast", node, partial(stacks[node].broadcast, payload, now))
            if sent is not None:
                step("broadcast", node, sent[1])
        elif roll < 0.8:
            ready = sorted(link for link, frames in links.items() if frames)
            if not ready:
                continue
            src, dst = rng.choice(ready)
            queue = links[(src, dst)]
            k = rng.randrange(len(queue)) if rng.random() < history.reorder else 0
            fate = rng.random()
            if fate < history.drop:
                queue.pop(k)
                continue
            data = queue[k] if fate < history.drop + history.dup else queue.pop(k)
            env = decode_envelope(data)
            sender = src
            headers = list(stacks[dst].codec.headers(env))
            if rng.random() < history.guest:
                sender = rng.choice(("x8", "x9"))
            elif rng.random() < history.forge:
                for j, header in enumerate(headers):
                    if type(header) is RData:
                        headers[j] = RData(header.seq, 10**6)
                        break
            env = decode_envelope(encode_frame(GROUP, sender, Packet(tuple(headers),
                                                                     env.payload)))
            outputs, refused = stacks[dst].receive(env, now)
            step(f"receive from {sender}", dst, outputs, refused)
        elif roll < 0.83 and ordering != "ticket":  # a stranger's data
            dst = rng.choice(NODES)
            frame = encode_frame(GROUP, "x9", Packet((FD, RData(1), SData(1)), b"?"))
            outputs, refused = stacks[dst].receive(decode_envelope(frame), now)
            step("stranger", dst, outputs, refused)
        else:
            now += rng.choice((500, 1_000, 3_000, 20_000, 40_000, 1_200_000))
            fire_due(stacks, timers, now, step)
    return log, [state(stack) for stack in stacks.values()]


def differs(seed: int, ordering: str, history: History) -> str | None:
    fast_log, fast_states = run(seed, ordering, history, shortcuts=True)
    slow_log, slow_states = run(seed, ordering, history, shortcuts=False)
    for i, (fast, slow) in enumerate(zip(fast_log, slow_log, strict=False)):
        if fast != slow:
            return f"step {i}: {fast!r} != {slow!r}"
    if len(fast_log) != len(slow_log):
        return "the histories differ in length"
    return None if fast_states == slow_states else "the final states differ"


@pytest.mark.parametrize("name", sorted(HISTORIES))
@pytest.mark.parametrize("ordering", ["sequencer", "skeen", "ticket"])
def test_the_channels_shortcuts_change_nothing_under_adverse_histories(
    ordering: str, name: str,
) -> None:
    stack = build_stack("n1", GROUP, ordering, View(1, NODES), options(History(), ordering))
    assert stack._pass_down_each is not None or stack._pass_up is not None
    for seed in range(3):
        assert differs(seed, ordering, HISTORIES[name]) is None, (ordering, name, seed)


# -- planted shortcuts, one guard removed each: the comparison must see them ------------


def without_hole_check(self: OpenChannel, sender: NodeId, header: object, now: int) -> bool:
    """Takes any next-or-later packet as the next one (a hole is skipped)."""
    link = self._in.get(sender)
    if (type(header) is RData and link is not None and not link.above and self._tick_set
            and sender in self._steady and header.seq > link.high + 1):
        link.high = header.seq
        link.ack_armed = True
        return True
    return ReliableChannel.pass_up(self, sender, header, now)


def without_credit_check(self: OpenChannel, to: tuple[NodeId, ...], packet: Packet, now: int
                         ) -> list[object] | None:
    """Numbers a packet even when the window is full (the queue for credit bypassed)."""
    if not self._tick_set or not all(dest in self._out and dest in self._steady
                                     for dest in to):
        return None
    return [self._number(dest, self._out[dest], packet, now) for dest in to]


def without_size_check(self: OpenChannel, to: tuple[NodeId, ...], packet: Packet, now: int
                       ) -> list[object] | None:
    """Sends a packet whole however large (no fragments)."""
    room, self._room = self._room, 2**62
    try:
        return ReliableChannel.pass_down_each(self, to, packet, now)
    finally:
        self._room = room


@pytest.mark.parametrize(("method", "planted", "name"), [
    ("pass_up", without_hole_check, "holes"),
    ("pass_down_each", without_credit_check, "credit"),
    ("pass_down_each", without_size_check, "fragments"),
])
def test_a_shortcut_missing_a_guard_is_caught(
    monkeypatch: pytest.MonkeyPatch, method: str, planted: object, name: str,
) -> None:
    monkeypatch.setattr(OpenChannel, method, planted)
    caught = sum(differs(seed, "sequencer", HISTORIES[name]) is not None for seed in range(3))
    assert caught, f"a {method} without its guard went unseen in '{name}'"
