"""The asyncio facade: a write resolves with its result once executed on the caller's
copy, a read waits for the caller's writes, a failed write raises for its caller, a bad
argument is refused before anything is broadcast, the lock battery excludes mutually,
and the same handles work over real groups (mem:// transport, registry, several total
orderings)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from abcast.effects import Deliver
from abcast.errors import LocalProtocolError
from abcast.ids import MsgId, NodeId
from abcast.replicated import (
    Account,
    Counter,
    Lock,
    ReplicatedDict,
    ReplicatedHandle,
    acquire,
    attach,
    locked,
    release,
    replicated,
    write,
)


def run_async(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test body on a fresh event loop, with a time limit."""

    @functools.wraps(test)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(test(*args, **kwargs), 60))

    return wrapper


class Bus:
    """A one-process total order: every broadcast reaches every member, in one order,
    on a later loop turn."""

    def __init__(self) -> None:
        self.members: list[FakeGroup] = []
        self.log: list[Deliver] = []

    def publish(self, delivery: Deliver) -> None:
        self.log.append(delivery)
        for member in self.members:
            member.receive(delivery)


class FakeGroup:
    def __init__(self, bus: Bus, node: NodeId) -> None:
        self.bus = bus
        self._node = node
        self._seq = 0
        self.hook: Any = None
        self.queue: asyncio.Queue[Deliver | None] = asyncio.Queue()
        self.removed_view: object = None
        bus.members.append(self)

    @property
    def node(self) -> NodeId:
        return self._node

    def broadcast_nowait(self, payload: bytes) -> MsgId:
        self._seq += 1
        delivery = Deliver(self._node, self._seq, payload)
        asyncio.get_running_loop().call_soon(self.bus.publish, delivery)
        return MsgId(self._node, self._seq)

    def receive(self, delivery: Deliver) -> None:
        if self.hook is not None:
            self.hook(delivery)
        else:
            self.queue.put_nowait(delivery)

    async def deliveries(self) -> AsyncIterator[Deliver]:
        while (delivery := await self.queue.get()) is not None:
            yield delivery

    def end(self, removed: bool = False) -> None:
        """The group ends here (closed; with `removed`, the group removed this member):
        nothing more is delivered, and deliveries() ends, as abcast.Group's does."""
        self.bus.members.remove(self)
        self.removed_view = object() if removed else None
        self.queue.put_nowait(None)


def _hooked(bus: Bus, node: NodeId, obj: Any) -> ReplicatedHandle[Any]:
    group = FakeGroup(bus, node)
    handle = ReplicatedHandle(obj)
    group.hook = handle.on_deliver
    handle.bind(group)
    return handle


@run_async
async def test_writes_resolve_with_their_result_and_reads_see_them() -> None:
    bus = Bus()
    acc, other = _hooked(bus, "n1", Account()), _hooked(bus, "n2", Account())
    assert await acc.deposit(300) == 300
    assert await other.withdraw(500) is False
    assert await other.withdraw(100) is True
    assert await acc.get() == 200 and await other.get() == 200


@run_async
async def test_a_read_waits_for_every_write_issued_before_it() -> None:
    bus = Bus()
    counter = _hooked(bus, "n1", Counter())
    _hooked(bus, "n2", Counter())
    pending = [counter.add(1) for _ in range(5)]  # issued, not awaited
    assert counter.local.value == 0  # nothing executed yet
    assert await counter.get() == 5
    assert [await p for p in pending] == [1, 2, 3, 4, 5]


@run_async
async def test_a_failing_write_raises_for_its_caller_only() -> None:
    bus = Bus()
    acc, other = _hooked(bus, "n1", Account()), _hooked(bus, "n2", Account())
    with pytest.raises(ValueError, match="must be positive"):
        await acc.deposit(-5)
    assert await other.deposit(1) == 1
    assert acc.local.balance == other.local.balance == 1


@run_async
async def test_bad_arguments_are_refused_before_broadcasting() -> None:
    bus = Bus()
    counter = _hooked(bus, "n1", Counter())
    with pytest.raises(LocalProtocolError, match=r"Counter.add: argument 'amount' is a set"):
        counter.add({1, 2})
    with pytest.raises(AttributeError, match="no @write or @read method 'grow'"):
        counter.grow(1)
    await asyncio.sleep(0)
    assert bus.log == []


