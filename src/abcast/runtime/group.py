"""`Group`: the application's handle on one process group — broadcast, and iterate over
deliveries in the order the group's ordering guarantees.

Rules: a group lives on a `Node` (its own, made from `transport`/`registry`/`node`, or a
shared one passed as `host`, since one node may host several groups). Its members are
fixed when it opens: either given (`node="n1", peers={"n2": "tcp://…"}`, for tests and
groups spanning machines by hand) or learned from the registry (join, then wait until
the group's declared `size` have joined). The stack is `build_stack(node, group,
ordering, view, options)`, so any registered ordering works by name. Deliveries go to
`on_deliver` if given (called on the loop, in delivery order; it must not block), else
to a queue read by `deliveries()`. `broadcast` waits for the transport's backpressure
(`drain`) first; `broadcast_nowait` does not. Membership changes after open belong to
the group layer, not here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Final

from abcast.effects import Deliver
from abcast.errors import ConfigError, LocalProtocolError
from abcast.ids import MsgId, NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.registry.client import RegistryClient
from abcast.runtime.driver import GroupDriver
from abcast.runtime.node import Node
from abcast.trace.recorder import TraceRecorder
from abcast.transport import Transport

log: Final = logging.getLogger("abcast.runtime")

DEFAULT_TRANSPORT: Final = "tcp://127.0.0.1:0"
LEAVE_TIMEOUT_S: Final = 2.0


class Group:
    """`async with Group("bank", ordering="sequencer", registry="tcp://127.0.0.1:7400",
    size=3) as g: await g.broadcast(b"deposit 300"); async for m in g.deliveries(): …`"""

    def __init__(
        self,
        name: str,
        *,
        ordering: str = "fifo",
        transport: str | Transport | None = None,
        registry: str | RegistryClient | None = None,
        node: NodeId | None = None,
        peers: Mapping[NodeId, str] | None = None,
        size: int | None = None,
        options: OrderingOptions | None = None,
        host: Node | None = None,
        recorder: TraceRecorder | None = None,
        wan: str | None = None,
        on_deliver: Callable[[Deliver], None] | None = None,
        join_timeout_s: float | None = None,
    ) -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise ConfigError(f"group name must be a 1..128 char string, got {name!r}")
        get_ordering(ordering)  # unknown names fail here, with the list of known ones
        if host is not None and any(
            x is not None for x in (transport, registry, node, recorder, wan)
        ):
            raise ConfigError("give either host= (a running Node) or transport/registry/"
                              "node/recorder/wan for a node of the group's own, not both")
        if size is not None and size < 1:
            raise ConfigError(f"size must be >= 1, got {size}")
        if peers is not None:
            if size is not None and size != len(peers) + 1:
                raise ConfigError(f"size={size} but peers name {len(peers) + 1} members")
        elif registry is None and (host is None or host.registry is None):
            raise ConfigError(f"group {name!r} needs peers={{node: url}} or a registry")
        if host is None and registry is None and node is None:
            raise ConfigError("a group without a registry needs node= (this node's id)")
        self.name = name
        self.ordering = ordering
        self.options = options
        self.size = size
        self._peers = dict(peers) if peers is not None else None
        self._user_hook = on_deliver
        self._join_timeout_s = join_timeout_s
        self._own_host = host is None
        self._host = host or Node(
            transport if transport is not None else DEFAULT_TRANSPORT,
            node=node, registry=registry, recorder=recorder, wan=wan,
        )
        self._driver: GroupDriver | None = None
        self._registered = False
        self._queue: asyncio.Queue[Deliver | None] | None = None
        self._state = "new"

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> Group:
        if self._state != "new":
            raise LocalProtocolError(f"group {self.name!r} already {self._state}")
        self._state = "opening"
        host = self._host
        try:
            if self._own_host:
                await host.start()
            host.reserve(self.name)
            async with asyncio.timeout(self._join_timeout_s):
                members = await self._members(host)
            host.add_peers(members)
            view = View(1, tuple(members))
            stack = build_stack(host.id, self.name, self.ordering, view, self.options)
            if self._user_hook is None:
                self._queue = asyncio.Queue()
            self._driver = GroupDriver(host, stack, self._on_deliver)
            host.attach(self._driver)
        except BaseException:
            host.unreserve(self.name)
            await self._leave_registry()
            if self._own_host:
                await host.close()
            self._state = "closed"
            raise
        self._state = "open"
        return self

    async def close(self) -> None:
        if self._state in ("closed", "new"):
            self._state = "closed"
            return
        self._state = "closed"
        self._host.detach(self.name)
        if self._queue is not None:
            self._queue.put_nowait(None)
        await self._leave_registry()
        if self._own_host:
            await self._host.close()

    async def __aenter__(self) -> Group:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _members(self, host: Node) -> dict[NodeId, str]:
        if self._peers is not None:
            return {host.id: host.address, **self._peers}
        registry = host.registry
        if registry is None:
            raise ConfigError(f"group {self.name!r} needs peers or a registry")
        self._registered = True
        info = await registry.join(self.name, host.address, self.size)
        if info.size is None:
            raise ConfigError(
                f"group {self.name!r} has no declared size yet: pass size=N (the first "
                "member to join fixes it; the view needs its members up front)"
            )
        self.size = info.size
        if len(info.members) < info.size:
            log.info("%s waits for %d members of %s (has %d)", host.id, info.size,
                     self.name, len(info.members))
            info = await registry.wait_members(self.name, info.size)
        return dict(info.members)

    async def _leave_registry(self) -> None:
        registry = self._host.registry
        if not self._registered or registry is None or not registry.connected:
            return  # a dead registry must not hold up a shutdown
        self._registered = False
        with contextlib.suppress(Exception):
            async with asyncio.timeout(LEAVE_TIMEOUT_S):
                await registry.leave(self.name)

    # ----------------------------------------------------------------- the API

    @property
    def host(self) -> Node:
        return self._host

    @property
    def node(self) -> NodeId:
        """This node's id."""
        return self._host.id

    @property
    def view(self) -> View:
        return self._require_driver().stack.view

    @property
    def members(self) -> tuple[NodeId, ...]:
        return self.view.members

    @property
    def leader(self) -> NodeId:
        return self.view.leader

    @property
    def driver(self) -> GroupDriver:
        return self._require_driver()

    @property
    def delivered(self) -> int:
        """Messages delivered (final stage) so far on this node."""
        return self._driver.delivered if self._driver is not None else 0

    async def broadcast(self, payload: bytes) -> MsgId:
        """Broadcast `payload` to the group (this node delivers it too, in order)."""
        driver = self._require_driver()
        await self._host.transport.drain()
        return MsgId(self._host.id, driver.broadcast(bytes(payload)))

    def broadcast_nowait(self, payload: bytes) -> MsgId:
        """Broadcast without waiting for backpressure (callbacks, closed loops)."""
        return MsgId(self._host.id, self._require_driver().broadcast(bytes(payload)))

    async def deliveries(self) -> AsyncIterator[Deliver]:
        """Every delivery, in delivery order, until the group closes."""
        queue = self._queue
        if queue is None:
            raise LocalProtocolError(
                "deliveries() needs an open group made without on_deliver= "
                "(with on_deliver, deliveries go to that callback)"
            )
        while True:
            item = await queue.get()
            if item is None:
                queue.put_nowait(None)  # let every other iterator end too
                return
            yield item

    def _on_deliver(self, delivery: Deliver) -> None:
        if self._user_hook is not None:
            self._user_hook(delivery)
        elif self._queue is not None:
            self._queue.put_nowait(delivery)

    def _require_driver(self) -> GroupDriver:
        if self._driver is None or self._state != "open":
            raise LocalProtocolError(f"group {self.name!r} is {self._state}, not open")
        return self._driver
