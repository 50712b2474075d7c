"""What one hostile or careless client can do to the registry, without a registry secret
(the default `abcast registry`), found by the security review: each test is one of its
scripts, turned round to prove the fix. Each names the planted variant that fails it."""

from __future__ import annotations

import asyncio
import logging
import socket

import msgspec
import pytest

from abcast.errors import ConfigError
from abcast.registry import RegistryClient, RegistryLimits, RegistryServer
from abcast.registry import server as server_module
from abcast.registry.messages import (
    MAX_MESSAGE_BYTES,
    PREFIX,
    Announce,
    GroupInfo,
    Lookup,
    Nonce,
    Refused,
    Register,
    Registered,
    Reply,
    Request,
    WaitDone,
    decode_reply,
    encode,
    read_body,
)

pytestmark = pytest.mark.timeout(60)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
LOGGER = "abcast.registry.server"


async def _raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _ask(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: Request) -> Reply:
    reader, writer = conn
    writer.write(encode(request))
    async with asyncio.timeout(10):
        return decode_reply(await read_body(reader))


async def _register(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                    token: str = "tok") -> str:
    reply = await _ask(conn, Register(1, token, None, "tcp://10.0.0.1:1"))
    assert isinstance(reply, Registered)
    return reply.node


def test_node_ids_outside_ascii_digits_neither_break_nor_poison_the_registry() -> None:
    """"²" is str.isdigit() but no int: it used to make every rendering of its group
    raise, so every later Lookup or ListGroups of it killed the serving connection and
    the client retried for ever. Planted: the old node_sort_key (tests/unit/test_node_order)."""

    async def main() -> None:
        async with RegistryServer() as server:
            conn = await _raw(server.url)
            me = await _register(conn)
            members = {me: "tcp://a:1", "²": "tcp://a:2", "①": "tcp://a:3", "n07": "tcp://a:4"}
            reply = await _ask(conn, Announce(2, me, "tok", "odd", "sequencer", 1, members, True))
            assert isinstance(reply, GroupInfo) and reply.leader == me == "n1"
            victim = RegistryClient(server.url, **FAST)
            async with asyncio.timeout(10):
                assert [g.group for g in await victim.list_groups()] == ["odd"]
                assert list((await victim.lookup("odd")).members) == [me, "n07", "²", "①"]
            assert victim.reconnects == 0 and server.stats.failed_requests == 0
            await victim.close()

    asyncio.run(main())


