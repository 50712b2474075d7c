"""Requests and replies on the asyncio runtime, in one process (three servers on their
own nodes, clients beside them): the API's promises and bad input.

- (every ordering that claims total order) a server planted to answer differently
  makes `all` + `all_same` INCONSISTENT, while `majority_same` still finds the
  majority value;
- a reply for an unknown request, a second reply from one server and a reply from a node
  that is no server are each ignored and counted once, and never count in a vote;
- a handler that raises sends an error reply and the server keeps serving;
- `to=[…]` requests run on those servers only; one-way requests run and get no reply;
- a server made without a handler serves through `requests()`;
- a registry that does not answer is a clear error, not a hang;
- a joiner receives the ids already run with the state, and drops a late copy;
- a client id handed out again after a registry restart still gets its requests run;
- a handler that replies then raises, or returns a str or an int, and an on_deliver that
  raises, cost their own delivery only (the rest of the batch runs);
- a request in a member's name never re-points that member's address;
- view news from a node that is no server of the client's is ignored; a group removed
  and created again under its name is found through the registry;
- misuse (to= naming a server twice, retry_s <= 0, a vote lost before sending) sends
  nothing; a proposal refused by Backpressure is proposed again at the retry;
- a request to be answered at no address of the transport is refused at the edge, and
  one ordered all the same answers nobody without breaking replies or view notices;
  a vote lost before sending reads the registry again (a server joined since counts).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from abcast import ConfigError, RegistryServer
from abcast.effects import Deliver
from abcast.errors import Backpressure
from abcast.ids import MsgId
from abcast.ordering.registry import ORDERINGS
from abcast.rpc import Client, IncomingRequest, Server, Status
from abcast.rpc import client as client_module
from abcast.rpc.executor import Executor
from abcast.rpc.wire import (
    REQUEST_MAGIC,
    ReplyFrame,
    Request,
    ViewNotice,
    encode_rpc,
    endpoint_name,
    ordered_request,
)
from abcast.runtime.group import Group
from abcast.runtime.node import Node

pytestmark = pytest.mark.timeout(60)

Handler = Callable[[IncomingRequest], bytes] | None
TOTAL = sorted(name for name, spec in ORDERINGS.items() if "total" in spec.guarantees)


async def _servers(url: str, handlers: list[Handler], ordering: str = "sequencer"
                   ) -> list[tuple[Server, Group]]:
    if "join" not in ORDERINGS[ordering].tolerates:  # a static group, opened together
        made = [Server(h) for h in handlers]
        groups = [Group("svc", ordering=ordering, registry=url, size=len(handlers),
                        **server.group_kwargs()) for server in made]
        await asyncio.gather(*(g.open() for g in groups))
        return list(zip(made, groups, strict=True))
    out = []
    for k, handler in enumerate(handlers):
        server = Server(handler)
        if k == 0:
            out.append(await Server.create("svc", ordering=ordering, registry=url,
                                           server=server))
        else:
            out.append(await Server.join("svc", registry=url, server=server))
    while len(out[-1][1].members) < len(handlers):
        await asyncio.sleep(0.01)
    return out


async def _client(url: str, size: int) -> Client:
    client = await Client.connect("svc", registry=url)
    while len(client.members) < size:  # the registry may still hold the previous view
        await client.request(b"", vote="first", timeout=1.0)
    return client


async def _close(servers: list[tuple[Server, Group]], *clients: Client) -> None:
    for c in clients:
        await c.close()
    for server, group in servers:
        server.close()
        await group.close()


async def _next_request(server: Server, payload: bytes) -> IncomingRequest:
    """The next request with this payload (warm-up requests before it are skipped)."""
    async for req in server.requests():
        if req.payload == payload:
            return req
    raise AssertionError("the server closed")


def _recording() -> tuple[list[bytes], Handler]:
    """A handler answering b"ok", and the payloads it ran, in order."""
    ran: list[bytes] = []

    def handle(req: IncomingRequest) -> bytes:
        ran.append(req.payload)
        return b"ok"

    return ran, handle


def run(scenario: Callable[[str], object]) -> None:
    async def main() -> None:
        async with RegistryServer() as registry:
            await scenario(registry.url)  # type: ignore[misc]

    asyncio.run(main())


@pytest.mark.parametrize("ordering", TOTAL)
def test_a_divergent_server(ordering: str) -> None:
    def same(req: IncomingRequest) -> bytes:
        return b"v:" + req.payload

    def planted(req: IncomingRequest) -> bytes:
        return b"other"

    async def scenario(url: str) -> None:
        servers = await _servers(url, [same, same, planted], ordering)
        client = await _client(url, 3)
        bad = await client.request(b"x", vote="all", consistency="all_same", timeout=2.0)
        assert bad.status is Status.INCONSISTENT and len(bad.replies) >= 2
        good = await client.request(b"y", vote="all", consistency="majority_same",
                                    timeout=2.0, path="direct")
        assert (good.status, good.value) == (Status.OK, b"v:y")
        await _close(servers, client)

    run(scenario)


def test_bad_replies_are_ignored_and_counted_once() -> None:
    async def scenario(url: str) -> None:
        servers = await _servers(url, [None, None, None])
        client = await _client(url, 3)
        rogue = await Node("tcp://127.0.0.1:0", registry=url).start()
        rogue.add_peers({client.id: client.node.address})
        call = asyncio.create_task(client.request(b"q", vote="all", timeout=5.0))
        incoming = [await _next_request(s, b"q") for s, _ in servers]
        rid = incoming[0].id
        view = servers[0][1].view

        def frame(sender: str, rid: int) -> bytes:
            return encode_rpc(client.endpoint, sender,
                              ReplyFrame(rid, sender, True, b"forged", view.view_id,
                                         view.members))

        rogue.transmit(client.id, frame(rogue.id, rid))  # no server of the group
        rogue.transmit(client.id, frame(rogue.id, 10_000))  # no such request
        incoming[0].reply(b"a")
        first_host = servers[0][1].host
        first_host.transmit(client.id, frame(first_host.id, rid))  # a second reply
        await asyncio.sleep(0.2)
        for req in incoming[1:]:
            req.reply(b"a")
        outcome = await call
        assert (outcome.status, outcome.value) == (Status.OK, b"a")
        assert sorted(r.server for r in outcome.replies) == sorted(view.members)
        stats = client.stats
        assert (stats.foreign_replies, stats.unknown_replies, stats.duplicate_replies) == (
            1, 1, 1)
        await rogue.close()
        await _close(servers, client)

    run(scenario)


def test_errors_subsets_and_one_way() -> None:
    executed: dict[str, list[bytes]] = {}

    def handler_for(k: int) -> Handler:
        def handle(req: IncomingRequest) -> bytes:
            executed.setdefault(f"s{k}", []).append(req.payload)
            if req.payload == b"boom":
                raise RuntimeError("boom")
            return b"ok"
        return handle

    async def scenario(url: str) -> None:
        servers = await _servers(url, [handler_for(k) for k in range(3)])
        client = await _client(url, 3)
        executed.clear()
        failed = await client.request(b"boom", vote="all", timeout=2.0)
        assert failed.ok and failed.failed and b"RuntimeError: boom" in (failed.value or b"")
        after = await client.request(b"fine", vote="all", timeout=2.0)
        assert after.value == b"ok"  # the servers kept serving
        two = list(client.members[1:])
        sub = await client.request(b"sub", vote="all", timeout=2.0, to=two)
        assert sub.ok and sorted(r.server for r in sub.replies) == sorted(two)
        rid = client.cast(b"oneway", path="direct")
        assert rid > 0
        done = await client.request(b"fence", vote="all", timeout=2.0)
        assert done.ok
        for k in range(3):
            seen = executed[f"s{k}"]
            assert seen.count(b"oneway") == 1 and seen.count(b"fence") == 1
        assert sum(runs.count(b"sub") for runs in executed.values()) == 2
        with pytest.raises(ConfigError, match="not servers of"):
            await client.request(b"x", to=["n99"])
        with pytest.raises(ConfigError, match="choose one of: direct, via-member"):
            await client.request(b"x", path="sideways")
        await _close(servers, client)

    run(scenario)


def test_requests_iterator_and_a_dead_registry() -> None:
    async def serve(server: Server) -> None:
        async for req in server.requests():
            req.reply(req.payload.upper())

    async def scenario(url: str) -> None:
        servers = await _servers(url, [None, None])
        tasks = [asyncio.create_task(serve(s)) for s, _ in servers]
        client = await _client(url, 2)
        outcome = await client.request(b"hi", vote="all", timeout=2.0, path="via-member",
                                       contact="sequencer")
        assert (outcome.status, outcome.value) == (Status.OK, b"HI")
        await _close(servers, client)
        for t in tasks:
            t.cancel()
        with pytest.raises(ConfigError, match="no members for group 'nothing'"):
            await Client.connect("nothing", registry=url)
        with pytest.raises(ConfigError, match="did not answer"):
            await Client.connect("svc", registry="tcp://127.0.0.1:9", timeout_s=0.5)

    run(scenario)


def test_a_joiner_does_not_run_again_what_ran_before_it_came() -> None:
    runs: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    rids: dict[bytes, int] = {}

    def counting(k: int) -> Handler:
        def handle(req: IncomingRequest) -> bytes:
            runs[k].append(req.payload)
            rids[req.payload] = req.id
            return b"done"
        return handle

    async def scenario(url: str) -> None:
        servers = await _servers(url, [counting(0), counting(1)])
        client = await _client(url, 2)
        assert (await client.request(b"once", vote="all", timeout=2.0)).ok
        joiner = Server(counting(2))
        servers.append(await Server.join("svc", registry=url, server=joiner))
        # the same request ordered again (as a late retry would): every server, the
        # joiner included (it got the ids with the state), drops it
        again = Request(client.id, rids[b"once"], b"once", client.node.address)
        servers[0][1].broadcast_nowait(ordered_request(again))
        assert (await client.request(b"fence", vote="first", timeout=2.0,
                                     contact="sequencer")).ok
        while b"fence" not in runs[2]:
            await asyncio.sleep(0.01)
        assert [r.count(b"once") for r in runs.values()] == [1, 1, 0]
        assert joiner.executor.stats.duplicates == 1
        await _close(servers, client)

    run(scenario)


@pytest.mark.parametrize("planted", [False, True])
def test_a_client_id_handed_out_again_after_a_registry_restart(
        planted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registry restarted empty gives a departed client's id to a new client: its
    requests still run (request ids start at random), and a planted client whose ids
    start at 1 gets the old client's cached reply instead (the check catches it)."""
    if planted:
        monkeypatch.setattr(client_module, "first_rid", lambda: 1)
    ran: list[bytes] = []

    def handle(req: IncomingRequest) -> bytes:
        ran.append(req.payload)
        return b"did " + req.payload

    async def main() -> None:
        first = RegistryServer()
        url = await first.start()
        servers = [await Server.create("svc", ordering="sequencer", registry=url,
                                       on_request=handle, recheck_s=0.05)]
        servers.append(await Server.join("svc", registry=url, on_request=handle))
        while len(servers[-1][1].members) < 2:
            await asyncio.sleep(0.01)
        old = await Client.connect("svc", registry=url)
        assert (await old.request(b"put x 1", vote="all", timeout=2.0)).value == b"did put x 1"
        await old.close()
        await first.close()  # everything it knew is gone
        second = RegistryServer(port=int(url.rsplit(":", 1)[1]), recovery_grace_s=0.3)
        await second.start()
        async with asyncio.timeout(10):
            while len(second.group_info("svc").members) < 2:
                await asyncio.sleep(0.01)
        new = await Client.connect("svc", registry=url)
        assert new.id == old.id  # the id is handed out again
        outcome = await new.request(b"incr n", vote="all", timeout=2.0)
        if planted:
            assert outcome.value == b"did put x 1" and b"incr n" not in ran
        else:
            assert (outcome.status, outcome.value) == (Status.OK, b"did incr n")
            assert ran.count(b"incr n") == 2
        await _close(servers, new)
        await second.close()

    asyncio.run(main())


