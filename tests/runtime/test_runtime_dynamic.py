"""Dynamic groups in one process over real transports: create, join (state transfer of a
replicated object), leave, the leader's registry duties (including after a registry
restart), list/members/remove, and several groups on one node."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

import pytest

from abcast import ConfigError, Group, Node, RegistryClient, RegistryServer, View
from abcast.ordering.registry import ORDERINGS, get_ordering
from abcast.replicated import Counter, ReplicatedHandle
from abcast.testing import check_events
from abcast.testing.polling import until
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(60)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
#: orderings that admit and release members at run time
OPEN_ORDERINGS = [name for name, spec in ORDERINGS.items()
                  if {"join", "leave"} <= spec.tolerates]
#: of which: those a replicated object can run on (total order)
OPEN_TOTAL = [name for name in OPEN_ORDERINGS if "total" in ORDERINGS[name].guarantees]


_until = functools.partial(until, timeout_s=10.0)


# ---------------------------------------------------------------- the registry alone


def test_announce_list_locate_and_remove_at_the_registry() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            a, b = RegistryClient(server.url, **FAST), RegistryClient(server.url, **FAST)
            assert await a.register(address="tcp://h:1") == "n1"
            assert await b.register(address="tcp://h:2") == "n2"
            info = await a.announce("chat", "matrix", 1, {"n1": "tcp://h:1"}, create=True,
                                    options=b"opts")
            assert (info.ordering, info.view_id, info.leader, info.options) == (
                "matrix", 1, "n1", b"opts")
            with pytest.raises(ConfigError, match="already exists"):
                await b.announce("chat", "matrix", 1, {"n2": "tcp://h:2"}, create=True)
            two = {"n1": "tcp://h:1", "n2": "tcp://h:2"}
            assert (await a.announce("chat", "matrix", 2, two)).view_id == 2
            # An older view (a leader that has not heard of view 2 yet) changes nothing.
            stale = await b.announce("chat", "matrix", 1, {"n2": "tcp://h:2"})
            assert stale.view_id == 2 and stale.members == two
            with pytest.raises(ConfigError, match="uses ordering 'matrix'"):
                await a.announce("chat", "skeen", 3, two)
            await a.announce("other", "fifo", 1, {"n1": "tcp://h:1"}, create=True)
            listed = [(g.group, g.ordering, g.view_id, g.leader, g.members)
                      for g in await b.list_groups()]
            assert listed == [("chat", "matrix", 2, "n1", 2), ("other", "fifo", 1, "n1", 1)]
            assert await b.locate("n1") == "tcp://h:1"
            assert await b.locate("n7") is None
            assert (await b.remove("chat")).members == {}
            with pytest.raises(ConfigError, match="was removed"):
                await a.announce("chat", "matrix", 3, two)
            assert [g.group for g in await a.list_groups()] == ["other"]
            # The name is free again for a new group.
            assert (await b.announce("chat", "skeen", 1, {"n2": "tcp://h:2"},
                                     create=True)).ordering == "skeen"
            await a.close()
            await b.close()

    asyncio.run(main())


# ---------------------------------------------------------------- create, join, leave


@pytest.mark.parametrize("ordering", OPEN_TOTAL)
def test_joiners_get_the_replicated_state_and_everyone_converges_under_writes(
    ordering: str,
) -> None:
    recorder = TraceRecorder("dyn-join")
    views: dict[str, list[View]] = {}

    def watcher(name: str) -> Callable[[View], None]:
        return lambda view: views.setdefault(name, []).append(view)

    async def main() -> tuple[list[int], list[int]]:
        async with RegistryServer() as server:
            handles = [ReplicatedHandle(Counter()) for _ in range(3)]
            groups = [await Group.create(
                "bank", ordering=ordering, registry=server.url, transport="mem://",
                app=handles[0], recorder=recorder, on_view=watcher("a"))]
            writes = 0

            async def keep_writing(h: ReplicatedHandle[Counter]) -> None:
                nonlocal writes
                while True:
                    await h.add(1)
                    writes += 1
                    # Alone in its group a write executes at once, and awaiting a done
                    # future does not yield: let the loop (and the joins) run.
                    await asyncio.sleep(0)

            writer = asyncio.create_task(keep_writing(handles[0]))
            await _until(lambda: writes >= 20)
            for k, name in ((1, "b"), (2, "c")):  # both join while n1 keeps writing
                groups.append(await Group.join(
                    "bank", registry=server.url, transport="mem://", app=handles[k],
                    recorder=recorder, on_view=watcher(name)))
            more = [asyncio.create_task(keep_writing(h)) for h in handles[1:]]
            await _until(lambda: writes >= 120)
            for task in (writer, *more):
                task.cancel()
            await asyncio.gather(writer, *more, return_exceptions=True)
            issued = sum(h.replica.issued for h in handles)  # each adds 1 to the counter
            await _until(lambda: all(h.local.value == issued for h in handles))
            # The leader announces each view to the registry on its own time.
            await _until(lambda: server.group_info("bank").view_id >= 3)
            info = server.group_info("bank")
            assert info.view_id == 3 and list(info.members) == ["n1", "n2", "n3"]
            # n1 learned where each joiner is from the registry, not from the join.
            assert groups[0].host.stats.resolved_peers == 2
            values = [h.local.value for h in handles]
            applied = [h.applied for h in handles]
            for g in groups:
                await g.close()
            return values, applied

    values, applied = asyncio.run(main())
    assert len(set(values)) == 1 and values[0] >= 120
    # The joiners executed only what came after their admission: their state came by
    # snapshot, not by replaying history.
    assert applied[1] < applied[0] and applied[2] < applied[0]
    assert [v.view_id for v in views["a"]] == [1, 2, 3]
    assert [v.view_id for v in views["b"]] == [2, 3]
    assert [v.view_id for v in views["c"]] == [3]
    assert check_events(recorder.rows(), get_ordering(ordering).guarantees, "dyn-join") == []


@pytest.mark.parametrize("ordering", OPEN_ORDERINGS)
def test_the_leader_leaves_and_the_next_lowest_member_registers_the_group(
    ordering: str,
) -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            url = server.url
            g1 = await Group.create("chat", ordering=ordering, registry=url,
                                    transport="tcp://127.0.0.1:0", recheck_s=0.1)
            g2 = await Group.join("chat", registry=url, transport="tcp://127.0.0.1:0")
            g3 = await Group.join("chat", registry=url, transport="tcp://127.0.0.1:0",
                                  ordering=ordering)
            assert g1.members == g2.members == g3.members == ("n1", "n2", "n3")
            await g2.broadcast(b"before")
            await g1.leave()
            assert g1.removed_view == View(4, ("n2", "n3"))
            await _until(lambda: server.group_info("chat").view_id == 4)
            info = server.group_info("chat")
            assert info.leader == "n2" and list(info.members) == ["n2", "n3"]
            assert g2.leader == "n2"
            await g3.broadcast(b"after")
            got = []
            async for d in g2.deliveries():
                got.append(d.payload)
                if d.payload == b"after":
                    break
            assert got == [b"before", b"after"]
            await g2.leave()
            await _until(lambda: list(server.group_info("chat").members) == ["n3"])
            await g3.leave()  # the last member: the group is gone
            assert server.group_names() == []

    asyncio.run(main())


def test_the_leader_registers_its_group_again_after_the_registry_restarts() -> None:
    async def main() -> None:
        first = RegistryServer()
        url = await first.start()
        g1 = await Group.create("chat", ordering="matrix", registry=url,
                                transport="tcp://127.0.0.1:0", recheck_s=0.05)
        g2 = await Group.join("chat", registry=url, transport="tcp://127.0.0.1:0",
                              recheck_s=0.05)
        await first.close()  # everything it knew is gone
        # The grace period lets running nodes re-claim their ids before new ones are
        # handed out (as `abcast registry` does by default).
        second = RegistryServer(port=int(url.rsplit(":", 1)[1]), recovery_grace_s=0.5)
        await second.start()
        try:
            await _until(lambda: second.group_info("chat").view_id == 2)
            info = second.group_info("chat")
            assert list(info.members) == ["n1", "n2"] and info.ordering == "matrix"
            assert g1.registrar is not None and g1.registrar.repairs >= 1
            # Both nodes told the new registry where they are (the client's replay).
            await _until(lambda: second.node_ids() == ["n1", "n2"])
            assert second.address_of("n2") == g2.host.address
            # And a third node can join through it.
            g3 = await Group.join("chat", registry=second.url, transport="tcp://127.0.0.1:0")
            assert g3.members == ("n1", "n2", "n3")
            await g3.close()
        finally:
            await g2.close()
            await g1.close()
            await second.close()

    asyncio.run(main())


def test_joining_what_cannot_be_joined_is_refused_clearly() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            url = server.url
            with pytest.raises(ConfigError, match="no group 'nope'"):
                await Group.join("nope", registry=url, transport="mem://")
            g = await Group.create("f", ordering="fifo", registry=url, transport="mem://")
            with pytest.raises(ConfigError, match="uses ordering 'fifo'"):
                await Group.join("f", registry=url, transport="mem://", ordering="matrix")
            with pytest.raises(ConfigError, match="already exists"):
                await Group.create("f", ordering="fifo", registry=url, transport="mem://")
            assert list(server.group_info("f").members) == [g.node]  # failures left no trace
            await g.close()

    asyncio.run(main())


def test_one_node_hosts_a_static_and_dynamic_groups_on_one_transport() -> None:
    """A static fifo group and one dynamic group per open ordering, all on the same two
    nodes: frames are routed by group, each group orders its own messages."""

    async def main() -> None:
        async with RegistryServer() as server:
            a = await Node("tcp://127.0.0.1:0", registry=server.url).start()
            b = await Node("tcp://127.0.0.1:0", registry=server.url).start()
            sa = await Group("s", ordering="fifo", host=a, peers={b.id: b.address}).open()
            sb = await Group("s", ordering="fifo", host=b, peers={a.id: a.address}).open()
            dynamic = []
            for ordering in OPEN_ORDERINGS:
                da = await Group.create(f"d-{ordering}", ordering=ordering, host=a)
                db = await Group.join(f"d-{ordering}", host=b)
                dynamic.append((da, db))
            names = sorted(["s", *(f"d-{o}" for o in OPEN_ORDERINGS)])
            assert sorted(a.groups) == sorted(b.groups) == names
            await sa.broadcast(b"static")
            for _, db in dynamic:
                await db.broadcast(db.name.encode())
            assert (await anext(sb.deliveries())).payload == b"static"
            for da, _ in dynamic:
                assert (await anext(da.deliveries())).payload == da.name.encode()
            assert a.stats.bad_frames == b.stats.bad_frames == 0
            for da, db in dynamic:
                await db.leave()
                assert da.members == ("n1",)
            assert sorted(b.groups) == ["s"]
            for g in (sa, sb, *(da for da, _ in dynamic)):
                await g.close()
            await a.close()
            await b.close()

    asyncio.run(main())
