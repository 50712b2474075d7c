"""How a node reaches peers nobody introduced: frames for a peer without a known address
wait while the registry is asked, go out in order once it answers (even if the peer
registers only later), and are dropped — counted, logged once — if it never does."""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest

from abcast import Node, RegistryServer
from abcast.codec import Packet, encode_frame
from abcast.registry import RegistryClient
from abcast.runtime import node as node_module
from abcast.testing.polling import until
from abcast.transport import Link, transport_from_url

pytestmark = pytest.mark.timeout(30)


_until = functools.partial(until, timeout_s=10.0)


def _frame(k: int) -> bytes:
    return encode_frame("g", "n1", Packet((), b"%d" % k))


def test_frames_wait_for_an_address_the_peer_registers_later_and_arrive_in_order() -> None:
    async def main() -> list[bytes]:
        async with RegistryServer() as server:
            a = await Node("tcp://127.0.0.1:0", registry=server.url).start()
            assert a.id == "n1" and server.address_of("n1") == a.address
            for k in range(50):
                a.transmit("n2", _frame(k))  # n2 does not exist yet
            await asyncio.sleep(0.3)  # a few lookups come back empty
            got: list[bytes] = []

            def on_frame(_link: Link, data: bytes) -> None:
                got.append(data)
            client = RegistryClient(server.url)
            assert await client.register("n2") == "n2"
            b = transport_from_url("tcp://127.0.0.1:0")
            await client.register("n2", await b.start("n2", on_frame))
            await _until(lambda: len(got) == 50)
            assert a.stats.resolved_peers == 1 and a.stats.unresolved_frames == 0
            assert a.peer_url("n2") == client.address
            a.transmit("n2", _frame(50))  # known now: straight out
            await _until(lambda: len(got) == 51)
            await b.close()
            await client.close()
            await a.close()
            return got

    got = asyncio.run(main())
    assert got == [_frame(k) for k in range(51)]


def test_frames_for_a_peer_nobody_knows_are_dropped_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(node_module, "RESOLVE_FOR_S", 0.3)

    async def main() -> tuple[int, int]:
        async with RegistryServer() as server:
            a = await Node("mem://", registry=server.url).start()
            for k in range(7):
                a.transmit("n9", _frame(k))
            await _until(lambda: a.stats.unresolved_frames == 7)
            stats = (a.stats.unresolved_frames, a.stats.resolved_peers)
            await a.close()
            return stats

    with caplog.at_level(logging.WARNING, logger="abcast.runtime"):
        assert asyncio.run(main()) == (7, 0)
    warnings = [r.getMessage() for r in caplog.records if "no address for n9" in r.getMessage()]
    assert len(warnings) == 1 and "dropped 7 frames" in warnings[0]


def test_a_lookup_the_registry_client_refuses_drops_the_frames_and_asks_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Locate that fails at once (ConfigError: an id the registry would not read, a
    reply the client cannot read) killed the resolver task: its frames stayed queued for
    good, every later frame for that peer joined them, no lookup was tried again and
    nothing was counted. Now: dropped and counted, logged once per peer, and the next
    frame asks again."""
    bogus = "x" * 200  # the registry's ids are at most 64 characters: the client refuses

    async def main() -> None:
        async with RegistryServer() as server:
            a = await Node("mem://", registry=server.url).start()
            try:
                for k in range(3):
                    a.transmit(bogus, _frame(k))
                    await _until(lambda k=k: a.stats.unresolved_frames == k + 1)
                    assert bogus not in a._unresolved and bogus not in a._resolvers
            finally:
                await a.close()

    with caplog.at_level(logging.WARNING, logger="abcast.runtime"):
        asyncio.run(main())
    assert len([r for r in caplog.records if "no address for xxx" in r.getMessage()]) == 1


def test_without_a_registry_an_unknown_peer_is_dropped_counted_and_logged_once(
        caplog: pytest.LogCaptureFixture) -> None:
    """A node without a registry has nowhere to ask for an address: a frame for a peer
    it does not hold (never added, or let go by prune_peers) is dropped and counted, one
    line per peer. It used to raise LocalProtocolError — out of a driver's carry-out,
    from a timer or a frame's handling, leaving the rest of that step's outputs undone."""
    async def main() -> int:
        a = await Node("mem://", node="n1").start()
        try:
            a.transmit("n2", _frame(0))
            a.transmit("n2", _frame(1))
            assert a.transmit_many(("n2", "n3"), _frame(2)) == 2
            return a.stats.unresolved_frames
        finally:
            await a.close()

    with caplog.at_level(logging.WARNING, logger="abcast.runtime"):
        assert asyncio.run(main()) == 4
    lines = [r.getMessage() for r in caplog.records if "no registry to ask" in r.getMessage()]
    assert len(lines) == 2 and "n2" in lines[0] and "n3" in lines[1]