@pytest.mark.parametrize("misuse", ["reply_then_raise", "str", "int"])
def test_a_misbehaving_handler_costs_its_own_request_only(misuse: str) -> None:
    """A handler that replies and then raises, or returns a str or an int: its request
    gets one reply (the early one, or an error naming the type), and a one-way request
    ordered right after it in the same batch still runs on every server."""
    def handler_for() -> Handler:
        count = [0]

        def handle(req: IncomingRequest) -> bytes:
            if req.payload == b"bad":
                if misuse == "reply_then_raise":
                    req.reply(b"early")
                    raise RuntimeError("after replying")
                return "text" if misuse == "str" else 5  # type: ignore[return-value]
            if req.payload == b"incr":
                count[0] += 1
            return str(count[0]).encode()
        return handle

    async def scenario(url: str) -> None:
        servers = await _servers(url, [handler_for() for _ in range(3)])
        client = await _client(url, 3)
        client.cast(b"bad", contact="sequencer")  # one contact, one loop turn: one batch
        client.cast(b"incr", contact="sequencer")
        counted = await client.request(b"get", vote="all", consistency="all_same",
                                       timeout=2.0, contact="sequencer")
        assert (counted.status, counted.value) == (Status.OK, b"1")
        bad = await client.request(b"bad", vote="all", consistency="all_same", timeout=2.0)
        assert bad.ok and len(bad.replies) == 3
        if misuse == "reply_then_raise":
            assert bad.value == b"early" and not bad.failed
        else:
            wrong = "str" if misuse == "str" else "int"
            assert bad.failed and f"must be bytes, bytearray or memoryview, not {wrong}" in (
                (bad.value or b"").decode())
        assert [s.stats.errors for s, _ in servers] == [2, 2, 2]
        await _close(servers, client)

    run(scenario)


