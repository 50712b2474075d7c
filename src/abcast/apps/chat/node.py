"""`ChatNode`: one participant of the chat demo — one abcast node, the groups it is in,
and the pages watching it.

Rules: the node's transport is a `HoldingTransport` (the debug panel's hold/release).
`request(text, reply)` takes one page frame: it is decoded (abcast.apps.chat.protocol)
and carried out; whatever goes wrong — a malformed frame, an unknown ordering, a name
taken, a group that does not answer — ends as one `Error` through `reply`, never as an
exception out of here. A group's name follows the command line's rule
(`cli_params.NAME`), so a group a page makes can be joined, listed and removed there too.
Creating and joining run as tasks (a join waits to be admitted); everything that changes
(views, deliveries, departures) goes to every subscriber in the order it happened.
`Debug` snapshots (`Group.inspect()` and the hold rules) are pushed every DEBUG_EVERY_S
for each open group whose snapshot changed. Groups are made with a
failure-detector timeout of DEMO_SUSPECT_AFTER_US, so that a person can hold a member's
packets for a few seconds before the group takes the member for crashed. A room keeps a
bounded history (`History`: the latest HISTORY_LINES lines within HISTORY_BYTES of text,
trimmed after each delivery, so every member keeps the same window); a joiner is handed
that window (the group's state) with each line's delivery index and shows it first. When
the group replaces a member's window later (partitions merging, a member cut off
rejoining), its pages get `Joined` again and the new window: `Joined` starts a room's
lines afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

import click
import msgspec

from abcast.apps.chat.holding import HoldingTransport
from abcast.apps.chat.protocol import (
    ClientMessage,
    Create,
    Debug,
    Delivered,
    Error,
    GroupRow,
    Groups,
    Hello,
    Hold,
    Join,
    Joined,
    Leave,
    Left,
    ListGroups,
    Release,
    Send,
    ServerMessage,
    ViewChanged,
    decode_client,
)
from abcast.cli_params import NAME
from abcast.codec import NOT_A_MESSAGE
from abcast.effects import Deliver, Stage
from abcast.errors import AbcastError, ConfigError, RemoteProtocolError
from abcast.group.failure_detector import DetectorConfig
from abcast.ids import View
from abcast.ordering.registry import MULTICASTS, ORDERINGS, PARTITIONS, OrderingOptions
from abcast.runtime.group import Group
from abcast.runtime.node import Node
from abcast.snapshot import to_builtins
from abcast.transport import transport_from_url

log: Final = logging.getLogger(__name__)

DEBUG_EVERY_S: Final = 0.25
DEMO_SUSPECT_AFTER_US: Final = 10_000_000
JOIN_TIMEOUT_S: Final = 30.0
#: the history a room keeps and a joiner is handed: the latest lines, at most this many
#: and at most this many bytes of text and origin (UTF-8), whichever bound comes first
HISTORY_LINES: Final = 1000
HISTORY_BYTES: Final = 1024 * 1024

Reply = Callable[[ServerMessage], None]


class _Line(msgspec.Struct, array_like=True, frozen=True):
    origin: str
    seq: int
    text: str


class _State(msgspec.Struct, array_like=True, frozen=True):
    """A room's history on the wire (a joiner's state): lines delivered so far, the last."""

    delivered: int
    lines: list[_Line]


_state_decoder = msgspec.msgpack.Decoder(_State)


def _size(line: _Line) -> int:
    return len(line.text.encode(errors="replace")) + len(line.origin.encode(errors="replace"))


@dataclass(slots=True)
class History:
    """The latest lines of one room: at most max_lines, at most max_bytes (`_size`).

    The bound is applied after every line, in delivery order, so every member that saw the
    same deliveries holds the same window; a line larger than max_bytes on its own is
    delivered but not kept. `delivered` counts every line so far: the window's lines have
    the delivery indices delivered - len(lines) + 1 … delivered."""

    max_lines: int = HISTORY_LINES
    max_bytes: int = HISTORY_BYTES
    lines: deque[_Line] = field(default_factory=deque)
    delivered: int = 0
    size: int = 0

    def add(self, line: _Line) -> int:
        """Keep `line` (and trim to the bound); its delivery index."""
        self.delivered += 1
        self.lines.append(line)
        self.size += _size(line)
        self._trim()
        return self.delivered

    def indexed(self) -> list[tuple[int, _Line]]:
        first = self.delivered - len(self.lines) + 1
        return list(enumerate(self.lines, first))

    def encode(self) -> bytes:
        return msgspec.msgpack.encode(_State(self.delivered, list(self.lines)))

    def load(self, state: bytes) -> None:
        """Take a member's window (`encode`) in place of this one, trimmed to this bound."""
        try:
            decoded = _state_decoder.decode(state)
        except NOT_A_MESSAGE as exc:
            raise RemoteProtocolError(f"a chat history that does not decode: {exc}") from None
        if decoded.delivered < len(decoded.lines):
            raise RemoteProtocolError(
                f"a history of {len(decoded.lines)} lines but {decoded.delivered} delivered")
        self.lines = deque(decoded.lines)
        self.delivered = decoded.delivered
        self.size = sum(map(_size, self.lines))
        self._trim()

    def _trim(self) -> None:
        while self.lines and (len(self.lines) > self.max_lines or self.size > self.max_bytes):
            self.size -= _size(self.lines.popleft())


