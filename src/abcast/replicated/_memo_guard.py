"""The pickle guard: refuse a pickle that would make the C unpickler do far more work than
its own size, before it is unpickled.

Rules:
- Memo: the C unpickler grows its memo array to the index a PUT (`p`, a decimal line) or
  LONG_BINPUT (`r`, 4 bytes) names, so 36 bytes naming index 10⁹ allocate 8 GB (the fuzz
  tests found it). An index above the pickle's length is refused (pickle.dumps numbers memo
  entries 0, 1, 2, …, one per opcode at most; protocol 5 writes MEMOIZE, which names no
  index, and never PUT). BINPUT (`q`) names at most 255: harmless, allowed.
- Hashing: the unpickler hashes the key of every dict item it sets (SETITEM, SETITEMS,
  DICT) and every set member (ADDITEMS, FROZENSET). Hashing a tuple walks every path
  through it, and one the memo shares (`t1 = (t0, t0); t2 = (t1, t1); …` keyed 40 deep:
  ~150 bytes) holds 2**40 paths: the replica hangs inside the unpickler, before any
  plain-data check. Plain data has no sets and only None, bool, int, str and bytes as dict
  keys (abcast.replicated._args), so a tuple as a key, any set opcode, and DUP (which
  pickle.dumps never writes) are refused; so is an int of unbounded size (LONG, LONG4)
  taken from the memo as a key (pickle.dumps never memoizes an int; hashing one costs its
  size, each time). What remains costs the pickle's length in all: a str or bytes caches
  its hash, the other scalars hash in a bounded time, a list or dict is refused unhashed.
- Colliding keys: Python hashes an int n to n mod (2**61 − 1), so ints beyond
  ±INT_KEY_BOUND share hashes at will, and a dict of N of them takes N² steps to fill
  (16 000 in 207 kB: 1.2 s of the unpickler). Plain data keeps int keys within the bound
  (abcast.replicated._args), where no two share a hash but -1 and -2: an int key beyond
  it (a LONG1 of 8 bytes or more holding one; a LONG, LONG4 or INT, which pickle.dumps
  writes only for ints far beyond it, or never) is refused. str and bytes hashes are
  keyed per process: a peer cannot make them collide.

How it stays cheap: the walk runs only on bytes that can need it (C-speed scans): ones
holding a hashing opcode and one that makes a tuple or a big int (a LONG1 of 8 bytes or
more among them), or a `p` or `r` (a memo put). It follows the opcodes as the unpickler
reads them, keeping only the kind of each object on the unpickler's stack and in its
memo: one table lookup per opcode (how far to step, what it does to the stack), a run
of one fixed-size scalar skipped by a strip over a strided slice, and no decoding of
arguments but a LONG1 of 8 bytes or more (pickletools.genops, the guard before, decoded
every one: 5–100× the unpickle itself). It stops where the unpickler stops: at STOP, and
at an opcode the unpickler refuses (unknown, or a global: the plain unpickler refuses every
global, so nothing after one is ever read); what the unpickler would refuse for a missing
operand (an empty stack, no MARK, an empty memo slot) it refuses. The tables are built from
pickletools' opcode table, so their idea of where each opcode ends is the unpickler's.
"""

from __future__ import annotations

import pickletools
import re
from typing import Final

from abcast.errors import RemoteProtocolError

# How far each opcode byte makes the walk step: > 0, that many bytes (the opcode and its
# fixed-size argument); < 0, an argument of the kind below; 0, stop (STOP, GLOBAL and
# INST, which reach find_class and are refused, and bytes that are no opcode).
_LINE, _LEN1, _LEN4, _LEN4U, _LEN8 = -1, -2, -3, -4, -5

# What each opcode does to the stack the model keeps (by name; any other opcode is
# refused: it reaches code, buffers or sets, which plain data never pickles to).
_SCALAR, _BIG, _TUPLE, _TUPLE_N, _MARK, _TO_MARK, _SETITEM, _POP1, _POP = range(1, 10)
_PUT, _GET, _STOP, _NOTHING, _REFUSE = range(10, 15)
_EFFECTS: Final = {
    _SCALAR: "BININT BININT1 BININT2 LONG1 STRING BINSTRING SHORT_BINSTRING BINBYTES "
             "SHORT_BINBYTES BINBYTES8 BYTEARRAY8 NONE NEWTRUE NEWFALSE UNICODE "
             "SHORT_BINUNICODE BINUNICODE BINUNICODE8 FLOAT BINFLOAT EMPTY_LIST EMPTY_DICT",
    _BIG: "INT LONG LONG4", _TUPLE: "EMPTY_TUPLE", _TUPLE_N: "TUPLE1 TUPLE2 TUPLE3",
    _MARK: "MARK", _TO_MARK: "TUPLE LIST DICT APPENDS SETITEMS POP_MARK",
    _SETITEM: "SETITEM", _POP1: "APPEND", _POP: "POP",
    _PUT: "PUT BINPUT LONG_BINPUT MEMOIZE", _GET: "GET BINGET LONG_BINGET",
    _STOP: "STOP GLOBAL INST STACK_GLOBAL", _NOTHING: "PROTO FRAME",
}
# The kind of an object on the modelled stack: hashed in a bounded time (or refused
# unhashed); an int of unbounded size; never to be hashed (a tuple; a big int shared); an
# int beyond INT_KEY_BOUND (its hash shared at will). Only _PLAIN may be a dict key.
_PLAIN, _HUGE, _KEYLESS, _WIDE = 0, 1, 2, 3
_SHARED_KIND: Final = (_PLAIN, _KEYLESS, _KEYLESS, _KEYLESS)  # what a memo GET gives back
#: the widest int a dict key may be (either sign): below the int hash's modulus, ints hash
#: to themselves (but -1, which hashes as -2)
INT_KEY_BOUND: Final = 2**61 - 2


