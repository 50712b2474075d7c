"""A joiner that crashes mid-packet no longer locks later joiners out of an open group.

The joiners here ask in fragments (their `MJoin` padded past the 2 KiB frame bound), and
every member's guests share 16 KiB of reassembly (`reassembly_bytes`): n6 asks each of
the five contacts in turn but gets only its first fragment out each time, then crashes,
leaving a half-reassembled ask of 9 KiB reserved at every member. n7's ask, 9 KiB too,
no longer fits anywhere — until the members forget n6, silent for the open channel's
linger time (10 s), and with it its reservations. With guests never forgotten (the
channel as it was: a planted variant) n7 is never admitted, and the test says so."""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send
from abcast.events import Event, SendRequested
from abcast.ids import NodeId, View
from abcast.membership.wire import MJoin
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.channel import ChannelConfig
from abcast.reliability.fragments import RFrag
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import judge
from abcast.stack import Stack

FRAME = 2_048
OPTIONS = OrderingOptions(channel=ChannelConfig(frame_bytes=FRAME, reassembly_bytes=16_384))
PAD = bytes(9_000)  # an ask of 9 fragments of 1 KiB: two do not fit the guests' 16 KiB
FAULTS = ("drop=0.03,dup=0.02,delay=1-20ms,join=n6@60ms,crash=n6@2300ms,join=n7@2500ms")


class AsksInFragments(OpenChannel):
    """A joiner's channel whose join ask is larger than a frame."""

    __slots__ = ()  # (swapped in by `__class__`: the layout must be the same)

    def handle(self, event: Event, now: int) -> list[Effect]:
        if type(event) is SendRequested and any(isinstance(h, MJoin)
                                                for h in event.packet.headers):
            event = SendRequested(event.to, Packet(event.packet.headers, PAD), event.control)
        return super().handle(event, now)


class StopsAfterAFirstFragment(AsksInFragments):
    """...and that never gets more than a packet's first fragment out (it is about to
    crash: the rest never leave)."""

    __slots__ = ()  # (swapped in by `__class__`: the layout must be the same)

    def handle(self, event: Event, now: int) -> list[Effect]:
        return [e for e in super().handle(event, now)
                if not (isinstance(e, Send) and isinstance(e.header, RFrag) and e.header.index)]


class NeverForgetsGuests(OpenChannel):
    """Planted: the channel as it was — a guest stays until a view holds it."""

    __slots__ = ()  # (swapped in by `__class__`: the layout must be the same)

    def _expire(self, peer: NodeId, now: int) -> list[Effect]:
        return [] if peer in self._guests else super()._expire(peer, now)


def _run(seed: int, member_channel: type[OpenChannel] = OpenChannel
         ) -> tuple[SimResult, list[Stack]]:
    stacks: list[Stack] = []
    channels: dict[NodeId, type[OpenChannel]] = {"n6": StopsAfterAFirstFragment,
                                                 "n7": AsksInFragments}

    def make(node: NodeId, view: View) -> Stack:
        stack = build_stack(node, "g", "sequencer", view, OPTIONS)
        for layer in stack.layers:
            if type(layer) is OpenChannel:
                layer.__class__ = channels.get(node, member_channel)
        stacks.append(stack)
        return stack

    config = SimConfig("sequencer", nodes=5, messages=40, seed=seed, faults=FAULTS,
                       frame_bytes=FRAME, options=OPTIONS, settle_us=20_000_000)
    return run_simulation(config, stack_factory=make), stacks


def _views(result: SimResult, node: NodeId) -> list[tuple[str, ...]]:
    return [tuple(r.members or ()) for r in result.recorder.rows_of(node) if r.kind == "view"]


def _refused(stacks: list[Stack]) -> int:
    return sum(int(snap.counters.get("refused_fragments", 0))
               for stack in stacks for snap in stack.inspect())


def check_later_joiners_get_in(result: SimResult, stacks: list[Stack]) -> None:
    violations, problems = judge(result)
    assert violations == [] and problems == [], ([v.detail for v in violations[:3]],
                                                 problems[:3])
    assert result.quiescent and result.oversize_frames == 0
    assert "n6" not in result.app_states  # crashed before it was admitted
    assert _views(result, "n7")[-1] == ("n1", "n2", "n3", "n4", "n5", "n7")
    members = [layer for stack in stacks for layer in stack.layers
               if isinstance(layer, OpenChannel) and stack.node not in ("n6", "n7")]
    assert all("n6" not in channel.guests() for channel in members)
    assert sum(channel.guests_forgotten for channel in members) >= 5


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_joiner_crashed_mid_packet_is_forgotten_and_later_joiners_get_in(seed: int) -> None:
    result, stacks = _run(seed)
    assert _refused(stacks) > 0  # n7's ask waited for n6's reservations to go
    check_later_joiners_get_in(result, stacks)


def test_with_guests_never_forgotten_the_next_joiner_is_locked_out() -> None:
    result, stacks = _run(1, NeverForgetsGuests)
    assert _views(result, "n7") == [("n7",)]
    with pytest.raises(AssertionError):
        check_later_joiners_get_in(result, stacks)