def test_an_on_deliver_that_raises_costs_that_delivery_only() -> None:
    seen: list[bytes] = []

    def on_deliver(delivery: Deliver) -> None:
        seen.append(delivery.payload)
        raise RuntimeError("the application's bug")

    async def scenario(url: str) -> None:
        servers = [await Server.create("svc", ordering="sequencer", registry=url,
                                       server=Server(lambda r: b"ran", on_deliver=on_deliver))]
        client = await _client(url, 1)
        group, executor = servers[0][1], servers[0][0].executor
        before = executor.stats.executed
        request = Request(client.id, 1, b"after", client.node.address, oneway=True)
        group.broadcast_nowait(b"plain")  # one loop turn: one batch with the request
        group.broadcast_nowait(ordered_request(request))
        async with asyncio.timeout(5):
            while executor.stats.executed == before:
                await asyncio.sleep(0.01)
        assert seen == [b"plain"] and servers[0][0].stats.errors == 1
        await _close(servers, client)

    run(scenario)


def test_a_request_in_a_members_name_never_re_points_that_member() -> None:
    """A node calling itself n2 (a member) sends a request whose reply_to is its own
    address: refused, and an ordered request naming n2 runs but answers nobody; no
    server's route to n2 moves, and the group keeps serving all three."""
    async def scenario(url: str) -> None:
        servers = await _servers(url, [lambda r: b"ok"] * 3)
        (s1, g1), (_, g2), (_, g3) = servers
        real = {g.host.id: g.host.peer_url(g2.host.id) for g in (g1, g3)}
        rogue = await Node("tcp://127.0.0.1:0", node=g2.host.id).start()  # any id
        rogue.add_peers({g1.host.id: g1.host.address})
        forged = Request(g2.host.id, 1, b"hi", rogue.address)
        rogue.transmit(g1.host.id, encode_rpc(endpoint_name("svc"), g2.host.id, forged))
        async with asyncio.timeout(5):
            while s1.stats.refused == 0:
                await asyncio.sleep(0.01)
        executed = [s.executor.stats.executed for s, _ in servers]
        g1.broadcast_nowait(ordered_request(Request(g2.host.id, 2, b"hi", rogue.address)))
        async with asyncio.timeout(5):
            while [s.executor.stats.executed for s, _ in servers] == executed:
                await asyncio.sleep(0.01)
        client = await _client(url, 3)
        outcome = await client.request(b"after", vote="all", timeout=2.0)
        assert outcome.ok and len(outcome.replies) == 3
        assert {g.host.id: g.host.peer_url(g2.host.id) for g in (g1, g3)} == real
        assert g2.host.id not in s1._clients
        await rogue.close()
        await _close(servers, client)

    run(scenario)


