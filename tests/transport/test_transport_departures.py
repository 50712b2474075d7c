"""What a long-lived tcp node holds for peers that left: after k peers joined, talked
both ways and departed (closed cleanly or aborted, then removed), its open fds, asyncio
tasks, outbound channels, inbound connections and sessions are what they were before the
first one — independent of k (the soak's anchors see dozens of departures an hour)."""

from __future__ import annotations

import asyncio
import gc
import os
from functools import partial
from typing import Any

import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport.tcp import TcpTransport


def held(node: Any) -> dict[str, int]:
    # What earlier tests left to the garbage collector (grpc's objects hold fds) must not
    # be freed between two counts.
    gc.collect()
    return {"fds": len(os.listdir("/proc/self/fd")), "tasks": len(asyncio.all_tasks()),
            "peers": len(node.peers), "channels": len(node._channels),
            "inbound": len(node._inbound), "sessions": len(node.sessions.links())}


def heard_from(inbox: Inbox, name: str) -> bool:
    return len(inbox.got(name)) == 1


def within(now: dict[str, int], want: dict[str, int]) -> bool:
    """`now` holds what `want` does; fewer fds is fine (the count is the process's: a
    thread of an earlier test may still be closing one)."""
    return all(now[k] <= want[k] if k == "fds" else now[k] == want[k] for k in want)


async def settled(node: Any, want: dict[str, int]) -> dict[str, int]:
    """`held(node)` once it is `within` `want`, or after a bounded wait (then the test
    fails showing what is still held)."""
    for _ in range(400):
        now = held(node)
        if within(now, want):
            return now
        await asyncio.sleep(0.01)
    return held(node)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds in /proc")
@pytest.mark.parametrize("departure", ["close", "abort"])
def test_a_node_holds_nothing_for_k_departed_peers(departure: str) -> None:
    async def main() -> None:
        async with Nodes() as nodes:
            anchor_inbox = Inbox()
            anchor = await nodes.start("tcp", "anchor", anchor_inbox)
            assert isinstance(anchor, TcpTransport)
            before = held(anchor)
            for k in range(8):
                name = f"p{k}"
                peer = await nodes.start("tcp", name, Inbox())
                peer.add_peer("anchor", anchor.address)
                anchor.add_peer(name, peer.address)
                peer.send("anchor", numbered(k))
                anchor.send(name, numbered(k))
                await anchor_inbox.wait_until(partial(heard_from, anchor_inbox, name),
                                              f"{name}'s frame")
                if departure == "abort":  # as a SIGKILL leaves it: sockets reset, no goodbye
                    for conn in [*peer._inbound.values()]:  # type: ignore[attr-defined]
                        conn.abort()
                    for channel in peer._channels.values():  # type: ignore[attr-defined]
                        channel.close()
                await peer.close()
                anchor.remove_peer(name)
                now = await settled(anchor, before)
                assert within(now, before), f"after {k + 1} departures: {now}, was {before}"

    run(main)