@run_async
async def test_the_lock_excludes_mutually_across_replicas() -> None:
    bus = Bus()
    locks = [_hooked(bus, f"n{i}", Lock()) for i in (1, 2, 3)]
    inside: list[str] = []
    entered: list[str] = []

    async def worker(handle: ReplicatedHandle[Lock], owner: str) -> None:
        for _ in range(3):
            async with locked(handle, owner):
                inside.append(owner)
                assert len(inside) == 1, f"{inside} hold the lock at once"
                entered.append(owner)
                for _ in range(3):
                    await asyncio.sleep(0)
                inside.remove(owner)

    await asyncio.wait_for(asyncio.gather(
        *(worker(h, f"{h.replica.node}:{k}") for h in locks for k in (1, 2))), 10)
    assert len(entered) == 18
    assert all(h.local.queue == [] for h in locks)


@run_async
async def test_attach_reads_deliveries_from_the_group_and_close_fails_pending() -> None:
    bus = Bus()
    groups = [FakeGroup(bus, n) for n in ("n1", "n2")]
    handles = [await attach(g, Counter, 10) for g in groups]
    assert await handles[0].add(5) == 15
    await handles[1].wait_until(lambda c: c.value == 15)
    stuck = handles[0].add(1)
    await handles[0].close()
    with pytest.raises(LocalProtocolError, match="closed"):
        await stuck
    await handles[1].close()


@pytest.mark.parametrize("first_name", [None, "a"])
@pytest.mark.parametrize("second_name", [None, "b"])
@run_async
async def test_a_second_reader_on_one_group_is_refused(first_name: str | None,
                                                       second_name: str | None) -> None:
    """Two readers of one group's deliveries would each take some of them: both copies
    would miss writes and callers would hang. Whichever mix of named and unnamed objects
    comes second is refused, unless both are named (they share the group's Objects)."""
    bus = Bus()
    group = FakeGroup(bus, "n1")
    first = await attach(group, Counter, name=first_name)
    if first_name is not None and second_name is not None:
        second = await attach(group, Counter, name=second_name)
        assert [await first.add(1) for _ in range(3)] == [1, 2, 3]
        assert await second.add(1) == 1
        return
    with pytest.raises(LocalProtocolError, match=r"one object per group.*name="):
        await attach(group, Counter, name=second_name)
    assert [await first.add(1) for _ in range(4)] == [1, 2, 3, 4]  # it had every one


@run_async
async def test_attach_beside_an_app_is_refused_and_close_frees_the_group() -> None:
    bus = Bus()
    hooked = _hooked(bus, "n1", Counter())  # the group's application, as app= makes it
    with pytest.raises(LocalProtocolError, match="already has its replicated object"):
        await attach(hooked._group, Counter)  # type: ignore[arg-type]
    group = FakeGroup(bus, "n2")
    first = await attach(group, Counter)
    assert await first.add(1) == 1
    await first.close()
    again = await attach(group, Counter)  # the group is free once the first is gone
    assert await again.add(1) == 1


@run_async
async def test_a_closed_app_handle_applies_nothing_more_and_hands_no_joiner_a_state() -> None:
    """A handle given as a group's `app=` is fed by the group's hook, which goes on while
    the group is open here: once closed, its copy keeps the state it had (as documented)
    and, stale from then on, it refuses to be a joiner's snapshot instead of handing one
    a copy that misses writes. (On main the copy went on to 4 and get_state answered.)"""
    bus = Bus()
    writer, closed = _hooked(bus, "n1", Counter()), _hooked(bus, "n2", Counter())
    assert await writer.add(1) == 1 and closed.local.value == 1
    await closed.close()
    for _ in range(3):
        await writer.add(1)  # the bus has called every member's hook by now
    assert (writer.local.value, closed.local.value, closed.applied) == (4, 1, 1)
    with pytest.raises(LocalProtocolError, match=r"closed.*no state to hand a joiner"):
        closed.get_state()
    with pytest.raises(LocalProtocolError, match="closed"):
        closed.set_state(writer.get_state())
    assert closed.local.value == 1


@contextlib.asynccontextmanager
async def real_groups(size: int, ordering: str = "sequencer") -> AsyncIterator[list[Any]]:
    """`size` members of one open group (mem:// transport, a registry), closed after."""
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        groups = [Group("counter", ordering=ordering, transport="mem://",
                        registry=server.url, node=f"n{i}", size=size)
                  for i in range(1, size + 1)]
        await asyncio.wait_for(asyncio.gather(*(g.open() for g in groups)), 20)
        try:
            yield groups
        finally:
            await asyncio.gather(*(g.close() for g in groups))