@dataclass(slots=True)
class _Room:
    """One group this node is in, as the pages see it."""

    history: History
    group: Group | None = None
    view: View | None = None
    joined: Joined | None = None
    last_debug: bytes = b""
    leaving: bool = False


class ChatNode:
    """`async with ChatNode(registry_url) as chat:` — then `subscribe`, `request`."""

    def __init__(self, registry: str, transport: str = "tcp://127.0.0.1:0", *,
                 history_lines: int = HISTORY_LINES,
                 history_bytes: int = HISTORY_BYTES) -> None:
        self.registry_url = registry
        self.history_lines, self.history_bytes = history_lines, history_bytes
        self.holding = HoldingTransport(transport_from_url(transport))
        self.node = Node(self.holding, registry=registry)
        self.rooms: dict[str, _Room] = {}
        self._subscribers: list[Reply] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._debug_task: asyncio.Task[None] | None = None

    async def start(self) -> ChatNode:
        await self.node.start()
        self._debug_task = asyncio.get_running_loop().create_task(self._debug_loop())
        return self

    async def close(self) -> None:
        if self._debug_task is not None:
            self._debug_task.cancel()
        for task in list(self._tasks):
            task.cancel()
        # every group at once: a leave waits (up to 10 s) for members that may be gone
        await asyncio.gather(*(room.group.leave() for room in list(self.rooms.values())
                               if room.group is not None and room.group.active),
                             return_exceptions=True)
        await self.node.close()

    async def __aenter__(self) -> ChatNode:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- pages

    def subscribe(self, reply: Reply) -> None:
        """`reply` hears everything from now on, after a `Hello` and the state so far."""
        reply(self.hello())
        for name, room in self.rooms.items():
            if room.joined is not None:
                reply(room.joined)
            if room.view is not None:
                reply(_view_message(name, room.view))
            for i, line in room.history.indexed():
                reply(Delivered(name, i, line.origin, line.seq, line.text))
            snapshot = self.debug(name)
            if snapshot is not None:  # an idle group's would not come again on its own
                reply(snapshot)
        self._subscribers.append(reply)

    def unsubscribe(self, reply: Reply) -> None:
        with contextlib.suppress(ValueError):
            self._subscribers.remove(reply)

    def hello(self) -> Hello:
        return Hello(
            node=self.node.id, registry=self.registry_url, orderings=sorted(ORDERINGS),
            joinable=sorted(n for n, s in ORDERINGS.items() if "join" in s.tolerates),
            multicasts=list(MULTICASTS), partitions=list(PARTITIONS),
            evs=sorted(n for n, s in ORDERINGS.items() if s.supports_evs),
            history_lines=self.history_lines)

    def _publish(self, message: ServerMessage) -> None:
        for reply in list(self._subscribers):
            reply(message)

    async def request(self, data: str | bytes, reply: Reply) -> None:
        """Carry out one page frame; any failure is one `Error` to `reply`."""
        try:
            message = decode_client(data)
        except NOT_A_MESSAGE as exc:
            reply(Error(f"bad request: {exc}"))
            return
        try:
            await self._dispatch(message, reply)
        except (AbcastError, TimeoutError, msgspec.ValidationError) as exc:
            reply(Error(f"{type(message).__name__.lower()} failed: {reason(exc)}"))
        except Exception as exc:  # a bug here must not take the node down
            log.exception("chat request %r failed", message)
            reply(Error(f"internal error: {exc!r}"))

    async def _dispatch(self, message: ClientMessage, reply: Reply) -> None:
        match message:
            case ListGroups():
                reply(await self.list_groups())
            case Create(name, ordering, multicast, partitions):
                spec = ORDERINGS.get(ordering)
                if spec is None:
                    raise ConfigError(f"unknown ordering {ordering!r}; choose one of: "
                                      f"{', '.join(sorted(ORDERINGS))}")
                options = OrderingOptions(
                    multicast=multicast, partitions=partitions,
                    detector=DetectorConfig(timeout_us=DEMO_SUSPECT_AFTER_US))
                spec.check_options(options)
                self._claim(name)
                self._spawn(self._enter(name, reply, ordering=ordering, options=options))
            case Join(name):
                self._claim(name)
                self._spawn(self._enter(name, reply))
            case Leave(name):
                group = self._group(name)
                self.rooms[name].leaving = True
                self._spawn(self._leave(name, group))
            case Send(name, text):
                await self._group(name).broadcast(text.encode())
            case Hold(name, member, delay_ms):
                self._holdable(name, member)
                self.holding.hold(name, member, delay_ms)
                self._push_debug(name, force=True)
            case Release(name, member):
                self._group(name)
                self.holding.release(name, member)
                self._push_debug(name, force=True)

    async def list_groups(self) -> Groups:
        registry = self.node.registry
        assert registry is not None
        async with asyncio.timeout(10):
            rows = await registry.list_groups()
        return Groups([GroupRow(g.group, g.ordering, g.view_id, g.leader, g.members)
                       for g in rows if g.ordering])

    # ----------------------------------------------------------------- groups

    def _claim(self, name: str) -> None:
        """Reserve a room for a group this node creates or joins (`NAME`'s rule, as the CLI's)."""
        try:
            NAME.convert(name, None, None)
        except click.BadParameter as exc:
            raise ConfigError(exc.message) from None
        if name in self.rooms:
            raise ConfigError(f"this node is already in {name!r} (or on its way)")
        self.rooms[name] = _Room(History(self.history_lines, self.history_bytes))

    def _group(self, name: str) -> Group:
        room = self.rooms.get(name)
        if room is None or room.group is None or not room.group.active:
            raise ConfigError(f"this node is not in group {name!r}")
        return room.group

    def _holdable(self, name: str, member: str) -> None:
        """A rule names another member of the group's view, or one that has a rule already
        (a held member the view dropped); anything else would be a rule for no one, and
        a page could make them without end."""
        self._group(name)
        view = self.rooms[name].view
        if member in self.holding.rules(name):
            return
        if member == self.node.id or view is None or member not in view.members:
            raise ConfigError(f"{member!r} is not another member of {name!r} (view "
                              f"{view.view_id if view else '-'}): nothing of it to hold")

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _enter(self, name: str, reply: Reply, *, ordering: str | None = None,
                     options: OrderingOptions | None = None) -> None:
        room = self.rooms[name]

        def set_state(state: bytes) -> None:
            room.history.load(state)
            if room.joined is not None:  # before that, `_enter` sends the lines so far
                # a merge or a rejoin: the window replaces the lines pages show
                self._publish(room.joined)
                self._publish_history(name, room)

        kwargs: dict[str, Any] = {
            "host": self.node, "on_deliver": lambda d: self._delivered(name, room, d),
            "on_view": lambda v: self._view(name, room, v),
            "get_state": room.history.encode, "set_state": set_state}
        try:
            if ordering is not None:
                group = await Group.create(name, ordering=ordering, options=options, **kwargs)
            else:
                group = await Group.join(name, join_timeout_s=JOIN_TIMEOUT_S, **kwargs)
        except (AbcastError, TimeoutError) as exc:
            del self.rooms[name]
            reply(Error(f"could not {'create' if ordering else 'join'} {name!r}: "
                        f"{reason(exc)}"))
            return
        except Exception as exc:
            del self.rooms[name]
            log.exception("entering %s failed", name)
            reply(Error(f"could not enter {name!r}: {exc!r}"))
            return
        room.group = group
        opts = group.options or OrderingOptions()
        room.joined = Joined(name, group.ordering, opts.multicast or "reliable", opts.partitions)
        self._publish(room.joined)
        if room.view is not None:
            self._publish(_view_message(name, room.view))
        self._publish_history(name, room)
        self._push_debug(name, force=True)

    async def _leave(self, name: str, group: Group) -> None:
        try:
            await group.leave()
        finally:
            self._gone(name, "left")

    def _gone(self, name: str, how: str) -> None:
        if self.rooms.pop(name, None) is not None:
            for member in self.holding.rules(name):
                self.holding.release(name, member)
            self._publish(Left(name, how))

    def _publish_history(self, name: str, room: _Room) -> None:
        for i, line in room.history.indexed():
            self._publish(Delivered(name, i, line.origin, line.seq, line.text))

    def _delivered(self, name: str, room: _Room, delivery: Deliver) -> None:
        if delivery.stage is Stage.FINAL:
            text = delivery.payload.decode(errors="replace")
            line = _Line(delivery.origin, delivery.seq, text)
            index = room.history.add(line)
            if room.joined is not None:  # before that, `_enter` sends the lines so far
                self._publish(Delivered(name, index, line.origin, line.seq, line.text))

    def _view(self, name: str, room: _Room, view: View) -> None:
        me = self.node.id
        if me not in view.members:
            how = "left" if room.leaving else "removed"
            asyncio.get_running_loop().call_soon(self._gone, name, how)
            return
        room.view = view
        if room.joined is not None:
            self._publish(_view_message(name, view))

    # ----------------------------------------------------------------- debug panel

    async def _debug_loop(self) -> None:
        while True:
            await asyncio.sleep(DEBUG_EVERY_S)
            for name in list(self.rooms):
                self._push_debug(name)

    def debug(self, name: str) -> Debug | None:
        room = self.rooms.get(name)
        if room is None or room.group is None or not room.group.active:
            return None
        return Debug(name, to_builtins(room.group.inspect()), self.holding.rules(name),
                     self.holding.held(name), dataclasses.asdict(self.holding.stats))

    def _push_debug(self, name: str, *, force: bool = False) -> None:
        message = self.debug(name)
        if message is None:
            return
        room = self.rooms[name]
        data = msgspec.json.encode(message)
        if force or data != room.last_debug:
            room.last_debug = data
            self._publish(message)


def reason(exc: BaseException) -> str:
    """What went wrong, for a person: the message, else "timed out" or the exception's name."""
    if str(exc):
        return str(exc)
    return "timed out" if isinstance(exc, TimeoutError) else type(exc).__name__


def _view_message(name: str, view: View) -> ViewChanged:
    return ViewChanged(name, view.view_id, list(view.members), view.leader)
