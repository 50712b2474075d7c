"""The operations replicas exchange: a write's name and arguments as bytes, and back.

Rules: every replica must execute the very same call, so arguments must be *plain data*
that means the same in every process: None, bool, int, float, str, bytes, and lists,
tuples and dicts of those (dicts keep insertion order), a dict's keys being None, bool,
str, bytes, or ints within ±INT_KEY_BOUND (2**61 − 2: beyond it ints share hashes at
will, and a dict of N such keys takes N² steps to fill, on every replica; a peer's
pickle of one is refused by abcast.replicated._memo_guard). Sets are refused (their
iteration order depends on each process's hash seed: a method looping over one would
diverge), and so is anything else (functions, open files, locks, arbitrary objects: they
cannot be sent, or would not mean the same thing at the other end), and so is nesting
deeper than MAX_DEPTH (a reference cycle too). Each refusal is a LocalProtocolError that
names the argument and the path inside it. The check is linear in the distinct
containers: one that is shared ((x, x): pickle keeps the sharing, so a peer's 200 bytes
can hold 2**40 paths) is walked once, and judged again only for its depth.

The bytes are a pickle of exact builtin types only, read back by an unpickler that
refuses every global: a peer cannot make a replica import or call anything. Bytes that
are not a valid operation raise RemoteProtocolError. The object's state for a joiner
(`encode_state`) follows the same rules, unless the class brings its own hooks
(`get_state() -> bytes` / `set_state(bytes)`): `check_state` is the test, which a
replica applies to its object when made and after every write (abcast.replicated.replica),
so that the state a member must hand a joiner is always one it can encode.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.replicated._declare import ClassSpec
from abcast.replicated._memo_guard import INT_KEY_BOUND, check_memo

#: nesting depth beyond which arguments are refused (also stops reference cycles)
MAX_DEPTH: Final = 64
_SCALARS: Final = (type(None), bool, int, float, str, bytes)
_KEYS: Final = (type(None), bool, int, str, bytes)
_SCALAR_TYPES: Final = frozenset(_SCALARS)
_KEY_TYPES: Final = frozenset(_KEYS)
_PROTOCOL: Final = 5


def check_plain(value: object, where: str, depth: int = 0) -> None:
    """Raise LocalProtocolError unless `value` is plain data (see the module rules).
    Linear in the distinct containers: one reached again (shared: (x, x)) is not walked
    again, only its nesting judged where it sits now."""
    _height(value, where, depth, {})


def check_key(key: object, where: str) -> None:
    """LocalProtocolError unless `key` may be a dict key of plain data: judged by its type
    (and an int by its size) before anything hashes it, so a caller can check a peer's
    key (hashing a nested tuple walks every path, as == does)."""
    kind = type(key)
    if kind not in _KEYS:
        raise LocalProtocolError(f"{where} has a key of type {kind.__name__}; dict "
                                 "keys must be None, bool, int, str or bytes")
    if kind is int and not -INT_KEY_BOUND <= key <= INT_KEY_BOUND:  # type: ignore[operator]
        raise _wide_key(where)


def _wide_key(where: str) -> LocalProtocolError:
    return LocalProtocolError(
        f"{where} has an int key beyond ±{INT_KEY_BOUND} (2**61 - 2): ints that wide share "
        "hashes at will, and a dict of them takes quadratic time to fill; use a str or "
        "bytes key")


def _check_int_keys(keys: dict[Any, Any], key_types: set[type], where: str) -> None:
    """The dict's int keys (`key_types`: its keys' types) are within ±INT_KEY_BOUND:
    all-int keys in two C-speed scans."""
    if len(key_types) == 1:
        if not (min(keys) >= -INT_KEY_BOUND and max(keys) <= INT_KEY_BOUND):
            raise _wide_key(where)
        return
    for key in keys:
        if type(key) is int:
            check_key(key, where)


def _deeper(where: str) -> LocalProtocolError:
    return LocalProtocolError(f"{where} is nested deeper than {MAX_DEPTH} levels "
                              "(or refers to itself)")


def _height(value: object, where: str, depth: int, heights: dict[int, int]) -> int:
    """How many levels of containers `value` holds below itself (checking it): 0 for a
    scalar or a container of scalars. `heights`: the containers checked so far (by id;
    a container still being checked counts as too deep, so a cycle is refused)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise _deeper(where)
    if kind in _SCALARS:
        return 0
    # Fast paths (a replica checks its object's whole state after every write): items
    # that are scalars, or lists and tuples of scalars, are passed at C speed.
    items: Iterable[tuple[Any, Any]]
    if kind is list or kind is tuple:
        assert isinstance(value, list | tuple)
        if _SCALAR_TYPES.issuperset(map(type, value)):
            return 0
        items = enumerate(value)
    elif kind is dict:
        assert isinstance(value, dict)
        key_types = set(map(type, value))
        if not _KEY_TYPES.issuperset(key_types):
            for key in value:
                check_key(key, where)  # refuses the first that is no key
        if int in key_types:
            _check_int_keys(value, key_types, where)
        if _SCALAR_TYPES.issuperset(map(type, value.values())):
            return 0
        items = value.items()
    elif kind is set or kind is frozenset:
        raise LocalProtocolError(
            f"{where} is a {kind.__name__}: its iteration order differs between processes, "
            "so replicas could diverge; pass a sorted list instead")
    else:
        raise LocalProtocolError(
            f"{where} is a {kind.__module__}.{kind.__qualname__}, which cannot be sent to "
            "the replicas: only plain data (None, bool, int, float, str, bytes, and lists, "
            "tuples and dicts of them) means the same in every process")
    known = _known(value, where, depth, heights)
    if known is not None:
        return known
    height = 0
    for key, item in items:
        if not _flat(item, depth):
            below = 1 + _height(item, f"{where}[{key!r}]", depth + 1, heights)
            height = max(height, below)
        elif not height and type(item) not in _SCALAR_TYPES:
            height = 1  # a list or tuple of scalars
    heights[id(value)] = height
    return height


