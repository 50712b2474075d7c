"""A slow receiver against a fast sender on a real 3-node tcp group (issue #21): the
receiver reads its sockets only a few milliseconds in every `period_s` while a sender
broadcasts as fast as `Group.broadcast()` lets it, and every queue the channel keeps is
sampled on every node as it goes. Used by the marked test (a few seconds) and by
`bench/slow_receiver.py` (60 s).

Rules: one event loop runs the three nodes; the receiver's slowness is its inbound
connections' `pause_reading()`, so TCP's own buffers fill and the sender's channel window
and credit are what hold it back — nothing here sleeps inside a callback. The bounds the
samples are judged against are the channel's (`window`, `max_waiting`) plus the packets
the protocol itself adds while a broadcast waits (a sequencer's orders, acks).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

from abcast.ordering.registry import OrderingOptions
from abcast.reliability.channel import ChannelConfig
from abcast.runtime.group import Group
from abcast.runtime.node import Node

IDS = ("n1", "n2", "n3")


@dataclass(slots=True)
class Peaks:
    """The highest value seen of each queue, per node, over the run."""

    in_flight: dict[str, int] = field(default_factory=dict)  # unacked, all links
    unacked_per_link: dict[str, int] = field(default_factory=dict)
    backlog: dict[str, int] = field(default_factory=dict)  # longest credit queue
    held_above: dict[str, int] = field(default_factory=dict)  # receiver: above the mark
    transport_buffered: dict[str, int] = field(default_factory=dict)  # bytes
    broadcasts: int = 0
    delivered: dict[str, int] = field(default_factory=dict)
    samples: int = 0

    def note(self, name: str, node: str, value: int) -> None:
        table: dict[str, int] = getattr(self, name)
        table[node] = max(table.get(node, 0), value)


def channel_config(window: int, max_waiting: int) -> ChannelConfig:
    """The runtime's stream channel with a given window and credit bound."""
    return ChannelConfig(rto_us=1_000_000, max_rto_us=4_000_000, piggyback_acks=True,
                         window=window, max_waiting=max_waiting)


def _sample(groups: list[Group], nodes: list[Node], peaks: Peaks) -> None:
    peaks.samples += 1
    for group, node in zip(groups, nodes, strict=True):
        snap: dict[str, Any] = next(
            s.clock for s in group.inspect() if s.layer.endswith("channel"))
        peaks.note("in_flight", node.id, snap["in_flight"])
        peaks.note("backlog", node.id, snap["backlog"])
        peaks.note("held_above", node.id, snap["held_above"])
        unacked = max((link["unacked"] for link in snap["out"].values()), default=0)
        peaks.note("unacked_per_link", node.id, unacked)
        peaks.note("transport_buffered", node.id, node.transport.buffered())


async def _slow_reader(node: Node, period_s: float, open_s: float, stop: asyncio.Event) -> None:
    """Let `node` read for open_s in every period_s: its inbound tcp connections are
    paused the rest of the time."""
    transport: Any = node.transport
    while not stop.is_set():
        for inbound in list(transport._inbound.values()):
            if inbound._transport is not None:
                inbound._transport.pause_reading()
        await asyncio.sleep(period_s - open_s)
        for inbound in list(transport._inbound.values()):
            if inbound._transport is not None:
                inbound._transport.resume_reading()
        await asyncio.sleep(open_s)


async def run(
    seconds: float, *, window: int = 64, max_waiting: int = 64, payload: int = 256,
    period_s: float = 0.1, open_s: float = 0.005, ordering: str = "sequencer",
    drain_s: float = 30.0, max_unstable: int | None = None,
) -> Peaks:
    """n2 broadcasts for `seconds` while n3 reads slowly; the peaks of every queue
    (`max_unstable`: the sequencer family's flow control, None: its default)."""
    options = OrderingOptions(channel=channel_config(window, max_waiting))
    if max_unstable is not None:
        options = replace(options, max_unstable=max_unstable)
    nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS]
    groups: list[Group] = []
    peaks = Peaks()
    stop = asyncio.Event()
    try:
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group("slow", ordering=ordering, options=options, host=node,
                                      peers=peers, on_deliver=lambda _d: None).open())
        slow = asyncio.create_task(_slow_reader(nodes[2], period_s, open_s, stop))
        sender, body = groups[1], bytes(payload)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await sender.broadcast(body)
            peaks.broadcasts += 1
            if peaks.broadcasts % 16 == 0:
                _sample(groups, nodes, peaks)
                await asyncio.sleep(0)  # one loop turn: the broadcasts leave as a batch
        stop.set()
        await slow  # reading again: let the slow node catch up (at most drain_s)
        _sample(groups, nodes, peaks)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(drain_s):
                while any(g.delivered < peaks.broadcasts for g in groups):
                    await asyncio.sleep(0.01)
        peaks.delivered = {g.node: g.delivered for g in groups}
    finally:
        stop.set()
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
    return peaks
