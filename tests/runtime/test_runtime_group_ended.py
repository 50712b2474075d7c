"""`Group.ended()`: the end of a group on this node, awaited instead of polled. It returns
the reason an app's `group_ended` hears — closed here, left, removed by the group, or
its opening failed — at once when the group already ended, to every waiter, and a
waiter cancelled leaves the others waiting. (What a failed open tells the app it bound:
tests/runtime/test_runtime_lifecycle.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from test_runtime_evs import DETECTOR, THREE, CuttableMemory
from test_runtime_lifecycle import _Told

from abcast import Group, Node, RegistryServer
from abcast.errors import ConfigError, LocalProtocolError
from abcast.ordering.registry import OrderingOptions
from abcast.testing.polling import until

pytestmark = pytest.mark.timeout(60)

#: a bound on a failure only: every wait below ends at once when the code is right
BOUND_S = 10.0

CLOSED = "the group was closed here"
LEFT = "this member left the group"
REMOVED = "the group removed this member"


def _at_once(ended: Coroutine[Any, Any, str]) -> str:
    """What `ended` returns when it does not suspend even once (it must not: the group
    already ended)."""
    with pytest.raises(StopIteration) as stop:
        ended.send(None)
    reason: str = stop.value.value
    return reason


def test_every_waiter_hears_a_close_and_a_cancelled_one_does_not_stop_the_others() -> None:
    async def main() -> None:
        node = await Node("mem://", node="n1").start()
        app = _Told()
        group = await Group("solo", ordering="fifo", host=node, peers={}, app=app).open()
        waiters = [asyncio.create_task(group.ended()) for _ in range(3)]
        await asyncio.sleep(0)  # all three parked
        assert not any(w.done() for w in waiters)
        waiters[1].cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiters[1]
        await group.close()
        async with asyncio.timeout(BOUND_S):
            assert [await waiters[0], await waiters[2]] == [CLOSED, CLOSED]
        assert app.ended == [CLOSED]  # the same reason, told once
        assert _at_once(group.ended()) == CLOSED
        await group.close()  # a second close changes nothing
        assert _at_once(group.ended()) == CLOSED and app.ended == [CLOSED]
        await node.close()

    asyncio.run(main())


def test_a_graceful_leave_ends_the_leaver_only() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            first = await Group.create("chat", ordering="sequencer", registry=server.url)
            second = await Group.join("chat", registry=server.url)
            waiting = asyncio.create_task(second.ended())
            staying = asyncio.create_task(first.ended())
            await second.leave()
            assert await asyncio.wait_for(waiting, BOUND_S) == LEFT
            assert second.removed_view is not None and not second.active
            assert _at_once(second.ended()) == LEFT  # its close() after the leave: still LEFT
            assert not staying.done() and first.active
            await first.close()
            assert await asyncio.wait_for(staying, BOUND_S) == CLOSED

    asyncio.run(main())


def test_a_member_the_group_removed_hears_it() -> None:
    """n3 is cut off (test_runtime_evs's partition, here under primary partition): n1
    and n2 go on without it; healed, n3 learns it was removed, and its group ends."""
    transports = {n: CuttableMemory() for n in THREE}

    async def main() -> None:
        nodes = [await Node(transports[n], node=n).start() for n in THREE]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group("g", ordering="sequencer", host=node, peers=peers,
                                      options=OrderingOptions(detector=DETECTOR)).open())
        try:
            removed = asyncio.create_task(groups[2].ended())
            staying = asyncio.create_task(groups[0].ended())
            for n in THREE:
                transports[n].blocked = {"n1", "n2"} if n == "n3" else {"n3"}
            await until(lambda: groups[0].members == ("n1", "n2"), BOUND_S)
            for n in THREE:
                transports[n].blocked = set()
            assert await asyncio.wait_for(removed, BOUND_S) == REMOVED
            assert groups[2].removed_view == groups[0].view
            assert not staying.done()
        finally:
            for g in groups:
                await g.close()
            for node in nodes:
                await node.close()

    asyncio.run(main())


def test_a_group_closed_while_opening_or_before_it_opened_ends() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node("mem://", registry=server.url).start()
            group = Group("pair", ordering="fifo", host=node, size=2)
            waiting = asyncio.create_task(group.ended())  # before open(): it waits too
            opening = asyncio.create_task(group.open())
            await asyncio.sleep(0)  # open() has started: it waits for a second member
            await group.close()
            assert await asyncio.wait_for(waiting, BOUND_S) == (
                "the group was closed here while opening")
            with pytest.raises(LocalProtocolError, match="closed while opening"):
                await asyncio.wait_for(opening, BOUND_S)

            never = Group("never", ordering="fifo", host=node, size=1)
            waiting = asyncio.create_task(never.ended())
            await never.close()
            assert await asyncio.wait_for(waiting, BOUND_S) == CLOSED
            await node.close()

    asyncio.run(main())


def test_a_failed_open_ends_the_group_with_what_stopped_it() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node("mem://", registry=server.url).start()
            app = _Told()
            group = Group("sizeless", ordering="fifo", host=node, app=app)
            waiting = asyncio.create_task(group.ended())
            with pytest.raises(ConfigError, match="no declared size"):
                await group.open()
            why = await asyncio.wait_for(waiting, BOUND_S)
            assert why.startswith("the group did not open: ConfigError: ")
            assert "no declared size" in why
            assert app.ended == [why]  # what the app it bound hears
            assert _at_once(group.ended()) == why
            await node.close()

    asyncio.run(main())
