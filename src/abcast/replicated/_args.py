"""The operations replicas exchange: a write's name and arguments as bytes, and back.

Rules: every replica must execute the very same call, so arguments must be *plain data*
that means the same in every process: None, bool, int, float, str, bytes, and lists,
tuples and dicts of those (dicts keep insertion order), a dict's keys being None, bool,
int, str or bytes. Ints beyond ±INT_KEY_BOUND (2**61 − 2) share hashes at will, and a
dict of N that share one takes N² steps to fill, on every replica: a value (a call's
arguments together, an object's state) in which more than MAX_SHARED_HASH (16) distinct
int keys beyond it share one hash is refused, as the guard refuses such a pickle
(abcast.replicated._memo_guard, with the figures). No 64-bit ints share a hash more
than 12 to one, so 64-bit ids as keys always pass. Sets are refused (their
iteration order depends on each process's hash seed: a method looping over one would
diverge), and so is anything else (functions, open files, locks, arbitrary objects: they
cannot be sent, or would not mean the same thing at the other end), and so is nesting
deeper than MAX_DEPTH (a reference cycle too). Each refusal is a LocalProtocolError that
names the argument and the path inside it. The check is linear in the distinct
containers: one that is shared ((x, x): pickle keeps the sharing, so a peer's 200 bytes
can hold 2**40 paths; a list of one dict 10 000 times, 10**8 items) is walked once, and
judged again only for its depth (one of at most 16 scalars is scanned again: as cheap).

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
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.replicated._declare import ClassSpec
from abcast.replicated._memo_guard import (
    INT_KEY_BOUND,
    MAX_SHARED_HASH,
    check_memo,
    shared_hashes,
)

#: nesting depth beyond which arguments are refused (also stops reference cycles)
MAX_DEPTH: Final = 64
#: a container of scalars longer than this is remembered once checked (a shorter one is
#: checked again where it is met again: at most _SHORT steps per reference)
_SHORT: Final = 16
_SCALARS: Final = (type(None), bool, int, float, str, bytes)
_KEYS: Final = (type(None), bool, int, str, bytes)
_SCALAR_TYPES: Final = frozenset(_SCALARS)
_KEY_TYPES: Final = frozenset(_KEYS)
_PROTOCOL: Final = 5


def check_plain(value: object, where: str, depth: int = 0) -> None:
    """Raise LocalProtocolError unless `value` is plain data (see the module rules).
    Linear in the distinct containers: one reached again (shared: (x, x)) is not walked
    again, only its nesting judged where it sits now."""
    wide: list[int] = []
    _height(value, where, depth, {}, wide)
    if wide:
        check_wide_keys(wide, where)


def check_plain_together(parts: Iterable[tuple[object, str]], together: str) -> None:
    """check_plain each (value, where) of `parts`, values that travel in one pickle: their
    wide int keys judged together too (named `together`)."""
    wide: list[int] = []
    for value, where in parts:
        own = plain_wide_keys(value, where)
        if own:
            check_wide_keys(own, where)
            wide += own
    if wide:
        check_wide_keys(wide, together)


def plain_wide_keys(value: object, where: str) -> list[int]:
    """The int keys beyond ±INT_KEY_BOUND in `value`'s dicts (one a dict that holds it),
    `value` checked as check_plain does but for the keys' shared hashes, which the caller
    judges (check_wide_keys, count_wide_keys) with those of the values it goes with."""
    wide: list[int] = []
    _height(value, where, 0, {}, wide)
    return wide


def check_wide_keys(wide: list[int], where: str) -> None:
    """LocalProtocolError if more than MAX_SHARED_HASH distinct ones of the ints `wide`
    (int keys beyond ±INT_KEY_BOUND) share one hash."""
    shared_hashes(wide, lambda shared, count: _crowded(where, shared, count))


def _crowded(where: str, shared: int, count: int) -> LocalProtocolError:
    return LocalProtocolError(
        f"{where}: {count} distinct int keys share the hash {shared}, more than "
        f"{MAX_SHARED_HASH} (ints beyond ±{INT_KEY_BOUND}, 2**61 - 2, share hashes at will, "
        "and a dict of N such keys takes N² steps to fill)")


def count_wide_keys(tally: dict[int, dict[int, int]], gone: list[int], new: list[int],
                    where: str) -> None:
    """Count an entry's wide int keys (`new`, from plain_wide_keys) in `tally` (per hash,
    each key's count) in place of those of the entry it replaces (`gone`): for a container
    that checks one entry at a time (batteries.ReplicatedDict) and must keep its whole
    within MAX_SHARED_HASH. LocalProtocolError, `tally` unchanged, if it would not."""
    check_wide_keys(new, where)  # (so no more than 2 * MAX_SHARED_HASH of one hash below)
    _add_keys(tally, gone, -1)
    _add_keys(tally, new, 1)
    for shared in map(hash, new):
        count = len(tally[shared])
        if count > MAX_SHARED_HASH:
            _add_keys(tally, new, -1)
            _add_keys(tally, gone, 1)
            raise _crowded(where, shared, count)


def tally_wide_keys(entries: dict[Any, Any], where: str) -> dict[int, dict[int, int]]:
    """check_plain(entries, where), and the tally count_wide_keys would have kept had the
    entries been counted one at a time: each entry's wide int keys, its key among them
    (one walk of them all, so a container two entries share counts once: entries that
    were counted one at a time, each unpickled apart, share none)."""
    wide = plain_wide_keys(entries, where)
    check_wide_keys(wide, where)
    tally: dict[int, dict[int, int]] = {}
    for key, count in Counter(wide).items():  # (checked: at most 16 distinct of one hash)
        tally.setdefault(hash(key), {})[key] = count
    return tally


def _add_keys(tally: dict[int, dict[int, int]], keys: list[int], step: int) -> None:
    for key in keys:
        shared = hash(key)
        held = tally.setdefault(shared, {})
        count = held.get(key, 0) + step
        if count > 0:
            held[key] = count
        else:  # (below 0 only for a state whose entries share a container: a peer's)
            held.pop(key, None)
            if not held:
                del tally[shared]


def check_key(key: object, where: str) -> None:
    """LocalProtocolError unless `key` may be a dict key of plain data: judged by its type
    alone, so a caller can check a peer's key before anything hashes it (hashing a
    nested tuple walks every path, as == does)."""
    if type(key) not in _KEYS:
        raise LocalProtocolError(f"{where} has a key of type {type(key).__name__}; dict "
                                 "keys must be None, bool, int, str or bytes")


def _add_wide(keys: dict[Any, Any], only_ints: bool, wide: list[int]) -> None:
    """Add the dict's int keys beyond ±INT_KEY_BOUND to `wide` (`only_ints`: it has no
    other keys; then in C-speed scans)."""
    if not only_ints:
        wide += [key for key in keys if type(key) is int
                 and (key > INT_KEY_BOUND or key < -INT_KEY_BOUND)]
    elif min(keys) < -INT_KEY_BOUND or max(keys) > INT_KEY_BOUND:
        wide += filter(INT_KEY_BOUND.__lt__, keys)
        wide += filter((-INT_KEY_BOUND).__gt__, keys)


def _deeper(where: str) -> LocalProtocolError:
    return LocalProtocolError(f"{where} is nested deeper than {MAX_DEPTH} levels "
                              "(or refers to itself)")


def _height(value: object, where: str, depth: int, heights: dict[int, int],
            wide: list[int]) -> int:
    """How many levels of containers `value` holds below itself (checking it): 0 for a
    scalar or a container of scalars. `heights`: the containers checked so far (by id;
    a container still being checked counts as too deep, so a cycle is refused); `wide`:
    the int keys beyond ±INT_KEY_BOUND met so far (a dict's once)."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise _deeper(where)
    if kind in _SCALARS:
        return 0
    known = heights.get(id(value))
    if known is not None:  # met before: too deep here, or still being checked (a cycle)?
        if depth + known > MAX_DEPTH:
            raise _deeper(where)
        return known
    # Fast paths (a replica checks its object's whole state after every write): items
    # that are scalars, or lists and tuples of scalars, are passed at C speed (and one
    # longer than _SHORT remembered, so that a peer cannot make it scanned per reference).
    items: Iterable[tuple[Any, Any]]
    if kind is list or kind is tuple:
        assert isinstance(value, list | tuple)
        if _SCALAR_TYPES.issuperset(map(type, value)):
            return _flat_height(value, heights)
        items = enumerate(value)
    elif kind is dict:
        assert isinstance(value, dict)
        key_types = set(map(type, value))
        if not _KEY_TYPES.issuperset(key_types):
            for key in value:
                check_key(key, where)  # refuses the first that is no key
        if int in key_types:
            _add_wide(value, len(key_types) == 1, wide)
        if _SCALAR_TYPES.issuperset(map(type, value.values())):
            return _flat_height(value, heights)
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
    heights[id(value)] = MAX_DEPTH + 1  # being checked: met again, it refers to itself
    height = 0
    below_bound = depth + 1 < MAX_DEPTH
    for key, item in items:
        kind = type(item)
        if kind in _SCALAR_TYPES:
            continue
        if ((kind is list or kind is tuple) and below_bound and len(item) <= _SHORT
                and _SCALAR_TYPES.issuperset(map(type, item))):
            height = height or 1  # a short list or tuple of scalars (a longer: remembered)
            continue
        height = max(height, 1 + _height(item, f"{where}[{key!r}]", depth + 1, heights, wide))
    heights[id(value)] = height
    return height


def _flat_height(value: list[Any] | tuple[Any, ...] | dict[Any, Any],
                 heights: dict[int, int]) -> int:
    """0, the height of a container of scalars; remembered if it is longer than _SHORT."""
    if len(value) > _SHORT:
        heights[id(value)] = 0
    return 0


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
    values = list(bound.arguments.items())[1:]  # (the first: self)
    try:
        check_plain_together([(value, f"argument {name!r}") for name, value in values],
                             "the arguments together")
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
