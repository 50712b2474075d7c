"""CPU time of one trace flush (5,000 delivery rows, recorded as five delivered batches of
1,000, gathered into a table by EventColumns and written as an lz4 Arrow IPC batch, as a
StreamingSink's thread does) on each Arrow memory pool: what the system
pool a StreamingSink chooses (abcast.trace.stream.use_system_memory_pool) costs against
mimalloc, the wheels' default, which kept a long-lived node's freed pages (README, the
soak). Best of `--repeat`, each the mean of 20 flushes.

    .venv/bin/python bench/trace_memory_pool.py [--pools mimalloc system jemalloc]
"""

from __future__ import annotations

import argparse
import io
import time

import pyarrow as pa

from abcast.trace.columns import EventColumns
from abcast.trace.rows import MessageRun
from abcast.trace.schema import EVENT_SCHEMA
from abcast.trace.stream import _STREAM_OPTIONS

BATCH, BATCHES = 1_000, 5
RUNS = [MessageRun("r", "n1", "deliver", "n2", 1 + k * BATCH, "g", 10**18 + k * BATCH,
                   k * BATCH, [64] * BATCH, 1) for k in range(BATCHES)]
ROWS = BATCH * BATCHES


def flush_cpu_s(flushes: int = 20) -> float:
    start = time.process_time()
    for _ in range(flushes):
        columns = EventColumns()
        for run in RUNS:
            columns.add_run(run)
        table = columns.take()
        with pa.ipc.new_stream(io.BytesIO(), EVENT_SCHEMA, options=_STREAM_OPTIONS) as w:
            w.write_table(table)
    return (time.process_time() - start) / flushes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pools", nargs="+", default=["mimalloc", "system"])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name in args.pools:
        try:
            pa.set_memory_pool(getattr(pa, f"{name}_memory_pool")())
        except (AttributeError, NotImplementedError, pa.ArrowException) as exc:
            print(f"{name:9s} not available here ({exc})")
            continue
        flush_cpu_s(2)  # warm up
        best = min(flush_cpu_s() for _ in range(args.repeat))
        print(f"{name:9s} {best * 1e3:6.2f} ms CPU per {ROWS:,}-row flush")


if __name__ == "__main__":
    main()