def test_view_news_only_from_the_clients_servers() -> None:
    """A node that is no server of the group tells the client of a view with nobody in
    it (a notice, and a reply's view): ignored and counted; the client keeps calling the
    servers it knows."""
    async def scenario(url: str) -> None:
        servers = await _servers(url, [lambda r: b"ok"] * 3)
        client = await _client(url, 3)
        before = (client.view_id, client.members)
        rogue = await Node("tcp://127.0.0.1:0", registry=url).start()
        rogue.add_peers({client.id: client.node.address})
        rogue.transmit(client.id, encode_rpc(client.endpoint, rogue.id,
                                             ViewNotice(10**9, ())))
        rogue.transmit(client.id, encode_rpc(client.endpoint, rogue.id,
                                             ReplyFrame(1, rogue.id, True, b"", 10**9, ())))
        async with asyncio.timeout(5):
            while client.stats.foreign_views < 2:
                await asyncio.sleep(0.01)
        assert (client.view_id, client.members) == before
        outcome = await client.request(b"y", vote="all", timeout=2.0)
        assert outcome.ok and len(outcome.replies) == 3
        await rogue.close()
        await _close(servers, client)

    run(scenario)


def test_a_group_re_created_under_its_name_is_found_again() -> None:
    """The group ends, is removed and is created again (view ids restart, new servers):
    the client's request to the old servers times out, the client reads the registry's
    record again in the background, and its next request reaches the new server."""
    async def scenario(url: str) -> None:
        servers = await _servers(url, [lambda r: b"old"] * 2)
        client = await _client(url, 2)
        assert client.view_id >= 2
        await _close(servers)
        registry = client.node.registry
        assert registry is not None
        await registry.remove("svc")  # its servers are gone: the operator removes it
        again = [await Server.create("svc", ordering="sequencer", registry=url,
                                     on_request=lambda r: b"new")]
        lost = await client.request(b"x", vote="first", timeout=0.3)
        assert lost.status in (Status.TIMEOUT, Status.MEMBERS_LOST)
        async with asyncio.timeout(5):
            while client.members != again[0][1].members:
                await asyncio.sleep(0.01)
        assert client.view_id == again[0][1].view.view_id < 2
        outcome = await client.request(b"y", vote="all", timeout=2.0)
        assert (outcome.status, outcome.value) == (Status.OK, b"new")
        await _close(again, client)

    run(scenario)


