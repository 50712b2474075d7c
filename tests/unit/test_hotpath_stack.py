"""The lower layers' shortcuts (`Layer.pass_up`/`pass_down`/`pass_down_each`) change
nothing but cost.

A group of three sequencer stacks with the runtime's channel (its tick at 1 ms) is
driven twice with the same seeded history: once as built (the failure detector at the
bottom lets members' packets through without events, and the reliable channel above it
its steady-state packets), once with a layer's shortcuts off (a subclass that overrides
`handle` gets none, by the stack's rule; the channel's need the detector's;
tests/unit/test_hotpath_channel_shortcuts.py drives the channel's through holes, credit,
fragments, forged acks and guests). Histories mix
broadcasts from every node, frames delivered in random interleavings (FIFO per link),
clock jumps long enough for the detector to suspect a silent peer and take it back,
timers fired as they fall due, and a stranger's frames. Every stack call must give equal
outputs, in equal order, and every layer must end in an equal state (the channel's
owed acks and its tick included). A planted detector whose `pass_up` forgets to note
the sign of life, and a planted channel whose `pass_up` forgets that an ack is owed,
must be caught.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Hashable

import pytest
from stack_harness import carry, fire_due

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Output
from abcast.events import Event
from abcast.group.failure_detector import FD, Fd
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer_wire import SData
from abcast.reliability.channel import RData
from abcast.runtime.stack_options import STREAM_CHANNEL, for_streams
from abcast.stack import Stack

NODES = ("n1", "n2", "n3")
GROUP = "g"
#: the runtime's channel with a 1 ms tick (its own ticks every 10 ms): more standalone
#: acks between the clock jumps, so more frames pass the detector's shortcut
OPTIONS = for_streams(OrderingOptions(
    channel=dataclasses.replace(STREAM_CHANNEL, ack_delay_us=2_000, tick_us=1_000)))


class NoShortcuts(OpenDetector):
    """The same detector, with the shortcuts off: `handle` is overridden below them."""

    def handle(self, event: Event, now: int) -> list[object]:  # type: ignore[override]
        return super().handle(event, now)  # type: ignore[return-value]


class ForgetfulPassUp(OpenDetector):
    """Planted: lets packets through without noting the sign of life."""

    def pass_up(self, sender: NodeId, header: object, now: int) -> bool:
        st = self._s.peers.get(sender)
        return st is not None and not st.suspected and st.claim is None and type(header) is Fd


class ChannelNoShortcuts(OpenChannel):
    """The same channel, with its shortcuts off."""

    def handle(self, event: Event, now: int) -> list[object]:  # type: ignore[override]
        return super().handle(event, now)  # type: ignore[return-value]


class AckForgettingChannel(OpenChannel):
    """Planted: takes a packet in sequence without noting that an ack is owed."""

    def pass_up(self, sender: NodeId, header: object, now: int) -> bool:
        link = self._in.get(sender)
        owed = link is not None and link.ack_armed
        passed = super().pass_up(sender, header, now)
        if passed and not owed and link is not None:
            link.ack_armed = False
        return passed


def group(detector: type[OpenDetector] | None,
          channel: type[OpenChannel] | None = None) -> dict[NodeId, Stack]:
    stacks = {}
    for node in NODES:
        stack = build_stack(node, GROUP, "sequencer", View(1, NODES), OPTIONS)
        layers = list(stack.layers)
        if detector is not None:
            old = layers[0]
            layers[0] = detector(node, old.config)  # type: ignore[attr-defined]
        if channel is not None:
            old_channel = layers[1]
            assert isinstance(old_channel, OpenChannel)
            layers[1] = channel(node, old_channel.config, old_channel.linger_us)
        stacks[node] = Stack(node, GROUP, layers, View(1, NODES))
    return stacks


def state(stack: Stack) -> list[object]:
    """Every layer's snapshot, and what the channel's leaves out: the acks it owes and
    whether its tick is set."""
    channel = stack.layers[1]
    assert isinstance(channel, OpenChannel)
    owed = sorted((peer, link.ack_armed, link.ack_aged)
                  for peer, link in channel._in.items())
    return [*stack.inspect(), owed, channel._tick_set]


def run(seed: int, detector: type[OpenDetector] | None,
        channel: type[OpenChannel] | None = None, steps: int = 400,
        ) -> tuple[list[tuple[str, list[Output]]], list[list[object]]]:
    """The outputs of every stack call and the final states, for one seeded history."""
    rng = random.Random(seed)
    stacks = group(detector, channel)
    links: dict[tuple[NodeId, NodeId], list[bytes]] = {}
    timers: dict[tuple[NodeId, Hashable], int] = {}
    log: list[tuple[str, list[Output]]] = []
    now = 0

    def step(label: str, node: NodeId, outputs: list[Output]) -> None:
        log.append((f"{label} {node}", outputs))
        carry(node, outputs, links, timers, stacks)

    for node, stack in stacks.items():
        step("start", node, stack.start(now))
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.25:
            node = rng.choice(NODES)
            _, outputs = stacks[node].broadcast(rng.randbytes(rng.randint(0, 40)), now)
            step("broadcast", node, outputs)
        elif roll < 0.8:
            ready = [link for link, frames in links.items() if frames]
            if ready:
                src, dst = rng.choice(sorted(ready))
                data = links[(src, dst)].pop(0)
                outputs, refused = stacks[dst].receive(decode_envelope(data), now)
                assert refused is None, refused
                step(f"receive from {src}", dst, outputs)
        elif roll < 0.85:  # a stranger's data: refused below, answered NotMember
            dst = rng.choice(NODES)
            frame = encode_frame(GROUP, "x9", Packet((FD, RData(1), SData(1)), b"?"))
            outputs, refused = stacks[dst].receive(decode_envelope(frame), now)
            step("stranger", dst, outputs)
            if refused is not None:  # refused above the detector: alike
                log.append((f"stranger refused at {dst}: {refused}", []))
        else:
            # time passes: sometimes past the detector's timeout, so peers are suspected
            now += rng.choice((500, 3_000, 20_000, 40_000, 40_000, 1_200_000))
            fire_due(stacks, timers, now, step)
    return log, [state(stack) for stack in stacks.values()]


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("off", ["detector", "channel"])
def test_the_shortcuts_give_the_outputs_and_states_of_the_events(seed: int, off: str) -> None:
    fast_log, fast_states = run(seed, None)
    if off == "detector":  # the channel's go too: they are used only above the bottom's
        slow_log, slow_states = run(seed, NoShortcuts)
    else:
        slow_log, slow_states = run(seed, None, ChannelNoShortcuts)
    built = group(None)["n1"]
    assert built._pass_up is not None and built._pass_up2 is not None  # on as built
    assert built._pass_down_each is not None
    assert group(NoShortcuts)["n1"]._pass_up2 is None
    assert group(None, ChannelNoShortcuts)["n1"]._pass_down_each is None
    for fast, slow in zip(fast_log, slow_log, strict=True):
        assert fast == slow
    assert fast_states == slow_states


def test_the_channels_shortcuts_are_taken() -> None:
    """A history's frames do pass the channel by its shortcuts, both ways."""
    taken = {"up": 0, "down": 0}
    up, down = OpenChannel.pass_up, OpenChannel.pass_down_each

    def counted_up(self: OpenChannel, sender: NodeId, header: object, now: int) -> bool:
        passed = up(self, sender, header, now)
        taken["up"] += passed
        return passed

    def counted_down(self: OpenChannel, to: tuple[NodeId, ...], packet: Packet, now: int
                     ) -> list[object] | None:
        heads = down(self, to, packet, now)
        taken["down"] += heads is not None
        return heads

    class Counted(OpenChannel):
        pass_up = counted_up
        pass_down_each = counted_down

    run(0, None, Counted)
    assert taken["up"] > 50 and taken["down"] > 50, taken


@pytest.mark.parametrize(("detector", "channel"), [(ForgetfulPassUp, None),
                                                   (None, AckForgettingChannel)])
def test_a_shortcut_that_skips_the_state_change_is_caught(
    detector: type[OpenDetector] | None, channel: type[OpenChannel] | None,
) -> None:
    caught = 0
    for seed in range(12):
        log, states = run(seed, None)
        broken_log, broken_states = run(seed, detector, channel)
        caught += log != broken_log or states != broken_states
    assert caught