def _known(value: object, where: str, depth: int, heights: dict[int, int]) -> int | None:
    """The height of a container met before (None: first time; it is marked as being
    checked). Too deep where it sits now, or still being checked (a cycle): refused."""
    key = id(value)
    known = heights.get(key)
    if known is None:
        heights[key] = MAX_DEPTH + 1  # being checked: met again, it refers to itself
        return None
    if depth + known > MAX_DEPTH:
        raise _deeper(where)
    return known


def _flat(item: Any, depth: int) -> bool:
    """A scalar, or a list or tuple of scalars, within the depth bound: plain data."""
    kind = type(item)
    return kind in _SCALAR_TYPES or (
        (kind is list or kind is tuple) and depth + 1 < MAX_DEPTH
        and _SCALAR_TYPES.issuperset(map(type, item)))


def detached(value: Any) -> Any:
    """A copy of `value` that shares nothing mutable with it: what a read (or this node's
    write) returns, which its caller may change without changing the replica's copy.
    A scalar or a tuple of scalars is returned as it is, a list or dict of scalars copied
    at C speed, anything else through pickle (for plain data an exact deep copy, sharing
    within it kept), or copy.deepcopy where pickle fails; what neither can copy (a lock, an
    open file: never plain state) is returned as it is."""
    kind = type(value)
    if kind in _SCALAR_TYPES:
        return value
    if kind is tuple or kind is list:
        if _SCALAR_TYPES.issuperset(map(type, value)):
            return value if kind is tuple else value.copy()
    elif kind is dict and _SCALAR_TYPES.issuperset(map(type, value.values())):
        return value.copy()  # (its keys are immutable: plain keys, or hashable anyway)
    try:
        return pickle.loads(pickle.dumps(value, protocol=_PROTOCOL))
    except Exception:
        try:
            return copy.deepcopy(value)
        except Exception:
            return value


@dataclass(frozen=True, slots=True)
class Invocation:
    """A write as it travels: which class, which method, with what."""

    cls: str
    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]


