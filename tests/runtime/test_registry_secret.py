"""The registry and secret groups: once a holder of the secret made a group, a client
without it (or with another secret) can neither join, leave, re-announce (replace the
member table), nor remove it; a registry started with the secret also refuses every
id claim from outside, a restart included; a proof captured on one connection is
refused on another, and a recorded request sent again on its own connection too.
Each refusal is one log line and the group's record is untouched. A planted registry
that accepts any proof (or ignores the request id) must let the stranger (the replay)
through, so the refusals above are the proof's doing.
"""

from __future__ import annotations

import asyncio
import logging
import struct

import msgspec
import pytest

from abcast.errors import ConfigError
from abcast.registry import RegistryClient, RegistryServer
from abcast.registry.messages import (
    Announce,
    Challenge,
    Join,
    Leave,
    Nonce,
    Refused,
    Register,
    Registered,
    Remove,
    Reply,
    Request,
    Signed,
    decode_reply,
    encode,
    read_body,
    signed_body,
)
from abcast.security.signing import Signer

pytestmark = pytest.mark.timeout(30)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
SECRET = b"the-bank-secret"
LOGGER = "abcast.registry.server"


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and "registry refused" in r.getMessage()]


async def _made_group(server: RegistryServer) -> tuple[RegistryClient, RegistryClient]:
    """Two holders of the secret: n1 created dynamic group "bank", n2 joined it."""
    n1 = RegistryClient(server.url, secret=SECRET, **FAST)
    n2 = RegistryClient(server.url, secret=SECRET, **FAST)
    await n1.register(address="tcp://127.0.0.1:1")
    await n2.register(address="tcp://127.0.0.1:2")
    await n1.announce("bank", "sequencer", 1, {"n1": "tcp://127.0.0.1:1"}, create=True)
    await n1.announce("bank", "sequencer", 2,
                      {"n1": "tcp://127.0.0.1:1", "n2": "tcp://127.0.0.1:2"})
    return n1, n2


@pytest.mark.parametrize("stranger_secret", [None, b"a-guessed-secret"])
def test_a_stranger_can_neither_join_replace_leave_nor_remove_a_secret_group(
    stranger_secret: bytes | None, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        async with RegistryServer() as server:
            n1, n2 = await _made_group(server)
            before = server.group_info("bank")
            x = RegistryClient(server.url, secret=stranger_secret, **FAST)
            await x.register("x1", "tcp://127.0.0.1:9")  # an open id: nothing to steal
            attempts = {
                "join": x.join("bank", "tcp://127.0.0.1:9"),
                "replace": x.announce("bank", "sequencer", 9, {"x1": "tcp://127.0.0.1:9"}),
                "leave": x.leave("bank"),
                "remove": x.remove("bank"),
            }
            for what, call in attempts.items():
                with pytest.raises(ConfigError, match="refused"):
                    await call
                assert server.group_info("bank") == before, what
            assert server.stats.refused_unauthenticated == 4
            assert len(_refusals(caplog)) == 4
            # the holders go on: a new view, then a removal, both granted
            info = await n2.announce("bank", "sequencer", 3, {"n2": "tcp://127.0.0.1:2"})
            assert info.members == {"n2": "tcp://127.0.0.1:2"}
            await n2.remove("bank")
            assert "bank" not in server.group_names()
            for c in (n1, n2, x):
                await c.close()

    asyncio.run(main())


def test_a_static_secret_group_refuses_a_strangers_join() -> None:
    async def main() -> None:
        async with RegistryServer(sizes={"g": 3}) as server:
            a = RegistryClient(server.url, secret=SECRET, **FAST)
            await a.register()
            await a.join("g", "tcp://127.0.0.1:1")
            x = RegistryClient(server.url, **FAST)
            await x.register()
            with pytest.raises(ConfigError, match="carries no proof"):
                await x.join("g", "tcp://127.0.0.1:9")
            b = RegistryClient(server.url, secret=SECRET, **FAST)
            await b.register()
            assert set((await b.join("g", "tcp://127.0.0.1:2")).members) == {"n1", "n3"}
            for c in (a, b, x):
                await c.close()

    asyncio.run(main())


def test_a_registry_with_the_secret_refuses_strangers_id_claims_across_a_restart(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        server = RegistryServer(secret=SECRET)
        url = await server.start()
        port = int(url.rsplit(":", 1)[1])
        member = RegistryClient(url, secret=SECRET, **FAST)
        assert await member.register("n1", "tcp://127.0.0.1:1") == "n1"
        await member.join("g", "tcp://127.0.0.1:1", size=2)
        await server.close()
        # The registry restarts empty; a stranger races the member for its id.
        server = RegistryServer(port=port, secret=SECRET)
        await server.start()
        thief = RegistryClient(url, **FAST)
        with pytest.raises(ConfigError, match="carries no proof"):
            await thief.register("n1")
        with pytest.raises(ConfigError, match="carries no proof"):
            await thief.register()
        # the member re-asserts its id and membership on reconnecting
        await asyncio.wait_for(member.lookup("g"), 10)
        info = await member.wait_members("g", 1)
        assert info.members == {"n1": "tcp://127.0.0.1:1"}
        assert server.stats.refused_unauthenticated == 2
        for c in (member, thief):
            await c.close()
        await server.close()

    asyncio.run(main())
    assert len(_refusals(caplog)) == 2


def test_a_proof_captured_on_one_connection_is_refused_on_another() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            n1, n2 = await _made_group(server)
            host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])

            async def ask(writer: asyncio.StreamWriter, reader: asyncio.StreamReader,
                          message: object) -> object:
                writer.write(encode(message))  # type: ignore[arg-type]
                head = await reader.readexactly(4)
                return decode_reply(await reader.readexactly(struct.unpack(">I", head)[0]))

            r1, w1 = await asyncio.open_connection(host, port)
            nonce = await ask(w1, r1, Challenge(1))
            assert isinstance(nonce, Nonce)
            remove = Remove(2, "bank")
            signed = Remove(2, "bank", Signer(SECRET).prove(nonce.nonce, signed_body(remove)))
            r2, w2 = await asyncio.open_connection(host, port)
            replayed = await ask(w2, r2, signed)
            assert "does not verify" in getattr(replayed, "reason", "")
            assert "bank" in server.group_names()
            granted = await ask(w1, r1, signed)  # on its own connection it is genuine
            assert not hasattr(granted, "reason") and "bank" not in server.group_names()
            for w in (w1, w2):
                w.close()
            for c in (n1, n2):
                await c.close()

    asyncio.run(main())


