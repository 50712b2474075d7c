"""The origin-side credit of causal, skeen and matrix at runtime (abcast.ordering._credit,
issue #21): three nodes over tcp with `max_unstable=4`. Four broadcasts in a row, each
sent at once (not batched into one ordered message), spend n1's credit (nothing is
stable before the next stability round, 200 ms away), so the fifth `broadcast_nowait`
raises Backpressure; `await broadcast()` then waits for the stable point and every
message is delivered everywhere."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from abcast import Backpressure, Group, Node, OrderingOptions
from abcast.testing.polling import until

IDS = ("n1", "n2", "n3")
MESSAGES = 12


@pytest.mark.parametrize("ordering", ["causal", "skeen", "matrix"])
def test_past_its_credit_an_origin_waits_and_every_message_is_delivered(
        ordering: str) -> None:
    async def main() -> tuple[bool, list[int]]:
        options = OrderingOptions(max_unstable=4)
        nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS]
        groups: list[Group] = []
        try:
            for node in nodes:
                peers = {o.id: o.address for o in nodes if o is not node}
                groups.append(await Group("g", ordering=ordering, options=options,
                                          host=node, peers=peers).open())
            for k in range(4):
                groups[0].broadcast_nowait(b"%d" % k)
                groups[0].send_queued()  # each its own ordered message, not one batch
            raised = False
            try:
                groups[0].broadcast_nowait(b"4")
            except Backpressure:
                raised = True
            else:
                groups[0].send_queued()
            async with asyncio.timeout(30):
                for k in range(4 + (not raised), MESSAGES):
                    await groups[0].broadcast(b"%d" % k)
                await until(lambda: min(g.delivered for g in groups) >= MESSAGES, 30)
            return raised, [g.delivered for g in groups]
        finally:
            for g in groups:
                with contextlib.suppress(Exception):
                    await g.close()
            for node in nodes:
                await node.close()

    raised, delivered = asyncio.run(main())
    assert raised
    assert delivered == [MESSAGES] * 3
