"""A group's and a node's lifecycle at its edges: closed while opening, a node closed with
groups in every phase, a leave that a close overtakes, an open that fails after binding
its app, and what the registry lists once the members are gone."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from abcast import Group, Node, RegistryClient, RegistryServer
from abcast.effects import Deliver
from abcast.errors import ConfigError, LocalProtocolError
from abcast.replicated import Counter, ReplicatedHandle
from abcast.rpc import Server

pytestmark = pytest.mark.timeout(30)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
#: a bound on a failure only: every wait below ends at once when the code is right
BOUND_S = 5.0


async def _settled(task: asyncio.Task[Group]) -> BaseException | Group:
    """What `task` ended with (its exception, or the group), waiting at most BOUND_S: an
    open() that hangs fails the test instead of hanging it."""
    done, _ = await asyncio.wait({task}, timeout=BOUND_S)
    if not done:
        task.cancel()
        pytest.fail("open() still waiting after the group was closed")
    return task.exception() or task.result()


async def _listed(url: str, group: str) -> dict[str, str]:
    async with RegistryClient(url, **FAST) as client:
        return dict((await client.lookup(group)).members)


def test_close_while_a_static_group_waits_for_its_members_ends_the_open() -> None:
    """open() waited for ever (size=2, no join timeout): close() took the node off the
    registry, so the second member never counted it, and one that did come brought the
    closed group back (attached, 'open')."""

    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node(registry=server.url).start()
            group = Group("bank", ordering="fifo", host=node, size=2)
            opening = asyncio.create_task(group.open())
            while not await _listed(server.url, "bank"):  # it waits for a second member
                await asyncio.sleep(0.005)
            await group.close()
            ended = await _settled(opening)
            assert isinstance(ended, LocalProtocolError)
            assert "closed while opening" in str(ended)
            assert node.groups == () and not group.active
            assert await _listed(server.url, "bank") == {}
            with pytest.raises(LocalProtocolError, match="closed"):
                await group.broadcast(b"late")
            await group.close()  # twice: nothing
            # The name is free on the node again.
            again = await Group("bank", ordering="fifo", host=node, size=1).open()
            await again.close()
            await node.close()

    asyncio.run(main())


def test_close_while_the_groups_own_node_starts_ends_the_open() -> None:
    """A close() that came while open() started the group's own node (registering with
    the registry) was seen by nothing: the open went on to wait for members for ever,
    and close() waited for the open."""

    async def main() -> None:
        async with RegistryServer() as server:
            group = Group("bank", ordering="fifo", registry=server.url, size=2)
            opening = asyncio.create_task(group.open())
            await asyncio.sleep(0)  # open() is inside its node's start
            assert group.host._state == "starting"
            closing = asyncio.create_task(group.close())
            ended = await _settled(opening)
            assert isinstance(ended, LocalProtocolError)
            await asyncio.wait({closing}, timeout=BOUND_S)
            assert closing.done() and not group.host.running
            assert await _listed(server.url, "bank") == {}

    asyncio.run(main())


def test_closing_a_node_closes_its_groups_in_every_phase() -> None:
    """Node.close() closed the stacks only: a deliveries() reader stayed parked for ever,
    the groups said they were active, a dynamic group's registrar ran on (parked on the
    closed registry client), an opening group waited for ever, and the registry kept
    listing the node in all of them."""

    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node(registry=server.url).start()
            static = await Group("solo", ordering="fifo", host=node, size=1).open()
            created = await Group.create("chat", ordering="sequencer", host=node)
            opening = asyncio.create_task(
                Group("pair", ordering="fifo", host=node, size=2).open())
            ended: list[str] = []

            class App:
                def on_deliver(self, delivery: Deliver) -> None: ...
                def get_state(self) -> bytes: return b""
                def set_state(self, state: bytes) -> None: ...
                def bind(self, group: object) -> None: ...
                def group_ended(self, why: str) -> None: ended.append(why)

            with_app = await Group("app", ordering="fifo", host=node, size=1,
                                   app=App()).open()

            async def read(group: Group) -> list[bytes]:
                return [d.payload async for d in group.deliveries()]

            await static.broadcast(b"one")
            reader = asyncio.create_task(read(static))
            while not await _listed(server.url, "pair"):
                await asyncio.sleep(0.005)
            assert created.registrar is not None
            await node.close()

            assert isinstance(await _settled(opening), LocalProtocolError)
            async with asyncio.timeout(BOUND_S):
                assert await reader == [b"one"]
            for group in (static, created, with_app):
                assert not group.active
                with pytest.raises(LocalProtocolError, match="closed"):
                    await group.broadcast(b"late")
                await group.close()  # after the node's close: nothing
            assert created.registrar is None
            assert ended == ["the group was closed here"]
            for name in ("solo", "chat", "pair", "app"):
                assert await _listed(server.url, name) == {}, name

    asyncio.run(main())


def test_a_dynamic_group_whose_members_all_closed_is_not_listed_and_can_be_made_again() -> None:
    """Members that close() (not leave()) stayed listed for ever: a joiner was sent to
    dead addresses until its join timed out, and the name could not be created again
    ('already exists')."""

    async def main() -> None:
        async with RegistryServer() as server:
            first = await Group.create("chat", ordering="sequencer", registry=server.url)
            second = await Group.join("chat", registry=server.url)
            assert len(await _listed(server.url, "chat")) == 2
            await second.close()
            # Off the record at once (the leader's view still holds it until its
            # failure detector says otherwise, and may list it again until then).
            assert second.node not in await _listed(server.url, "chat")
            await first.close()
            assert await _listed(server.url, "chat") == {}
            again = await Group.create("chat", ordering="sequencer", registry=server.url)
            assert await _listed(server.url, "chat") == {again.node: again.host.address}
            await again.close()

    asyncio.run(main())


def test_a_close_overtaking_a_leave_ends_the_leave() -> None:
    """leave() waited for its departure for GRACEFUL_LEAVE_TIMEOUT_S (10 s) when a close()
    came meanwhile: the closed stack would never install the view without this node."""

    async def main() -> None:
        async with RegistryServer() as server:
            first = await Group.create("chat", ordering="sequencer", registry=server.url)
            second = await Group.join("chat", registry=server.url)
            leaving = asyncio.create_task(second.leave())
            await asyncio.sleep(0)  # the leave has started: it waits for its view
            await second.close()
            done, _ = await asyncio.wait({leaving}, timeout=BOUND_S)
            assert done, "leave() still waiting after close()"
            assert leaving.exception() is None
            await first.close()

    asyncio.run(main())


def test_the_registrar_of_a_view_without_members_stays_quiet_and_stops_cleanly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The view a group's last member leaves into is empty (chandra-toueg's is): the
    registrar read its leader first (IndexError), its task died unseen, and stop() raised
    the IndexError from inside Group.leave(). A bug of any other kind is one logged
    traceback and the registrar's end, not an exception out of stop()."""
    from abcast import View
    from abcast.runtime.registrar import Registrar

    async def main() -> None:
        async with RegistryServer() as server, RegistryClient(server.url, **FAST) as client:
            await client.register(address="tcp://h:1")
            assert client.node is not None

            def broken() -> View:
                raise RuntimeError("planted")

            for view in (lambda: View(6, ()), broken):
                registrar = Registrar(client, "g", "fifo", b"", client.node, "tcp://h:1",
                                      view, lambda _: None, recheck_s=0.01)
                registrar.start()
                await asyncio.sleep(0)  # its first step: the first view, at once
                await registrar.stop()  # raised IndexError
                assert registrar.announcements == 0
            assert await _listed(server.url, "g") == {}

    with caplog.at_level("ERROR", logger="abcast.runtime.registrar"):
        asyncio.run(main())
    assert [r.exc_info[0] for r in caplog.records if r.exc_info] == [RuntimeError]


