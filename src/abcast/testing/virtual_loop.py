"""Driving a `GroupDriver` without asyncio or sockets: a virtual event loop on exact
integer µs, its clock, and a host whose frames go to an in-memory network.

One definition for the driver tests (the lazy timers, the per-step backpressure, the
delivered batches): `VirtualLoop` stands in for the driver's loop (`call_later`,
`call_soon`; nothing runs until the test says so), `VirtualClock` is its time, and
`NetHost` is the `Host` a driver needs, appending each frame to `links[(src, dst)]`
(FIFO per link) for the test to hand to the receiving driver when it chooses.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from abcast.effects import Transmit
from abcast.ids import NodeId
from abcast.runtime.loop import MonotonicClock
from abcast.trace.recorder import TraceRecorder


class VirtualHandle:
    """What `call_later`/`call_soon` return: a handle that can be cancelled."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualLoop:
    """`call_later` on exact integer µs; `advance_to` runs what falls due, in order,
    `fire_next` the earliest; `call_soon` only collects (`soon`)."""

    def __init__(self) -> None:
        self.now = 0
        self.calls = 0  # call_later calls
        self._order = itertools.count()
        self._queue: list[tuple[int, int, VirtualHandle, Callable[..., None],
                                tuple[Any, ...]]] = []
        self.soon: list[Callable[[], None]] = []

    def call_later(self, delay_s: float, callback: Callable[..., None],
                   *args: Any) -> VirtualHandle:
        self.calls += 1
        handle = VirtualHandle()
        when = self.now + round(delay_s * 1_000_000)
        heapq.heappush(self._queue, (when, next(self._order), handle, callback, args))
        return handle

    def call_soon(self, callback: Callable[[], None]) -> VirtualHandle:
        self.soon.append(callback)
        return VirtualHandle()

    def advance_to(self, target: int) -> None:
        while self._queue and self._queue[0][0] <= target:
            when, _, handle, callback, args = heapq.heappop(self._queue)
            self.now = max(self.now, when)
            if not handle.cancelled:
                callback(*args)
        self.now = target

    def fire_next(self) -> bool:
        """Run the earliest live timer (the clock jumps to it); False when none is left."""
        while self._queue:
            when, _, handle, callback, args = heapq.heappop(self._queue)
            if not handle.cancelled:
                self.now = max(self.now, when)
                callback(*args)
                return True
        return False

    def pending(self) -> int:
        return sum(not entry[2].cancelled for entry in self._queue)


class VirtualClock(MonotonicClock):
    """The virtual loop's time."""

    __slots__ = ("_loop",)

    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self._loop = loop

    def now_us(self) -> int:
        return self._loop.now

    def at_least(self, at: int) -> int:
        return max(at, self._loop.now)


class NetHost:
    """A driver's host on the in-memory network: `transmit` appends to
    `links[(self.id, dst)]`; a run of packets is one append per packet."""

    def __init__(self, node: NodeId, loop: VirtualLoop,
                 links: dict[tuple[NodeId, NodeId], list[bytes]] | None = None,
                 recorder: TraceRecorder | None = None) -> None:
        self.id = node
        self.clock: MonotonicClock = VirtualClock(loop)
        self.recorder = recorder
        self.links: dict[tuple[NodeId, NodeId], list[bytes]] = {} if links is None else links

    def transmit(self, dst: NodeId, data: bytes) -> None:
        self.links.setdefault((self.id, dst), []).append(data)

    def transmit_many(self, dsts: tuple[NodeId, ...], data: bytes) -> int:
        for dst in dsts:
            self.transmit(dst, data)
        return len(dsts)

    def transmit_run(self, run: list[Transmit]) -> int:
        for transmit in run:
            self.transmit_many(transmit.to, transmit.data)
        return sum(len(transmit.to) for transmit in run)
