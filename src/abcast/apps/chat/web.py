"""The chat demo's web server (aiohttp): the page, its static files, one websocket per page.

Rules: `/` is the page, `/static/…` its script and style (shipped in the package; no
build step, nothing fetched from elsewhere), `/ws` the websocket. A page's text frames
go to `ChatNode.request` one at a time, in order; binary frames and frames over
MAX_FRAME_BYTES earn an `Error` (the oversize one closes that socket, as aiohttp does);
everything the node publishes is queued per page and written in order. A page that goes
away is unsubscribed; the node goes on. The server binds 127.0.0.1 unless told otherwise:
it hands whoever reaches it this node's groups.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Final

from aiohttp import WSMsgType, web

from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.protocol import Error, ServerMessage, encode_server

STATIC: Final = Path(__file__).with_name("static")
MAX_FRAME_BYTES: Final = 64 * 1024
CHAT_NODE: Final = web.AppKey("chat_node", ChatNode)


def make_app(chat: ChatNode) -> web.Application:
    app = web.Application()
    app[CHAT_NODE] = chat
    app.router.add_get("/", _index)
    app.router.add_get("/ws", _websocket)
    app.router.add_static("/static/", STATIC)
    return app


async def _index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html")


async def _websocket(request: web.Request) -> web.WebSocketResponse:
    chat = request.app[CHAT_NODE]
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
    runner = web.AppRunner(make_app(chat), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, f"http://{host}:{bound}/"