def test_a_join_whose_registry_went_away_gives_up_within_its_timeout() -> None:
    """join_timeout_s bounded only the wait to be admitted: the registry lookup before it
    waited for as long as the registry was away."""

    async def main() -> None:
        server = RegistryServer()
        await server.start()
        node = await Node("mem://", registry=server.url).start()
        await server.close()
        joining = asyncio.create_task(Group.join("chat", host=node, join_timeout_s=0.2))
        done, _ = await asyncio.wait({joining}, timeout=BOUND_S)
        assert done, "Group.join still waiting past its join_timeout_s"
        assert isinstance(joining.exception(), TimeoutError)
        assert node.groups == ()
        await node.close()

    asyncio.run(main())


def test_a_close_cancelled_while_it_stops_a_background_task_is_cancelled() -> None:
    """Registrar.stop() (in Group.close/leave) and RegistryClient.close() (in Node.close)
    stopped their task with `suppress(CancelledError)` around `await task`, which also
    swallowed a cancellation of the caller arriving meanwhile: the cancelled caller ran
    on. Cleanup that runs after a cancellation still stops its tasks to the end."""
    from abcast import View
    from abcast.runtime.registrar import Registrar
    from abcast.tasks import stop_task

    async def cancelled_inside(stop: Callable[[], Awaitable[None]]) -> list[str]:
        reached: list[str] = []

        async def caller() -> None:
            await stop()
            reached.append("ran on past its cancellation")

        task = asyncio.create_task(caller())
        await asyncio.sleep(0)  # it waits inside stop(): cancel it there
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return reached

    async def main() -> None:
        async with RegistryServer() as server:
            client = RegistryClient(server.url, **FAST)
            await client.register(address="tcp://h:1")
            assert client.node is not None
            registrar = Registrar(client, "g", "fifo", b"", client.node, "tcp://h:1",
                                  lambda: View(1, ("n1",)), lambda _: None)
            registrar.start()
            assert await cancelled_inside(registrar.stop) == []
            assert await cancelled_inside(client.close) == []

            # cleanup after the caller's cancellation: every stop_task runs to the end
            sleepers = [asyncio.create_task(asyncio.sleep(60)) for _ in range(2)]

            async def cleanup_after_cancel() -> None:
                try:
                    await asyncio.sleep(60)
                finally:
                    for sleeper in sleepers:
                        await stop_task(sleeper)

            task = asyncio.create_task(cleanup_after_cancel())
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert all(s.cancelled() for s in sleepers)

    asyncio.run(main())


