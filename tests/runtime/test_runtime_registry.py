"""The registry: ids in connection order, groups, waits, bad input, and surviving a restart."""

from __future__ import annotations

import asyncio
import struct

import msgspec
import pytest

from abcast.errors import ConfigError, LocalProtocolError
from abcast.registry import RegistryClient, RegistryServer
from abcast.registry.messages import Lookup, encode
from abcast.testing.polling import until

pytestmark = pytest.mark.timeout(30)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def test_a_well_formed_request_is_framed_like_the_junk_below() -> None:
    # The unknown-type case only differs from a real request in its tag.
    real = encode(Lookup(1, "g"))
    assert real == _framed(msgspec.msgpack.encode(["Lookup", 1, "g", 0]))


def test_ids_follow_registration_order_and_claims_are_guarded() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            clients = [RegistryClient(server.url, **FAST) for _ in range(3)]
            ids = [await c.register() for c in clients]
            assert ids == ["n1", "n2", "n3"]
            claimer = RegistryClient(server.url, **FAST)
            assert await claimer.register("n7") == "n7"
            assert await RegistryClient(server.url, **FAST).register() == "n8"  # after the claim
            thief = RegistryClient(server.url, **FAST)
            with pytest.raises(ConfigError, match="taken"):
                await thief.register("n2")
            # The same token may re-claim its id (a client back after a registry restart).
            assert await clients[1].register("n2") == "n2"
            for c in [*clients, claimer, thief]:
                await c.close()

    asyncio.run(main())


def test_groups_map_members_and_leader_and_enforce_their_size() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            a, b, c, d = (RegistryClient(server.url, **FAST) for _ in range(4))
            for client in (a, b, c, d):
                await client.register()
            waiting = asyncio.create_task(a.wait_members("bank", 3))
            info = await b.join("bank", "tcp://127.0.0.1:2", size=3)
            assert info.size == 3 and info.members == {"n2": "tcp://127.0.0.1:2"}
            await a.join("bank", "tcp://127.0.0.1:1")  # adopts the declared size
            with pytest.raises(ConfigError, match="size 3, not 4"):
                await c.join("bank", "tcp://127.0.0.1:3", size=4)
            assert not waiting.done()
            await c.join("bank", "tcp://127.0.0.1:3")
            full = await waiting
            assert list(full.members) == ["n1", "n2", "n3"] and full.leader == "n1"
            with pytest.raises(ConfigError, match="full"):
                await d.join("bank", "tcp://127.0.0.1:4")
            await a.leave("bank")
            assert (await d.lookup("bank")).leader == "n2"
            for client in (a, b, c, d):
                await client.close()

    asyncio.run(main())


