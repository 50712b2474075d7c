"""Benchmark: `abcast check` on a 10-million-event trace (8 nodes x 1.25 M deliveries).

Rules: this script generates the trace with pyarrow and numpy (vectorized, a few seconds),
then times `abcast check DIR --json` in a fresh interpreter (so Spark start-up is
included) and prints events/s. The first check on a machine writes the driver JVM's
class archive (abcast.pipeline.class_archive) that every later start maps; if there is
none yet, an untimed check of a tiny trace writes it first, so the figure is the one a
user sees from the second check on. It is a benchmark, not a test: it asserts only that the
clean trace is reported clean, and never compares times against a limit.

The trace is one sequencer run: every node installs view 1, every message is sent once by
its origin and delivered by all nodes in one global order, so every check claimed by a
sequencer (integrity, validity, agreement, uniform agreement, fifo, total) has to look
at every row and finds nothing.

    .venv/bin/python bench/spark_check_10m.py [--out DIR] [--keep] [--master URL]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from abcast.pipeline.class_archive import archive_path
from abcast.pipeline.session import spark_home
from abcast.trace.schema import EVENT_SCHEMA, RUN_SCHEMA

RUN_ID = "bench-10m"
GROUP = "g"
SEQUENCER_GUARANTEES = ["integrity", "validity", "agreement", "uniform_agreement", "fifo", "total"]


@dataclass(frozen=True, slots=True)
class TraceShape:
    nodes: int
    deliveries_per_node: int
    payload_bytes: int
    seed: int

    @property
    def events(self) -> int:
        # deliveries + one send per message + one view row per node
        return self.nodes * self.deliveries_per_node + self.deliveries_per_node + self.nodes


def _const_string(value: str | None, n: int) -> pa.Array:
    """A dictionary-encoded constant column, cast to plain string (cheap to build)."""
    if value is None:
        return pa.nulls(n, pa.string())
    return pa.DictionaryArray.from_arrays(
        pa.array(np.zeros(n, dtype=np.int32)), pa.array([value], pa.string())
    ).cast(pa.string())


def _node_names(nodes: int) -> list[str]:
    return [f"n{i + 1}" for i in range(nodes)]


def _table(
    n: int,
    node: str,
    kind: str,
    origin: pa.Array,
    seq: pa.Array,
    t_ns: np.ndarray,
    index: np.ndarray | None,
    size: int | None,
    members: list[str] | None = None,
) -> pa.Table:
    columns = {
        "run_id": _const_string(RUN_ID, n),
        "node": _const_string(node, n),
        "kind": _const_string(kind, n),
        "origin": origin,
        "seq": seq,
        "group": _const_string(GROUP, n),
        "t_ns": pa.array(t_ns, pa.int64()),
        "index": pa.array(index, pa.int64()) if index is not None else pa.nulls(n, pa.int64()),
        "size": (pa.array(np.full(n, size, dtype=np.int32)) if size is not None
                 else pa.nulls(n, pa.int32())),
        "view_id": pa.array(np.ones(n, dtype=np.int64)),
        "deps": pa.nulls(n, EVENT_SCHEMA.field("deps").type),
        "peer": pa.nulls(n, pa.string()),
        "members": (pa.array([members] * n, pa.list_(pa.string())) if members is not None
                    else pa.nulls(n, pa.list_(pa.string()))),
    }
    return pa.Table.from_pydict(columns, schema=EVENT_SCHEMA)


def generate(out: Path, shape: TraceShape) -> None:
    """Write `out/events/<run>/<node>.parquet` and `out/runs.parquet` for one clean run."""
    rng = np.random.default_rng(shape.seed)
    names = _node_names(shape.nodes)
    m = shape.deliveries_per_node
    # Global order: a random interleaving of the origins; seq counts per origin.
    origin_ix = rng.integers(0, shape.nodes, size=m, dtype=np.int64)
    seq = np.empty(m, dtype=np.int64)
    for k in range(shape.nodes):
        mask = origin_ix == k
        seq[mask] = np.arange(1, int(mask.sum()) + 1, dtype=np.int64)
    origin_col = pa.DictionaryArray.from_arrays(
        pa.array(origin_ix.astype(np.int32)), pa.array(names, pa.string())
    ).cast(pa.string())
    seq_col = pa.array(seq, pa.int64())
    step = 1_000
    send_t = np.arange(m, dtype=np.int64) * step + 1_000_000
    run_dir = out / "events" / RUN_ID
    run_dir.mkdir(parents=True, exist_ok=True)
    for k, node in enumerate(names):
        # Strictly increasing t_ns per node: sends end in ...1, deliveries in 2..901.
        jitter = rng.integers(2, 900, size=m, dtype=np.int64)
        deliver_t = send_t - 1 + 200_000 + jitter
        deliveries = _table(m, node, "deliver", origin_col, seq_col, deliver_t,
                            np.arange(1, m + 1, dtype=np.int64), shape.payload_bytes)
        mine = np.flatnonzero(origin_ix == k)
        sends = _table(len(mine), node, "send", origin_col.take(pa.array(mine)),
                       seq_col.take(pa.array(mine)), send_t[mine],
                       np.arange(1, len(mine) + 1, dtype=np.int64), shape.payload_bytes)
        view = _table(1, node, "view", pa.nulls(1, pa.string()), pa.nulls(1, pa.int64()),
                      np.array([0], dtype=np.int64), np.array([1], dtype=np.int64), None,
                      members=names)
        table = pa.concat_tables([view, sends, deliveries])
        pq.write_table(table, run_dir / f"{node}.parquet", row_group_size=1 << 20)
    runs = pa.Table.from_pylist([{
        "run_id": RUN_ID, "ordering": "sequencer", "transport": "mem",
        "nodes": shape.nodes, "payload_bytes": shape.payload_bytes, "workload": "bench",
        "seed": shape.seed, "faults": "", "guarantees": SEQUENCER_GUARANTEES,
        "started_ns": 0, "duration_ns": int(send_t[-1]) + 1_000_000,
    }], schema=RUN_SCHEMA)
    pq.write_table(runs, out / "runs.parquet")


def _time_check(out: Path, master: str | None) -> tuple[float, dict[str, object]]:
    argv = [str(out), "--json"] + (["--master", master] if master else [])
    code = (
        "import sys; from abcast.pipeline.commands import check; "
        "check.main(args=sys.argv[1:], prog_name='abcast check')"
    )
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"abcast check failed with exit code {proc.returncode}")
    summary: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    summary["exit_code"] = proc.returncode
    return elapsed, summary


def warm_up(nodes: int, master: str | None) -> None:
    """Write the driver JVM's class archive, if there is none yet, with an untimed check
    of a tiny trace (once per PySpark install and JDK)."""
    archive = archive_path(spark_home())
    if archive is None or archive.is_file():
        return
    tiny = Path(tempfile.mkdtemp(prefix="abcast-warm-up-"))
    try:
        generate(tiny, TraceShape(nodes, 1_000, payload_bytes=64, seed=1))
        elapsed, _ = _time_check(tiny, master)
        print(f"warm-up: a check of {TraceShape(nodes, 1_000, 64, 1).events:,} events wrote "
              f"{archive} in {elapsed:.1f} s (once)", flush=True)
    finally:
        shutil.rmtree(tiny, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="trace dir (default: a temp dir)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the generated trace (a given --out is always kept)")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--deliveries-per-node", type=int, default=1_250_000)
    parser.add_argument("--master", default=None)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    shape = TraceShape(args.nodes, args.deliveries_per_node, payload_bytes=64, seed=args.seed)
    out = args.out or Path(tempfile.mkdtemp(prefix="abcast-bench-"))
    try:
        warm_up(args.nodes, args.master)
        started = time.perf_counter()
        generate(out, shape)
        print(f"generated {shape.events:,} events in {time.perf_counter() - started:.1f} s "
              f"-> {out}")
        elapsed, summary = _time_check(out, args.master)
        print(f"abcast check: {elapsed:.1f} s wall (Spark start-up included), "
              f"{shape.events / elapsed:,.0f} events/s, exit code {summary['exit_code']}")
        print(f"summary: runs={summary['runs']} events={summary['events']} "
              f"violations={summary['violations']}")
        found = summary["violations"]
        if summary["exit_code"] != 0 or (isinstance(found, dict) and any(found.values())):
            raise SystemExit("the clean trace was not reported clean")
    finally:
        if not args.keep and args.out is None:
            shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
