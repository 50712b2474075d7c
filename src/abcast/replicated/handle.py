"""The async facade: a replicated object on top of a running group (abcast.Group).

Rules: `ReplicatedHandle` wraps a `Replica` and a group. Calling a @write method
validates the call, broadcasts the operation at once and returns an awaitable that
resolves — with the method's return value, or its exception — once the operation has
been executed on this node's copy; calling a @read method returns an awaitable that
first waits until every write this node issued before it has executed here, then runs
the method on the local copy. Deliveries reach the replica either through the group's
`on_deliver` hook (`Group(..., on_deliver=handle.on_deliver)`, then `handle.bind(group)`
— deliveries are applied synchronously, which a state-transfer snapshot will need) or,
for a group made without one, from a task that reads `group.deliveries()` (`attach`).
A delivery that is not an operation of this class is logged and counted, never raised
into the group's driver.

A handle is also a group application (`Group.create/join(..., app=handle)`): it binds
itself, applies deliveries synchronously, and answers `get_state`/`set_state`, so the
object's state moves to every joiner at the exact point of the group's order where it
was admitted.

It needs from the group only `node`, `broadcast_nowait(payload) -> MsgId` and, for
`attach`, `deliveries()`; when the group also names its `ordering` (and `options`), as
abcast.Group does, binding refuses with ConfigError an ordering that does not claim total
order — copies applying writes in different orders diverge silently. Nothing here knows
transports or the wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, overload

from abcast.effects import Deliver, Stage
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.replicated._declare import READ, spec_of
from abcast.replicated._group import GroupLike, require_total_order, total_orderings
from abcast.replicated.replica import Outcome, Replica

if TYPE_CHECKING:
    from abcast.replicated.objects import ObjectHandle

__all__ = ["GroupLike", "ReplicatedHandle", "attach", "require_total_order", "total_orderings"]

log: Final = logging.getLogger(__name__)

T = TypeVar("T")


class ReplicatedHandle(Generic[T]):
    """`acc = await attach(group, Account)`; `await acc.deposit(300)`; `await acc.get()`."""

    def __init__(self, obj: T) -> None:
        self._replica: Replica[T] = Replica(obj)
        self._group: GroupLike | None = None
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._early: dict[int, Outcome] = {}  # outcomes that came before their future
        self._changed: asyncio.Event | None = None
        self._reader: asyncio.Task[None] | None = None
        self.bad_deliveries = 0

    # -- wiring ------------------------------------------------------------------------------
    @property
    def replica(self) -> Replica[T]:
        return self._replica

    @property
    def local(self) -> T:
        """This node's copy (read it; never change it outside a @write)."""
        return self._replica.obj

    @property
    def applied(self) -> int:
        """Operations executed on this copy so far."""
        return self._replica.applied

    def bind(self, group: GroupLike) -> None:
        """Use `group` (open, with this handle's `on_deliver` as its delivery hook)."""
        if self._group is not None:
            raise LocalProtocolError("this replicated object is already bound to a group")
        ordering = getattr(group, "ordering", None)
        if isinstance(ordering, str):
            require_total_order(ordering, getattr(group, "options", None))
        self._group = group
        self._replica.node = group.node

    def get_state(self) -> bytes:
        """The copy's state, for a joiner (the group's snapshot hook)."""
        return self._replica.state()

    def set_state(self, state: bytes) -> None:
        """Replace the copy's state with a member's snapshot (this node just joined)."""
        self._replica.load(state)
        if self._changed is not None:
            self._changed.set()

    def start_reading(self) -> None:
        """Apply the group's deliveries from a task (a group made without on_deliver)."""
        group = self._require_group()
        if self._reader is not None:
            raise LocalProtocolError("this replicated object already reads its group")
        self._reader = asyncio.get_running_loop().create_task(self._read_all(group))

    async def _read_all(self, group: GroupLike) -> None:
        async for delivery in group.deliveries():
            self.on_deliver(delivery)

    async def close(self) -> None:
        """Stop applying deliveries; pending calls fail with LocalProtocolError."""
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for future in self._futures.values():
            if not future.done():
                future.set_exception(LocalProtocolError("replicated object closed"))
        self._futures.clear()

    async def __aenter__(self) -> ReplicatedHandle[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _require_group(self) -> GroupLike:
        if self._group is None:
            raise LocalProtocolError("bind the replicated object to an open group first")
        return self._group

    # -- deliveries ----------------------------------------------------------------------------
    def on_deliver(self, delivery: Deliver) -> None:
        """The group's delivery hook: execute the operation, resolve our caller."""
        if delivery.stage is not Stage.FINAL:
            return
        try:
            outcome = self._replica.apply(delivery.origin, delivery.seq, delivery.payload)
        except RemoteProtocolError as exc:
            self.bad_deliveries += 1
            log.warning("ignored %s#%d: %s", delivery.origin, delivery.seq, exc)
            return
        if outcome is not None:
            future = self._futures.pop(outcome.seq, None)
            if future is None:
                self._early[outcome.seq] = outcome
            elif not future.done():
                _settle(future, outcome)
        if self._changed is not None:
            self._changed.set()

    # -- calls -----------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        entry = spec_of(self._replica.obj).methods.get(name)
        if entry is None:
            raise AttributeError(
                f"{type(self._replica.obj).__name__} has no @write or @read method {name!r}")
        if entry.kind == READ:
            return lambda *args, **kwargs: self.call_read(name, *args, **kwargs)
        return lambda *args, **kwargs: self.call_write(name, *args, **kwargs)

    def call_write(self, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Broadcast a write now; the future resolves once it executed on this copy."""
        group = self._require_group()
        payload = self._replica.invocation(method, args, kwargs)
        loop = asyncio.get_running_loop()
        mid = group.broadcast_nowait(payload)
        self._replica.issued_as(mid.seq)
        future: asyncio.Future[Any] = loop.create_future()
        early = self._early.pop(mid.seq, None)
        if early is not None:
            _settle(future, early)
        else:
            self._futures[mid.seq] = future
        return future

    async def call_read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a read on this copy once every write this node issued has executed here."""
        await self.wait_until(lambda _obj: self._replica.caught_up())
        return self._replica.read(method, args, kwargs)

    async def wait_until(self, predicate: Callable[[T], bool]) -> None:
        """Wait until `predicate(local copy)` holds; re-checked after every operation."""
        if self._changed is None:
            self._changed = asyncio.Event()
        while not predicate(self._replica.obj):
            self._changed.clear()
            await self._changed.wait()


def _settle(future: asyncio.Future[Any], outcome: Outcome) -> None:
    if outcome.error is not None:
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome.value)


@overload
async def attach(group: GroupLike, cls: type[T], *args: Any, name: None = None,
                 **kwargs: Any) -> ReplicatedHandle[T]: ...


@overload
async def attach(group: GroupLike, cls: type[T], *args: Any, name: str,
                 **kwargs: Any) -> ObjectHandle: ...


async def attach(group: GroupLike, cls: type[T], *args: Any, name: str | None = None,
                 **kwargs: Any) -> ReplicatedHandle[T] | ObjectHandle:
    """A replica of `cls(*args, **kwargs)` on an open group made without on_deliver; it
    applies the group's deliveries from a task until `close()`. With `name=`, a named
    object among the group's others (abcast.replicated.objects): created in the group's
    order, found by the other members with `lookup(group, name)`."""
    spec_of(cls)  # refuse undecorated classes before building anything
    if name is not None:
        from abcast.replicated.objects import attach_named

        return await attach_named(group, cls, name, *args, **kwargs)
    handle = ReplicatedHandle(cls(*args, **kwargs))
    handle.bind(group)
    handle.start_reading()
    return handle
