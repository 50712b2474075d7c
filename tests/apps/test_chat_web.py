"""The chat demo's web server: the websocket is the page's own (a cross-origin or
rebound request is refused with 403 and one log line; a program without an Origin is
served), and a page that falls behind is dropped instead of growing the server."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.web import serve
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