def encode_invocation(spec: ClassSpec, method: str, args: tuple[Any, ...],
                      kwargs: Mapping[str, Any]) -> bytes:
    """Check the call against the method's signature and its arguments against the
    plain-data rules; the operation's bytes."""
    entry = spec.method(method)
    try:
        bound = entry.signature.bind(None, *args, **kwargs)
    except TypeError as exc:
        raise LocalProtocolError(f"{spec.cls.__name__}.{method}: {exc}") from None
    for i, (name, value) in enumerate(bound.arguments.items()):
        if i == 0:
            continue  # self
        try:
            check_plain(value, f"argument {name!r}")
        except LocalProtocolError as exc:
            raise LocalProtocolError(f"{spec.cls.__name__}.{method}: {exc}") from None
    body = (spec.name, method, tuple(args), dict(kwargs))
    return pickle.dumps(body, protocol=_PROTOCOL)


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise RemoteProtocolError(f"operation refers to {module}.{name}: not plain data")


def loads_plain(data: bytes, what: str) -> Any:
    try:
        check_memo(data)
    except RemoteProtocolError as exc:
        raise RemoteProtocolError(f"{what} is not valid: {exc}") from None
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except RemoteProtocolError:
        raise
    except Exception as exc:  # any malformed pickle
        raise RemoteProtocolError(f"{what} is not valid: {type(exc).__name__}: {exc}") from None


def decode_invocation(data: bytes) -> Invocation:
    body = loads_plain(data, "operation")
    match body:
        case (str(cls), str(method), tuple(args), dict(kwargs)) if all(
                type(k) is str for k in kwargs):
            return Invocation(cls, method, args, kwargs)
        case _:
            raise RemoteProtocolError(f"operation has the wrong shape: {type(body).__name__}")


def has_state_hooks(obj: object) -> bool:
    """The object hands its state over itself (`get_state`/`set_state`)."""
    return callable(getattr(obj, "get_state", None))


def _attrs(obj: object) -> dict[str, Any]:
    try:
        return dict(vars(obj))
    except TypeError:
        raise LocalProtocolError(f"{type(obj).__name__} has no __dict__: give it get_state() "
                                 "and set_state() to hand its state to joiners") from None


def check_state(obj: object) -> None:
    """LocalProtocolError unless `encode_state(obj)` can encode the object's attributes
    (always passes for a class with its own hooks: its state is its business)."""
    if not has_state_hooks(obj):
        check_plain(_attrs(obj), f"the state of {type(obj).__name__}")


def encode_state(obj: object) -> bytes:
    """The object's state for a joiner: its own `get_state()` if it has one, else its
    attributes (which must be plain data)."""
    hook = getattr(obj, "get_state", None)
    if callable(hook):
        state = hook()
        if not isinstance(state, bytes):
            raise LocalProtocolError(f"{type(obj).__name__}.get_state() must return bytes")
        return b"H" + state
    check_state(obj)
    return _dump_attrs(obj)


def checkpoint_state(obj: object) -> bytes | None:
    """The attributes as `encode_state` gives them, without the plain-data check (the
    caller knows them plain), for `decode_state` to put back; None for a class with its own
    hooks."""
    return None if has_state_hooks(obj) else _dump_attrs(obj)


def _dump_attrs(obj: object) -> bytes:
    return b"P" + pickle.dumps(_attrs(obj), protocol=_PROTOCOL)


def decode_state(obj: object, data: bytes) -> None:
    """Replace `obj`'s state with `data` from `encode_state` (of the same class)."""
    tag, body = data[:1], data[1:]
    if tag == b"H":
        hook = getattr(obj, "set_state", None)
        if not callable(hook):
            raise RemoteProtocolError(f"state made by get_state(), but {type(obj).__name__} "
                                      "has no set_state()")
        hook(body)
        return
    if tag != b"P":
        raise RemoteProtocolError("state bytes carry no known tag")
    attrs = loads_plain(body, "state")
    if not isinstance(attrs, dict) or not all(type(k) is str for k in attrs):
        raise RemoteProtocolError("state is not a dict of attributes")
    vars(obj).clear()
    vars(obj).update(attrs)
