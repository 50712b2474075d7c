"""What the C codec of the steady frames (abcast._steady_codec) costs per frame against
the Python path it would replace (issue #23, docs/performance.md §5 step 2), in one run:

- decoding: `parse(frame)` against `decode_envelope(frame)` and the stack's header
  decoders (`stack.codec.headers(env)`, as Stack.receive does), for a member's data frame
  and the sequencer's order frame of a lone message (one id, no payload, as a
  sequencer stack sends them: `abcast cluster --ordering sequencer --serial`);
- encoding: `encode_data_frame` / `encode_order_frame` against `encode_frame` of a
  Packet whose headers are built for the frame, as the stack builds them (the encode
  alone, headers built beforehand, in brackets).

Prints ns per frame (the best of `--repeat`, in this process's CPU time, which other load
on the machine disturbs less than wall time) and C / Python. A benchmark, not a test;
build the extension first (bench/build_native.py).

    .venv/bin/python bench/steady_codec_micro.py [--repeat 7] [--payload 100]
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from collections.abc import Callable

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.group.failure_detector import FD
from abcast.ids import View
from abcast.ordering.registry import build_stack
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel_wire import RData

try:
    from abcast import _steady_codec as sc
except ImportError:
    sys.exit("abcast._steady_codec is not built: run bench/build_native.py first")


def per_call_ns(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """ns per call of each of `fns`, the best of `repeat` rounds of ~0.2 s each. The
    functions take turns within each round, so that load from elsewhere on the machine
    falls on all of them alike and their ratios hold even when the absolute figures
    move."""
    timers = [timeit.Timer(fn, timer=time.process_time) for fn in fns]
    numbers = [max(t.autorange()[0], 20_000) for t in timers]
    best = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, (t, n) in enumerate(zip(timers, numbers, strict=True)):
            best[i] = min(best[i], t.timeit(n) / n * 1e9)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--payload", type=int, default=100, help="a data frame's payload bytes")
    args = parser.parse_args()
    group, me, origin = "g", "n1", "n2"
    codec = build_stack(me, group, "sequencer", View(1, ("n1", "n2", "n3"))).codec
    payload = bytes(args.payload)
    none = b""  # an order frame carries no payload (the bodies went in the data frames)
    data = encode_frame(group, origin, Packet((FD, RData(41, 40), SData(17)), payload))
    order = encode_frame(group, me, Packet((FD, RData(42, 41), SOrder(230, [(origin, 17)])),
                                           none))
    assert sc.encode_data_frame(group, origin, 41, 40, 17, payload) == data
    assert sc.encode_order_frame(group, me, 42, 41, 230, [(origin, 17)], none) == order
    ids = [(origin, 17)]
    data_packet = Packet((FD, RData(41, 40), SData(17)), payload)
    order_packet = Packet((FD, RData(42, 41), SOrder(230, ids)), none)
    rows: list[tuple[str, Callable[[], object], Callable[[], object], Callable[[], object]]] = [
        ("parse: data frame", lambda: sc.parse(data),
         lambda: codec.headers(decode_envelope(data)), lambda: None),
        ("parse: order frame", lambda: sc.parse(order),
         lambda: codec.headers(decode_envelope(order)), lambda: None),
        ("encode: data frame",
         lambda: sc.encode_data_frame(group, origin, 41, 40, 17, payload),
         lambda: encode_frame(group, origin, Packet((FD, RData(41, 40), SData(17)), payload)),
         lambda: encode_frame(group, origin, data_packet)),
        ("encode: order frame",
         lambda: sc.encode_order_frame(group, me, 42, 41, 230, ids, none),
         lambda: encode_frame(group, me, Packet((FD, RData(42, 41), SOrder(230, ids)),
                                                none)),
         lambda: encode_frame(group, me, order_packet)),
    ]
    print(f"data payload {args.payload} B, best of {args.repeat}, ns per frame (CPU time); "
          f"each includes one Python call of a lambda, "
          f"{per_call_ns([lambda: None], args.repeat)[0]:,.0f} ns alone")
    print(f"{'':22} {'C':>8} {'Python':>8} {'C/Python':>9}")
    for name, native, python, bare in rows:
        encoding = name.startswith("encode")
        c_ns, py_ns, *rest = per_call_ns([native, python, *([bare] if encoding else [])],
                                         args.repeat)
        note = (f"   [encode_frame alone {rest[0]:,.0f} ns: C/it {c_ns / rest[0]:.2f}]"
                if rest else "")
        print(f"{name:22} {c_ns:>8,.0f} {py_ns:>8,.0f} {c_ns / py_ns:>9.2f}{note}")


if __name__ == "__main__":
    main()