@run_async
async def test_a_second_attach_on_a_real_group_is_refused() -> None:
    async with real_groups(2) as groups:
        handles = [await attach(g, Counter) for g in groups]
        for group in groups:
            with pytest.raises(LocalProtocolError, match="one object per group"):
                await attach(group, Counter)
        values = [await asyncio.wait_for(handles[0].add(1), 10) for _ in range(4)]
        assert values == [1, 2, 3, 4]
        await asyncio.wait_for(handles[1].wait_until(lambda c: c.value == 4), 10)
        for handle in handles:
            await handle.close()


@replicated
class Seen:
    """A class whose write can store a set (state the state encoder refuses)."""

    def __init__(self) -> None:
        self.data: dict[str, int] = {}

    @write
    def put(self, key: Any, value: Any) -> None:
        if key == "set":
            self.seen = {value}
        else:
            self.data[key] = value


@pytest.mark.parametrize(("cls", "bad", "refused"), [
    (ReplicatedDict, [((1, 2), "x"), (1.5, "y")], "the new entry has a key of type"),
    (Seen, [("set", 1)], r"Seen.put was undone: the state of Seen\['seen'\] is a set")])
@run_async
async def test_a_write_leaving_state_no_joiner_could_get_fails_and_joins_still_work(
        cls: type, bad: list[tuple[Any, Any]], refused: str) -> None:
    """A tuple or float key, or a set, used to be stored, after which no member could hand
    its state to a joiner and every later join timed out."""
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        opts: dict[str, Any] = {"transport": "mem://", "registry": server.url}
        handles = [ReplicatedHandle(cls()) for _ in range(3)]
        groups = [await Group.create("kv", ordering="sequencer", app=handles[0], **opts)]
        try:
            groups.append(await Group.join("kv", app=handles[1], **opts))
            await asyncio.wait_for(handles[0].put("k", [1]), 10)
            for key, value in bad:
                with pytest.raises(LocalProtocolError, match=refused):
                    await asyncio.wait_for(handles[1].put(key, value), 10)
            groups.append(await Group.join("kv", app=handles[2], join_timeout_s=20, **opts))
            await asyncio.wait_for(handles[2].put("j", 2), 10)
            for handle in handles:
                await asyncio.wait_for(handle.wait_until(lambda d: "j" in d.data), 10)
                assert handle.local.data == {"k": [1], "j": 2}
        finally:
            for group in reversed(groups):
                await group.close()


@pytest.mark.parametrize(("removed", "why"), [
    (False, "its group was closed here"),
    (True, "this member left its group or was removed from it")])
@run_async
async def test_when_the_group_ends_pending_waiting_and_later_calls_fail(
        removed: bool, why: str) -> None:
    bus = Bus()
    groups = [FakeGroup(bus, n) for n in ("n1", "n2")]
    first, second = [await attach(g, Counter) for g in groups]
    assert await second.add(1) == 1
    groups[1].end(removed)  # its write below is never delivered here
    in_flight = second.add(1)
    reading = asyncio.ensure_future(second.get())  # waits for that write
    waiting = asyncio.ensure_future(second.wait_until(lambda c: c.value == 2))
    gone = f"replicated object gone: {why}"
    for call in (in_flight, reading, waiting):
        with pytest.raises(LocalProtocolError, match=gone):
            await asyncio.wait_for(call, 10)
    with pytest.raises(LocalProtocolError, match=gone):
        second.add(1)  # at once: nothing is broadcast
    with pytest.raises(LocalProtocolError, match=gone):
        await second.get()
    assert await first.add(1) == 3  # the others go on (they got its last write)
    await first.close()
    with pytest.raises(LocalProtocolError, match="replicated object closed"):
        first.add(1)


class RefusingGroup(FakeGroup):
    """A group whose deliveries() refuses (as abcast.Group's does when made with
    on_deliver=)."""

    async def deliveries(self) -> AsyncIterator[Deliver]:
        raise LocalProtocolError("deliveries() needs an open group made without on_deliver=")
        yield  # an async generator


@run_async
async def test_a_reader_whose_deliveries_refuse_fails_its_calls() -> None:
    handle = await attach(RefusingGroup(Bus(), "n1"), Counter)
    pending = handle.add(1)
    with pytest.raises(LocalProtocolError, match=r"deliveries failed: .*without on_deliver"):
        await asyncio.wait_for(pending, 10)
    with pytest.raises(LocalProtocolError, match="deliveries failed"):
        handle.add(1)