def test_a_group_closed_while_the_registry_is_away_is_not_joined_again_on_its_return() -> None:
    """Closing skips the registry's Leave while the registry is away (a dead registry must
    not hold up a shutdown), but the client kept the membership and re-joined it on its
    next connection: the restarted registry listed the closed member again, for as long
    as its node ran."""

    async def main() -> None:
        first = RegistryServer()
        url = await first.start()
        port = int(url.rsplit(":", 1)[1])
        node = await Node("mem://", registry=RegistryClient(url, **FAST)).start()
        registry = node.registry
        assert registry is not None
        solo = await Group("solo", ordering="fifo", host=node, size=1).open()
        kept = await Group("kept", ordering="fifo", host=node, size=1).open()
        await first.close()
        while registry.connected:
            await asyncio.sleep(0.005)
        await solo.close()
        second = RegistryServer(port=port, recovery_grace_s=0.05)
        await second.start()
        await registry.lookup("kept")  # answered once the client has re-asserted itself
        assert second.group_info("solo").members == {}
        assert list(second.group_info("kept").members) == [node.id]
        await kept.close()
        await node.close()
        await second.close()

    asyncio.run(main())


def test_a_node_closed_while_it_starts_does_not_come_up() -> None:
    """close() during start()'s last step (its metrics server starting) was undone by
    start(), which marked the node running over its closed transport and left the
    metrics server listening."""

    async def main() -> None:
        node = Node("tcp://127.0.0.1:0", node="n1", metrics_port=0)
        starting = asyncio.create_task(node.start())
        while node._address is None:  # the transport is up; the services start next
            await asyncio.sleep(0)
        await node.close()
        done, _ = await asyncio.wait({starting}, timeout=BOUND_S)
        assert done and isinstance(starting.exception(), LocalProtocolError)
        assert not node.running
        if node.metrics_url is not None:  # it had come up: it must be down again
            host, port = node.metrics_url.split("/")[2].rsplit(":", 1)
            with pytest.raises(OSError):
                _, writer = await asyncio.open_connection(host, int(port))
                writer.close()
        with pytest.raises(LocalProtocolError, match="closed"):
            node.add_peers({"n2": "tcp://127.0.0.1:9"})
        with pytest.raises(LocalProtocolError, match="closed"):  # was taken, and dead
            node.open_endpoint("rpc", lambda link, env: None)

    asyncio.run(main())