def test_misuse_is_refused_before_anything_is_sent() -> None:
    """`to=` naming a server twice and `retry_s <= 0` are ConfigErrors; a vote already
    lost when the request is made (quorum(3) once a server has left) ends MEMBERS_LOST
    without a frame sent, so no server runs it."""
    ran, handle = _recording()

    async def scenario(url: str) -> None:
        servers = await _servers(url, [handle] * 3)
        client = await _client(url, 3)
        sent = client.stats.sent
        with pytest.raises(ConfigError, match="more than once: n2"):
            await client.request(b"B", vote="quorum(2)", to=["n2", "n2"])
        assert client.stats.sent == sent
        for retry_s in (0.0, -1.0, float("nan")):
            with pytest.raises(ConfigError, match="retry_s must be positive"):
                await Client.connect("svc", registry=url, retry_s=retry_s)
        server, group = servers.pop()
        server.close()
        await group.close()
        async with asyncio.timeout(5):
            while len(client.members) > 2:
                await client.request(b"", vote="first", timeout=1.0)
        sent, ran[:] = client.stats.sent, []
        lost = await client.request(b"A", vote="quorum(3)", timeout=1.0)
        assert (lost.status, client.stats.sent) == (Status.MEMBERS_LOST, sent)
        fence = await client.request(b"fence", vote="all", timeout=2.0)
        assert fence.ok and b"A" not in ran
        await _close(servers, client)

    run(scenario)


