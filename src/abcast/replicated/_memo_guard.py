"""The memo guard: refuse a pickle that would make the C unpickler allocate far more than
its own size, before it is unpickled.

Rules: the C unpickler grows its memo array to the index a PUT (`p`, a decimal line) or
LONG_BINPUT (`r`, 4 bytes) names, so 36 bytes naming index 10⁹ allocate 8 GB (the fuzz
tests found it). `check_memo` refuses such an index above the pickle's length (pickle.dumps
numbers memo entries 0, 1, 2, …, one per opcode at most; protocol 5 writes MEMOIZE, which
names no index, and never PUT). BINPUT (`q`) names at most 255: harmless, allowed.

How it stays cheap: bytes holding neither `p` nor `r` cannot hold a memo put (two
C-speed scans). Otherwise it walks the opcodes as the unpickler reads them, with one
table lookup per opcode (how far to step), a run of one fixed-size opcode skipped by a
strip over a strided slice, and no decoding of arguments (pickletools.genops,
the guard before, decoded every one: 5–100× the unpickle itself). It stops where the
unpickler stops: at STOP, and at an opcode the unpickler refuses (unknown, or a global:
the plain unpickler refuses every global, so nothing after one is ever read). The table
is built from pickletools' opcode table, so its idea of where each opcode ends is the
unpickler's.
"""

from __future__ import annotations

import pickletools
from typing import Final

from abcast.errors import RemoteProtocolError

# What each opcode byte makes the walk do: > 0, step over that many bytes (the opcode and
# its fixed-size argument); the negative codes below; 0, stop (STOP, GLOBAL and INST,
# which reach find_class and are refused, and bytes that are no opcode).
_LINE, _LEN1, _LEN4, _LEN4U, _LEN8, _PUT, _LONG_BINPUT = -1, -2, -3, -4, -5, -6, -7


def _table() -> tuple[int, ...]:
    kinds = {pickletools.UP_TO_NEWLINE: _LINE, pickletools.TAKEN_FROM_ARGUMENT1: _LEN1,
             pickletools.TAKEN_FROM_ARGUMENT4: _LEN4, pickletools.TAKEN_FROM_ARGUMENT4U: _LEN4U,
             pickletools.TAKEN_FROM_ARGUMENT8U: _LEN8}
    table = [0] * 256
    for op in pickletools.opcodes:
        n = 0 if op.arg is None else op.arg.n
        table[ord(op.code)] = (0 if op.code in ".ci" else _PUT if op.code == "p"
                               else _LONG_BINPUT if op.code == "r"
                               else 1 + n if n >= 0 else kinds[n])
    return tuple(table)


_STEP: Final = _table()
_MEMOIZE: Final = 0x94
#: opcodes looked at per slice when skipping a run of one opcode
_RUN_SLICE: Final = 512


def check_memo(data: bytes) -> None:
    """Raise RemoteProtocolError if `data` names a memo index above its own length."""
    if b"r" not in data and b"p" not in data:
        return  # no memo put can be in it
    end = len(data)
    step = _STEP
    pos = 0
    while pos < end:
        code = data[pos]
        kind = step[code]
        if kind > 0:
            if pos + kind < end and data[pos + kind] == code:
                # A run of one fixed-size opcode (a list of small ints, of floats): its
                # length by one C-speed strip over every kind-th byte, a slice at a time.
                run = data[pos:pos + _RUN_SLICE * kind:kind]
                pos += kind * (len(run) - len(run.lstrip(run[:1])))
            else:
                pos += kind
        elif kind == _LEN1:
            pos += 2 + data[pos + 1] if pos + 1 < end else 1
            if pos < end and data[pos] == _MEMOIZE:
                pos += 1  # protocol 4+ memoizes every short string it writes
        elif kind == 0:
            return  # STOP, a global, or a byte the unpickler refuses: it stops here
        elif kind == _LONG_BINPUT:
            _check_index(int.from_bytes(data[pos + 1:pos + 5], "little"), end)
            pos += 5
        elif kind in (_LINE, _PUT):
            newline = data.find(b"\n", pos + 1)
            if newline < 0:
                return  # a truncated line: the unpickler refuses it
            if kind == _PUT:
                _check_put(data[pos + 1:newline], end)
            pos = newline + 1
        else:
            prefix = 4 if kind != _LEN8 else 8
            size = int.from_bytes(data[pos + 1:pos + 1 + prefix], "little", signed=kind == _LEN4)
            if size < 0:
                return  # a negative length: the unpickler refuses it
            pos += 1 + prefix + size


def _check_index(index: int, end: int) -> None:
    if not 0 <= index <= end:
        raise RemoteProtocolError(f"memo index {index} in a pickle of {end} bytes")


def _check_put(line: bytes, end: int) -> None:
    try:
        index = int(line)
    except ValueError:
        raise RemoteProtocolError(f"memo index {line!r} in a pickle of {end} bytes") from None
    _check_index(index, end)
