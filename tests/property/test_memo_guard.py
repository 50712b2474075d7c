"""The pickle guard (abcast.replicated._memo_guard) is sound: whenever it lets a pickle
through, unpickling it never stores into the memo at an index above the pickle's length,
and never hashes a tuple or a frozenset (a dict key or set member: hashing one the memo
shares walks 2**depth paths). Judged by the pure-Python unpickler with a memo that records
every index and dict/set building that stops at such a key instead of hashing it, over
valid pickles of plain data mutated by inserting memo puts (big and small), other opcodes,
length prefixes and random bytes at random places, and over generated shared DAGs
(t1 = (t0, t0), …, shared by the memo or DUP) put in every place a pickle can hash them;
and planted guards (one that skips the opcode walk, one without the key rule, one
without the wide-int rule) must fail the same property. It never sets a dict key that
is an int beyond ±INT_KEY_BOUND either: such ints share hashes at will, and N of them
take N² steps to insert (16 000 in 207 kB: 1.2 s on main, for every replica)."""

from __future__ import annotations

import contextlib
import io
import pickle
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abcast.errors import RemoteProtocolError
from abcast.replicated import _memo_guard as memo_guard
from abcast.replicated._args import decode_invocation
from abcast.replicated._memo_guard import INT_KEY_BOUND, check_memo

B = INT_KEY_BOUND
#: dict keys of plain data; ints near the bound (8-byte LONG1s) make the guard walk
KEYS = (st.text(max_size=5) | st.integers(-B, B) | st.integers(B - 4, B)
        | st.integers(-B, -B + 4))
PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20)


def _long1(value: int) -> bytes:
    """LONG1 pushing `value` (as pickle.dumps writes it)."""
    body = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(body)]) + body


def _wide(value: int) -> bool:
    return type(value) is int and not -B <= value <= B

INSERTS = st.one_of(
    st.integers(0, 2**32 - 1).map(lambda i: b"r" + struct.pack("<I", i)),
    st.integers(-10, 10**12).map(lambda i: b"p" + str(i).encode() + b"\n"),
    st.sampled_from([b"p 1_000_000\n", b"p+99999999\n", b"q\xff", b"\x94", b"(", b"e", b"N",
                     b"\x8c\x05", b"X\xff\xff\xff\x7f", b"T\xff\xff\xff\xff", b"\x95" + bytes(8),
                     b"cos\nsystem\n", b".", b"I12\n", b"S'r\n"]),
    st.binary(min_size=1, max_size=6),
    st.sampled_from([B + 1, -B - 1, 2**64, B * 3, 2**61 - 1]).map(_long1),  # wide ints
)