def test_a_request_the_registry_fails_to_serve_drops_its_connection_and_stores_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A registry bug while serving one request (planted here: an order that raises on
    one id) is one ERROR line and that connection dropped; the record is not stored half
    made, and everyone else is served. Planted: storing the view before ordering its
    members leaves a group that no request can render."""
    caplog.set_level(logging.INFO, LOGGER)
    real = server_module.sorted_nodes

    def fragile(nodes: list[str]) -> tuple[str, ...]:
        if "boom" in nodes:
            raise ValueError("planted")
        return real(nodes)

    monkeypatch.setattr(server_module, "sorted_nodes", fragile)

    async def main() -> None:
        async with RegistryServer() as server:
            conn = await _raw(server.url)
            me = await _register(conn)
            conn[1].write(encode(Announce(2, me, "tok", "bad", "sequencer", 1,
                                          {me: "tcp://a:1", "boom": "tcp://a:2"}, True)))
            async with asyncio.timeout(10):
                assert await conn[0].read() == b""  # dropped
            assert server.stats.failed_requests == 1 and "bad" not in server.group_names()
            other = RegistryClient(server.url, **FAST)
            await other.register()
            await other.join("fine", "tcp://127.0.0.1:1")
            async with asyncio.timeout(10):
                assert [g.group for g in await other.list_groups()] == ["fine"]
            await other.close()
        failed = [r for r in caplog.records if r.name == LOGGER and "failed" in r.getMessage()]
        assert len(failed) == 1 and failed[0].levelno == logging.ERROR

    asyncio.run(main())


def test_a_claim_of_a_huge_number_does_not_stop_fresh_ids() -> None:
    """A claim of "n" + 63 nines used to move the counter of fresh ids so far that the next
    one (65 characters) no client could read, and every later register() looped. Planted:
    claims of any number moving the counter."""

    async def main() -> None:
        async with RegistryServer() as server:
            conn = await _raw(server.url)
            huge = "n" + "9" * 63
            assert await _ask(conn, Register(1, "attacker", huge)) == Registered(1, huge)
            victim = RegistryClient(server.url, **FAST)
            async with asyncio.timeout(10):
                assert await victim.register() == "n1"
            assert await _ask(conn, Register(2, "other", "n" + "9" * 18)) == Registered(
                2, "n" + "9" * 18)  # the largest number that still moves the counter
            async with asyncio.timeout(10):
                assert await RegistryClient(server.url, **FAST).register() == "n1" + "0" * 18
            await victim.close()

    asyncio.run(main())


def test_a_reply_the_client_cannot_read_fails_that_call_once() -> None:
    """A registry (here a fake one) whose reply does not decode: the call raises one
    ConfigError naming it instead of reconnecting and re-sending for ever; an oversize
    reply fails what is pending the same way. Planted: treating it as a lost connection."""

    async def main() -> None:
        async def fake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                try:
                    body = await read_body(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                rid = msgspec.msgpack.decode(body)[1]
                tag = msgspec.msgpack.decode(body)[0]
                if tag == "Challenge":  # what a client asks a registry it never reached
                    out = encode(Nonce(rid, b"n" * 32))[PREFIX.size:]
                elif tag == "Register":  # a node id longer than NodeField
                    out = msgspec.msgpack.encode(["Registered", rid, "n" + "1" * 64])
                else:  # a reply above the 1 MiB bound
                    out = b"\x00" * (MAX_MESSAGE_BYTES + 1)
                writer.write(PREFIX.pack(len(out)) + out)

        server = await asyncio.start_server(fake, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = RegistryClient(f"tcp://127.0.0.1:{port}", **FAST)
        async with asyncio.timeout(10):
            with pytest.raises(ConfigError, match="reply this client cannot read"):
                await client.register()
            with pytest.raises(ConfigError, match="reply this client cannot read"):
                await client.lookup("g")
        await client.close()
        server.close()

    asyncio.run(main())


async def _big_group(server: RegistryServer, members: int) -> None:
    """Group "big" with `members` members (a Lookup reply of about 30 B each)."""
    conn = await _raw(server.url)
    me = await _register(conn, "big-owner")
    table = {me: "tcp://10.0.0.1:1"} | {f"m{k}": "tcp://10.0.0.2:7500" for k in range(members)}
    reply = await _ask(conn, Announce(2, me, "big-owner", "big", "sequencer", 1, table, True))
    assert isinstance(reply, GroupInfo)
    conn[1].close()


async def _tiny_window(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose socket takes in little of what it does not read (so what the
    registry sends it stays in the registry's buffer, where the bound applies)."""
    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    return await asyncio.open_connection(sock=sock)


def _unread(server: RegistryServer) -> int:
    return max((w.transport.get_write_buffer_size() for w in server._connections.values()),
               default=0)


def test_a_client_that_reads_slowly_is_served_in_full_and_the_registry_buffers_little() -> None:
    """60 Lookups of a 150 KB group sent at once, their replies not read: the registry
    stops reading that connection's requests while its replies wait (it used to answer
    them all: 5.6 KB of Lookups made it buffer 115 MB), and once the client reads, every
    reply comes. Planted: reading on regardless (the max_unread_bytes cap then drops it)."""

    async def main() -> None:
        async with RegistryServer(limits=RegistryLimits(max_unread_bytes=2 * MAX_MESSAGE_BYTES)
                                  ) as server:
            await _big_group(server, 5_000)
            reader, writer = await _tiny_window(server.url)
            writer.write(b"".join(encode(Lookup(i, "big")) for i in range(1, 61)))
            async with asyncio.timeout(10):
                while _unread(server) < 64 * 1024:  # the registry is waiting for us
                    await asyncio.sleep(0.005)
                rids = [decode_reply(await read_body(reader)).rid for _ in range(60)]
            assert rids == list(range(1, 61)) and server.stats.slow_readers == 0

    asyncio.run(main())


