"""`Server`: a group member that serves requests from clients (abcast.rpc.client).

Usage: `server = Server(on_request=handler)` then
`group = await Group.create("kv", ordering="sequencer", registry=url, **server.group_kwargs())`
(or `await Server.create("kv", ordering=…, registry=…, on_request=handler)`), or without
a handler `async for req in server.requests(): req.reply(b"…")`.

Rules:
- A server is the group's application (`app=`, plus `on_view=`): it opens the group's
  request endpoint (abcast.rpc.wire) on the member's node and sees every delivery.
  Deliveries that are not requests go on to the caller's `on_deliver`, in order.
- A request frame from a client is handled by the Executor's table: proposed into the
  group's order (a broadcast), held (Case A, this server not the view's leader: the
  leader proposes it; a server that becomes leader proposes what it holds),
  re-answered from the reply cache, or left alone while a copy is in flight (a proposal
  the group refuses, `Backpressure`, is withdrawn: the client's retry proposes it
  again, `stats.backpressured`). A request
  is *executed* only where it is delivered, in the group's total order, and at most
  once per (client, request id) — so replicas that apply requests deterministically
  stay equal.
- Executed: `on_request(req)` is called on the loop, in delivery order; its return value
  (bytes, bytearray or memoryview; None: empty) is the reply, unless the handler called
  `req.reply`/`req.fail` itself. An exception, or a return value of another type,
  becomes an error reply (`ok=False`, its text; one log line) and the server keeps
  serving; a handler that raises after replying keeps its reply (one log line). An
  `on_deliver` that raises costs that delivery only (one log line, `stats.errors`).
  Without a handler, requests queue for `requests()` and the application calls
  `req.reply(...)` (or `req.fail(...)`) itself, in order; a second reply is a
  `LocalProtocolError`.
- A joiner receives the application's state (`get_state`/`set_state`) together with
  the duplicate table, so it does not execute again what the group executed before.
- Only the request's targets (`to`, default every member) execute it; one-way requests
  get no reply. Replies go straight to the client (the address in the request) and carry
  the server's view; on a view change every client heard from in the last
  `NOTIFY_FOR_S` is told the new view, so a waiting vote can re-count.
- The server ends with its group: when the group closes here, is left, removes this
  member, or fails to open once the server was bound (`group_ended`), or on `close()`,
  the request endpoint is closed on the node and `requests()` ends.
- A request frame whose `reply_to` is no address of this node's transport is refused
  (`stats.bad_frames`, the link dropped) before anything is proposed; an ordered request
  with one (a member's own broadcast) runs and answers nobody (one log line).
- A client is never a member: a request frame whose client id is in the server's view
  is refused (`stats.refused`, the link dropped), and no reply or notice goes to a
  member's id, so a request's `reply_to` never re-points a group peer's address (an
  ordered request naming a member still runs, everywhere alike; nobody is answered).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from abcast.codec import NOT_A_MESSAGE, Envelope
from abcast.effects import Deliver, Stage
from abcast.errors import Backpressure, ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId, View
from abcast.rpc.executor import DEFAULT_CAPACITY, Action, Executor
from abcast.rpc.wire import (
    ReplyFrame,
    Request,
    ViewNotice,
    decode_rpc,
    encode_rpc,
    endpoint_name,
    is_request,
    ordered_request,
    read_ordered_request,
)
from abcast.runtime.group import Group
from abcast.transport import Link
from abcast.transport.base import parse_url

log: Final = logging.getLogger(__name__)

#: a client that sent nothing for this long is not told about view changes
NOTIFY_FOR_S: Final = 30.0
#: clients remembered for those notices
MAX_CLIENTS: Final = 1_000

_StateRows = list[tuple[NodeId, int]]
_state_encode = msgspec.msgpack.Encoder().encode
_state_decode = msgspec.msgpack.Decoder(tuple[bytes, _StateRows]).decode


@dataclass(slots=True)
class ServerStats:
    requests: int = 0  # executed here
    replies: int = 0
    errors: int = 0  # handlers (and on_deliver callbacks) that raised or returned no bytes
    bad_frames: int = 0  # endpoint frames that were not requests
    refused: int = 0  # request frames in a member's name
    backpressured: int = 0  # proposals the group refused (withdrawn; a retry proposes)
    bad_ordered: int = 0  # ordered requests that did not decode
    notices: int = 0


class IncomingRequest:
    """One executed request, as the application sees it."""

    __slots__ = ("_server", "client", "id", "payload", "replied")

    def __init__(self, server: Server, request: Request) -> None:
        self._server = server
        self.client: NodeId = request.client
        self.id: int = request.rid
        self.payload: bytes = request.payload
        self.replied = False

    def reply(self, value: bytes) -> None:
        self._server._send_reply(self, True, reply_bytes(value))

    def fail(self, error: str) -> None:
        self._server._send_reply(self, False, error.encode())


def reply_bytes(value: object) -> bytes:
    """A handler's reply as bytes (None: empty); any other type is the caller's bug, not
    something to guess at (`bytes(5)` would be five zero bytes)."""
    if value is None:
        return b""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise LocalProtocolError(f"a reply must be bytes, bytearray or memoryview, "
                             f"not {type(value).__name__}")


class Server:
    def __init__(
        self,
        on_request: Callable[[IncomingRequest], bytes] | None = None,
        *,
        on_deliver: Callable[[Deliver], None] | None = None,
        get_state: Callable[[], bytes] | None = None,
        set_state: Callable[[bytes], None] | None = None,
        on_view: Callable[[View], None] | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self._handler = on_request
        self._on_deliver = on_deliver
        self._get_state = get_state
        self._set_state = set_state
        self._user_view = on_view
        self.executor = Executor(capacity)
        self.stats = ServerStats()
        self._group: Group | None = None
        self._endpoint = ""
        self._clients: OrderedDict[NodeId, tuple[str, float]] = OrderedDict()
        self._requests: dict[tuple[NodeId, int], Request] = {}
        self._led = False  # this server led the last view it saw
        self._queue: asyncio.Queue[IncomingRequest | None] | None = (
            asyncio.Queue() if on_request is None else None)

    # -- making one -------------------------------------------------------------------------
    def group_kwargs(self) -> dict[str, Any]:
        """What to pass to Group/Group.create/Group.join so it serves through this."""
        return {"app": self, "on_view": self.on_view}

    @classmethod
    async def create(cls, name: str, *, ordering: str, server: Server | None = None,
                     on_request: Callable[[IncomingRequest], bytes] | None = None,
                     **kwargs: Any) -> tuple[Server, Group]:
        srv = server or cls(on_request)
        group = await Group.create(name, ordering=ordering, **srv.group_kwargs(), **kwargs)
        return srv, group

    @classmethod
    async def join(cls, name: str, *, server: Server | None = None,
                   on_request: Callable[[IncomingRequest], bytes] | None = None,
                   **kwargs: Any) -> tuple[Server, Group]:
        srv = server or cls(on_request)
        group = await Group.join(name, **srv.group_kwargs(), **kwargs)
        return srv, group

    # -- the group application --------------------------------------------------------------
    def bind(self, group: Any) -> None:
        if self._group is not None:
            raise LocalProtocolError("this server already serves a group")
        self._group = group
        self._endpoint = endpoint_name(group.name)
        group.host.open_endpoint(self._endpoint, self._on_frame)

    def group_ended(self, why: str) -> None:
        """The group (this server is its `app=`) ended on this node: serve no more."""
        self.close()

    def close(self) -> None:
        """Close the request endpoint and end `requests()` (also done when the group
        ends here: `group_ended`)."""
        group = self._group
        if group is not None:
            group.host.close_endpoint(self._endpoint)
        if self._queue is not None:
            self._queue.put_nowait(None)

    def get_state(self) -> bytes:
        app = self._get_state() if self._get_state is not None else b""
        return _state_encode((app, self.executor.export()))

    def set_state(self, state: bytes) -> None:
        try:
            app, table = _state_decode(state)
        except NOT_A_MESSAGE as exc:
            raise RemoteProtocolError(f"server state does not decode: {exc}") from None
        self.executor.load(table)
        if self._set_state is not None:
            self._set_state(app)

    def on_view(self, view: View) -> None:
        if self._user_view is not None:
            self._user_view(view)
        group = self._group
        if group is None or not group.active:
            return
        led, self._led = self._led, view.leader == group.node
        if self._led and not led:
            for request in self.executor.release_held():
                self._propose(group, request)
        now = time.monotonic()
        notice = ViewNotice(view.view_id, view.members)
        for client, (url, seen) in list(self._clients.items()):
            if now - seen <= NOTIFY_FOR_S:
                self._transmit(client, url, notice)
                self.stats.notices += 1

    def on_deliver(self, delivery: Deliver) -> None:
        if delivery.stage is not Stage.FINAL:
            return
        if not is_request(delivery.payload):
            if self._on_deliver is not None:
                try:
                    self._on_deliver(delivery)
                except Exception as exc:  # the application's bug costs this delivery only
                    self.stats.errors += 1
                    log.warning("on_deliver failed on a delivery from %s: %r",
                                delivery.origin, exc)
            return
        try:
            request = read_ordered_request(delivery.payload)
        except RemoteProtocolError as exc:
            self.stats.bad_ordered += 1
            log.warning("ignored a request ordered from %s: %s", delivery.origin, exc)
            return
        self._remember(request)
        if self.executor.on_ordered(request) is not Action.EXECUTE:
            return
        group = self._require_group()
        if request.to and group.node not in request.to:
            return  # ordered here too, executed by its targets only
        self.stats.requests += 1
        incoming = IncomingRequest(self, request)
        self._requests[(request.client, request.rid)] = request
        if self._handler is None:
            assert self._queue is not None
            self._queue.put_nowait(incoming)
            return
        self._execute(self._handler, incoming)

    def _execute(self, handler: Callable[[IncomingRequest], bytes],
                 incoming: IncomingRequest) -> None:
        """Run the handler; whatever it does, the delivery step goes on."""
        try:
            value = handler(incoming)
            if not incoming.replied:
                self._send_reply(incoming, True, reply_bytes(value))
        except Exception as exc:  # the handler's bug never kills the server
            self.stats.errors += 1
            if incoming.replied:
                log.warning("request %s#%d: the handler raised after replying, the reply "
                            "stands: %r", incoming.client, incoming.id, exc)
                return
            log.warning("request %s#%d failed: %r", incoming.client, incoming.id, exc)
            self._send_reply(incoming, False, f"{type(exc).__name__}: {exc}".encode())

    async def requests(self) -> AsyncIterator[IncomingRequest]:
        """Every request executed here, in the group's order (servers without a handler)."""
        if self._queue is None:
            raise LocalProtocolError("requests() is for a server made without on_request")
        while True:
            item = await self._queue.get()
            if item is None:
                self._queue.put_nowait(None)
                return
            yield item

    # -- frames -----------------------------------------------------------------------------
    def _on_frame(self, link: Link, env: Envelope) -> None:
        frame = decode_rpc(env.payload)  # DecodeError: the node drops the link
        if not isinstance(frame, Request) or frame.client != env.sender:
            self.stats.bad_frames += 1
            raise RemoteProtocolError(f"{env.sender} sent {type(frame).__name__} to a server")
        group = self._group
        if group is None or not group.active:
            return
        if frame.client in group.view.members:
            self.stats.refused += 1
            raise RemoteProtocolError(f"{env.sender} sent a request in the name of "
                                      f"{frame.client}, a member of {group.name!r}")
        if group.host.peer_url(frame.client) != frame.reply_to:
            try:
                parse_url(frame.reply_to, expect_scheme=group.host.transport.scheme)
            except ConfigError as exc:
                self.stats.bad_frames += 1
                raise RemoteProtocolError(f"{env.sender} sent a request to be answered at "
                                          f"no address of this transport: {exc}") from None
        self._remember(frame)
        action, cached = self.executor.on_frame(frame, leader=group.view.leader == group.node)
        if action is Action.PROPOSE:
            self._propose(group, frame)
        elif action is Action.RESEND and cached is not None and not frame.oneway:
            self._reply_frame(frame.client, frame.reply_to, frame.rid, cached.ok,
                              cached.value)

    def _propose(self, group: Group, request: Request) -> None:
        try:
            group.broadcast_nowait(ordered_request(request))
        except Backpressure as exc:
            self.executor.withdraw(request)
            self.stats.backpressured += 1
            log.info("request %s#%d not proposed, the client's retry will be: %s",
                     request.client, request.rid, exc)

    def _remember(self, request: Request) -> None:
        if request.client in self._require_group().view.members:
            return  # not a client: never told anything at reply_to
        self._clients[request.client] = (request.reply_to, time.monotonic())
        self._clients.move_to_end(request.client)
        if len(self._clients) > MAX_CLIENTS:
            self._clients.popitem(last=False)

    def _send_reply(self, incoming: IncomingRequest, ok: bool, value: bytes) -> None:
        if incoming.replied:
            raise LocalProtocolError(f"request {incoming.client}#{incoming.id} already replied")
        incoming.replied = True
        if not ok and self._handler is None:
            self.stats.errors += 1
        request = self._requests.pop((incoming.client, incoming.id), None)
        self.executor.replied(incoming.client, incoming.id, ok, value)
        if request is None or request.oneway:
            return
        self._reply_frame(request.client, request.reply_to, request.rid, ok, value)

    def _reply_frame(self, client: NodeId, url: str, rid: int, ok: bool, value: bytes) -> None:
        group = self._require_group()
        if not group.active:
            return
        view = group.view
        self.stats.replies += 1
        self._transmit(client, url, ReplyFrame(rid, group.node, ok, value, view.view_id,
                                                view.members))

    def _transmit(self, client: NodeId, url: str, frame: ReplyFrame | ViewNotice) -> None:
        group = self._require_group()
        if client in group.view.members:
            return  # a group peer's address is the group's to set, never a request's
        host = group.host
        if host.peer_url(client) != url:
            try:
                host.add_peers({client: url})
            except ConfigError as exc:  # an ordered request a member sent itself
                log.warning("no frame to client %s: %s", client, exc)
                return
        host.transmit(client, encode_rpc(self._endpoint, host.id, frame))

    def _require_group(self) -> Group:
        if self._group is None:
            raise LocalProtocolError("the server is not bound to a group yet")
        return self._group