@run_async
async def test_a_write_in_flight_when_a_real_group_closes_here_resolves() -> None:
    async with real_groups(2) as groups:
        first, second = [await attach(g, Counter) for g in groups]
        assert await asyncio.wait_for(second.add(1), 10) == 1
        in_flight = second.add(1)
        await groups[1].close()
        try:  # executed here before the close, or failed by it: never left hanging
            assert await asyncio.wait_for(in_flight, 10) == 2
        except LocalProtocolError as exc:
            assert "its group was closed here" in str(exc)
        with pytest.raises(LocalProtocolError, match="its group was closed here"):
            await asyncio.wait_for(second.get(), 10)
        await first.close()


@pytest.mark.parametrize("ordering", ["matrix", "sequencer"])
@run_async
async def test_replicas_over_real_groups_agree(ordering: str) -> None:
    async with real_groups(3, ordering) as groups:
        handles = [await attach(g, Counter) for g in groups]

        async def work(handle: ReplicatedHandle[Counter]) -> None:
            for _ in range(10):
                await handle.add(1)

        await asyncio.wait_for(asyncio.gather(*(work(h) for h in handles)), 20)
        for handle in handles:
            await asyncio.wait_for(handle.wait_until(lambda c: c.value == 30), 20)
        assert [await h.get() for h in handles] == [30, 30, 30]
        for handle in handles:
            await handle.close()


@pytest.mark.parametrize("ordering", ["unordered", "fifo", "causal"])
@run_async
async def test_attach_refuses_a_group_that_does_not_claim_total_order(ordering: str) -> None:
    """Copies on a fifo or causal group would apply writes in different orders and end
    with different values, silently: attaching is a ConfigError naming what works."""
    from abcast.errors import ConfigError
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        async with Group("counter", ordering=ordering, transport="mem://",
                         registry=server.url, node="n1", size=1) as group:
            with pytest.raises(ConfigError, match=r"total order.*chandra-toueg.*sequencer"):
                await attach(group, Counter)
        with pytest.raises(ConfigError, match="does not claim total order"):
            await Group.create("kv", ordering=ordering, transport="mem://",
                               registry=server.url, app=ReplicatedHandle(Counter()))


@run_async
async def test_attach_beside_the_applications_own_reader_fails_loudly() -> None:
    """The group refuses a second reader of one delivery stream: attach's task, or the
    application's loop, fails at once instead of both silently missing deliveries."""
    async with real_groups(2) as groups:
        handle = await attach(groups[0], Counter)
        await asyncio.wait_for(handle.add(1), 10)  # its reader is parked on the queue
        with pytest.raises(LocalProtocolError, match="already has a reader"):
            await asyncio.wait_for(anext(groups[0].deliveries()), 10)
        assert await asyncio.wait_for(handle.add(1), 10) == 2  # the first reader goes on
        await handle.close()
        # a reader that left (close, or `break`: its iterator is not parked) frees it
        await groups[1].broadcast(b"after")
        delivery = await asyncio.wait_for(anext(groups[0].deliveries()), 10)
        assert (delivery.origin, delivery.payload) == (groups[1].node, b"after")


@run_async
async def test_an_app_handles_pending_call_fails_when_its_group_closes_here() -> None:
    """Given as `app=`, a handle hears `group_ended` from the group: what waits fails."""
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as server:
        opts: dict[str, Any] = {"transport": "mem://", "registry": server.url}
        first, second = ReplicatedHandle(Counter()), ReplicatedHandle(Counter())
        g1 = await Group.create("c", ordering="sequencer", app=first, **opts)
        g2 = await Group.join("c", app=second, **opts)
        try:
            assert await asyncio.wait_for(second.add(1), 10) == 1
            waiting = asyncio.ensure_future(second.wait_until(lambda c: c.value == 99))
            await g2.close()
            with pytest.raises(LocalProtocolError, match="the group was closed here"):
                await asyncio.wait_for(waiting, 10)
            with pytest.raises(LocalProtocolError, match="the group was closed here"):
                second.add(1)
        finally:
            await g1.close()


@run_async
async def test_a_wait_until_predicate_changing_what_it_is_given_leaves_the_replica_alone(
        ) -> None:
    """wait_until hands its predicate a copy, as a read hands its result: on main it got
    this node's object itself, so a predicate that changed it (a counter bumped, a list
    appended to) changed this copy only — which then differed from the others' and would
    be handed to joiners so."""
    bus = Bus()
    mine, other = _hooked(bus, "n1", ReplicatedDict()), _hooked(bus, "n2", ReplicatedDict())
    seen: list[Any] = []

    def meddle(copy: ReplicatedDict) -> bool:
        seen.append(copy)
        copy.data.setdefault("k", []).append("meddled")
        copy.data["extra"] = 1
        return len(copy.data["k"]) >= 3  # ["a", "b", "meddled"]: once both writes ran

    await mine.put("k", ["a"])
    waiting = asyncio.ensure_future(mine.wait_until(meddle))
    await asyncio.sleep(0)
    assert not waiting.done()
    await other.put("k", ["a", "b"])
    await asyncio.wait_for(waiting, 5)
    assert mine.local.data == other.local.data == {"k": ["a", "b"]}
    assert mine.replica.state() == other.replica.state()
    assert len(seen) >= 2 and all(copy is not mine.local for copy in seen)
    counter = _hooked(bus, "n3", Counter(5))

    def bump(copy: Counter) -> bool:
        copy.value += 1
        return True

    await counter.wait_until(bump)
    assert counter.local.value == 5