def test_a_planted_registry_that_accepts_any_proof_lets_the_stranger_remove_the_group(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("abcast.registry.server.verify", lambda *_args: True)

    async def main() -> None:
        async with RegistryServer() as server:
            n1, n2 = await _made_group(server)
            x = RegistryClient(server.url, secret=b"a-guessed-secret", **FAST)
            await x.remove("bank")  # granted: the planted bug
            assert "bank" not in server.group_names()
            for c in (n1, n2, x):
                await c.close()

    asyncio.run(main())



def _prove(nonce: bytes, request: Signed) -> Signed:
    signer = Signer(SECRET)
    if isinstance(request, Register | Join | Announce):
        request = msgspec.structs.replace(request, verifier=signer.verifier)
    return msgspec.structs.replace(request, auth=signer.prove(nonce, signed_body(request)))


async def _replays(server: RegistryServer) -> list[Reply]:
    """On one connection: create "bank", join "kept", leave it, remove "bank" (all with
    proofs), then send the recorded Join and create again: the registry's replies."""
    host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))

    async def ask(message: Request) -> Reply:
        writer.write(encode(message))
        async with asyncio.timeout(10):
            return decode_reply(await read_body(reader))

    nonce = await ask(Challenge(0))
    assert isinstance(nonce, Nonce)
    me = await ask(_prove(nonce.nonce, Register(1, "tok", None, "tcp://10.0.0.1:1")))
    assert isinstance(me, Registered)
    other = RegistryClient(server.url, secret=SECRET, **FAST)
    members = {me.node: "tcp://10.0.0.1:1", await other.register(): "tcp://10.0.0.1:2"}
    create = _prove(nonce.nonce, Announce(2, me.node, "tok", "bank", "sequencer", 1,
                                          members, True))
    join = _prove(nonce.nonce, Join(3, me.node, "tok", "kept", "tcp://10.0.0.1:1", 3))
    for genuine in (create, join, _prove(nonce.nonce, Leave(4, me.node, "tok", "kept")),
                    _prove(nonce.nonce, Remove(5, "bank"))):
        assert not isinstance(await ask(genuine), Refused)
    replies = [await ask(join), await ask(create)]
    writer.close()
    await other.close()
    return replies


def test_a_recorded_request_replayed_on_its_own_connection_is_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A proof covers the request id and the ids of one connection must rise: a man in
    the middle who recorded a member's Join cannot re-admit it after its Leave, nor
    resurrect a group with a recorded create after its Remove (both were granted)."""
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        async with RegistryServer() as server:
            replies = await _replays(server)
            assert all(isinstance(r, Refused) and "replayed" in r.reason for r in replies)
            assert "bank" not in server.group_names() and "kept" not in server.group_names()
            assert server.stats.refused_unauthenticated == 2

    asyncio.run(main())
    assert len([m for m in _refusals(caplog) if "replayed" in m]) == 2


def test_a_planted_registry_that_ignores_the_rid_takes_the_replays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(RegistryServer, "_replayed", lambda *_args: None)

    async def main() -> None:
        async with RegistryServer() as server:
            replies = await _replays(server)
            assert not any(isinstance(r, Refused) for r in replies)
            assert {"bank", "kept"} <= set(server.group_names())

    asyncio.run(main())