@pytest.mark.parametrize("planted", [False, True])
def test_a_proposal_refused_by_backpressure_is_proposed_at_the_retry(
        planted: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The group refuses the first proposal (`Backpressure`): the client's retry, to the
    one server there is, proposes it again and it runs; a planted executor that keeps
    the refused proposal as in flight answers every retry WAIT (the check catches it)."""
    if planted:
        monkeypatch.setattr(Executor, "withdraw", lambda self, request: None)

    async def scenario(url: str) -> None:
        servers = await _servers(url, [lambda r: b"ran"])
        server, group = servers[0]
        client = await _client(url, 1)
        refuse = [True]
        broadcast = group.broadcast_nowait

        def once(payload: bytes) -> MsgId:
            if refuse and payload.startswith(REQUEST_MAGIC):
                refuse.clear()
                raise Backpressure("full")
            return broadcast(payload)

        monkeypatch.setattr(group, "broadcast_nowait", once)
        outcome = await client.request(b"x", vote="first", timeout=1.0)
        assert server.stats.backpressured == 1
        if planted:
            assert outcome.status is Status.TIMEOUT and client.stats.retries >= 1
        else:
            assert (outcome.status, outcome.value) == (Status.OK, b"ran")
        await _close(servers, client)

    run(scenario)


def test_a_reply_address_that_is_no_address_costs_its_request_only() -> None:
    """A request frame whose reply_to is no address of the servers' transport is the
    sender's fault: refused (`bad_frames`, the link dropped), never proposed. An ordered
    request with one (a member's own broadcast) still runs everywhere alike, answers
    nobody and counts no handler error; and the view changes after it still reach every
    client. Before, the server tried to route the reply there: a ConfigError came out of
    the reply path (counted as the handler's), out of the endpoint on a retry, and out
    of on_view at every view change, which skipped the notices of the clients after it."""
    ran, handle = _recording()

    async def scenario(url: str) -> None:
        servers = await _servers(url, [handle] * 3)
        (s1, g1), _, _ = servers
        rogue = await Node("tcp://127.0.0.1:0", registry=url).start()
        rogue.add_peers({g1.host.id: g1.host.address})
        bad = Request(rogue.id, 7, b"nowhere", "no address")
        rogue.transmit(g1.host.id, encode_rpc(endpoint_name("svc"), rogue.id, bad))
        async with asyncio.timeout(5):
            while s1.stats.bad_frames == 0:
                await asyncio.sleep(0.01)
        g1.broadcast_nowait(ordered_request(Request(rogue.id, 8, b"ordered", "udp://x:1")))
        async with asyncio.timeout(5):
            while ran.count(b"ordered") < 3:
                await asyncio.sleep(0.01)
        assert b"nowhere" not in ran
        assert [s.stats.errors for s, _ in servers] == [0, 0, 0]
        client = await _client(url, 3)
        assert (await client.request(b"hello", vote="all", timeout=2.0)).ok  # heard from
        view_id = client.view_id
        servers.append(await Server.join("svc", registry=url, server=Server(handle)))
        async with asyncio.timeout(5):
            while client.view_id == view_id:  # told by the servers' notices
                await asyncio.sleep(0.01)
        assert len(client.members) == 4
        await rogue.close()
        await _close(servers, client)

    run(scenario)


def test_a_vote_lost_before_sending_still_reads_the_registry_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that is told no view change (notices go only to clients heard from
    lately) and whose `quorum(3)` is lost before sending (a server left) reads the
    registry again, as after any MEMBERS_LOST: once a new server has joined, the next
    quorum(3) runs. Before, the request ended MEMBERS_LOST with no frame and no refresh,
    so no reply and no lookup ever told the client of the new server: every quorum(3)
    was lost, forever."""
    from abcast.rpc import server as server_module

    monkeypatch.setattr(server_module, "NOTIFY_FOR_S", -1.0)  # nobody is notified

    async def scenario(url: str) -> None:
        servers = await _servers(url, [lambda r: b"ok"] * 3)
        client = await _client(url, 3)
        server, group = servers.pop()
        server.close()
        await group.close()
        async with asyncio.timeout(5):
            while len(client.members) > 2:  # the view without it, from a reply
                await client.request(b"", vote="first", timeout=1.0)
        servers.append(await Server.join("svc", registry=url, server=Server(lambda r: b"ok")))
        async with asyncio.timeout(10):
            while (await client.request(b"q", vote="quorum(3)", timeout=1.0)).status \
                    is Status.MEMBERS_LOST:
                await asyncio.sleep(0.05)
        assert len(client.members) == 3
        await _close(servers, client)

    run(scenario)