def test_a_client_that_reads_nothing_is_dropped_at_max_unread_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Parked Lookups all answered at once to a client that reads nothing: past
    max_unread_bytes the connection is dropped with one line; others are served. Planted:
    no cap (the registry buffers every reply)."""
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        async with RegistryServer(limits=RegistryLimits(max_unread_bytes=2 * MAX_MESSAGE_BYTES)
                                  ) as server:
            hostile = await _tiny_window(server.url)
            hostile[1].write(b"".join(encode(Lookup(i, "big", 2)) for i in range(1, 101)))
            async with asyncio.timeout(10):
                while server.stats.requests < 100:
                    await asyncio.sleep(0.005)
            await _big_group(server, 5_000)  # wakes all 100: 15 MB of replies
            async with asyncio.timeout(10):
                while server.stats.slow_readers == 0:
                    await asyncio.sleep(0.005)
            assert _unread(server) <= 2 * MAX_MESSAGE_BYTES
            client = RegistryClient(server.url, **FAST)
            async with asyncio.timeout(10):
                assert len((await client.lookup("big")).members) == 5_001
            await client.close()
        dropped = [r for r in caplog.records if "replies unread" in r.getMessage()]
        assert len(dropped) == 1

    asyncio.run(main())


def test_waits_are_bounded_per_connection_and_a_change_wakes_only_its_groups_waiters(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One connection used to park any number of Lookups (50,000 tasks), each woken by
    every change to any group (10 unrelated joins took 3.9 s). Now past
    max_waits_per_client it is refused (one line for the connection), and a change wakes
    only the waiters of the group it changed. Planted: no bound; one wake-up for all."""
    caplog.set_level(logging.INFO, LOGGER)
    checks: list[str] = []
    real = RegistryServer._ready

    def counted(self: RegistryServer, request: Lookup | WaitDone) -> bool:
        checks.append(request.group)
        return real(self, request)

    monkeypatch.setattr(RegistryServer, "_ready", counted)

    async def main() -> None:
        async with RegistryServer(limits=RegistryLimits(max_waits_per_client=8)) as server:
            reader, writer = await _raw(server.url)
            writer.write(b"".join(encode(Lookup(i, "never", 2)) for i in range(1, 11)))
            async with asyncio.timeout(10):
                refused = [decode_reply(await read_body(reader)) for _ in range(2)]
            assert [r.rid for r in refused] == [9, 10]
            assert all(isinstance(r, Refused) and "max_waits_per_client 8" in r.reason
                       for r in refused)
            checks.clear()
            other = RegistryClient(server.url, **FAST)
            await other.register()
            for k in range(5):
                await other.join(f"other{k}", "tcp://127.0.0.1:1")
            assert "never" not in checks
            await other.join("never", "tcp://127.0.0.1:1")
            assert checks.count("never") == 8  # each waiter looked once, and waits on
            await other.close()
        lines = [r for r in caplog.records if "max_waits_per_client" in r.getMessage()]
        assert len(lines) == 1

    asyncio.run(main())


def test_a_group_record_never_grows_past_what_a_reply_carries() -> None:
    """A group whose record passed the bound on a registry message could be read by no
    client (each lookup failed to decode and was re-sent for ever). A join or a view
    that would make it so is refused, with a reason, to that caller; the group stays
    readable. (The bound here is a registry's smaller max_message_bytes; by default the
    1 MiB a client reads.) Planted: no such check (the join is granted)."""

    async def main() -> None:
        bound = 16_384
        async with RegistryServer(max_message_bytes=bound) as server:
            address = "tcp://10.0.0.1:7500/" + "x" * 480
            clients: list[RegistryClient] = []
            with pytest.raises(ConfigError, match=f"above the {bound}-byte bound"):
                for _ in range(100):
                    clients.append(RegistryClient(server.url, **FAST))
                    await clients[-1].register()
                    await clients[-1].join("bank", address)
            info = await clients[0].lookup("bank")
            assert 20 < len(info.members) == len(clients) - 1
            assert len(encode(info)) <= bound
            # A view that large would not pass as a request here; handed over directly:
            me = clients[0].node or ""
            wide = {me: address} | {f"m{k}": address for k in range(40)}
            refused = server._handle(Announce(1, me, clients[0].token, "wide", "sequencer", 1,
                                              wide, True))
            assert isinstance(refused, Refused) and "would not fit a registry reply" in (
                refused.reason) and "wide" not in server.group_names()
            for c in clients:
                await c.close()

    asyncio.run(main())


def test_a_registry_url_where_nothing_answers_fails_within_the_connect_timeout() -> None:
    """A registry URL where something accepts connections but never answers (another
    service, a hung registry): the connection counted as reaching the registry, so the
    first call waited for its reply for ever (Node.start hung), connect_timeout_s
    notwithstanding. Now a connection's first message, before the registry was first
    reached, is a Challenge it answers at once: the call fails within the timeout,
    naming the URL, and a real registry is reached as before."""

    async def main() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # takes everything, answers nothing
            writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = RegistryClient(f"tcp://127.0.0.1:{port}", connect_timeout_s=0.3, **FAST)
        with pytest.raises(ConfigError, match=f"registry tcp://127.0.0.1:{port} did not answer"):
            async with asyncio.timeout(10):  # the client gives up first, by itself
                await client.register()
        await client.close()
        server.close()
        async with RegistryServer() as registry:
            client = RegistryClient(registry.url, connect_timeout_s=0.3, **FAST)
            assert await client.register() == "n1"
            assert registry.stats.bad_messages == 0
            await client.close()

    asyncio.run(main())
