"""The memo guard (abcast.replicated._memo_guard) is sound: whenever it lets a pickle
through, unpickling it never stores into the memo at an index above the pickle's length.
Judged by the pure-Python unpickler with a memo that records every index, over valid
pickles of plain data mutated by inserting memo puts (big and small), other opcodes,
length prefixes and random bytes at random places; and a planted guard that skips the
opcode walk must fail the same property."""

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
from abcast.replicated._memo_guard import check_memo

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda inner: st.lists(inner, max_size=5) | st.tuples(inner, inner)
    | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20)

INSERTS = st.one_of(
    st.integers(0, 2**32 - 1).map(lambda i: b"r" + struct.pack("<I", i)),
    st.integers(-10, 10**12).map(lambda i: b"p" + str(i).encode() + b"\n"),
    st.sampled_from([b"p 1_000_000\n", b"p+99999999\n", b"q\xff", b"\x94", b"(", b"e", b"N",
                     b"\x8c\x05", b"X\xff\xff\xff\x7f", b"T\xff\xff\xff\xff", b"\x95" + bytes(8),
                     b"cos\nsystem\n", b".", b"I12\n", b"S'r\n"]),
    st.binary(min_size=1, max_size=6),
)


class _Recorded(dict[Any, Any]):
    def __init__(self) -> None:
        super().__init__()
        self.top = -1

    def __setitem__(self, key: Any, value: Any) -> None:
        self.top = max(self.top, key)
        super().__setitem__(key, value)


class _Watching(pickle._Unpickler):  # type: ignore[name-defined,misc]  # the pure-Python one
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.memo = _Recorded()

    def find_class(self, module: str, name: str) -> Any:
        raise RemoteProtocolError("global")


def _highest_memo_index(data: bytes) -> int:
    reader = _Watching(data)
    with contextlib.suppress(Exception):  # malformed: what it stored before failing counts
        reader.load()
    return int(reader.memo.top)


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


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(PLAIN, st.sampled_from([2, 5]),  # 5 frames its opcodes, 2 does not
       st.lists(st.tuples(st.integers(0, 10**6), INSERTS), max_size=3))
def test_a_pickle_the_guard_allows_never_stores_above_its_length(
        value: object, protocol: int, inserts: list[tuple[int, bytes]]) -> None:
    data = _mutated(value, protocol, inserts)
    if _guard_allows(check_memo, data):
        assert _highest_memo_index(data) <= max(len(data), 255)


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
