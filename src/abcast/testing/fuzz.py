"""Decoder fuzzing: every decoder that reads what a peer (or a trace file) gives us, with
valid inputs to start from and the mutations that break them.

Rules: a `Target` is one decoder (bytes → object) and the exceptions it declares — a
peer's bytes: `RemoteProtocolError` (`DecodeError` is one); a trace file:
`TraceFormatError` — and valid inputs generated from its wire types
(`msgspec.inspect`: every struct of every union, fields within their declared bounds).
`mutate` turns a valid input into a hostile one, structure-aware (the msgpack tree decoded
and one node replaced by a value of the wrong type, a boundary integer, an oversized or
invalid string, deep nesting, an element dropped or added) or byte-wise (flipped bits,
truncation, insertion, a length prefix claiming 4 GiB, garbage). `run_case` decodes one
input and returns the exception that escaped, if any undeclared one did. Used by
tests/property/test_fuzz_decoders.py (a few seconds, Hypothesis) and
bench/fuzz_decoders.py (>= 100,000 cases per decoder); the decoders themselves are listed
in abcast.testing.fuzz_targets.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import msgspec
import msgspec.inspect as mi

from abcast.errors import RemoteProtocolError

#: wrong values for any field: every msgpack type, boundaries, the absurd
WRONG: Final[tuple[Any, ...]] = (
    None, True, False, 0, -1, 1, 2**62 + 1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5,
    float("nan"), "", "x" * 70, "n1", "\u00e9\U0001f600", b"", b"\xff" * 9, [], [0], {},
    {"a": 1}, [[[]]], msgspec.msgpack.Ext(1, b"\x00"),
)
#: raw msgpack tokens spliced into bytes: huge lengths (4 GiB claims), the unused byte,
#: ext types, invalid utf-8 in a str, 64-bit extremes
TOKENS: Final[tuple[bytes, ...]] = (
    b"\xdd\xff\xff\xff\xff", b"\xdf\xff\xff\xff\xff", b"\xc6\xff\xff\xff\xff",
    b"\xdb\xff\xff\xff\xff", b"\xc9\xff\xff\xff\xff\x01", b"\xc1", b"\xd4\x01\x00",
    b"\xa2\xff\xfe", b"\xd9\x03\xed\xa0\x80", b"\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"\xd3\x80\x00\x00\x00\x00\x00\x00\x00", b"\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\xff\xff\xff\xff", b"\x00\x00\x00\x00",
)
DEEP: Final = 50_000  # nesting levels of the deep-nesting mutation


@dataclass(frozen=True)
class Target:
    """One decoder under fuzz."""

    name: str
    decode: Callable[[bytes], object]
    seeds: tuple[bytes, ...]  # valid inputs
    declared: tuple[type[BaseException], ...] = (RemoteProtocolError,)
    msgpack: bool = True  # inputs are msgpack after `prefix`: mutate the tree too
    prefix: bytes = b""  # a magic number before the msgpack (kept by tree mutations)


# ---------------------------------------------------------------- valid values


def sample(t: mi.Type, rng: random.Random, depth: int = 0) -> Any:
    """A value of type `t` within its declared bounds (lengths kept short)."""
    match t:
        case mi.IntType():
            lo = t.ge if t.ge is not None else (t.gt + 1 if t.gt is not None else -(2**40))
            hi = t.le if t.le is not None else (t.lt - 1 if t.lt is not None else 2**40)
            return rng.choice([lo, hi, rng.randint(lo, min(hi, lo + 1000)), rng.randint(lo, hi)])
        case mi.StrType():
            n = rng.randint(t.min_length or 0, min(t.max_length or 8, (t.min_length or 0) + 8))
            return "".join(rng.choice("n0123456789abc") for _ in range(n))
        case mi.BytesType() | mi.ByteArrayType() | mi.MemoryViewType():
            n = rng.randint(t.min_length or 0, min(t.max_length or 16, (t.min_length or 0) + 16))
            return rng.randbytes(n)
        case mi.BoolType():
            return rng.random() < 0.5
        case mi.NoneType():
            return None
        case mi.FloatType():
            return rng.uniform(0, 10)
        case mi.LiteralType():
            return rng.choice(t.values)
        case mi.EnumType():
            return rng.choice(list(t.cls))
        case mi.TupleType():
            return tuple(sample(i, rng, depth + 1) for i in t.item_types)
        case mi.ListType() | mi.VarTupleType() | mi.SetType() | mi.FrozenSetType():
            lo = t.min_length or 0
            n = 0 if depth > 4 else rng.randint(lo, max(lo, min(t.max_length or 3, 3)))
            items = [sample(t.item_type, rng, depth + 1) for _ in range(n)]
            if isinstance(t, mi.VarTupleType):
                return tuple(items)
            if isinstance(t, mi.SetType | mi.FrozenSetType):
                return frozenset(items) if _hashable(items) else frozenset()
            return items
        case mi.DictType():
            n = 0 if depth > 4 else rng.randint(t.min_length or 0, 3)
            return {sample(t.key_type, rng, depth + 1): sample(t.value_type, rng, depth + 1)
                    for _ in range(n)}
        case mi.UnionType():
            return sample(rng.choice(t.types), rng, depth)
        case mi.StructType():
            return t.cls(**{f.name: sample(f.type, rng, depth + 1) for f in t.fields})
        case mi.RawType():
            return msgspec.Raw(msgspec.msgpack.encode(rng.randint(0, 9)))
        case _:
            return rng.choice([0, "x", b"", None])


def _hashable(items: list[Any]) -> bool:
    try:
        frozenset(items)
    except TypeError:
        return False
    return True


def valid_inputs(wire_type: Any, count: int, seed: int = 0) -> tuple[bytes, ...]:
    """`count` encodings of values of `wire_type` (every struct of a union, round-robin)
    that its own decoder accepts."""
    rng = random.Random(seed)
    info = mi.type_info(wire_type)
    members = info.types if isinstance(info, mi.UnionType) else (info,)
    decoder = msgspec.msgpack.Decoder(wire_type)
    out: list[bytes] = []
    for i in range(count * 4):
        if len(out) >= count:
            break
        try:
            data = msgspec.msgpack.encode(sample(members[i % len(members)], rng))
            decoder.decode(data)
        except (msgspec.MsgspecError, ValueError, TypeError):
            continue
        out.append(data)
    return tuple(out)


# ---------------------------------------------------------------- mutation


def _nodes(tree: Any, path: tuple[int | str, ...] = ()) -> Iterator[tuple[int | str, ...]]:
    yield path
    if isinstance(tree, list):
        for i, item in enumerate(tree):
            yield from _nodes(item, (*path, i))
    elif isinstance(tree, dict):
        for key in list(tree)[:8]:
            yield from _nodes(tree[key], (*path, key))


def _replace(tree: Any, path: tuple[int | str, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(tree, list) and isinstance(head, int):
        copy = list(tree)
        copy[head] = _replace(copy[head], rest, value)
        return copy
    if isinstance(tree, dict):
        copy_d = dict(tree)
        copy_d[head] = _replace(copy_d[head], rest, value)
        return copy_d
    return tree


def _get(tree: Any, path: tuple[int | str, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


def mutate_tree(body: bytes, rng: random.Random) -> bytes | None:
    """Decode `body` as untyped msgpack, change one node, encode again (None when the
    body is not msgpack)."""
    try:
        tree = msgspec.msgpack.decode(body)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    path = rng.choice(list(_nodes(tree)))
    node = _get(tree, path)
    roll = rng.random()
    if roll < 0.45:
        value = rng.choice(WRONG)
    elif roll < 0.6 and isinstance(node, int) and not isinstance(node, bool):
        value = rng.choice([node + 1, node - 1, -node, 0, 2**62, 2**62 + 1, 2**64 - 1])
    elif roll < 0.75 and isinstance(node, list):
        value = list(node)
        op = rng.randrange(4)
        if op == 0 and value:
            value.pop(rng.randrange(len(value)))
        elif op == 1:
            value.insert(rng.randint(0, len(value)), rng.choice(WRONG))
        elif op == 2 and len(value) > 1:
            i, j = rng.sample(range(len(value)), 2)
            value[i], value[j] = value[j], value[i]
        else:
            value = value * rng.randint(2, 40)
    elif roll < 0.85:
        value = node
        for _ in range(rng.randint(1, 30)):
            value = [value]
    elif isinstance(node, str | bytes):
        value = node * rng.randint(2, 300)
    else:
        value = {str(node): node} if rng.random() < 0.5 else [node, node]
    try:
        return msgspec.msgpack.encode(_replace(tree, path, value))
    except (msgspec.MsgspecError, ValueError, TypeError, OverflowError):
        return None


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One byte-level mutation."""
    n = len(data)
    op = rng.randrange(9)
    if op == 0 and n:  # flip bits
        buf = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(n)] ^= 1 << rng.randrange(8)
        return bytes(buf)
    if op == 1:  # truncate
        return data[: rng.randint(0, max(0, n - 1))]
    if op == 2:  # insert garbage
        at = rng.randint(0, n)
        return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]
    if op == 3 and n:  # delete a slice
        at = rng.randrange(n)
        return data[:at] + data[at + rng.randint(1, 16):]
    if op == 4:  # a hostile token, inserted or overwriting
        at = rng.randint(0, n)
        token = rng.choice(TOKENS)
        end = at + (len(token) if rng.random() < 0.5 else 0)
        return data[:at] + token + data[end:]
    if op == 5:  # deep nesting spliced in
        at = rng.randint(0, n)
        return data[:at] + b"\x91" * rng.choice([100, 1000, DEEP]) + b"\xc0" + data[at:]
    if op == 6 and n:  # a byte set to an extreme
        buf = bytearray(data)
        buf[rng.randrange(n)] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0xC1, 0xDD, 0xDF])
        return bytes(buf)
    if op == 7:  # duplicated tail
        at = rng.randint(0, n)
        return data[:at] + data[at:] * rng.randint(2, 4)
    return rng.randbytes(rng.randint(0, 64))


def mutate(target: Target, data: bytes, rng: random.Random) -> bytes:
    """A hostile variant of the valid input `data`; one to three mutations."""
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        if target.msgpack and rng.random() < 0.5 and data.startswith(target.prefix):
            body = mutate_tree(data[len(target.prefix):], rng)
            if body is not None:
                data = target.prefix + body
                continue
        data = mutate_bytes(data, rng)
    return data


def case(target: Target, rng: random.Random) -> bytes:
    """One fuzz input: mostly a mutated valid input, sometimes a valid one or garbage."""
    roll = rng.random()
    if roll < 0.03 or not target.seeds:
        return rng.randbytes(rng.randint(0, 96))
    seed = rng.choice(target.seeds)
    return seed if roll < 0.06 else mutate(target, seed, rng)


def run_case(target: Target, data: bytes) -> BaseException | None:
    """Decode `data`; the undeclared exception that escaped, or None."""
    try:
        target.decode(data)
    except target.declared:
        return None
    except Exception as exc:  # what the fuzzer is here to find
        return exc
    return None
