"""Named replicated objects over real groups (mem:// transport, a registry): two objects,
written by three members at once, end equal on every member and on one that joined
while they were written (both objects in its snapshot); `lookup` finds an object another
member created, and of an unknown name is a NoSuchObjectError (a LocalProtocolError and a
KeyError); a second create of a name is ObjectExistsError; a dropped object is gone
everywhere. Ordering "ticket" with its own ticket server carries them too."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from abcast.errors import LocalProtocolError
from abcast.replicated import (
    Account,
    Counter,
    NoSuchObjectError,
    ObjectExistsError,
    ObjectHandle,
    Objects,
    attach,
    lookup,
)


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 90))

    return wrapper


async def deposits(handle: ObjectHandle, amounts: list[int]) -> None:
    for amount in amounts:
        await handle.deposit(amount)


@run_async
async def test_two_named_objects_end_equal_on_every_member_and_a_joiner() -> None:
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        opts: dict[str, Any] = {"transport": "mem://", "registry": server.url}
        spaces = [Objects() for _ in range(4)]
        first = await Group.create("bank", ordering="sequencer", app=spaces[0], **opts)
        groups = [first]
        for space in spaces[1:3]:
            groups.append(await Group.join("bank", app=space, **opts))
        try:
            alice = await attach(groups[0], Account, name="alice")
            bob = await attach(groups[1], Account, 10, name="bob")
            with pytest.raises(ObjectExistsError, match="alice"):
                await attach(groups[2], Account, name="alice")
            handles = [(await spaces[i].wait_for("alice"), await spaces[i].wait_for("bob"))
                       for i in range(3)]
            assert handles[0][0].name == alice.name and handles[1][1].name == bob.name
            work = [deposits(handles[i][k], [i + 1] * 15) for i in range(3) for k in (0, 1)]
            writing = asyncio.gather(*work)
            await asyncio.sleep(0.05)  # join while the writes are under way
            groups.append(await Group.join("bank", app=spaces[3], **opts))
            await writing
            expected = {"alice": 15 * (1 + 2 + 3), "bob": 10 + 15 * (1 + 2 + 3)}
            for space in spaces:
                for name, balance in expected.items():
                    await space.wait_until(
                        lambda s=space, n=name, b=balance:  # type: ignore[misc]
                        s.directory.has(n) and s.directory.replica(n).obj.balance == b)
            # reads wait only for the caller's own writes to that object
            assert await lookup(groups[3], "bob").get() == expected["bob"]
            assert {s.get_state() for s in spaces} == {spaces[0].get_state()}
            with pytest.raises(NoSuchObjectError, match="carol") as caught:
                lookup(groups[2], "carol")
            assert isinstance(caught.value, LocalProtocolError)
            assert isinstance(caught.value, KeyError)
            await lookup(groups[3], "alice").drop()
            for space in spaces:
                await space.wait_until(lambda s=space: not s.directory.has("alice"))  # type: ignore[misc]
            with pytest.raises(NoSuchObjectError):
                await handles[0][0].deposit(1)
        finally:
            for group in reversed(groups):
                await group.close()


@run_async
async def test_lookup_on_a_group_without_named_objects_is_a_clear_error() -> None:
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server, Group(
            "plain", ordering="sequencer", transport="mem://", registry=server.url,
            node="n1", size=1) as group:
        with pytest.raises(NoSuchObjectError, match="no replicated object 'alice'"):
            lookup(group, "alice")
        counter = await attach(group, Counter, name="hits")
        await counter.add(2)
        assert await lookup(group, "hits").get() == 2


@run_async
async def test_named_objects_over_a_ticket_server() -> None:
    from abcast.apps.ticket_server import TicketService
    from abcast.ordering.registry import OrderingOptions
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server, \
            TicketService(["tb"], registry=server.url) as ticket:
        options = OrderingOptions(ticket=ticket.url)
        groups = [Group("tb", ordering="ticket", registry=server.url, node=f"n{i}",
                        size=3, options=options, app=Objects()) for i in (1, 2, 3)]
        await asyncio.wait_for(asyncio.gather(*(g.open() for g in groups)), 20)
        try:
            await attach(groups[0], Account, name="alice")
            await attach(groups[1], Account, name="bob")
            spaces = [objects_for(g) for g in groups]
            hs = [(await s.wait_for("alice"), await s.wait_for("bob")) for s in spaces]
            await asyncio.gather(*(deposits(hs[i][k], [1] * 10) for i in range(3)
                                   for k in (0, 1)))
            for space in spaces:
                await space.wait_until(lambda s=space: s.directory.applied == 2 + 60)  # type: ignore[misc]
            assert {s.get_state() for s in spaces} == {spaces[0].get_state()}
            assert ticket.issued("tb") >= 2  # the numbers came from the server
        finally:
            await asyncio.gather(*(g.close() for g in groups))


def objects_for(group: Any) -> Objects:
    from abcast.replicated.objects import objects_of

    return objects_of(group)


class HeldGroup:
    """A one-member group whose deliveries the test releases by hand."""

    def __init__(self) -> None:
        self.node = "n1"
        self.sent: list[bytes] = []

    def broadcast_nowait(self, payload: bytes) -> Any:
        from abcast.ids import MsgId

        self.sent.append(payload)
        return MsgId(self.node, len(self.sent))

    async def deliveries(self) -> Any:  # never used: the objects are the group's app
        yield None

    def release(self, objects: Objects, upto: int) -> None:
        from abcast.effects import Deliver

        for seq in range(1, upto + 1):
            objects.on_deliver(Deliver(self.node, seq, self.sent[seq - 1]))


@run_async
async def test_a_read_waits_only_for_the_callers_writes_to_that_object() -> None:
    group, objects = HeldGroup(), Objects()
    objects.bind(group)  # type: ignore[arg-type]
    creates = [asyncio.ensure_future(objects.create(n, Account)) for n in ("alice", "bob")]
    await asyncio.sleep(0)  # both creates broadcast
    group.release(objects, 2)
    alice, bob = [await c for c in creates]
    pending = alice.deposit(5)  # issued, not yet delivered
    assert await bob.get() == 0  # bob's read does not wait for alice's write
    reading = asyncio.ensure_future(alice.get())
    await asyncio.sleep(0)
    assert not reading.done()  # alice's read waits for it
    group.release(objects, 3)
    assert await pending == 5 and await reading == 5


@pytest.mark.parametrize("name", [None, "hits"])
@run_async
async def test_attach_refuses_a_dynamic_group_it_is_not_the_application_of(
        name: str | None) -> None:
    """A dynamic group made without app= hands a joiner no object state: an attached
    copy on the joiner started afresh (the creator had 5, the joiner 0, and after one more
    write 6 against 1). attach now refuses such a group, on the creator and on a joiner,
    and names the fix; with app= the joiner gets the state."""
    from abcast.registry.server import RegistryServer
    from abcast.replicated import ReplicatedHandle
    from abcast.replicated._app import bound_to
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        opts: dict[str, Any] = {"transport": "mem://", "registry": server.url}
        created = await Group.create("c", ordering="sequencer", **opts)
        joined = await Group.join("c", **opts)
        try:
            for group in (created, joined):
                with pytest.raises(LocalProtocolError, match="must be the group's application"):
                    await attach(group, Counter, name=name)
                assert bound_to(group) is None  # nothing left bound to the group
        finally:
            await joined.close()
            await created.close()
        first = ReplicatedHandle(Counter())
        created = await Group.create("d", ordering="sequencer", app=first, **opts)
        try:
            await first.add(5)
            second = ReplicatedHandle(Counter())
            joined = await Group.join("d", app=second, **opts)
            await asyncio.wait_for(second.add(1), 10)
            await asyncio.wait_for(first.wait_until(lambda c: c.value == 6), 10)
            assert second.local.value == 6
            await joined.close()
        finally:
            await created.close()


@run_async
async def test_a_named_attach_beside_an_app_handle_on_a_dynamic_group_says_why() -> None:
    """Beside the group's app= handle, a named attach is refused for being a second
    reader (not for the group being dynamic: it has its application)."""
    from abcast.registry.server import RegistryServer
    from abcast.replicated import ReplicatedHandle
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        handle = ReplicatedHandle(Counter())
        group = await Group.create("e", ordering="sequencer", transport="mem://",
                                   registry=server.url, app=handle)
        try:
            with pytest.raises(LocalProtocolError, match="already has its replicated object"):
                await attach(group, Counter, name="hits")
            with pytest.raises(LocalProtocolError, match="already has its replicated object"):
                await attach(group, Counter)
        finally:
            await group.close()
