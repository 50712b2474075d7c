"""One bad packet must not stop a group (issue #21): the two attacks of the issue, replayed
against a real 3-node sequencer group over tcp on loopback.

- a hello claiming `n1`, then one `NotMember` frame to `n3` claiming a later view:
  before, n3 believed it at once and stopped delivering for ever with no log line; now
  the claim waits for n1's own traffic, which refutes it (`refuted_not_member`), and n3
  keeps delivering everything;
- a hello claiming `n2`, then a data frame far beyond the link's window to the
  sequencer: before, it was handed up (and the real n2's message with that number
  dropped as a duplicate); now it is refused with one log line (`refused_far`) and the
  connection is dropped, and every member delivers the same messages;
- a hello claiming `n3`, to n3 itself, then a data frame claiming n3: before, the stack
  raised LocalProtocolError out of the frame handler; now it is refused with one log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import struct
from typing import Any

import pytest

from abcast import Delivery, Group, Node
from abcast.codec import Packet, encode_frame
from abcast.group.failure_detector import Fd, NotMember
from abcast.ordering.sequencer_wire import SData
from abcast.reliability.channel import RData
from abcast.testing.polling import until
from abcast.transport._hello import Hello, encode_hello

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")
PER_NODE = 20


def _prefixed(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


_until = functools.partial(until, timeout_s=15.0)


async def _cluster() -> tuple[list[Node], list[Group]]:
    nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS]
    groups = []
    for node in nodes:
        peers = {other.id: other.address for other in nodes if other is not node}
        groups.append(await Group("g", ordering="sequencer", host=node, peers=peers).open())
    return nodes, groups


async def _forge(target: Node, claimed: str, packet: Packet) -> None:
    """Connect to `target` as `claimed` (a hello with an incarnation of our own) and send
    one frame carrying `packet`."""
    host, port = target.address.removeprefix("tcp://").rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port))
    hello = encode_hello(Hello(claimed, 999_999, 1))
    writer.write(_prefixed(hello) + _prefixed(encode_frame("g", claimed, packet)))
    await writer.drain()
    await asyncio.sleep(0.05)
    writer.close()


async def _rounds(groups: list[Group], tag: str) -> None:
    for k in range(PER_NODE):
        for g in groups:
            await g.broadcast(f"{tag}{g.node}:{k}".encode())


def _counter(group: Group, layer: str, name: str) -> int:
    return next(s.counters[name] for s in group.inspect() if s.layer == layer)


async def _delivered(groups: list[Group], count: int) -> list[list[Delivery]]:
    got: list[list[Delivery]] = [[] for _ in groups]

    async def collect(i: int) -> None:
        async for delivery in groups[i].deliveries():
            got[i].append(delivery)
            if len(got[i]) == count:
                break

    async with asyncio.timeout(30):
        await asyncio.gather(*(collect(i) for i in range(len(groups))))
    return got


def test_a_forged_not_member_does_not_stop_a_member() -> None:
    async def main() -> tuple[list[list[Delivery]], int, bool]:
        nodes, groups = await _cluster()
        try:
            await _rounds(groups, "before-")
            n3 = groups[2]
            view_id = n3.view.view_id
            await _forge(nodes[2], "n1", Packet((NotMember(view_id + 7),), b""))
            await _until(lambda: _counter(n3, "open-fd", "refuted_not_member") >= 1)
            await _rounds(groups, "after-")
            got = await _delivered(groups, 2 * PER_NODE * len(IDS))
            return got, _counter(n3, "open-fd", "refuted_not_member"), n3.active
        finally:
            for g in groups:
                await g.close()
            for node in nodes:
                await node.close()

    got, refuted, active = asyncio.run(main())
    assert active and refuted >= 1
    orders = [[(d.origin, d.payload) for d in per] for per in got]
    assert orders[0] == orders[1] == orders[2]
    assert len(set(orders[2])) == 2 * PER_NODE * len(IDS)


def test_a_far_ahead_data_frame_is_refused_not_delivered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> tuple[list[list[Delivery]], int]:
        nodes, groups = await _cluster()
        try:
            await _rounds(groups, "before-")
            sequencer = groups[0]
            forged = Packet((Fd(), RData(1_000_000), SData(1_000_000)), b"forged")
            await _forge(nodes[0], "n2", forged)
            await _until(lambda: _counter(sequencer, "open-channel", "refused_far") >= 1)
            await _rounds(groups, "after-")
            got = await _delivered(groups, 2 * PER_NODE * len(IDS))
            return got, _counter(sequencer, "open-channel", "refused_far")
        finally:
            for g in groups:
                await g.close()
            for node in nodes:
                await node.close()

    with caplog.at_level(logging.WARNING, logger="abcast.transport"):
        got, refused = asyncio.run(main())
    assert refused == 1
    orders = [[(d.origin, d.payload) for d in per] for per in got]
    assert orders[0] == orders[1] == orders[2]
    assert all(payload != b"forged" for _, payload in orders[0])
    lines = [r.getMessage() for r in caplog.records if "beyond the window" in r.getMessage()]
    assert len(lines) == 1


def test_a_connection_claiming_the_receiver_itself_is_refused_with_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A hello claiming n3, to n3, then a data frame claiming n3. First (session 19) the
    frame reached n3's stack, whose failure detector took n3 for a stranger and probed
    it with a `Send` to itself: LocalProtocolError out of the frame handler, an ERROR
    line with a traceback; then the stack refused it (tests/unit/test_stack_self_sender.py,
    still the guard behind this one). Now the transport refuses the hello itself
    (abcast.transport._hello.hello_refusal): one WARNING line, the connection refused
    (`refused_links`), no frame of it handed to the node, and the group goes on
    delivering everything."""

    async def main() -> tuple[list[list[Delivery]], int, int, int, bool]:
        nodes, groups = await _cluster()
        try:
            await _rounds(groups, "before-")
            forged = Packet((Fd(), RData(PER_NODE + 1), SData(PER_NODE + 1)), b"forged")
            await _forge(nodes[2], "n3", forged)
            stats = nodes[2].transport.stats
            await _until(lambda: stats.refused_links >= 1)
            await _rounds(groups, "after-")
            got = await _delivered(groups, 2 * PER_NODE * len(IDS))
            return (got, stats.refused_links, stats.bad_frames, nodes[2].stats.bad_frames,
                    groups[2].active)
        finally:
            for g in groups:
                await g.close()
            for node in nodes:
                await node.close()

    with caplog.at_level(logging.WARNING, logger="abcast"):
        got, refused, transport_bad, node_bad, active = asyncio.run(main())
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "frame handler raised" in m]
    assert len([m for m in messages if "two nodes have the id n3" in m]) == 1
    assert refused == 1 and transport_bad == 0 and node_bad == 0 and active
    orders = [[(d.origin, d.payload) for d in per] for per in got]
    assert orders[0] == orders[1] == orders[2]
    assert all(payload != b"forged" for _, payload in orders[2])


