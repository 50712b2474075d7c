"""The chat demo's server without a browser: page frames are validated (a malformed one
earns an error frame and the node goes on), and the hold/release filter makes a message
wait in the ordering's holdback — visible in the debug snapshot — until released."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
import pytest

from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.protocol import (
    Debug,
    Delivered,
    Error,
    ServerMessage,
    decode_client,
)
from abcast.apps.chat.web import serve
from abcast.errors import ConfigError
from abcast.registry.server import RegistryServer
from abcast.runtime.group import Group

pytestmark = pytest.mark.timeout(120)

BAD_FRAMES = [
    "not json",
    "[]",
    "{}",
    '{"type": "launch"}',
    '{"type": "send", "group": "g"}',
    '{"type": "send", "group": "g", "text": ""}',
    '{"type": "send", "group": "", "text": "x"}',
    '{"type": "send", "group": "g", "text": 7}',
    '{"type": "hold", "group": "g", "member": "n1", "delay_ms": -5}',
    '{"type": "list", "extra": 1}',
    '{"type": "create", "group": "g", "ordering": "causal", "multicast": "carrier pigeon"}',
    '{"type": "join", "group": null}',
]


@pytest.mark.parametrize("frame", BAD_FRAMES)
def test_a_malformed_page_frame_is_refused_by_the_decoder(frame: str) -> None:
    with pytest.raises((msgspec.ValidationError, msgspec.DecodeError)):
        decode_client(frame)


async def _until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


@asynccontextmanager
async def _registry() -> AsyncIterator[str]:
    async with RegistryServer() as server:
        yield server.url


def test_every_malformed_frame_gets_an_error_frame_and_the_node_keeps_serving() -> None:
    async def main() -> None:
        async with _registry() as url, ChatNode(url) as chat:
            runner, page = await serve(chat, "127.0.0.1", 0)
            try:
                async with aiohttp.ClientSession() as session, \
                        session.ws_connect(page + "ws") as ws:
                    hello = json.loads((await ws.receive(timeout=10)).data)
                    assert hello["type"] == "hello" and hello["node"] == chat.node.id
                    for frame in BAD_FRAMES:
                        await ws.send_str(frame)
                    await ws.send_bytes(b"\x00\x01")
                    await ws.send_str('{"type": "send", "group": "nowhere", "text": "x"}')
                    await ws.send_str('{"type": "create", "group": "g", "ordering": "nope"}')
                    await ws.send_str('{"type": "list"}')
                    replies = [json.loads((await ws.receive(timeout=10)).data)
                               for _ in range(len(BAD_FRAMES) + 4)]
                assert [r["type"] for r in replies] == ["error"] * (len(BAD_FRAMES) + 3) + [
                    "groups"]
                assert "not in group 'nowhere'" in replies[-3]["message"]
                assert "unknown ordering 'nope'" in replies[-2]["message"]
                assert chat.node.running
                # still serving: a new page gets its hello
                async with aiohttp.ClientSession() as session, \
                        session.ws_connect(page + "ws") as ws:
                    assert json.loads((await ws.receive(timeout=10)).data)["type"] == "hello"
            finally:
                await runner.cleanup()

    asyncio.run(main())


class _Page:
    """What one subscriber heard."""

    def __init__(self, chat: ChatNode) -> None:
        self.heard: list[ServerMessage] = []
        chat.subscribe(self.heard.append)

    def texts(self, group: str) -> list[str]:
        return [m.text for m in self.heard if isinstance(m, Delivered) and m.group == group]

    def debug(self, group: str) -> Debug | None:
        found = [m for m in self.heard if isinstance(m, Debug) and m.group == group]
        return found[-1] if found else None

    def errors(self) -> list[str]:
        return [m.message for m in self.heard if isinstance(m, Error)]


def _held(debug: Debug | None) -> list[dict[str, Any]]:
    return [] if debug is None else [h for layer in debug.layers for h in layer["holdback"]]


def test_a_held_sequencer_order_keeps_the_message_in_the_holdback_until_released() -> None:
    """b holds what the sequencer (a) sends: b's own message waits for its order, named in
    the sequencer's snapshot; release delivers it, in the same order as at a."""

    async def main() -> None:
        async with _registry() as url, ChatNode(url) as a, ChatNode(url) as b:
            pa, pb = _Page(a), _Page(b)

            async def ask(chat: ChatNode, page: _Page, frame: dict[str, Any]) -> None:
                await chat.request(json.dumps(frame), page.heard.append)

            await ask(a, pa, {"type": "create", "group": "g", "ordering": "sequencer"})
            await _until(lambda: "g" in a.rooms and a.rooms["g"].group is not None)
            await ask(b, pb, {"type": "join", "group": "g"})
            await _until(lambda: b.rooms.get("g") is not None
                         and b.rooms["g"].group is not None
                         and a.rooms["g"].view is not None
                         and len(a.rooms["g"].view.members) == 2)
            await ask(a, pa, {"type": "send", "group": "g", "text": "one"})
            await _until(lambda: pb.texts("g") == ["one"])
            await ask(b, pb, {"type": "hold", "group": "g", "member": a.node.id})
            await ask(b, pb, {"type": "send", "group": "g", "text": "two"})
            await _until(lambda: pa.texts("g") == ["one", "two"])
            await _until(lambda: any(h["origin"] == b.node.id and "order" in h["waiting_for"]
                                     for h in _held(pb.debug("g"))))
            debug = pb.debug("g")
            assert debug is not None and debug.rules == {a.node.id: 0}
            assert debug.held.get(a.node.id, 0) >= 1
            assert pb.texts("g") == ["one"]
            await ask(b, pb, {"type": "release", "group": "g", "member": a.node.id})
            await _until(lambda: pb.texts("g") == ["one", "two"])
            await _until(lambda: not _held(pb.debug("g")))
            assert pa.errors() == pb.errors() == []

    asyncio.run(main())


