"""Replicated objects (RepMI): one object, a copy on every member of a group, its @write
methods executed by every copy in the group's total order, its @read methods on the
local copy.

    @replicated
    class Account:
        def __init__(self) -> None: self.balance = 0
        @write
        def deposit(self, amount: int) -> None: self.balance += amount
        @read
        def get(self) -> int: return self.balance

    async with Group("bank", ordering="matrix", registry=url, size=3) as group:
        acc = await attach(group, Account)
        await acc.deposit(300)      # returns once executed on this node's copy
        print(await acc.get())      # after this node's writes

Several objects per group, found by name (abcast.replicated.objects): the group's
application is an `Objects`, and each object is created — an operation ordered like the
writes — and found by name from any member:

    group = await Group.create("bank", ordering="sequencer", registry=url, app=Objects())
    alice = await attach(group, Account, name="alice")
    bob = lookup(group, "bob")          # created by another member; NoSuchObjectError if not

Any ordering that claims total order works (matrix, sequencer, skeen, chandra-toueg…).
In a dynamic group the handle is the group's application, and its state moves to every
joiner by itself:

    acc = ReplicatedHandle(Account())
    group = await Group.join("bank", registry=url, app=acc)  # or Group.create(...)
The sans-IO core is `Replica`; `ReplicatedHandle` is the asyncio facade; `sim` runs
replicas as the simulator's application.

This package is itself callable as the class decorator, so that `@abcast.replicated`
works whether `abcast.replicated` names the package (once anything imported it, Python
binds the package there) or the function.
"""

from __future__ import annotations

import sys
import types
from typing import TypeVar

from abcast.replicated._declare import ClassSpec, read, replicated, spec_of, write
from abcast.replicated.batteries import (
    Account,
    Counter,
    Lock,
    ReplicatedDict,
    acquire,
    locked,
    release,
)
from abcast.replicated.directory import NoSuchObjectError, ObjectExistsError
from abcast.replicated.handle import ReplicatedHandle, attach
from abcast.replicated.objects import ObjectHandle, Objects, lookup
from abcast.replicated.replica import Outcome, Replica

__all__ = [
    "Account",
    "ClassSpec",
    "Counter",
    "Lock",
    "NoSuchObjectError",
    "ObjectExistsError",
    "ObjectHandle",
    "Objects",
    "Outcome",
    "Replica",
    "ReplicatedDict",
    "ReplicatedHandle",
    "acquire",
    "attach",
    "locked",
    "lookup",
    "read",
    "release",
    "replicated",
    "spec_of",
    "write",
]

_C = TypeVar("_C", bound=type)


class _DecoratorPackage(types.ModuleType):
    def __call__(self, cls: _C) -> _C:
        return replicated(cls)


sys.modules[__name__].__class__ = _DecoratorPackage