def _tables() -> tuple[tuple[int, ...], tuple[int, ...]]:
    kinds = {pickletools.UP_TO_NEWLINE: _LINE, pickletools.TAKEN_FROM_ARGUMENT1: _LEN1,
             pickletools.TAKEN_FROM_ARGUMENT4: _LEN4, pickletools.TAKEN_FROM_ARGUMENT4U: _LEN4U,
             pickletools.TAKEN_FROM_ARGUMENT8U: _LEN8}
    effect_of = {name: effect for effect, names in _EFFECTS.items() for name in names.split()}
    step, effect = [0] * 256, [_STOP] * 256
    for op in pickletools.opcodes:
        n = 0 if op.arg is None else op.arg.n
        step[ord(op.code)] = 0 if op.code in ".ci" else 1 + n if n >= 0 else kinds[n]
        effect[ord(op.code)] = effect_of.get(op.name, _REFUSE)
    return tuple(step), tuple(effect)


_STEP, _EFFECT = _tables()
_NAMES: Final = {ord(op.code): op.name for op in pickletools.opcodes}
_MEMOIZE: Final = 0x94
_LONG1: Final = 0x8A
#: opcodes looked at per slice when skipping a run of one opcode
_RUN_SLICE: Final = 512
_PLAIN_RUN: Final = (_PLAIN,) * _RUN_SLICE


def check_memo(data: bytes) -> None:
    """Raise RemoteProtocolError if unpickling `data` would store into the memo above its
    length or hash a key that is not plain data (see the rules)."""
    if (b"r" in data or b"p" in data or (
            any(map(data.__contains__, _HASHES))
            and (any(map(data.__contains__, _MAKES_KEYLESS))
                 or _WIDE_LONG1.search(data) is not None))):
        _walk(data)


_HASHES: Final = (b"u", b"s", b"d", b"\x90", b"\x91")
#: opcodes making what must not be hashed: tuples (a frozenset), ints of unbounded size
_MAKES_KEYLESS: Final = (b"\x85", b"\x86", b"\x87", b"t", b")", b"\x91", b"\x8b", b"L", b"I")
#: a LONG1 of 8 bytes or more: an int that may lie beyond INT_KEY_BOUND
_WIDE_LONG1: Final = re.compile(rb"\x8a[\x08-\xff]")
_SETITEMS, _DICT, _TUPLE_OP, _TUPLE1, _BINGET = b"u"[0], b"d"[0], b"t"[0], 0x85, b"h"[0]
_PUSHES_AFTER_MARK: Final = frozenset(b"tld")


