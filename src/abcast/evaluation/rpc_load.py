"""One client process of the bench's saturation experiment (abcast.evaluation.rpc_bench).

`python -m abcast.evaluation.rpc_load --registry URL --group G --seconds S --window W
--path P --contact C`: connects, prints `{"event": "ready", "node": …}`, waits for a
`go` line on stdin, keeps W requests in flight for S seconds (each a new one as soon as one is
decided), prints `{"event": "result", "requests": …, "ok": …, "p50_us": …}` and exits at
the next line on stdin (so its CPU time can be read while it still exists).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from abcast.rpc.client import Client
from abcast.rpc.voting import Status


def _emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def _main(args: argparse.Namespace) -> None:
    client = await Client.connect(args.group, registry=args.registry)
    loop = asyncio.get_running_loop()
    _emit(event="ready", node=client.id)
    await loop.run_in_executor(None, sys.stdin.readline)
    latencies: list[int] = []
    ok = 0
    done = 0
    end = time.monotonic() + args.seconds
    payload = b"x" * args.payload

    async def worker() -> None:
        nonlocal ok, done
        while time.monotonic() < end:
            start = time.perf_counter_ns()
            outcome = await client.request(payload, vote=args.vote, timeout=5.0,
                                           path=args.path, contact=args.contact)
            latencies.append((time.perf_counter_ns() - start) // 1000)
            done += 1
            ok += outcome.status is Status.OK

    await asyncio.gather(*(worker() for _ in range(args.window)))
    _emit(event="result", node=client.id, requests=done, ok=ok,
          p50_us=statistics.median(latencies) if latencies else None)
    await loop.run_in_executor(None, sys.stdin.readline)
    await client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--registry", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--window", type=int, default=8)
    parser.add_argument("--path", default="via-member")
    parser.add_argument("--contact", default="round-robin")
    parser.add_argument("--vote", default="majority")
    parser.add_argument("--payload", type=int, default=64)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
