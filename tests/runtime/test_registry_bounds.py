"""The registry's bounds (issue #21): a client that cannot be served backs off instead of
looping, a request the registry cannot read fails at once, `group list` is paged, the
registry holds a bounded number of entries (a clear refusal past each bound), and
connections that hold a slot without finishing a message, or idle, are closed."""

from __future__ import annotations

import asyncio
import logging
import struct

import pytest

from abcast.errors import ConfigError
from abcast.registry import RegistryClient, RegistryLimits, RegistryServer
from abcast.registry.messages import Register, Registered, decode_reply, encode, read_body

pytestmark = pytest.mark.timeout(30)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.08}


def test_an_invalid_name_fails_at_once_and_costs_the_registry_nothing() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            client = RegistryClient(server.url, **FAST)
            with pytest.raises(ConfigError, match="invalid registry request Register"):
                await client.register("not a node id!" * 20)
            await client.register()
            with pytest.raises(ConfigError, match="invalid registry request Join"):
                await client.join("g" * 500, "tcp://127.0.0.1:1")
            assert server.stats.bad_messages == 0 and client.reconnects == 0
            await client.close()

    asyncio.run(main())


def test_a_registry_that_drops_every_connection_is_retried_with_growing_delays() -> None:
    """A server that accepts and closes at once (as the registry does on a request it
    cannot read): before, the client reconnected at once, every time (55,597 log lines
    in 30 s); now every reconnection waits, twice as long each time up to the cap."""

    async def main() -> list[float]:
        accepted = 0

        async def slam(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        server = await asyncio.start_server(slam, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = RegistryClient(f"tcp://127.0.0.1:{port}", **FAST, connect_timeout_s=None)
        delays: list[float] = []
        real = client._back_off

        async def recorded(delay: float) -> float:
            delays.append(delay)
            return await real(delay)

        client._back_off = recorded  # type: ignore[method-assign]
        request = asyncio.create_task(client.list_groups())
        async with asyncio.timeout(10):
            while len(delays) < 6:
                await asyncio.sleep(0.01)
        request.cancel()
        await client.close()
        server.close()
        assert accepted <= len(delays) + 1  # one connection per back-off, no more
        return delays

    delays = asyncio.run(main())
    assert delays[:6] == [0.01, 0.02, 0.04, 0.08, 0.08, 0.08]


def test_group_list_is_paged() -> None:
    async def main() -> None:
        limits = RegistryLimits(list_page=4)
        async with RegistryServer(limits=limits) as server:
            client = RegistryClient(server.url, **FAST)
            await client.register()
            names = [f"g{i:02d}" for i in range(11)]
            for name in names:
                await client.join(name, "tcp://127.0.0.1:1")
            first = await client.list_page()
            assert [g.group for g in first.groups] == names[:4] and first.next == "g03"
            assert [g.group for g in (await client.list_page("g03", 2)).groups] == names[4:6]
            assert [g.group for g in await client.list_groups()] == names
            await client.close()

    asyncio.run(main())


def test_the_registry_refuses_entries_past_its_bounds_with_a_clear_reason() -> None:
    async def main() -> None:
        limits = RegistryLimits(max_groups=3, max_nodes=4, max_entries_per_client=2)
        async with RegistryServer(limits=limits) as server:
            client = RegistryClient(server.url, **FAST)
            await client.register()
            await client.join("a", "tcp://127.0.0.1:1")  # 2 entries by this connection
            with pytest.raises(ConfigError, match="max_entries_per_client 2"):
                await client.join("b", "tcp://127.0.0.1:1")
            await client.join("a", "tcp://127.0.0.1:1")  # nothing new: still served
            others = [RegistryClient(server.url, **FAST) for _ in range(4)]
            for other in others[:3]:
                await other.register()
            with pytest.raises(ConfigError, match="registry full: it holds 4 node ids"):
                await others[3].register()
            await others[0].join("b", "tcp://127.0.0.1:2")
            await others[1].join("c", "tcp://127.0.0.1:2")
            with pytest.raises(ConfigError, match="registry full: it holds 3 groups"):
                await others[2].join("d", "tcp://127.0.0.1:2")
            assert server.stats.refused_full == 3
            for c in [client, *others]:
                await c.close()

    asyncio.run(main())


def test_half_sent_and_idle_connections_are_closed_but_waiting_ones_are_not() -> None:
    async def main() -> None:
        limits = RegistryLimits(idle_timeout_s=0.3, message_timeout_s=0.2)
        async with RegistryServer(limits=limits) as server:
            host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
            slow_r, slow_w = await asyncio.open_connection(host, int(port))
            slow_w.write(struct.pack(">I", 100)[:2])  # half a length prefix, then nothing
            idle_r, _idle_w = await asyncio.open_connection(host, int(port))
            waiter = RegistryClient(server.url, **FAST)
            await waiter.register()
            waiting = asyncio.create_task(waiter.wait_members("late", 1))
            async with asyncio.timeout(10):
                assert await slow_r.read() == b""  # closed by the registry
                assert await idle_r.read() == b""
            assert server.stats.timeouts >= 2 and not waiting.done()
            joiner = RegistryClient(server.url, **FAST)
            await joiner.register()
            await joiner.join("late", "tcp://127.0.0.1:1")
            async with asyncio.timeout(10):
                info = await waiting
            assert list(info.members) == ["n2"]
            for c in (waiter, joiner):
                await c.close()

    asyncio.run(main())


def test_one_token_claiming_id_after_id_is_counted_for_each(
        caplog: pytest.LogCaptureFixture) -> None:
    """A token that holds an id and claims another creates one more: it used to skip the
    bounds (200 claims granted with max_nodes 10). Planted: counting by token only. The
    refusals are logged once for the connection, not once per request."""

    async def main() -> None:
        limits = RegistryLimits(max_nodes=10, max_entries_per_client=5)
        async with RegistryServer(limits=limits) as server:
            host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            replies = []
            for i in range(20):
                writer.write(encode(Register(i, "one-token", f"x{i}", f"tcp://10.0.0.1:{i + 1}")))
                async with asyncio.timeout(10):
                    replies.append(decode_reply(await read_body(reader)))
            granted = [r for r in replies if isinstance(r, Registered)]
            assert len(granted) == 5 == len(server.node_ids())
            assert all("max_entries_per_client 5" in getattr(r, "reason", "")
                       for r in replies[5:])
            writer.close()
            warned = [r for r in caplog.records if r.levelno >= logging.WARNING
                      and "registry refused a request" in r.getMessage()]
            assert len(warned) == 1  # of the 15 refusals

    asyncio.run(main())


def test_registrations_parked_in_the_recovery_grace_are_counted_when_granted() -> None:
    """During --recovery-grace registrations wait; they were checked against max_nodes on
    arrival, when none of them was counted, and then all granted. Planted: checking on
    arrival only."""

    async def main() -> None:
        limits = RegistryLimits(max_nodes=5)
        async with RegistryServer(limits=limits, recovery_grace_s=0.2) as server:
            clients = [RegistryClient(server.url, **FAST) for _ in range(12)]
            results = await asyncio.gather(*(c.register() for c in clients),
                                           return_exceptions=True)
            refused = [r for r in results if isinstance(r, ConfigError)]
            assert len(server.node_ids()) == 5 and len(refused) == 7
            assert all("registry full: it holds 5 node ids" in str(r) for r in refused)
            for c in clients:
                await c.close()

    asyncio.run(main())


def test_tombstones_and_addresses_are_bounded() -> None:
    """Remove of a name the registry never held leaves no tombstone, and it keeps the
    newest max_groups tombstones only (5,000 Removes of made-up names used to leave
    5,000); an announced view gives addresses to registered ids only (20 views of one
    group listing 5,000 made-up members each used to leave 100,001 addresses).
    Planted: a tombstone per Remove; every listed member's address kept."""

    async def main() -> None:
        limits = RegistryLimits(max_groups=3)
        async with RegistryServer(limits=limits) as server:
            client = RegistryClient(server.url, **FAST)
            me = await client.register(address="tcp://10.0.0.1:1")
            for i in range(50):
                await client.remove(f"never{i}")
            assert len(server._removed) == 0
            for i in range(5):
                await client.announce(f"g{i}", "sequencer", 1, {me: "tcp://10.0.0.1:1"},
                                      create=True)
                await client.remove(f"g{i}")
            assert list(server._removed) == ["g2", "g3", "g4"]  # the newest 3
            with pytest.raises(ConfigError, match="was removed"):
                await client.announce("g4", "sequencer", 2, {me: "tcp://10.0.0.1:1"})
            await client.announce("g0", "sequencer", 2, {me: "tcp://10.0.0.1:1"})  # forgotten
            quiet = RegistryClient(server.url, **FAST)
            other = await quiet.register()  # no address of its own
            for v in range(3, 6):
                fakes = {f"fake{v}_{k}": "tcp://10.6.6.6:1" for k in range(100)}
                await client.announce("g0", "sequencer", v,
                                      {me: "tcp://10.0.0.1:1", other: "tcp://10.0.0.2:1"}
                                      | fakes)
            assert server._addresses == {me: "tcp://10.0.0.1:1", other: "tcp://10.0.0.2:1"}
            assert await client.locate("fake3_0") is None
            assert await client.locate(other) == "tcp://10.0.0.2:1"
            for c in (client, quiet):
                await c.close()

    asyncio.run(main())


def test_the_secrets_of_groups_gone_are_let_go() -> None:
    """A secret group's verifier was kept after the group went (its last member left,
    or it was removed) until a request named the group again: a client making and
    leaving secret groups under new names grew the registry without bound (200 groups
    made and left, at most 3 at a time, left 200 verifiers). Now it goes with the
    group, and the name is free for anyone, as before."""

    async def main() -> None:
        limits = RegistryLimits(max_groups=3)
        async with RegistryServer(limits=limits) as server:
            client = RegistryClient(server.url, secret=b"a-group-secret", **FAST)
            me = await client.register(address="tcp://10.0.0.1:1")
            for i in range(100):
                await client.join(f"s{i}", "tcp://10.0.0.1:1", 1)
                await client.leave(f"s{i}")
                await client.announce(f"d{i}", "sequencer", 1, {me: "tcp://10.0.0.1:1"},
                                      create=True)
                await client.remove(f"d{i}")
            assert server._groups == {}
            assert len(server._group_keys) <= limits.max_groups, len(server._group_keys)
            stranger = RegistryClient(server.url, **FAST)  # no secret: the names are free
            await stranger.register(address="tcp://10.0.0.2:1")
            assert (await stranger.join("s0", "tcp://10.0.0.2:1", 1)).secret is False
            for c in (client, stranger):
                await c.close()

    asyncio.run(main())


def test_a_request_above_the_message_bound_fails_at_once() -> None:
    """A view too large for one registry message was sent, dropped by the registry as
    oversize, and re-sent after every reconnect for ever; now the client refuses it."""

    async def main() -> None:
        async with RegistryServer() as server:
            client = RegistryClient(server.url, **FAST)
            me = await client.register()
            members = {me: "tcp://10.0.0.1:1"} | {
                f"m{k}": "tcp://10.0.0.2:7500/" + "x" * 480 for k in range(2_500)}
            with pytest.raises(ConfigError, match="above the 1048576-byte bound"):
                await client.announce("wide", "sequencer", 1, members, create=True)
            assert server.stats.bad_messages == 0 and client.reconnects == 0
            await client.close()

    asyncio.run(main())
