"""Named replicated objects on a running group: `attach(group, Account, name="alice")`,
`lookup(group, "alice")`, `await handle.drop()`.

Rules: a group's named objects live in one `Objects` (the asyncio facade of
`Directory`): the group's application when given as `app=` (then every object's state
moves to a joiner in the group's snapshot), or, for a group made without one, made by
the first `attach(..., name=…)` and fed from a task reading `group.deliveries()`.
`attach` broadcasts a create and returns the object's handle once the create has
executed here — or raises `ObjectExistsError`, as every member decides at that point of the
order. `lookup` is local and immediate: the handle of an object whose create has
executed here, else `NoSuchObjectError` (`await objects.wait_for(name)` waits for one that is
on its way). On an `ObjectHandle`, a @write broadcasts and resolves once executed here;
a @read waits only until this node's own writes *to that object* have executed here.
Outcomes of this node's operations are matched to their callers by the group's seq.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, Final

from abcast.effects import Deliver, Stage
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.replicated._declare import READ, spec_of
from abcast.replicated._group import GroupLike, require_total_order
from abcast.replicated.directory import (
    Directory,
    encode_call,
    encode_create,
    encode_drop,
)
from abcast.replicated.replica import Outcome

log: Final = logging.getLogger(__name__)

#: the Objects serving each open group (a group has at most one)
_BY_GROUP: weakref.WeakKeyDictionary[Any, Objects] = weakref.WeakKeyDictionary()


class Objects:
    """A group's named objects: `Group.join("bank", registry=url, app=Objects())`."""

    def __init__(self) -> None:
        self.directory = Directory()
        self._group: GroupLike | None = None
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._early: dict[int, Outcome] = {}
        self._changed: asyncio.Event | None = None
        self._reader: asyncio.Task[None] | None = None
        self.bad_deliveries = 0

    # -- the group's application ---------------------------------------------------------
    def bind(self, group: GroupLike) -> None:
        if self._group is not None:
            raise LocalProtocolError("these objects are already bound to a group")
        if _BY_GROUP.get(group) is not None:
            raise LocalProtocolError("this group already has its named objects")
        ordering = getattr(group, "ordering", None)
        if isinstance(ordering, str):
            require_total_order(ordering, getattr(group, "options", None))
        self._group = group
        self.directory.node = group.node
        _BY_GROUP[group] = self

    def on_deliver(self, delivery: Deliver) -> None:
        if delivery.stage is not Stage.FINAL:
            return
        try:
            outcome = self.directory.apply(delivery.origin, delivery.seq, delivery.payload)
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

    def get_state(self) -> bytes:
        return self.directory.state()

    def set_state(self, state: bytes) -> None:
        self.directory.load(state)
        if self._changed is not None:
            self._changed.set()

    def start_reading(self) -> None:
        group = self._require_group()
        if self._reader is None:
            self._reader = asyncio.get_running_loop().create_task(self._read_all(group))

    async def _read_all(self, group: GroupLike) -> None:
        async for delivery in group.deliveries():
            self.on_deliver(delivery)

    async def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
            self._reader = None
        for future in self._futures.values():
            if not future.done():
                future.set_exception(LocalProtocolError("replicated objects closed"))
        self._futures.clear()

    def _require_group(self) -> GroupLike:
        if self._group is None:
            raise LocalProtocolError("bind the objects to an open group first")
        return self._group

    # -- operations --------------------------------------------------------------------
    def submit(self, payload: bytes) -> tuple[int, asyncio.Future[Any]]:
        """Broadcast one operation; (its seq, a future for its outcome here)."""
        group = self._require_group()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        seq = group.broadcast_nowait(payload).seq
        early = self._early.pop(seq, None)
        if early is not None:
            _settle(future, early)
        else:
            self._futures[seq] = future
        return seq, future

    async def create(self, name: str, cls: type, *args: Any, **kwargs: Any) -> ObjectHandle:
        _seq, future = self.submit(encode_create(name, cls, args, kwargs))
        await future
        return ObjectHandle(self, name)

    def lookup(self, name: str) -> ObjectHandle:
        self.directory.replica(name)  # NoSuchObjectError unless it is here
        return ObjectHandle(self, name)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        while not predicate():
            self._changed.clear()
            await self._changed.wait()

    async def wait_for(self, name: str) -> ObjectHandle:
        """The handle of `name` once its create has executed here."""
        await self.wait_until(lambda: self.directory.has(name))
        return self.lookup(name)


class ObjectHandle:
    """One named object: `await acc.deposit(5)`, `await acc.get()`, `await acc.drop()`."""

    def __init__(self, objects: Objects, name: str) -> None:
        self._objects = objects
        self.name = name

    @property
    def local(self) -> Any:
        """This node's copy (read it; never change it outside a @write)."""
        return self._objects.directory.replica(self.name).obj

    def __getattr__(self, method: str) -> Callable[..., Awaitable[Any]]:
        if method.startswith("_"):
            raise AttributeError(method)
        entry = spec_of(self.local).methods.get(method)
        if entry is None:
            raise AttributeError(f"{type(self.local).__name__} has no @write or @read "
                                 f"method {method!r}")
        if entry.kind == READ:
            return lambda *args, **kwargs: self.call_read(method, *args, **kwargs)
        return lambda *args, **kwargs: self.call_write(method, *args, **kwargs)

    def call_write(self, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
        replica = self._objects.directory.replica(self.name)
        payload = encode_call(self.name, replica.invocation(method, args, kwargs))
        seq, future = self._objects.submit(payload)
        replica.issued_as(seq)
        return future

    async def call_read(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Once this node's writes to this object have executed here."""
        directory = self._objects.directory
        await self._objects.wait_until(
            lambda: not directory.has(self.name) or directory.replica(self.name).caught_up())
        return directory.replica(self.name).read(method, args, kwargs)

    async def drop(self) -> None:
        """Remove the object from the group (ordered: later writes to it fail)."""
        _seq, future = self._objects.submit(encode_drop(self.name))
        await future


def _settle(future: asyncio.Future[Any], outcome: Outcome) -> None:
    if outcome.error is not None:
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome.value)


def objects_of(group: GroupLike) -> Objects:
    """The group's named objects: its `app=` Objects, or one made now that reads the
    group's deliveries (a group made without on_deliver/app)."""
    objects = _BY_GROUP.get(group)
    if objects is None:
        objects = Objects()
        objects.bind(group)
        objects.start_reading()
    return objects


async def attach_named(group: GroupLike, cls: type, name: str, *args: Any,
                       **kwargs: Any) -> ObjectHandle:
    """Create object `name` of `cls(*args, **kwargs)` in the group (ObjectExistsError if the
    group ordered another create of that name first)."""
    spec_of(cls)
    return await objects_of(group).create(name, cls, *args, **kwargs)


def lookup(group: GroupLike, name: str) -> ObjectHandle:
    """The handle of object `name`, created by any member (NoSuchObjectError if its create has
    not executed here)."""
    objects = _BY_GROUP.get(group)
    if objects is None:
        raise _no_objects(name)
    return objects.lookup(name)


def _no_objects(name: str) -> LocalProtocolError:
    from abcast.replicated.directory import NoSuchObjectError

    return NoSuchObjectError(f"this group has no replicated object {name!r}: no named object "
                        "was created or attached on it here (give the group app=Objects())")
