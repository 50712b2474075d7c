"""The chat demo's web server (aiohttp): the page, its static files, one websocket per page.

Rules: `/` is the page, `/static/…` its script and style (shipped in the package; no
build step, nothing fetched from elsewhere), `/ws` the websocket, accepted only from the
page itself: a request that carries an Origin (every browser's does) must come from this
server's own origin, asked by a name it serves (the --host given, localhost or an IP
address), so that neither a website the user visits nor one rebinding its DNS name to
this address can drive the node; a request without an Origin (a program, not a browser)
is accepted; a refusal is HTTP 403 and one log line. A page's text frames go to
`ChatNode.request` one at a time, in order; binary frames and frames over
MAX_FRAME_BYTES earn an `Error` (the oversize one closes that socket, as aiohttp does);
everything the node publishes is queued per page and written in order. A page that goes
away is unsubscribed; the node goes on. The server binds 127.0.0.1 unless told otherwise:
it hands whoever reaches it this node's groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from pathlib import Path
from typing import Final

from aiohttp import WSMsgType, hdrs, web
from yarl import URL

from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.protocol import Error, ServerMessage, encode_server

STATIC: Final = Path(__file__).with_name("static")
MAX_FRAME_BYTES: Final = 64 * 1024
CHAT_NODE: Final = web.AppKey("chat_node", ChatNode)
SERVED_HOST: Final = web.AppKey("served_host", str)

log: Final = logging.getLogger(__name__)


def make_app(chat: ChatNode, host: str = "127.0.0.1") -> web.Application:
    """The page and websocket of `chat`, served on `host` (the name the page is asked by)."""
    app = web.Application()
    app[CHAT_NODE] = chat
    app[SERVED_HOST] = host
    app.router.add_get("/", _index)
    app.router.add_get("/ws", _websocket)
    app.router.add_static("/static/", STATIC)
    return app


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


def cross_origin(request: web.Request) -> str | None:
    """Why this websocket request does not come from the page itself, or None."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None:
        return None  # not a browser: browsers send an Origin with every websocket
    try:
        page, came_from = URL(f"{request.scheme}://{request.host}"), URL(origin)
        if (came_from.scheme, came_from.host, came_from.port) != (
                page.scheme, page.host, page.port):
            return f"Origin {origin!r} is not this page's ({page})"
    except ValueError:
        return f"Origin {origin!r} or Host {request.host!r} is not a URL"
    if not _served_name(page.host or "", request.app[SERVED_HOST]):
        return f"Host {request.host!r} is not a name this page is served on"
    return None


def _served_name(host: str, served: str) -> bool:
    if host.lower() in (served.strip("[]").lower(), "localhost"):
        return True
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def _websocket(request: web.Request) -> web.StreamResponse:
    chat = request.app[CHAT_NODE]
    refused = cross_origin(request)
    if refused is not None:
        log.warning("chat: websocket from %s refused: %s", request.remote, refused)
        return web.Response(status=403, text=f"refused: {refused}\n")
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES)
    await ws.prepare(request)
    outbox: asyncio.Queue[ServerMessage] = asyncio.Queue()
    chat.subscribe(outbox.put_nowait)
    writer = asyncio.get_running_loop().create_task(_write(ws, outbox))
    try:
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                await chat.request(frame.data, outbox.put_nowait)
            elif frame.type is WSMsgType.BINARY:
                outbox.put_nowait(Error("bad request: send JSON text frames, not binary"))
            elif frame.type is WSMsgType.ERROR:
                break
    finally:
        chat.unsubscribe(outbox.put_nowait)
        writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writer
    return ws


async def _write(ws: web.WebSocketResponse, outbox: asyncio.Queue[ServerMessage]) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        while not ws.closed:
            await ws.send_str(encode_server(await outbox.get()))


async def serve(chat: ChatNode, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Start serving `chat` on host:port (0: any free port); returns the runner and URL."""
    runner = web.AppRunner(make_app(chat, host), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, str(URL.build(scheme="http", host=host, port=bound, path="/"))  # [::1]