def _walk(data: bytes) -> None:
    """Follow the opcodes as the unpickler reads them, with the kind of each object on its
    stack and in its memo. Where it lacks an operand (an IndexError or KeyError here: a
    truncated argument, an empty stack, no MARK, an empty memo slot) the unpickler refuses
    the pickle too: so does the walk."""
    end = len(data)
    step, effect = _STEP, _EFFECT
    stack: list[int] = []  # the kind of each object on the unpickler's stack
    marks: list[int] = []  # the stack's height at each MARK
    memo: dict[int, int] = {}  # what the memo holds at each index: its kind
    pos = 0
    try:
        while pos < end:
            code = data[pos]
            size = step[code]
            if size == _LEN1:  # a short str, bytes or int: plain (an int maybe wide)
                length = data[pos + 1]
                kind = _PLAIN if code != _LONG1 or length < 8 else _int_kind(data, pos, length)
                pos += 2 + length
                stack.append(kind)
                if data[pos] == _MEMOIZE:  # protocol 4+ memoizes every string it writes
                    memo[len(memo)] = _SHARED_KIND[kind]
                    pos += 1
                continue
            act = effect[code]
            if act == _SCALAR and size > 0:
                if data[pos + size] == code:
                    # A run of one fixed-size opcode (a list of small ints, of floats): its
                    # length by one C-speed strip over every size-th byte, a slice at a time.
                    run = data[pos:pos + _RUN_SLICE * size:size]
                    count = len(run) - len(run.lstrip(run[:1]))
                    stack += _PLAIN_RUN[:count]
                    pos += size * count
                else:
                    stack.append(_PLAIN)
                    pos += size
            elif act == _PUT:
                if code == _MEMOIZE:
                    memo[len(memo)] = _SHARED_KIND[stack[-1]]
                    pos += 1
                else:
                    index, pos = _memo_index(data, pos, size)
                    memo[index] = _SHARED_KIND[stack[-1]]
            elif act == _GET:
                if code == _BINGET:
                    stack.append(memo[data[pos + 1]])
                    pos += 2
                else:
                    index, pos = _memo_index(data, pos, size)
                    stack.append(memo[index])
            elif act == _MARK:
                marks.append(len(stack))
                pos += 1
            elif act == _TO_MARK:
                mark = marks.pop()
                if code in (_SETITEMS, _DICT):
                    _check_keys(stack[mark::2])
                del stack[mark:]
                if code in _PUSHES_AFTER_MARK:
                    stack.append(_KEYLESS if code == _TUPLE_OP else _PLAIN)
                pos += 1
            elif act == _TUPLE_N:
                count = code - _TUPLE1 + 1
                if len(stack) < count:
                    raise IndexError
                del stack[len(stack) - count:]
                stack.append(_KEYLESS)
                pos += 1
            elif act == _SETITEM:
                _check_keys(stack[-2:-1])
                del stack[-2:]
                pos += 1
            elif act == _POP1:
                stack.pop()
                pos += 1
            elif act in (_SCALAR, _BIG):  # an argument of variable length
                if size == _LINE:
                    newline = data.find(b"\n", pos + 1)
                    if newline < 0:
                        return  # a truncated line: the unpickler refuses it
                    pos = newline + 1
                else:
                    prefix = 4 if size != _LEN8 else 8
                    length = int.from_bytes(data[pos + 1:pos + 1 + prefix], "little",
                                            signed=size == _LEN4)
                    if length < 0:
                        return  # a negative length: the unpickler refuses it
                    pos += 1 + prefix + length
                stack.append(_PLAIN if act == _SCALAR else _HUGE)
            elif act == _TUPLE:
                stack.append(_KEYLESS)
                pos += 1
            elif act == _NOTHING:
                pos += size
            elif act == _POP:
                if marks and marks[-1] == len(stack):
                    marks.pop()
                else:
                    stack.pop()
                pos += 1
            elif act == _STOP:
                return  # STOP, a global, or a byte the unpickler refuses: it stops here
            else:
                raise RemoteProtocolError(f"pickle opcode {_NAMES[code]} at {pos}: "
                                          "not plain data")
    except (IndexError, KeyError):
        raise RemoteProtocolError(f"pickle opcode at {pos} lacks an operand") from None


def _memo_index(data: bytes, pos: int, size: int) -> tuple[int, int]:
    """The memo index the PUT or GET at `pos` names, checked against the pickle's length;
    where the next opcode starts."""
    end = len(data)
    if size == 2:
        return data[pos + 1], pos + 2  # BINPUT, BINGET
    if size == 5:
        index = int.from_bytes(data[pos + 1:pos + 5], "little")
        _check_index(index, end)
        return index, pos + 5
    newline = data.find(b"\n", pos + 1)
    if newline < 0:
        raise IndexError  # a truncated line
    line = data[pos + 1:newline]
    try:
        index = int(line)
    except ValueError:
        raise RemoteProtocolError(f"memo index {line!r} in a pickle of {end} bytes") from None
    _check_index(index, end)
    return index, newline + 1


def _int_kind(data: bytes, pos: int, length: int) -> int:
    """The kind of the LONG1 int at `pos` (of `length` bytes, 8 or more)."""
    value = int.from_bytes(data[pos + 2:pos + 2 + length], "little", signed=True)
    return _PLAIN if -INT_KEY_BOUND <= value <= INT_KEY_BOUND else _WIDE


def _check_keys(kinds: list[int]) -> None:
    if kinds.count(_PLAIN) == len(kinds):
        return
    if _KEYLESS in kinds:
        raise RemoteProtocolError("pickle sets a dict item whose key is a tuple (or an int "
                                  "from the memo): not plain data, and hashing it could "
                                  "walk 2**depth paths")
    raise RemoteProtocolError(f"pickle sets a dict item whose key is an int beyond "
                              f"±{INT_KEY_BOUND}: not plain data (such ints share hashes "
                              "at will: N of them take N² steps to insert)")


def _check_index(index: int, end: int) -> None:
    if not 0 <= index <= end:
        raise RemoteProtocolError(f"memo index {index} in a pickle of {end} bytes")
