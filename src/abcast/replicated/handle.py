"""The async facade: a replicated object on top of a running group (abcast.Group).

Rules: `ReplicatedHandle` wraps a `Replica` and a group. Calling a @write method
validates the call, broadcasts the operation at once and returns an awaitable that
resolves — with the method's return value, or its exception — once the operation has
been executed on this node's copy; calling a @read method returns an awaitable that
first waits until every write this node issued before it has executed here, then runs
the method on the local copy; `wait_until(predicate)` waits until the predicate holds of
a copy of the object (what a read returns, and the predicate, never touch this node's
copy itself). Deliveries reach the replica either through the group's
`on_deliver` hook (`Group(..., on_deliver=handle.on_deliver)`, then `handle.bind(group)`
— deliveries are applied synchronously, which a state-transfer snapshot will need) or,
for a group made without one, from a task that reads `group.deliveries()` (`attach`;
one such object per group and node, a second is refused: abcast.replicated._app).
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
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from abcast.replicated._app import GroupApp, bound_to
from abcast.replicated._declare import READ, refuse_shadowed, spec_of
from abcast.replicated._group import (
    GroupLike,
    refuse_dynamic,
    require_total_order,
    total_orderings,
)
from abcast.replicated.replica import Replica

if TYPE_CHECKING:
    from abcast.replicated.objects import ObjectHandle

__all__ = ["GroupLike", "ReplicatedHandle", "attach", "require_total_order", "total_orderings"]

T = TypeVar("T")


class ReplicatedHandle(GroupApp[Replica[T]]):
    """`acc = await attach(group, Account)`; `await acc.deposit(300)`; `await acc.get()`."""

    def __init__(self, obj: T) -> None:
        refuse_shadowed(spec_of(obj), type(self))
        super().__init__(Replica(obj), "replicated object")

    @property
    def replica(self) -> Replica[T]:
        return self.core

    @property
    def local(self) -> T:
        """This node's copy (read it; never change it outside a @write)."""
        return self.core.obj

    @property
    def applied(self) -> int:
        """Operations executed on this copy so far."""
        return self.core.applied

    async def __aenter__(self) -> ReplicatedHandle[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls -----------------------------------------------------------------------------------
    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_"):
            raise AttributeError(name)
        entry = spec_of(self.core.obj).methods.get(name)
        if entry is None:
            raise AttributeError(
                f"{type(self.core.obj).__name__} has no @write or @read method {name!r}")
        if entry.kind == READ:
            return lambda *args, **kwargs: self.call_read(name, *args, **kwargs)
        return lambda *args, **kwargs: self.call_write(name, *args, **kwargs)

    def call_write(self, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Broadcast a write now; the future resolves once it executed on this copy."""
        payload = self.core.invocation(method, args, kwargs)
        seq, future = self.submit(payload)
        self.core.issued_as(seq)
        return future

    async def call_read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run a read on this copy once every write this node issued has executed here."""
        await self._wait(self.core.caught_up)
        return self.core.read(method, args, kwargs)

    async def wait_until(self, predicate: Callable[[T], bool]) -> None:
        """Wait until `predicate(copy)` holds, re-checked after every operation executed
        here. The predicate is given a copy of this node's object (`Replica.copy`, made
        for each check), as a read's result is: one that changes what it is given
        changes nothing here."""
        await self._wait(lambda: predicate(self.core.copy()))


@overload
async def attach(group: GroupLike, cls: type[T], *args: Any, name: None = None,
                 **kwargs: Any) -> ReplicatedHandle[T]: ...


@overload
async def attach(group: GroupLike, cls: type[T], *args: Any, name: str,
                 **kwargs: Any) -> ObjectHandle: ...


async def attach(group: GroupLike, cls: type[T], *args: Any, name: str | None = None,
                 **kwargs: Any) -> ReplicatedHandle[T] | ObjectHandle:
    """A replica of `cls(*args, **kwargs)` on an open static group made without
    on_deliver; it applies the group's deliveries from a task until `close()`. With
    `name=`, a named object among the group's others (abcast.replicated.objects): created
    in the group's order, found by the other members with `lookup(group, name)`. A
    dynamic group (Group.create/join) is refused with LocalProtocolError unless its
    `app=` holds the objects: its joiners would get no state."""
    spec_of(cls)  # refuse undecorated classes before building anything
    if name is not None:
        from abcast.replicated.objects import attach_named

        return await attach_named(group, cls, name, *args, **kwargs)
    if bound_to(group) is None:  # (beside another, bind says why it cannot be)
        refuse_dynamic(group, "a replicated object")
    handle = ReplicatedHandle(cls(*args, **kwargs))
    handle.bind(group)
    handle.start_reading()
    return handle
