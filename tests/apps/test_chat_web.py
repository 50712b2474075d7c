"""The chat demo's web server: the websocket is the page's own (a cross-origin or
rebound request is refused with 403 and one log line; a program without an Origin is
served), and a page that falls behind is dropped instead of growing the server."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from abcast.apps.chat import web
from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.protocol import Debug, Delivered, Joined, Left, ServerMessage
from abcast.apps.chat.web import Outbox, serve
from abcast.registry.server import RegistryServer

pytestmark = pytest.mark.timeout(120)


@asynccontextmanager
async def _page(host: str = "127.0.0.1") -> AsyncIterator[tuple[ChatNode, str]]:
    async with RegistryServer() as registry, ChatNode(registry.url) as chat:
        runner, url = await serve(chat, host, 0)
        try:
            yield chat, url
        finally:
            await runner.cleanup()


async def _status(url: str, headers: dict[str, str]) -> int:
    """101 if the websocket opened (and said hello), else the HTTP status."""
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(url + "ws", headers=headers) as ws:
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "hello"
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def _port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


def test_only_the_page_itself_may_open_the_websocket(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with _page() as (chat, url):
            port = _port(url)
            own = f"http://127.0.0.1:{port}"
            assert await _status(url, {}) == 101  # a program: no Origin
            assert await _status(url, {"Origin": own}) == 101
            assert await _status(url, {"Origin": f"http://localhost:{port}",
                                       "Host": f"localhost:{port}"}) == 101
            caplog.clear()
            with caplog.at_level(logging.WARNING, logger="abcast.apps.chat.web"):
                for headers in (
                    {"Origin": "http://evil.example"},
                    {"Origin": f"http://evil.example:{port}"},
                    {"Origin": f"http://127.0.0.1:{port + 1}"},
                    {"Origin": f"https://127.0.0.1:{port}"},
                    {"Origin": "null"},
                    # DNS rebinding: evil.example resolves to 127.0.0.1, same origin
                    {"Origin": f"http://evil.example:{port}", "Host": f"evil.example:{port}"},
                ):
                    assert await _status(url, headers) == 403, headers
            refusals = [r for r in caplog.records if "refused" in r.getMessage()]
            assert len(refusals) == 6
            assert chat.rooms == {} and chat._subscribers == []

    asyncio.run(main())


def test_an_ipv6_page_is_its_own_origin() -> None:
    async def main() -> None:
        try:
            async with _page("::1") as (_, url):
                assert url.startswith("http://[::1]:")
                port = _port(url)
                assert await _status(url, {"Origin": f"http://[::1]:{port}"}) == 101
                assert await _status(url, {"Origin": f"http://127.0.0.1:{port}"}) == 403
        except OSError as exc:  # no IPv6 loopback here
            pytest.skip(f"cannot serve on ::1: {exc}")

    asyncio.run(main())


def _delivered(i: int, text: str = "x") -> Delivered:
    return Delivered("g", i, "n1", i, text)


def _debug(group: str, marker: int) -> Debug:
    return Debug(group, [{"marker": marker}], {}, {})


def test_an_outbox_keeps_the_order_and_only_the_latest_snapshot_of_a_group() -> None:
    async def main() -> None:
        outbox = Outbox(lambda: pytest.fail("overflowed"), max_behind=10**6)
        outbox.put(_delivered(1))
        outbox.put(_debug("g", 1))
        outbox.put(_delivered(2))
        outbox.put(_debug("h", 1))
        for marker in range(2, 500):
            outbox.put(_debug("g", marker))
        outbox.put(_delivered(3))
        assert len(outbox) == 5
        frames = [json.loads(await outbox.get()) for _ in range(5)]
        assert [(f["type"], f.get("index") or f["layers"][0]["marker"]) for f in frames] == [
            ("deliver", 1), ("debug", 499), ("deliver", 2), ("debug", 1), ("deliver", 3)]
        assert outbox.behind == 0

    asyncio.run(main())


def test_a_snapshot_waiting_when_its_group_is_left_is_not_written_before_the_left() -> None:
    """A page behind when this node leaves a group and enters it again: the snapshot of the
    new room comes after `left` and `joined` (which makes the panel), not in the place of
    the old room's snapshot before them, where the page drops it with the old panel."""

    async def main() -> None:
        outbox = Outbox(lambda: pytest.fail("overflowed"), max_behind=10**6)
        outbox.put(_debug("g", 1))
        outbox.put(Left("g", "left"))
        outbox.put(Joined("g", "fifo", "reliable", "primary"))
        outbox.put(_debug("g", 2))
        outbox.put(_debug("g", 3))
        frames = []
        while len(outbox):
            frames.append(json.loads(await outbox.get()))
        assert [(f["type"], f.get("layers", [{}])[0].get("marker")) for f in frames] == [
            ("left", None), ("joined", None), ("debug", 3)]
        assert outbox.behind == 0

    asyncio.run(main())