@pytest.mark.parametrize("when", ["queued", "requesting"])
@run_async
async def test_an_acquire_given_up_leaves_the_locks_queue(when: str) -> None:
    """A waiter whose `acquire` is cancelled (a timeout around it, say) leaves the queue,
    so the lock never passes to an owner that stopped waiting: the next one gets it.
    `queued`: cancelled while waiting behind the holder; `requesting`: cancelled before
    its request was even executed here (the request was broadcast all the same)."""
    bus = Bus()
    a, b, c = (_hooked(bus, f"n{i}", Lock()) for i in (1, 2, 3))
    await acquire(a, "A")
    waiter = asyncio.create_task(acquire(b, "B"))
    if when == "queued":
        await b.wait_until(lambda copy: "B" in copy.queue)
    else:
        await asyncio.sleep(0)  # the request is broadcast, not yet executed
        assert "B" not in b.local.queue
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await release(a, "A")
    await asyncio.wait_for(acquire(c, "C"), 5)  # on main: B holds it, forever
    assert c.local.queue == ["C"]


@replicated
class Tab:
    """An account-like class whose writes are named like the facades' own calls."""

    def __init__(self) -> None:
        self.open = True

    @write
    def close(self) -> None:
        self.open = False

    @write
    def drop(self) -> None:
        self.open = False


@run_async
async def test_a_method_named_like_the_handles_own_is_refused() -> None:
    """`close` (or `drop`, on a named object) called through a handle was the handle's
    own: `await tab.close()` closed the handle — this copy applied nothing from then on —
    and the write ran nowhere; `drop()` would have removed the object from the group.
    Such a class is refused with LocalProtocolError naming the method, before anything
    is broadcast."""
    from abcast.replicated import Objects

    with pytest.raises(LocalProtocolError, match=r"Tab: close cannot be called through "
                                                 r"ReplicatedHandle"):
        ReplicatedHandle(Tab())
    bus = Bus()
    group = FakeGroup(bus, "n1")
    objects = Objects()
    group.hook = objects.on_deliver
    objects.bind(group)
    with pytest.raises(LocalProtocolError, match=r"Tab: drop cannot be called through "
                                                 r"ObjectHandle"):
        await objects.create("tab", Tab)
    await asyncio.sleep(0)
    assert bus.log == []


class LateRequests(FakeGroup):
    """A total order without FIFO per sender (ordering skeen claims none): this member's
    lock requests are ordered after the operations it broadcasts right after them."""

    def broadcast_nowait(self, payload: bytes) -> MsgId:
        if b"request" not in payload:
            return super().broadcast_nowait(payload)
        self._seq += 1
        delivery = Deliver(self._node, self._seq, payload)
        asyncio.get_running_loop().call_later(0.05, self.bus.publish, delivery)
        return MsgId(self._node, self._seq)


@run_async
async def test_a_given_up_acquire_releases_after_its_request_whatever_the_order() -> None:
    """The release of a given-up acquire goes out once its request has executed here, so
    even an order that puts a member's later broadcast first (no FIFO) cannot run the
    release before the request and leave the owner queued for ever."""
    bus = Bus()
    a, c = _hooked(bus, "n1", Lock()), _hooked(bus, "n3", Lock())
    late = LateRequests(bus, "n2")
    b = ReplicatedHandle(Lock())
    late.hook = b.on_deliver
    b.bind(late)
    await acquire(a, "A")
    waiter = asyncio.create_task(acquire(b, "B"))
    await asyncio.sleep(0)  # B's request is broadcast, ordered late
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    async with asyncio.timeout(5):  # until B's request is ordered (after its release?)
        while not any(d.origin == "n2" and b"request" in d.payload for d in bus.log):
            await asyncio.sleep(0.01)
    await release(a, "A")
    await asyncio.wait_for(acquire(c, "C"), 5)  # sent at once, B stayed queued for ever
    assert c.local.queue == ["C"]
