"""Named replicated objects on a running group: `attach(group, Account, name="alice")`,
`lookup(group, "alice")`, `await handle.drop()`.

Rules: a group's named objects live in one `Objects` (the asyncio facade of
`Directory`): the group's application when given as `app=` (then every object's state
moves to a joiner in the group's snapshot), or, for a static group made without one,
made by the first `attach(..., name=…)` and fed from a task reading
`group.deliveries()` (a dynamic group without it is refused: its joiners would get no
objects).
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
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from abcast.errors import LocalProtocolError
from abcast.replicated._app import GroupApp, bound_to
from abcast.replicated._declare import READ, refuse_shadowed, spec_of
from abcast.replicated._group import GroupLike, refuse_dynamic
from abcast.replicated.directory import (
    Directory,
    encode_call,
    encode_create,
    encode_drop,
)


class Objects(GroupApp[Directory]):
    """A group's named objects: `Group.join("bank", registry=url, app=Objects())`."""

    def __init__(self) -> None:
        super().__init__(Directory(), "replicated objects")

    @property
    def directory(self) -> Directory:
        return self.core

    async def create(self, name: str, cls: type, *args: Any, **kwargs: Any) -> ObjectHandle:
        refuse_shadowed(spec_of(cls), ObjectHandle, *ObjectHandle.OWN)
        _seq, future = self.submit(encode_create(name, cls, args, kwargs))
        await future
        return ObjectHandle(self, name)

    def lookup(self, name: str) -> ObjectHandle:
        replica = self.core.replica(name)  # NoSuchObjectError unless it is here
        refuse_shadowed(replica.spec, ObjectHandle, *ObjectHandle.OWN)
        return ObjectHandle(self, name)

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; re-checked after every operation."""
        await self._wait(predicate)

    async def wait_for(self, name: str) -> ObjectHandle:
        """The handle of `name` once its create has executed here."""
        await self._wait(lambda: self.core.has(name))
        return self.lookup(name)


class ObjectHandle:
    """One named object: `await acc.deposit(5)`, `await acc.get()`, `await acc.drop()`."""

    #: instance attributes a method of the object must not be named after
    OWN: ClassVar[tuple[str, ...]] = ("name",)

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


def objects_of(group: GroupLike) -> Objects:
    """The group's named objects: its `app=` Objects, or one made now that reads the
    group's deliveries (a group made without on_deliver/app)."""
    objects = bound_to(group)
    if isinstance(objects, Objects):
        return objects
    if objects is None:  # (beside another, bind says why it cannot be)
        refuse_dynamic(group, "its replicated objects")
    made = Objects()
    made.bind(group)  # LocalProtocolError if an unnamed object reads the group
    made.start_reading()
    return made


async def attach_named(group: GroupLike, cls: type, name: str, *args: Any,
                       **kwargs: Any) -> ObjectHandle:
    """Create object `name` of `cls(*args, **kwargs)` in the group (ObjectExistsError if the
    group ordered another create of that name first)."""
    spec_of(cls)
    return await objects_of(group).create(name, cls, *args, **kwargs)


def lookup(group: GroupLike, name: str) -> ObjectHandle:
    """The handle of object `name`, created by any member (NoSuchObjectError if its create has
    not executed here)."""
    objects = bound_to(group)
    if not isinstance(objects, Objects):
        raise _no_objects(name)
    return objects.lookup(name)


def _no_objects(name: str) -> LocalProtocolError:
    from abcast.replicated.directory import NoSuchObjectError

    return NoSuchObjectError(f"this group has no replicated object {name!r}: no named object "
                        "was created or attached on it here (give the group app=Objects())")
