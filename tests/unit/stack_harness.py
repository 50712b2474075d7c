"""What the stack-level differential tests share: carrying a stack call's outputs onto
in-memory links and a timer table, firing the timers due, and the reliable channel's
state that its snapshot leaves out. tests/unit/test_hotpath_stack.py,
test_hotpath_channel_shortcuts.py and test_stack_top_step.py drive two groups through
one history and compare both."""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Mapping

from abcast.effects import CancelTimer, Output, SetTimer, Transmit
from abcast.ids import NodeId
from abcast.reliability.channel import ReliableChannel
from abcast.stack import Stack

Links = dict[tuple[NodeId, NodeId], list[bytes]]
Timers = dict[tuple[NodeId, Hashable], int]


def carry(node: NodeId, outputs: list[Output], links: Links, timers: Timers,
          nodes: Container[NodeId]) -> None:
    """Queue `node`'s frames on its links to `nodes` (a frame to anyone else goes
    nowhere: a reply to a stranger) and note the timers it set and cancelled."""
    for out in outputs:
        if isinstance(out, Transmit):
            for dst in out.to:
                if dst in nodes:
                    links.setdefault((node, dst), []).append(out.data)
        elif isinstance(out, SetTimer):
            timers[(node, out.key)] = out.at
        elif isinstance(out, CancelTimer):
            timers.pop((node, out.key), None)


def fire_due(stacks: Mapping[NodeId, Stack], timers: Timers, now: int,
             step: Callable[[str, NodeId, list[Output]], None]) -> None:
    """Fire every timer due by `now`, the earliest first (ties by key), each only if a
    timer fired before it did not move or cancel it; `step` records each call."""
    for (node, key), at in sorted(timers.items(), key=lambda item: (item[1], repr(item[0]))):
        if at <= now and timers.get((node, key)) == at:
            del timers[(node, key)]
            step(f"fire {key!r}", node, stacks[node].fire(key, now))


def channel_links(channel: ReliableChannel) -> list[object]:
    """The channel's links: in (high mark, holes, owed acks) and out (next number,
    unacked packets with their deadlines and tries, credit queue, progress, RTO)."""
    inbound = sorted((peer, link.high, sorted(link.above), link.ack_armed, link.ack_aged)
                     for peer, link in channel._in.items())
    outbound = sorted((peer, link.next_seq, [(seq, p.sent, p.deadline, p.tries)
                                             for seq, p in link.unacked.items()],
                       len(link.waiting), link.progress_at, link.timer.rto)
                      for peer, link in channel._out.items())
    return [inbound, outbound]
