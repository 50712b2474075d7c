"""Two tcp:// nodes that disagree on max_frame_bytes, for a fixed time: what the logs and
the counters show. The sender `a` keeps the default bound (16 MiB), the receiver `b`
has a smaller one; `a` sends a frame above b's bound every `--every` seconds (what a
reliable channel's retransmissions of a large packet do), as the group's traffic would.

Prints one JSON line: log lines by level on abcast.transport (both nodes), b's
dropped/refused/bad counters, a's lost connections and reconnects, frames b delivered.
Runs against whatever `abcast` is on the path (PYTHONPATH=/work/main/src for main).

    .venv/bin/python bench/frame_bound_mismatch.py --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
from collections import Counter

from abcast.transport import Link, TransportOptions, transport_from_url


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.levels: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        self.levels[record.levelname] += 1


async def main(seconds: float, every: float, small: int) -> dict[str, object]:
    counter = _Count()
    log = logging.getLogger("abcast.transport")
    log.addHandler(counter)
    log.setLevel(logging.DEBUG)
    delivered = [0]

    def on_frame(link: Link, frame: bytes) -> None:
        delivered[0] += 1

    a = transport_from_url("tcp://127.0.0.1:0", TransportOptions())
    b = transport_from_url("tcp://127.0.0.1:0", TransportOptions(max_frame_bytes=small))
    await a.start("a", lambda link, frame: None)
    await b.start("b", on_frame)
    try:
        a.add_peer("b", b.address)
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while loop.time() < end:
            if not a.buffered("b"):
                a.send("b", bytes(4 * small))
            await asyncio.sleep(every)
    finally:
        await a.close()
        await b.close()
    return {
        "seconds": seconds, "log_lines": dict(counter.levels),
        "b_dropped_connections": b.stats.dropped_connections,
        "b_refused_links": getattr(b.stats, "refused_links", None),
        "b_bad_frames": b.stats.bad_frames, "b_frames_delivered": delivered[0],
        "a_lost_connections": a.stats.lost_connections, "a_reconnects": a.stats.reconnects,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=0.05)
    parser.add_argument("--small", type=int, default=16_384, help="b's max_frame_bytes")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.seconds, args.every, args.small))))