def test_broadcast_nowait_raises_backpressure_when_a_member_stops_reading() -> None:
    """n3 stops reading: n1's link to it fills its window (2) and its credit queue (2),
    and `broadcast_nowait` raises Backpressure; once the group has removed the silent
    n3, `broadcast` goes through."""
    from abcast import Backpressure, OrderingOptions
    from abcast.testing.slow_receiver import channel_config

    async def main() -> tuple[bool, list[str]]:
        options = OrderingOptions(channel=channel_config(window=2, max_waiting=2))
        nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS]
        groups = []
        try:
            for node in nodes:
                peers = {o.id: o.address for o in nodes if o is not node}
                groups.append(await Group("g", ordering="sequencer", options=options,
                                          host=node, peers=peers).open())
            transport: Any = nodes[2].transport
            await _rounds(groups, "warm-")  # every connection is up
            await _until(lambda: len(transport._inbound) == 2)
            for inbound in list(transport._inbound.values()):
                inbound._transport.pause_reading()
            raised = False
            for k in range(200):  # until n3's link has no credit left
                try:
                    groups[0].broadcast_nowait(b"%d" % k)
                except Backpressure:
                    raised = True
                    break
                groups[0].send_queued()  # one packet each
                await asyncio.sleep(0.02)  # n2's acks come back meanwhile; n3's do not
            await nodes[2].close()  # n3 is gone for good: suspected, removed
            async with asyncio.timeout(20):
                await groups[0].broadcast(b"after")
                await _until(lambda: len(groups[0].view.members) == 2)
            return raised, list(groups[0].view.members)
        finally:
            for g in groups:
                with contextlib.suppress(Exception):
                    await g.close()
            for node in nodes:
                await node.close()

    raised, members = asyncio.run(main())
    assert raised and members == ["n1", "n2"]


def test_broadcast_waits_while_the_stack_is_backpressured() -> None:
    from types import SimpleNamespace

    from abcast.runtime.group import _await_credit

    class Stack:
        asked = 0

        def backpressured(self) -> bool:
            self.asked += 1
            return self.asked < 5  # credit comes back at the fifth look

    stack = Stack()
    asyncio.run(_await_credit(SimpleNamespace(stack=stack, closed=False)))  # type: ignore[arg-type]
    assert stack.asked == 5
