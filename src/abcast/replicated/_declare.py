"""Declaring a replicated class: `@replicated` on the class, `@write` / `@read` on methods.

Rules: declaration only. `@write` and `@read` tag a method (the function is returned
unchanged, so the class still works as a plain local object); `@replicated` collects the
tags into a `ClassSpec` stored on the class and checks the declaration (at least one
write, no method both, names that do not start with "_"). A write is executed by every
replica in the group's total order and must be deterministic: its outcome may depend
only on the object's state and its arguments. A read runs on the local copy only and
must not change it. Nothing here knows about groups, deliveries or the wire.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from abcast.errors import LocalProtocolError

C = TypeVar("C", bound=type)
F = TypeVar("F", bound=Callable[..., Any])

_KIND_ATTR: Final = "__abcast_kind__"
#: every @replicated class of this process by its wire name: a named object's create
#: operation names its class, and a member builds its copy only from a class it has
#: itself imported and declared (a peer can never make it import anything)
_CLASSES: Final[dict[str, type]] = {}
_SPEC_ATTR: Final = "__abcast_spec__"
WRITE: Final = "write"
READ: Final = "read"


@dataclass(frozen=True, slots=True)
class MethodSpec:
    name: str
    kind: str  # WRITE or READ
    function: Callable[..., Any]
    signature: inspect.Signature


@dataclass(frozen=True, slots=True)
class ClassSpec:
    """What `@replicated` learnt about a class: its name on the wire and its methods."""

    name: str
    cls: type
    methods: Mapping[str, MethodSpec]

    def method(self, name: str) -> MethodSpec:
        try:
            return self.methods[name]
        except KeyError:
            raise LocalProtocolError(
                f"{self.name} has no @write or @read method {name!r} "
                f"(it has: {', '.join(sorted(self.methods)) or 'none'})"
            ) from None

    @property
    def writes(self) -> tuple[str, ...]:
        return tuple(n for n, m in self.methods.items() if m.kind == WRITE)

    @property
    def reads(self) -> tuple[str, ...]:
        return tuple(n for n, m in self.methods.items() if m.kind == READ)


def _tag(function: F, kind: str) -> F:
    if not callable(function):
        raise LocalProtocolError(f"@{kind} decorates methods, not {function!r}")
    if inspect.iscoroutinefunction(function):
        raise LocalProtocolError(
            f"@{kind} method {function.__name__} is async: replicated methods run inside "
            "the delivery of an operation and must be plain functions"
        )
    previous = getattr(function, _KIND_ATTR, None)
    if previous is not None and previous != kind:
        raise LocalProtocolError(f"{function.__name__} is both @{previous} and @{kind}")
    setattr(function, _KIND_ATTR, kind)
    return function


def write(function: F) -> F:
    """Mark a method as a write: every replica executes it, in the group's total order."""
    return _tag(function, WRITE)


def read(function: F) -> F:
    """Mark a method as a read: it runs on the local copy, after the caller's last write."""
    return _tag(function, READ)


def replicated(cls: C) -> C:
    """Make `cls` replicable (see abcast.replicated.attach / Replica). The class itself is
    returned unchanged apart from its spec, so `cls()` is still a plain local object."""
    if not isinstance(cls, type):
        raise LocalProtocolError(f"@replicated decorates classes, not {cls!r}")
    methods: dict[str, MethodSpec] = {}
    for klass in reversed(cls.__mro__):
        for name, member in vars(klass).items():
            kind = getattr(member, _KIND_ATTR, None)
            if kind is None:
                continue
            if name.startswith("_"):
                raise LocalProtocolError(f"{cls.__name__}.{name}: a @{kind} method needs a "
                                         "public name (it travels on the wire)")
            methods[name] = MethodSpec(name, kind, member, inspect.signature(member))
    if not any(m.kind == WRITE for m in methods.values()):
        raise LocalProtocolError(f"{cls.__name__} has no @write method: nothing to replicate")
    name = f"{cls.__module__}.{cls.__qualname__}"
    setattr(cls, _SPEC_ATTR, ClassSpec(name, cls, methods))
    _CLASSES[name] = cls
    return cls


def refuse_shadowed(spec: ClassSpec, facade: type, *own: str) -> None:
    """LocalProtocolError if a @write or @read of `spec` has the name of one of the
    facade's own public attributes (or of `own`): called on the facade, that name is the
    facade's — a `close` write would close the handle and run nowhere."""
    names = {n for n in dir(facade) if not n.startswith("_")} | set(own)
    clash = sorted(names & set(spec.methods))
    if clash:
        raise LocalProtocolError(
            f"{spec.cls.__name__}: {', '.join(clash)} cannot be called through "
            f"{facade.__name__}, which has its own attribute of that name; rename the "
            f"method (the facade's names: {', '.join(sorted(names))})")


def class_named(name: str) -> type | None:
    """The @replicated class of this process whose wire name is `name`, if any."""
    return _CLASSES.get(name)


def spec_of(target: object) -> ClassSpec:
    """The spec of a replicated class or of an instance of one."""
    cls = target if isinstance(target, type) else type(target)
    spec = getattr(cls, _SPEC_ATTR, None)
    if not isinstance(spec, ClassSpec) or spec.cls is not cls:
        raise LocalProtocolError(f"{cls.__name__} is not decorated with @replicated")
    return spec
