"""A slow receiver against a fast sender for a minute (issue #21): a real 3-node tcp group
(sequencer), n3 reading its sockets `--open-ms` in every `--period-ms`, n2 broadcasting as
fast as `Group.broadcast()` lets it (abcast.testing.slow_receiver). Prints, per node, the
peak of every queue the channel keeps and the transport's buffered bytes, the broadcasts
and deliveries, and the bounds they are judged against; exit 1 if a queue passed its
bound (the sender's credit queue: max_waiting; the sequencer's queue to the slow node,
which carries orders for everybody's traffic: `--max-unstable` when given, the
sequencer's flow control, else reported, not judged) or a broadcast was not delivered
everywhere. A benchmark, not a test: the marked
test (tests/runtime/test_runtime_slow_receiver.py) runs it for 4 s.

    .venv/bin/python bench/slow_receiver.py                   # 60 s, window 1024 (default)
    .venv/bin/python bench/slow_receiver.py --seconds 10 --window 64 --max-waiting 64
    .venv/bin/python bench/slow_receiver.py --window 32 --max-waiting 32 --max-unstable 64
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys

from abcast.testing.slow_receiver import IDS, run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--window", type=int, default=1024)
    parser.add_argument("--max-waiting", type=int, default=1024)
    parser.add_argument("--payload", type=int, default=256)
    parser.add_argument("--max-unstable", type=int, default=None,
                        help="the sequencer's flow control (default: OrderingOptions')")
    parser.add_argument("--period-ms", type=float, default=200.0)
    parser.add_argument("--open-ms", type=float, default=5.0)
    args = parser.parse_args()
    peaks = asyncio.run(run(args.seconds, window=args.window, max_waiting=args.max_waiting,
                            payload=args.payload, period_s=args.period_ms / 1000,
                            open_s=args.open_ms / 1000, max_unstable=args.max_unstable))
    print(f"{args.seconds:g} s, window {args.window}, max_waiting {args.max_waiting}, "
          f"max_unstable {args.max_unstable or 'default'}, "
          f"n3 reads {args.open_ms:g} ms every {args.period_ms:g} ms; "
          f"{peaks.broadcasts} broadcasts by n2, {peaks.samples} samples")
    print("| node | peak unacked/link | peak in flight | peak credit queue | "
          "peak held above mark | peak transport bytes | delivered |")
    print("|---|---|---|---|---|---|---|")
    for node in IDS:
        print(f"| {node} | {peaks.unacked_per_link.get(node, 0)} | {peaks.in_flight.get(node, 0)}"
              f" | {peaks.backlog.get(node, 0)} | {peaks.held_above.get(node, 0)}"
              f" | {peaks.transport_buffered.get(node, 0)} | {peaks.delivered.get(node, 0)} |")
    print(f"peak RSS of the process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} KiB")
    broken = [
        *(f"{n}: unacked {v} > window" for n, v in peaks.unacked_per_link.items()
          if v > args.window),
        *(f"{n}: held above {v} > window" for n, v in peaks.held_above.items()
          if v > args.window),
        *(f"{n}: the sender's credit queue {v} > max_waiting + 1"
          for n, v in peaks.backlog.items() if n == "n2" and v > args.max_waiting + 1),
        *(f"{n}: the sequencer's queue {v} > max_unstable"
          for n, v in peaks.backlog.items()
          if n == "n1" and args.max_unstable is not None and v > args.max_unstable),
        *(f"{n}: delivered {v} of {peaks.broadcasts}" for n, v in peaks.delivered.items()
          if v != peaks.broadcasts),
    ]
    for problem in broken:
        print("BOUND BROKEN:", problem)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