def test_a_delay_lets_packets_through_late_but_in_order() -> None:
    async def main() -> None:
        async with _registry() as url, ChatNode(url) as a, ChatNode(url) as b:
            pa, pb = _Page(a), _Page(b)
            await a.request('{"type": "create", "group": "c", "ordering": "causal"}',
                            pa.heard.append)
            await _until(lambda: "c" in a.rooms and a.rooms["c"].group is not None)
            await b.request('{"type": "join", "group": "c"}', pb.heard.append)
            await _until(lambda: b.rooms.get("c") is not None
                         and b.rooms["c"].group is not None)
            b.holding.hold("c", a.node.id, delay_ms=200)
            for i in range(5):
                await a.request(json.dumps({"type": "send", "group": "c", "text": f"m{i}"}),
                                pa.heard.append)
            expected = [f"m{i}" for i in range(5)]
            await _until(lambda: pb.texts("c") == expected)
            assert pa.texts("c") == expected
            assert b.holding.rules("c") == {a.node.id: 200}
            b.holding.release("c", a.node.id)
            assert b.holding.rules("c") == {} and b.holding.held("c") == {}

    asyncio.run(main())


def test_a_hold_names_another_member_of_the_view() -> None:
    """A hold for no member (a name not in the view, this node itself) is refused with an
    error and makes no rule: a page cannot grow the rules (and every debug snapshot) without
    end, nor show a hold that holds nothing."""

    async def main() -> None:
        async with _registry() as url, ChatNode(url) as chat:
            page = _Page(chat)
            await chat.request('{"type": "create", "group": "g", "ordering": "fifo"}',
                               page.heard.append)
            await _until(lambda: chat.rooms.get("g") is not None
                         and chat.rooms["g"].view is not None)
            for member in ("nobody", "n99", chat.node.id):
                await chat.request(json.dumps({"type": "hold", "group": "g",
                                               "member": member}), page.heard.append)
            assert len(page.errors()) == 3
            assert "'nobody' is not another member of 'g'" in page.errors()[0]
            assert chat.holding.rules("g") == {}

    asyncio.run(main())


BAD_NAMES = ["my chat", "\x1b[2J\x1b[31mFAKE\x1b[0m", "line1\nn9  ordering=x", "-g", ".g",
             "g/h", "é", "g\n"]


def test_a_group_name_the_command_line_refuses_is_refused_naming_the_rule() -> None:
    async def main() -> None:
        async with _registry() as url, ChatNode(url) as chat:
            page = _Page(chat)
            for name in BAD_NAMES:
                for kind in ("create", "join"):
                    await chat.request(json.dumps({"type": kind, "group": name,
                                                   "ordering": "fifo"} if kind == "create"
                                                  else {"type": kind, "group": name}),
                                       page.heard.append)
            errors = page.errors()
            assert len(errors) == 2 * len(BAD_NAMES)
            for name, error in zip([n for n in BAD_NAMES for _ in "cj"], errors, strict=True):
                assert f"{name!r} is not a name (1-128 letters, digits or _ . : -" in error
            await chat.request(json.dumps({"type": "join", "group": "g" * 129}),
                               page.heard.append)
            assert "length <= 128" in page.errors()[-1]  # the decoder's bound, the same
            assert chat.rooms == {}
            # what the rule allows goes through
            await chat.request('{"type": "create", "group": "Room_1.a:b-c", '
                               '"ordering": "fifo"}', page.heard.append)
            await _until(lambda: "Room_1.a:b-c" in chat.rooms
                         and chat.rooms["Room_1.a:b-c"].group is not None)
            assert len(page.errors()) == 2 * len(BAD_NAMES) + 1

    asyncio.run(main())


@pytest.mark.parametrize(("exc", "said"), [
    (TimeoutError(), "timed out"),
    (TimeoutError("no answer from the registry"), "no answer from the registry"),
    (ConfigError(""), "ConfigError"),
    (ConfigError("group 'g' is closed"), "group 'g' is closed"),
])
def test_a_failed_join_says_what_happened(
        monkeypatch: pytest.MonkeyPatch, exc: Exception, said: str) -> None:
    async def fail(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(Group, "join", fail)
    monkeypatch.setattr(Group, "create", fail)

    async def main() -> None:
        async with _registry() as url, ChatNode(url) as chat:
            page = _Page(chat)
            await chat.request('{"type": "join", "group": "g"}', page.heard.append)
            await chat.request('{"type": "create", "group": "h", "ordering": "fifo"}',
                               page.heard.append)
            await _until(lambda: len(page.errors()) == 2)
            assert page.errors() == [f"could not join 'g': {said}",
                                     f"could not create 'h': {said}"]
            assert chat.rooms == {}

    asyncio.run(main())


def test_a_failed_request_says_what_happened(monkeypatch: pytest.MonkeyPatch) -> None:
    async def main() -> None:
        async with _registry() as url, ChatNode(url) as chat:
            page = _Page(chat)

            async def slow() -> None:
                raise TimeoutError

            monkeypatch.setattr(chat, "list_groups", slow)
            await chat.request('{"type": "list"}', page.heard.append)
            assert page.errors() == ["listgroups failed: timed out"]

    asyncio.run(main())
