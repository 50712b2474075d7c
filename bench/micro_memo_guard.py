"""What the pickle memo guard costs (issue #21): decoding a replicated operation's bytes
(abcast.replicated._args.decode_invocation) with the guard against without it, for
payloads of different shapes; and the guard it replaced (a pickletools.genops walk),
kept here only as the reference. Prints µs per decode and the ratio to the unguarded
unpickle. Timed in this process's CPU time (the best of `--repeat`), which other load on
the machine disturbs less than wall time. A benchmark, not a test.

    .venv/bin/python bench/micro_memo_guard.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import pickle
import pickletools
import sys
import time
import timeit
from collections.abc import Callable

from abcast.errors import RemoteProtocolError
from abcast.replicated._args import _PlainUnpickler
from abcast.replicated._memo_guard import check_memo

PAYLOADS: dict[str, object] = {
    "small call (2 args)": ("Counter", "add", (5, "k"), {}),
    "1,000 small ints": ("Log", "extend", (list(range(1000)),), {}),
    "200 short strings": ("Log", "extend", ([f"item-{i}" for i in range(200)],), {}),
    "dict of 100 str->float": ("Map", "update", ({f"k{i}": i / 7 for i in range(100)},), {}),
    "one 64 KiB bytes": ("Blob", "put", (bytes(65536),), {}),
    "nested 50 x (int, str, [float])": (
        "Rows", "add", ([(i, f"r{i}", [i / 3, i / 5]) for i in range(50)],), {}),
}


def genops_guard(data: bytes) -> None:
    """The guard before this session (for reference only)."""
    for opcode, arg, _pos in pickletools.genops(data):
        if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT") and not (
                isinstance(arg, int) and 0 <= arg <= len(data)):
            raise RemoteProtocolError(f"memo index {arg!r}")
        if opcode.name == "STOP":
            return


def decoder(guard: Callable[[bytes], None] | None) -> Callable[[bytes], object]:
    def decode(data: bytes) -> object:
        if guard is not None:
            guard(data)
        return _PlainUnpickler(io.BytesIO(data)).load()
    return decode


def per_call_us(fn: Callable[[bytes], object], data: bytes, repeat: int) -> float:
    timer = timeit.Timer(lambda: fn(data), timer=time.process_time)
    number, _ = timer.autorange()
    return min(timer.repeat(repeat, number)) / number * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bare, new, old = decoder(None), decoder(check_memo), decoder(genops_guard)
    print("| payload | bytes | unpickle µs | + guard µs | ratio | + genops guard µs | ratio |")
    print("|---|---|---|---|---|---|---|")
    for name, value in PAYLOADS.items():
        data = pickle.dumps(value, protocol=5)
        t0, t1, t2 = (per_call_us(f, data, args.repeat) for f in (bare, new, old))
        print(f"| {name} | {len(data)} | {t0:.2f} | {t1:.2f} | {t1 / t0:.2f}× "
              f"| {t2:.2f} | {t2 / t0:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
