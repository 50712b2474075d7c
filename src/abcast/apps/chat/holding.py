"""`HoldingTransport`: the chat demo's hold/release control — a filter on inbound frames.

Rules: it wraps any transport and sits between it and the node's frame handler. With no
rule set every frame passes straight through (one dict lookup). A rule names a group and
a member: `hold(group, member)` keeps every frame that member sends for that group, in
arrival order, until `release(group, member)` hands them all to the node at once, in that
order; `hold(group, member, delay_ms=N)` lets each such frame through N ms after it
arrived (still in order; releasing the rule lets what waits through at once). A new rule
for the pair applies to what already waits: a hold keeps it, a delay lets each frame
through N ms after it arrived (frames a hold kept that long ago go at once). The frames
are whatever the member's stack sent — data, acks, retransmissions, heartbeats — so a
hold is a one-way cut of that link for that group, and a crash-tolerant ordering's failure
detector on this node suspects the member once a hold outlasts its timeout. Frames this
node cannot decode pass through untouched (the node refuses them as always). Nothing here
knows a protocol: the cores see late packets, which is exactly what the demo shows.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import ClassVar

from abcast.codec import decode_envelope
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.transport.base import FrameHandler, Link, Transport
from abcast.transport.wrapper import WrappingTransport

Key = tuple[str, str]  # (group, member)


class HoldingTransport(WrappingTransport):
    """`HoldingTransport(inner)`; then `hold`, `release`, `held` on the running node."""

    scheme: ClassVar[str] = "hold"

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self._on_frame: FrameHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: (group, member) → delay in ms (0: hold until released)
        self._rules: dict[Key, int] = {}
        #: (group, member) → (arrival time, link, frame), in arrival order
        self._queues: dict[Key, deque[tuple[float, Link, bytes]]] = {}
        self._timers: dict[Key, asyncio.TimerHandle] = {}

    # ----------------------------------------------------------------- the control

    def hold(self, group: str, member: str, delay_ms: int = 0) -> None:
        """Hold `member`'s frames for `group` (delay_ms=0) or delay each by `delay_ms`."""
        if delay_ms < 0:
            raise LocalProtocolError(f"delay_ms must be >= 0, got {delay_ms}")
        key = (group, member)
        self._rules[key] = delay_ms
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._schedule(key)  # what already waits, under the new rule

    def release(self, group: str, member: str) -> int:
        """Drop the rule and hand over what it kept, in arrival order; returns how many."""
        key = (group, member)
        self._rules.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        queue = self._queues.pop(key, deque())
        for _, link, data in queue:
            self._pass(link, data)
        return len(queue)

    def rules(self, group: str) -> dict[str, int]:
        """member → delay_ms (0: held) for `group`."""
        return {m: d for (g, m), d in self._rules.items() if g == group}

    def held(self, group: str) -> dict[str, int]:
        """member → frames waiting here for `group`."""
        return {m: len(q) for (g, m), q in self._queues.items() if g == group and q}

    # ----------------------------------------------------------------- inbound

    def _filter(self, link: Link, data: bytes) -> None:
        if not self._rules:
            self._pass(link, data)
            return
        try:
            env = decode_envelope(data)
        except RemoteProtocolError:
            self._pass(link, data)  # the node refuses it, as without the filter
            return
        key = (env.group, env.sender)
        delay_ms = self._rules.get(key)
        queue = self._queues.get(key)
        if delay_ms is None and not queue:
            self._pass(link, data)
            return
        loop = self._loop
        assert loop is not None
        self._queues.setdefault(key, deque()).append((loop.time(), link, data))
        if key not in self._timers:
            self._schedule(key)

    def _schedule(self, key: Key) -> None:
        """Wake `_due` when the oldest waiting frame of a delayed pair is due."""
        queue, delay_ms, loop = self._queues.get(key), self._rules.get(key), self._loop
        if queue and delay_ms and loop is not None:
            self._timers[key] = loop.call_at(queue[0][0] + delay_ms / 1000, self._due, key)

    def _due(self, key: Key) -> None:
        self._timers.pop(key, None)
        queue, delay_ms, loop = self._queues.get(key), self._rules.get(key), self._loop
        if not queue or not delay_ms or loop is None:
            return  # now held: `release` hands them over
        now = loop.time()
        while queue and queue[0][0] + delay_ms / 1000 <= now:
            _, link, data = queue.popleft()
            self._pass(link, data)
        if queue:
            self._schedule(key)
        else:
            del self._queues[key]

    def _pass(self, link: Link, data: bytes) -> None:
        if self._on_frame is not None:
            self._on_frame(link, data)

    # ----------------------------------------------------------------- the transport

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        self._on_frame = on_frame
        self._loop = asyncio.get_running_loop()
        return await self.inner.start(node, self._filter)

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._queues.clear()
        self._rules.clear()
        self._on_frame = None
        await self.inner.close()