def test_done_reports_release_wait_done_even_after_members_leave() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            a, b = RegistryClient(server.url, **FAST), RegistryClient(server.url, **FAST)
            for client in (a, b):
                await client.register()
                await client.join("run", "mem://x", size=2)
            everyone = asyncio.create_task(b.wait_done("run", 2))
            await a.done("run")
            await a.leave("run")  # a finished early and left: its Done still counts
            assert not everyone.done()
            await b.done("run")
            assert (await everyone).done == ["n1", "n2"]
            for client in (a, b):
                await client.close()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("junk", "reason"),
    [
        (b"\xff" * 64, "exceeds the limit"),  # raw garbage reads as a huge length
        (_framed(b"\xc1" * 20), "not a registry request"),  # 0xc1: never valid msgpack
        (struct.pack(">I", 2**31) + b"x", "exceeds the limit"),
        (struct.pack(">I", 100) + b"short", "truncated"),
        (_framed(msgspec.msgpack.encode(["Nonsense", 1, "g"])), "not a registry request"),
    ],
    ids=["garbage", "garbage-body", "oversize-prefix", "truncated", "unknown-type"],
)
def test_bad_input_drops_that_connection_only(
    junk: bytes, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            good = RegistryClient(server.url, **FAST)
            assert await good.register() == "n1"
            host, port = server.url.removeprefix("tcp://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(junk)
            await writer.drain()
            writer.write_eof()
            assert await asyncio.wait_for(reader.read(), 5) == b""  # the server hung up
            writer.close()
            assert server.stats.bad_messages == 1
            # Everyone else is still served, and the state is intact.
            await good.join("g", "mem://a", size=1)
            assert (await good.lookup("g")).members == {"n1": "mem://a"}
            await good.close()

    asyncio.run(main())
    assert any(reason in r.getMessage() for r in caplog.records
               if r.name.startswith("abcast.registry"))


def test_a_restarted_registry_learns_members_again_and_waiting_calls_resume() -> None:
    async def main() -> None:
        first = RegistryServer()
        url = await first.start()
        port = int(url.rsplit(":", 1)[1])
        a, b = RegistryClient(url, **FAST), RegistryClient(url, **FAST)
        assert [await a.register(), await b.register()] == ["n1", "n2"]
        await a.join("g", "tcp://127.0.0.1:1", size=3)
        await b.join("g", "tcp://127.0.0.1:2")
        await first.close()

        late = RegistryClient(url, **FAST)
        joining = asyncio.create_task(late.register())  # waits: nobody is listening
        await asyncio.sleep(0.1)
        assert not joining.done()

        # The grace lets n1 and n2 re-assert their ids before `late` is given one.
        second = RegistryServer(port=port, recovery_grace_s=0.3)
        await second.start()
        # The running members re-assert their ids and memberships on their own.
        info = await asyncio.wait_for(late.wait_members("g", 2), 10)
        assert info.members == {"n1": "tcp://127.0.0.1:1", "n2": "tcp://127.0.0.1:2"}
        assert await joining == "n3"
        await late.join("g", "tcp://127.0.0.1:3")
        assert a.reconnects >= 1 and b.reconnects >= 1
        for client in (a, b, late):
            await client.close()
        await second.close()

    asyncio.run(main())


def test_closing_the_client_ends_the_calls_it_has_waiting() -> None:
    """A call waiting for a reply the registry holds (a wait for members), or for a
    registry that went away to come back, raises LocalProtocolError when the client is
    closed (both waited for ever: the lost connection's _LostError sent them back to
    wait for a connection that a closed client never makes)."""

    async def main() -> None:
        server = RegistryServer()
        await server.start()
        client = RegistryClient(server.url, **FAST)
        await client.register()
        held = asyncio.create_task(client.wait_members("g", 5))  # the registry holds it
        await until(lambda: server.stats.requests >= 2, 5.0)  # register, then the wait
        await client.close()
        with pytest.raises(LocalProtocolError, match="closed"):
            async with asyncio.timeout(5):  # a bound on the failure only
                await held

        client = RegistryClient(server.url, **FAST)
        await client.register()
        await server.close()
        await until(lambda: not client.connected, 5.0)
        away = asyncio.create_task(client.lookup("g"))  # waits for the registry
        await asyncio.sleep(0)
        await client.close()
        with pytest.raises(LocalProtocolError, match="closed"):
            async with asyncio.timeout(5):
                await away
        with pytest.raises(LocalProtocolError, match="closed"):
            await client.lookup("g")

    asyncio.run(main())


def test_a_group_forgotten_while_away_is_left_on_the_next_connection() -> None:
    """`forget` (a group closed while the registry was away): the membership is not
    re-asserted on the next connection, and its Leave goes out there, so a registry that
    only lost the connection (state kept) forgets it too."""
    from abcast.registry.limits import RegistryLimits

    async def main() -> None:
        # Connections idle for 0.2 s are closed by the registry: every client reconnects.
        async with RegistryServer(limits=RegistryLimits(idle_timeout_s=0.2)) as server:
            a, b = RegistryClient(server.url, **FAST), RegistryClient(server.url, **FAST)
            assert [await a.register(), await b.register()] == ["n1", "n2"]
            await a.join("g", "tcp://h:1", size=2)
            await b.join("g", "tcp://h:2")
            a.forget("g")
            await until(lambda: list(server.group_info("g").members) == ["n2"], 5.0)
            reconnects = a.reconnects
            await until(lambda: a.reconnects > reconnects, 5.0)  # once more: no re-join
            await a.lookup("g")
            assert list(server.group_info("g").members) == ["n2"]
            await a.join("g", "tcp://h:1")  # joining again takes it back
            assert list(server.group_info("g").members) == ["n1", "n2"]
            for client in (a, b):
                await client.close()

    asyncio.run(main())


def test_a_registry_never_reached_fails_within_the_timeout_naming_its_url() -> None:
    """The Python API and the CLI give up on a dead registry alike: one default,
    REGISTRY_TIMEOUT_S (the CLI's --timeout default), and an error that names the URL."""
    from abcast.apps.groups import timeout_option
    from abcast.registry.client import REGISTRY_TIMEOUT_S
    from abcast.runtime.group import Group
    from abcast.runtime.node import Node

    dead = "tcp://127.0.0.1:9"  # the discard port: nothing listens there
    assert Node("mem://", registry=dead).registry.connect_timeout_s == REGISTRY_TIMEOUT_S
    assert RegistryClient(dead).connect_timeout_s == REGISTRY_TIMEOUT_S
    assert any(getattr(p, "default", None) == REGISTRY_TIMEOUT_S
               for p in timeout_option(lambda: None).__click_params__)  # type: ignore[attr-defined]

    async def main() -> None:
        client = RegistryClient(dead, connect_timeout_s=0.3, **FAST)
        with pytest.raises(ConfigError, match=r"registry tcp://127\.0\.0\.1:9 did not answer"):
            async with asyncio.timeout(5):  # the client gives up first, by itself
                await Group("g", ordering="fifo", transport="mem://", registry=client,
                            size=1).open()

    asyncio.run(main())
