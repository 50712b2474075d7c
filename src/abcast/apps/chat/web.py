"""The chat demo's web server (aiohttp): the page, its static files, one websocket per page.

Rules: `/` is the page, `/static/…` its script and style (shipped in the package; no
build step, nothing fetched from elsewhere), `/ws` the websocket, accepted only from the
page itself: a request that carries an Origin (every browser's does) must come from this
server's own origin, asked by a name it serves (the --host given, localhost or an IP
address), so that neither a website the user visits nor one rebinding its DNS name to
this address can drive the node; a request without an Origin (a program, not a browser)
is accepted; a refusal is HTTP 403 and one log line. A page's text frames go to
`ChatNode.request` one at a time, in order; a binary frame earns an `Error`; a frame over
MAX_FRAME_BYTES (the page sends at most 4096 characters of text, ~25 kB escaped) closes
that socket with code 1009, message too big, and no `Error` (aiohttp refuses it before it
is read; the page shows the close); everything the node publishes is queued per page
(`Outbox`) and written in order, a group's `Debug` snapshots coalesced (a page that is
behind gets the latest one only, never one from before the group's `Left`); a page that
falls more than MAX_BEHIND characters of frames behind (a stalled or dead tab) is
dropped — its socket aborted, one log line — and a websocket heartbeat every HEARTBEAT_S
notices a page that went away silently. A page that goes away is unsubscribed; the node
goes on. The server binds 127.0.0.1 unless told otherwise: it hands whoever reaches it
this node's groups.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Final

from aiohttp import WSMsgType, hdrs, web
from yarl import URL

from abcast.apps.chat.node import ChatNode
from abcast.apps.chat.protocol import Debug, Error, Left, ServerMessage, encode_server
from abcast.tasks import stop_task

STATIC: Final = Path(__file__).with_name("static")
#: the largest frame a page may send; a larger one closes its socket (code 1009)
MAX_FRAME_BYTES: Final = 64 * 1024
#: how far (characters of JSON frames not yet written) a page may fall behind: a fresh
#: page's state is every group's history (1 MiB of text each at most) and views
MAX_BEHIND: Final = 16 * 1024 * 1024
#: the websocket's ping period; a page that does not answer within half of it is closed
HEARTBEAT_S: Final = 20.0
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
    ws = web.WebSocketResponse(max_msg_size=MAX_FRAME_BYTES, heartbeat=HEARTBEAT_S)
    await ws.prepare(request)

    def drop() -> None:
        log.warning("chat: page %s fell more than %d characters behind; dropped it",
                    request.remote, MAX_BEHIND)
        chat.unsubscribe(outbox.put)
        if request.transport is not None:
            request.transport.abort()

    outbox = Outbox(drop, MAX_BEHIND)
    chat.subscribe(outbox.put)
    writer = asyncio.get_running_loop().create_task(_write(ws, outbox))
    try:
        async for frame in ws:
            if frame.type is WSMsgType.TEXT:
                await chat.request(frame.data, outbox.put)
            elif frame.type is WSMsgType.BINARY:
                outbox.put(Error("bad request: send JSON text frames, not binary"))
            elif frame.type is WSMsgType.ERROR:
                break
    finally:
        chat.unsubscribe(outbox.put)
        await stop_task(writer)
    return ws


class Outbox:
    """One page's frames not yet written, in order, at most `max_behind` characters.

    A `Debug` takes the place of its group's snapshot still waiting (the page shows only
    the latest), unless the group's `Left` came after that one: then the waiting one is
    dropped (the page drops it with the panel) and the new one waits after the `Left`.
    The first frame past the bound empties the outbox, calls `on_overflow` once, and every
    later frame is dropped."""

    def __init__(self, on_overflow: Callable[[], None], max_behind: int = MAX_BEHIND) -> None:
        self.on_overflow, self.max_behind = on_overflow, max_behind
        #: a frame, or (None) the slot of a snapshot in `_snapshots` (gone there: dropped)
        self._queue: deque[tuple[int, str | None]] = deque()
        self._slots = itertools.count()
        #: group → the slot of its snapshot still waiting; slot → (group, snapshot)
        self._waiting: dict[str, int] = {}
        self._snapshots: dict[int, tuple[str, str]] = {}
        self._ready = asyncio.Event()
        self.behind = 0
        self.overflowed = False

    def put(self, message: ServerMessage) -> None:
        if self.overflowed:
            return
        data = encode_server(message)
        if isinstance(message, Debug):
            slot = self._waiting.get(message.group)
            if slot is None:
                slot = self._waiting[message.group] = next(self._slots)
                self._queue.append((slot, None))
            else:
                self.behind -= len(self._snapshots[slot][1])
            self._snapshots[slot] = (message.group, data)
        else:
            if isinstance(message, Left) and message.group in self._waiting:
                dropped = self._waiting.pop(message.group)
                self.behind -= len(self._snapshots.pop(dropped)[1])
            self._queue.append((0, data))
        self.behind += len(data)
        if self.behind > self.max_behind:
            self.overflowed = True
            self._queue.clear()
            self._waiting.clear()
            self._snapshots.clear()
            self.behind = 0
            self.on_overflow()
            return
        self._ready.set()

    def __len__(self) -> int:
        """Frames waiting (a dropped snapshot's slot too, until `get` passes it)."""
        return len(self._queue)

    async def get(self) -> str:
        while True:
            while not self._queue:
                self._ready.clear()
                await self._ready.wait()
            slot, data = self._queue.popleft()
            if data is None:
                snapshot = self._snapshots.pop(slot, None)
                if snapshot is None:
                    continue  # dropped by its group's Left
                group, data = snapshot
                if self._waiting.get(group) == slot:
                    del self._waiting[group]
            self.behind -= len(data)
            return data


async def _write(ws: web.WebSocketResponse, outbox: Outbox) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):
        while not ws.closed:
            await ws.send_str(await outbox.get())


async def serve(chat: ChatNode, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Start serving `chat` on host:port (0: any free port); returns the runner and URL."""
    runner = web.AppRunner(make_app(chat, host), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    return runner, str(URL.build(scheme="http", host=host, port=bound, path="/"))  # [::1]