def test_a_page_that_falls_behind_is_dropped_once_and_holds_nothing() -> None:
    dropped: list[int] = []
    outbox = Outbox(lambda: dropped.append(outbox.behind), max_behind=100_000)
    for i in range(1, 10_000):
        outbox.put(_delivered(i, "y" * 1000))
        assert outbox.behind <= 100_000
    assert dropped == [0] and len(outbox) == 0 and outbox.overflowed


def _stalled_page(port: int) -> socket.socket:
    """A websocket client that never reads (a frozen tab)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    return s


def test_a_stalled_page_is_dropped_and_the_others_go_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(web, "MAX_BEHIND", 256 * 1024)

    async def main() -> None:
        async with _page() as (chat, url):
            heard: list[ServerMessage] = []
            chat.subscribe(heard.append)
            await chat.request('{"type": "create", "group": "g", "ordering": "fifo"}',
                               heard.append)
            async with asyncio.timeout(60):
                while "g" not in chat.rooms or chat.rooms["g"].group is None:
                    await asyncio.sleep(0.02)
            stalled = _stalled_page(_port(url))
            try:
                async with asyncio.timeout(60):
                    while len(chat._subscribers) < 2:
                        await asyncio.sleep(0.02)
                sent = 0
                with caplog.at_level(logging.WARNING, logger="abcast.apps.chat.web"):
                    async with asyncio.timeout(60):
                        while len(chat._subscribers) > 1:
                            sent += 1
                            await chat.request(json.dumps(
                                {"type": "send", "group": "g", "text": "m" * 4000}),
                                heard.append)
                            await asyncio.sleep(0)
                assert chat._subscribers == [heard.append]
                assert sent < 1000  # dropped after ~64 frames of 4 kB, not at the end
                assert len([r for r in caplog.records if "behind" in r.getMessage()]) == 1
                async with asyncio.timeout(60):  # the others go on
                    while sum(isinstance(m, Delivered) for m in heard) < sent:
                        await asyncio.sleep(0.02)
            finally:
                stalled.close()

    asyncio.run(main())


def test_a_frame_too_big_closes_that_socket_with_1009_and_the_node_goes_on() -> None:
    async def main() -> None:
        async with _page() as (chat, url), aiohttp.ClientSession() as session:
            async with session.ws_connect(url + "ws") as ws:
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "hello"
                await ws.send_str(json.dumps({"type": "send", "group": "g",
                                              "text": "z" * (web.MAX_FRAME_BYTES + 1)}))
                closed = await ws.receive(timeout=10)
                assert closed.type is aiohttp.WSMsgType.CLOSE
                assert closed.data == aiohttp.WSCloseCode.MESSAGE_TOO_BIG == 1009
            # a frame just under the limit is read and carried out
            async with session.ws_connect(url + "ws") as ws:
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "hello"
                await ws.send_str(" " * (web.MAX_FRAME_BYTES - 100) + '{"type": "list"}')
                assert json.loads((await ws.receive(timeout=10)).data)["type"] == "groups"
            assert chat.node.running

    asyncio.run(main())