class _Recorded(dict[Any, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.top = -1

    def __setitem__(self, key: Any, value: Any) -> None:
        self.top = max(self.top, key)
        super().__setitem__(key, value)


class _HashesAContainerError(Exception):
    pass


def _judged(load: Any, keys: Any) -> Any:
    def judge_then_load(self: _Watching) -> None:
        if any(type(key) in (tuple, frozenset) for key in keys(self)):
            self.hashed_container = True
            raise _HashesAContainerError  # instead of hashing it (which may never end)
        if any(_wide(key) for key in keys(self)):
            self.wide_key = True
            raise _HashesAContainerError  # instead of inserting it (maybe colliding)
        load(self)
    return judge_then_load


_PY = pickle._Unpickler  # type: ignore[attr-defined]  # the pure-Python one


class _Watching(_PY):  # type: ignore[misc]
    dispatch = dict(_PY.dispatch)
    # what each hashing opcode would hash (the items since the MARK are self.stack)
    for _code, _load, _keys in [
            (b"s", _PY.load_setitem, lambda self: self.stack[-2:-1]),
            (b"u", _PY.load_setitems, lambda self: self.stack[0::2]),
            (b"d", _PY.load_dict, lambda self: self.stack[0::2]),
            (b"\x90", _PY.load_additems, lambda self: self.stack),
            (b"\x91", _PY.load_frozenset, lambda self: self.stack)]:
        dispatch[_code[0]] = _judged(_load, _keys)

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.memo = _Recorded()
        self.hashed_container = False
        self.wide_key = False

    def find_class(self, module: str, name: str) -> Any:
        raise RemoteProtocolError("global")


def _watched(data: bytes) -> _Watching:
    reader = _Watching(data)
    with contextlib.suppress(Exception):  # malformed: what it did before failing counts
        reader.load()
    return reader


def _highest_memo_index(data: bytes) -> int:
    return int(_watched(data).memo.top)


def _dag(depth: int, share: str) -> bytes:
    """Opcodes pushing t_depth, where t0 = () and t_k+1 = (t_k, t_k): the memo (or DUP)
    shares t_k, so ~3 bytes a level make 2**depth paths."""
    out = b")"
    for level in range(depth):
        if share == "dup":
            out += b"2\x86"
        elif share == "memoize":  # protocol 4+: MEMOIZE, BINGET
            out += b"\x94h" + bytes([level]) + b"\x86"
        else:  # protocol 1-3: BINPUT / LONG_BINPUT, LONG_BINGET
            out += b"r" + struct.pack("<I", level) + b"j" + struct.pack("<I", level) + b"\x86"
    return out


# Where a pickle can hash the DAG (the ones before the value "legal" hash nothing).
PLACES = {
    "setitem": lambda dag: b"}" + dag + b"K\x01s",
    "setitems": lambda dag: b"}(K\x00N" + dag + b"K\x01u",
    "dict": lambda dag: b"(" + dag + b"K\x01d",
    "additems": lambda dag: b"\x8f(" + dag + b"\x90",
    "frozenset": lambda dag: b"(" + dag + b"\x91",
    "inside a key": lambda dag: b"}K\x07" + dag + b"\x86K\x01s",
    "as a value": lambda dag: b"}K\x01" + dag + b"s",
    "in a list": lambda dag: b"](" + dag + b"e",
}
DAGS = st.builds(lambda depth, share, place, protocol: (
    (b"\x80\x05" if protocol == 5 else b"\x80\x02") + PLACES[place](_dag(depth, share)) + b"."),
    st.integers(0, 40), st.sampled_from(["dup", "memoize", "binput"]),
    st.sampled_from(sorted(PLACES)), st.sampled_from([2, 5]))


def _mutated(value: object, protocol: int, inserts: list[tuple[int, bytes]]) -> bytes:
    data = pickle.dumps(value, protocol=protocol)
    for where, chunk in inserts:
        at = where % (len(data) + 1)
        data = data[:at] + chunk + data[at:]
    return data


def _guard_allows(guard: Any, data: bytes) -> bool:
    try:
        guard(data)
    except RemoteProtocolError:
        return False
    return True


def _sound(guard: Any, data: bytes) -> None:
    if _guard_allows(guard, data):
        reader = _watched(data)
        assert reader.memo.top <= max(len(data), 255)
        assert not reader.hashed_container
        assert not reader.wide_key, "a dict key beyond ±INT_KEY_BOUND was let through"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN, st.sampled_from([2, 5]),  # 5 frames its opcodes, 2 does not
       st.lists(st.tuples(st.integers(0, 10**6), INSERTS), max_size=3))
def test_a_pickle_the_guard_allows_never_stores_above_its_length(
        value: object, protocol: int, inserts: list[tuple[int, bytes]]) -> None:
    _sound(check_memo, _mutated(value, protocol, inserts))


@settings(max_examples=300, deadline=None)
@given(DAGS, PLAIN, st.lists(st.tuples(st.integers(0, 10**6), INSERTS), max_size=2))
def test_a_pickle_the_guard_allows_never_hashes_a_tuple(
        dag: bytes, value: object, inserts: list[tuple[int, bytes]]) -> None:
    _sound(check_memo, dag)
    # the DAG inside an operation's plain data, and that mutated
    body = pickle.dumps(("Cls", "m", (value,), {}), protocol=5)
    at = body.index(b"\x85")  # the args tuple: (value,) -> (value, dag)
    with_dag = body[:at] + dag[2:-1] + b"\x86" + body[at + 1:]
    _sound(check_memo, with_dag)
    for where, chunk in inserts:
        at = where % (len(with_dag) + 1)
        _sound(check_memo, with_dag[:at] + chunk + with_dag[at:])


@pytest.mark.parametrize("place", ["as a value", "in a list"])
def test_a_shared_dag_the_unpickler_does_not_hash_is_allowed(place: str) -> None:
    data = b"\x80\x05" + PLACES[place](_dag(40, "memoize")) + b"."
    check_memo(data)
    loaded = pickle.loads(data)
    top = loaded[1] if place == "as a value" else loaded[0]
    for _ in range(40):  # (t, t), the one t shared (== would walk 2**40 paths)
        assert type(top) is tuple and top[0] is top[1]
        top = top[0]
    assert top == ()


def test_the_planted_guard_without_the_key_rule_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = b"\x80\x05" + PLACES["setitem"](_dag(30, "memoize")) + b"."
    with pytest.raises(RemoteProtocolError, match="key is a tuple"):
        check_memo(data)
    monkeypatch.setattr(memo_guard, "_check_keys", lambda kinds: None)
    with pytest.raises(AssertionError):  # what the property test would report
        _sound(check_memo, data)


@given(PLAIN)
@settings(max_examples=100, deadline=None)
def test_every_pickle_of_plain_data_is_allowed(value: object) -> None:
    check_memo(pickle.dumps(value, protocol=5))
    check_memo(pickle.dumps(value, protocol=2))  # BINPUT and LONG_BINPUT within bounds


def test_the_planted_guard_that_stops_at_the_first_string_is_caught() -> None:
    def planted(data: bytes) -> None:  # "strings are data": stops where a string starts
        check_memo(data.split(b"X", 1)[0] + b".")

    data = pickle.dumps(["ab", 1], protocol=2)
    data = data.replace(b"K\x01", b"r\x00\xca\x9a\x3b" + b"K\x01")  # memo index 10^9
    assert _guard_allows(planted, data)
    assert _highest_memo_index(data) > len(data)  # what the property test would report
    with pytest.raises(RemoteProtocolError, match="memo index 1000000000"):
        check_memo(data)


def _operation(arg: bytes) -> bytes:
    """An operation's bytes, ("m.C", "put", (arg,), {}), around the opcodes of its argument."""
    return b"\x80\x05(\x8c\x03m.C\x8c\x03put" + arg + b"\x85}t."


@pytest.mark.parametrize("place", ["setitem", "setitems", "dict", "inside a key", "additems",
                                   "frozenset"])
@pytest.mark.parametrize("share", ["memoize", "dup"])
def test_an_operation_keyed_by_a_shared_tuple_is_refused_before_it_is_hashed(
        place: str, share: str) -> None:
    # ~100 bytes the C unpickler hashed path by path inside decode_invocation, before any
    # check: 26 levels ~1 s, the cost doubling per level (40: hours, signals ignored).
    # The guard refuses them, so nothing is hashed.
    data = _operation(PLACES[place](_dag(26, share)))
    with pytest.raises(RemoteProtocolError):
        check_memo(data)  # on main: allowed, then hashed
    with pytest.raises(RemoteProtocolError):
        decode_invocation(data)


def test_a_deep_tuple_key_is_refused_before_it_is_hashed() -> None:
    # a key (((…),),) nested 10**6 deep (1 MB) overflowed the C stack as it was hashed
    # (SIGSEGV); 1000 deep here, refused the same way
    with pytest.raises(RemoteProtocolError, match="key is a tuple"):
        check_memo(b"\x80\x05}" + b")" + b"\x85" * 1000 + b"K\x01s.")


def test_a_big_int_key_from_the_memo_is_refused() -> None:
    # hashing an int costs its size, each time: one 1 KB int set as a key 400 times
    # through the memo (BINGET, 2 bytes) is quadratic; pickle.dumps never memoizes an int
    big = pickle.dumps(2**8000, protocol=5)[2:-1]
    data = b"\x80\x05}(" + big + b"\x94K\x01" + b"h\x00K\x01" * 400 + b"u."
    with pytest.raises(RemoteProtocolError, match="key"):
        check_memo(data)
    check_memo(pickle.dumps({2: 2**8000}, protocol=5))  # plain data: allowed
    with pytest.raises(RemoteProtocolError, match="beyond"):  # a key beyond the bound
        check_memo(pickle.dumps({2**8000: 1}, protocol=5))


def _colliding(count: int) -> bytes:
    """An operation whose argument is a dict of `count` int keys of one hash (k·(2**61 − 1)),
    written as opcodes: a peer needs no such dict to send its bytes."""
    keys = b"".join(_long1(k * (2**61 - 1)) + b"N" for k in range(1, count + 1))
    return _operation(b"}(" + keys + b"u")


def test_an_operation_whose_dict_keys_collide_is_refused_before_it_is_filled() -> None:
    # 16 000 such keys (207 kB) kept the C unpickler busy 1.2 s (quadratic: 4 000, 80 ms)
    # inside decode_invocation on main, on every replica; now refused by the walk
    data = _colliding(16_000)
    with pytest.raises(RemoteProtocolError, match=r"int beyond ±2305843009213693950"):
        check_memo(data)
    with pytest.raises(RemoteProtocolError, match="beyond"):
        decode_invocation(data)
    edge = _operation(b"}(" + _long1(B) + b"N" + _long1(-B) + b"Nu")  # at the bound: plain
    check_memo(edge)
    assert sorted(decode_invocation(edge).args[0]) == [-B, B]


def test_the_planted_guard_without_the_wide_int_rule_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    data = _colliding(50)
    monkeypatch.setattr(memo_guard, "_int_kind", lambda data, pos, length: memo_guard._PLAIN)
    with pytest.raises(AssertionError, match="beyond"):  # what the property test reports
        _sound(check_memo, data)
