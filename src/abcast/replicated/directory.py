"""`Directory`: one node's named replicated objects of a group — several objects per group.

Rules: the group's deliveries are operations on the directory, each naming its object:

| operation         | executed, in the group's order, on every member                     |
|-------------------|---------------------------------------------------------------------|
| create(name, cls) | a new copy `cls(*args)`; `ObjectExistsError` if `name` is taken           |
| drop(name)        | the copy is gone; `NoSuchObjectError` if `name` is not there              |
| call(name, write) | the write runs on that copy (`Replica.apply`); `NoSuchObjectError` if gone |

Create and drop are ordered like writes, so two members creating "alice" at once get
the same verdict everywhere: the first in the order creates it, the second's create
is refused, at the same point of the order, on every member. A member builds its copy
only from a `@replicated` class this process has declared (`class_named`): a create
for a class it does not know leaves a placeholder whose operations are refused alike
(and counted), never an import. Each object keeps its own `Replica` — its own
issued/executed counts, so a read of one object waits only for this node's writes to
that object — and its own state in the directory's snapshot (names in creation order).
The outcome of this node's own operations is returned, keyed by the group's seq.

No I/O, no clock, no asyncio: abcast.replicated.objects (asyncio) and
abcast.replicated.sim (the simulator) drive it.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from abcast.errors import AbcastError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.replicated._args import check_plain_together, loads_plain
from abcast.replicated._declare import class_named, spec_of
from abcast.replicated.replica import Outcome, Replica

_TAG: Final = "abcast.objects"
_PROTOCOL: Final = 5
#: longest object name
MAX_NAME: Final = 128


class ObjectExistsError(AbcastError):
    """A create named an object the group already has (decided in the group's order)."""


class NoSuchObjectError(LocalProtocolError, KeyError):
    """No object of that name in this group (lookup, or an operation ordered after a
    drop). A LocalProtocolError, and a KeyError for `except KeyError` callers."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def check_name(name: object) -> str:
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME:
        raise LocalProtocolError(f"an object name is a 1..{MAX_NAME} char string, "
                                 f"not {name!r}")
    return name


# -- the operations on the wire -----------------------------------------------------------
def encode_create(name: str, cls: type, args: tuple[Any, ...],
                  kwargs: Mapping[str, Any]) -> bytes:
    spec = spec_of(cls)
    of = f"{spec.cls.__name__}()"
    check_plain_together([(list(args), f"the arguments of {of}"),
                          (dict(kwargs), f"the keyword arguments of {of}")],
                         f"the arguments of {of} together")  # (one pickle)
    return _dumps(("create", check_name(name), spec.name, tuple(args), dict(kwargs)))


def encode_drop(name: str) -> bytes:
    return _dumps(("drop", check_name(name)))


def encode_call(name: str, invocation: bytes) -> bytes:
    return _dumps(("call", check_name(name), invocation))


def _dumps(body: tuple[Any, ...]) -> bytes:
    return pickle.dumps((_TAG, *body), protocol=_PROTOCOL)


@dataclass(slots=True)
class _Entry:
    cls_name: str
    replica: Replica[Any] | None  # None: a class this process does not know


class Directory:
    """`Directory(node="n1")`; `apply(origin, seq, payload)` for every delivery."""

    def __init__(self, node: NodeId | None = None) -> None:
        self.node = node
        self._objects: dict[str, _Entry] = {}
        self.applied = 0
        self.unknown_class_ops = 0  # operations on placeholders (class unknown here)

    # -- reading ------------------------------------------------------------------------
    def names(self) -> tuple[str, ...]:
        return tuple(self._objects)

    def has(self, name: str) -> bool:
        return name in self._objects

    def replica(self, name: str) -> Replica[Any]:
        """The copy named `name` (NoSuchObjectError if the group has none here)."""
        entry = self._objects.get(name)
        if entry is None:
            known = ", ".join(sorted(self._objects)) or "none"
            raise NoSuchObjectError(f"this group has no replicated object {name!r} here "
                               f"(it has: {known}); create it with attach(group, cls, "
                               f"name={name!r})")
        if entry.replica is None:
            raise NoSuchObjectError(f"object {name!r} is of class {entry.cls_name}, which this "
                               "process has not declared (@replicated) and cannot hold")
        return entry.replica

    # -- delivered operations ------------------------------------------------------------
    def apply(self, origin: NodeId, seq: int, payload: bytes) -> Outcome | None:
        """Execute one delivered operation; its outcome if this node issued it.
        RemoteProtocolError (nothing executed) for bytes that are not an operation."""
        body = loads_plain(payload, "object operation")
        own = origin == self.node and self.node is not None
        match body:
            case (str(tag), "create", str(name), str(cls_name), tuple(args), dict(kwargs)) \
                    if tag == _TAG:
                error = self._create(name, cls_name, args, kwargs)
            case (str(tag), "drop", str(name)) if tag == _TAG:
                error = None
                if self._objects.pop(name, None) is None:
                    error = NoSuchObjectError(f"drop: no object {name!r} (already dropped?)")
            case (str(tag), "call", str(name), bytes(invocation)) if tag == _TAG:
                return self._call(origin, seq, name, invocation, own)
            case _:
                raise RemoteProtocolError(f"{origin}#{seq} is not an object operation")
        self.applied += 1
        return Outcome(seq, None, error) if own else None

    def _create(self, name: str, cls_name: str, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Exception | None:
        if name in self._objects:
            return ObjectExistsError(f"the group already has an object {name!r} "
                                f"({self._objects[name].cls_name})")
        cls = class_named(cls_name)
        if cls is None:
            self._objects[name] = _Entry(cls_name, None)
            return None
        try:
            replica = Replica(cls(*args, **kwargs), self.node)
        except Exception as exc:  # the constructor's failure, or state that is not plain
            return exc  # data (LocalProtocolError): the same everywhere
        self._objects[name] = _Entry(cls_name, replica)
        return None

    def _call(self, origin: NodeId, seq: int, name: str, invocation: bytes,
              own: bool) -> Outcome | None:
        entry = self._objects.get(name)
        self.applied += 1
        if entry is None or entry.replica is None:
            if entry is not None:
                self.unknown_class_ops += 1
            return Outcome(seq, None, NoSuchObjectError(
                f"no object {name!r} when this write was ordered (dropped, or never "
                "created)")) if own else None
        return entry.replica.apply(origin, seq, invocation)

    # -- state transfer --------------------------------------------------------------------
    def state(self) -> bytes:
        """Every object's class and state, in creation order (placeholders keep none)."""
        body = [(name, e.cls_name, e.replica.state() if e.replica is not None else None)
                for name, e in self._objects.items()]
        return _dumps(("state", body))

    def load(self, state: bytes) -> None:
        body = loads_plain(state, "directory state")
        match body:
            case (str(tag), "state", list(items)) if tag == _TAG:
                pass
            case _:
                raise RemoteProtocolError("directory state has the wrong shape")
        objects: dict[str, _Entry] = {}
        for item in items:
            match item:
                case (str(name), str(cls_name), bytes() | None as data):
                    pass
                case _:
                    raise RemoteProtocolError("directory state holds a malformed object")
            cls = class_named(cls_name)
            if cls is None or data is None:
                objects[name] = _Entry(cls_name, None)
                continue
            blank: Any = object.__new__(cls)  # its state comes from the snapshot
            replica: Replica[Any] = Replica(blank, self.node)
            replica.load(data)
            objects[name] = _Entry(cls_name, replica)
        self._objects = objects