def test_the_groups_a_node_closed_are_remembered_up_to_a_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node remembered every group ever closed on it (to take their late frames
    quietly), for as long as it ran: a node making and closing groups under new names
    (a chat server's rooms) grew without bound. It keeps the most recently closed ones
    (late frames for those stay quiet)."""
    from abcast.runtime import node as node_module

    monkeypatch.setattr(node_module, "MAX_CLOSED_GROUPS", 8, raising=False)

    async def main() -> None:
        node = await Node("mem://", node="n1").start()
        for i in range(50):
            group = await Group(f"room{i}", ordering="fifo", host=node, peers={}).open()
            await group.close()
        assert len(node._closed_groups) <= 8, len(node._closed_groups)
        assert "room49" in node._closed_groups
        await node.close()

    asyncio.run(main())


class _Told:
    """An `app=` that records `group_ended`."""

    def __init__(self) -> None:
        self.ended: list[str] = []

    def on_deliver(self, delivery: Deliver) -> None: ...
    def get_state(self) -> bytes: return b""
    def set_state(self, state: bytes) -> None: ...
    def bind(self, group: object) -> None: ...
    def group_ended(self, why: str) -> None: self.ended.append(why)


def test_an_open_that_fails_after_binding_its_app_tells_the_app() -> None:
    """An open that failed after binding its app (a static group the registry has no
    size for, a create whose name is taken) never called `group_ended`: the app went on
    as if it served a group. It hears why, once."""

    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node("mem://", registry=server.url).start()
            app = _Told()
            with pytest.raises(ConfigError, match="no declared size"):
                await Group("sizeless", ordering="fifo", host=node, app=app).open()
            assert len(app.ended) == 1
            assert app.ended[0].startswith("the group did not open: ConfigError: ")
            assert "no declared size" in app.ended[0]

            taken = await Group.create("chat", ordering="sequencer", registry=server.url)
            app = _Told()
            with pytest.raises(ConfigError, match="already exists"):
                await Group.create("chat", ordering="sequencer", host=node, app=app)
            assert len(app.ended) == 1 and "already exists" in app.ended[0]

            app = _Told()
            group = Group("pair", ordering="fifo", host=node, size=2, app=app)
            opening = asyncio.create_task(group.open())
            while not await _listed(server.url, "pair"):  # bound, waiting for a second
                await asyncio.sleep(0.005)
            await group.close()
            assert isinstance(await _settled(opening), LocalProtocolError)
            assert app.ended == ["the group was closed here while opening"]
            await node.close()
            await taken.close()

    asyncio.run(main())


def test_an_rpc_server_whose_group_failed_to_open_frees_its_endpoint() -> None:
    """What the failed open cost on a shared node: the RPC server it bound kept the
    group's request endpoint, and the next try (a join, with a new server) was refused,
    "node already routes 'rpc:svc'" (tests/rpc/test_rpc_server_lifecycle.py has the close
    and leave cases)."""

    async def main() -> None:
        async with RegistryServer() as server:
            taken = await Group.create("svc", ordering="sequencer", registry=server.url)
            node = await Node("tcp://127.0.0.1:0", registry=server.url).start()
            with pytest.raises(ConfigError, match="already exists"):
                await Server.create("svc", ordering="sequencer", host=node)
            _, joined = await Server.join("svc", host=node, on_request=lambda r: b"")
            assert joined.members == (taken.node, node.id)
            await joined.close()
            await node.close()
            await taken.close()

    asyncio.run(main())


def test_an_app_a_failed_join_never_bound_is_not_told_and_can_be_used_again() -> None:
    """A join refused before it bound its app (the group unknown) never had the app serve
    it: the app is not told, and a ReplicatedHandle is usable for the next try."""

    async def main() -> None:
        async with RegistryServer() as server:
            node = await Node("mem://", registry=server.url).start()
            app = _Told()
            with pytest.raises(ConfigError, match="no group 'bank'"):
                await Group.join("bank", host=node, app=app)
            assert app.ended == []
            handle = ReplicatedHandle(Counter())
            with pytest.raises(ConfigError, match="no group 'bank'"):
                await Group.join("bank", host=node, app=handle)
            created = await Group.create("bank", ordering="sequencer", host=node,
                                         app=handle)
            await handle.add(2)
            assert handle.local.value == 2
            await created.close()
            await node.close()

    asyncio.run(main())
