"""The registry's node-id tokens are compared in constant time, at every check: a claim
of a held id, Join, Leave, Done and Announce. They were compared with `!=`, whose time
grows with the length of the right prefix a guess has. Done carried no token at all: any
client could mark any member of an open group done."""

from __future__ import annotations

import asyncio

import pytest

from abcast.registry import RegistryClient, RegistryServer
from abcast.registry import server as server_module
from abcast.registry.messages import (
    Announce,
    Done,
    GroupInfo,
    Join,
    Leave,
    Refused,
    Register,
    Registered,
    Reply,
    Request,
    decode_reply,
    encode,
    read_body,
)
from abcast.security import secret

pytestmark = pytest.mark.timeout(60)

RIGHT = "tøken-ø"  # not ASCII: hmac.compare_digest refuses such a str, so bytes it is
WRONG = "tøken-x"


def test_every_token_check_is_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each request that names a node id's token is checked through
    `abcast.security.secret.same_text` (hmac.compare_digest) with the held and the
    offered token: a wrong one is refused, the right one goes through, and no check is made any
    other way (every request kind is seen comparing both tokens)."""
    compared: list[tuple[str, str]] = []

    def recording(a: str, b: str) -> bool:
        compared.append((a, b))
        return secret.same_text(a, b)

    monkeypatch.setattr(server_module, "same_text", recording, raising=False)

    async def main() -> list[tuple[str, Reply, list[tuple[str, str]]]]:
        seen = []
        async with RegistryServer() as server:
            host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            rids = iter(range(1, 100))

            async def ask(what: str, request: Request) -> None:
                compared.clear()
                writer.write(encode(request))
                async with asyncio.timeout(10):
                    reply = decode_reply(await read_body(reader))
                seen.append((what, reply, list(compared)))

            await ask("register", Register(next(rids), RIGHT, "n1", "tcp://a:1"))
            members = {"n1": "tcp://a:1"}
            for token in (WRONG, RIGHT):
                await ask(f"claim {token}", Register(next(rids), token, "n1", "tcp://a:1"))
                await ask(f"join {token}", Join(next(rids), "n1", token, "g", "tcp://a:1"))
                await ask(f"done {token}", Done(next(rids), "n1", token, "g"))
                await ask(f"announce {token}", Announce(next(rids), "n1", token, "d",
                                                        "sequencer", 1, members, True))
                await ask(f"leave {token}", Leave(next(rids), "n1", token, "g"))
            writer.close()
            assert server.stats.failed_requests == 0
        return seen

    seen = asyncio.run(main())
    assert isinstance(seen[0][1], Registered)  # a fresh claim: nobody's token to check
    pair = {WRONG: (RIGHT, WRONG), RIGHT: (RIGHT, RIGHT)}
    for what, reply, comparisons in seen[1:]:
        token = what.split()[1]
        assert comparisons == [pair[token]], what
        if token == WRONG:
            assert isinstance(reply, Refused), what
        else:
            assert isinstance(reply, Registered | GroupInfo), what


def test_a_stranger_cannot_mark_a_member_done() -> None:
    """On an open group (no secret), a Done for n1 from another connection, with another
    token, is refused and n1 is not counted done; n1's own Done (its client) is."""

    async def main() -> tuple[Reply, GroupInfo, GroupInfo]:
        async with RegistryServer() as server, RegistryClient(server.url) as member:
            node = await member.register()
            await member.join("g", "tcp://a:1")
            host, port = server.url.removeprefix("tcp://").rsplit(":", 1)
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(encode(Done(1, node, "a-stranger's-token", "g")))
            async with asyncio.timeout(10):
                forged = decode_reply(await read_body(reader))
            writer.close()
            after_forged = await member.lookup("g")
            return forged, after_forged, await member.done("g")

    forged, after_forged, after_own = asyncio.run(main())
    assert isinstance(forged, Refused)
    assert "not registered with this token" in forged.reason
    assert after_forged.done == []
    assert after_own.done == ["n1"]
