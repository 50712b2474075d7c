"""Benchmark: `abcast check` time and memory against trace size, embedded `local[2]`
against a 2-worker standalone cluster on this machine — when to move to a cluster.

Rules: for each size it generates the clean 8-node sequencer trace of
bench/spark_check_10m.py, then times `abcast check DIR --json` in a fresh interpreter
(start-up included) on `local[2]` and on a standalone cluster (a master and two workers
of 2 cores and `--worker-memory` each, started once from the installed PySpark,
abcast.pipeline.local_cluster), sampling every 0.5 s the resident memory of the JVMs
involved (the driver's process tree; on the cluster, the executors' too) and keeping the
peak, and the 1-minute load average when the check started (other work on the machine
slows it: compare only rows measured side by side). It prints a Markdown table, and
writes it to `--table FILE` as well (each row as soon as it is measured, so a long run
cut short keeps what it has). A benchmark, not a test: it asserts only that every clean
trace is reported clean. Like bench/spark_check_10m.py, it first writes the driver
JVM's class archive if there is none (untimed).

    .venv/bin/python bench/spark_scaling.py [--sizes 1,10,50] [--out DIR] [--table FILE]
        [--where local,cluster]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from spark_check_10m import TraceShape, generate, warm_up

from abcast.pipeline.local_cluster import standalone_cluster
from abcast.pipeline.session import EXECUTOR_MEMORY_ENV

NODES = 8


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def _rss_bytes(roots: list[int]) -> int:
    tree, total, todo, seen = _children(), 0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(tree.get(pid, []))
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def timed_check(trace: Path, master: str, also: list[int]) -> tuple[float, int, dict[str, object]]:
    """(seconds, peak RSS of the check's tree and of `also`'s, the JSON verdict)."""
    code = ("import sys; from abcast.pipeline.commands import check; "
            "check.main(args=sys.argv[1:], prog_name='abcast check')")
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, str(trace), "--json",
                             "--master", master], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.5):
            peak = max(peak, _rss_bytes([proc.pid, *also]))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"abcast check --master {master} failed ({proc.returncode})")
    verdict: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    if proc.returncode != 0:
        raise SystemExit(f"the clean trace was not reported clean on {master}: {verdict}")
    return elapsed, peak, verdict


_HEADER = ("| events | where | wall s | events/s | peak RSS GiB | load avg |\n"
           "|---|---|---|---|---|---|\n")


def _row(events: int, label: str, seconds: float, peak: int, load: float) -> str:
    return (f"| {events:,} | {label} | {seconds:.1f} | {events / seconds:,.0f} | "
            f"{peak / 2**30:.1f} | {load:.1f} |\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,50", help="millions of deliveries")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--worker-memory", default="4g")
    parser.add_argument("--executor-memory", default="3g")
    parser.add_argument("--table", type=Path, default=None, help="also write the table here")
    parser.add_argument("--where", default="local,cluster",
                        help="local, cluster or both (comma-separated)")
    args = parser.parse_args()
    where = set(args.where.split(","))
    if args.table is not None:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        args.table.write_text(_HEADER)
    os.environ[EXECUTOR_MEMORY_ENV] = args.executor_memory
    work = args.out or Path(tempfile.mkdtemp(prefix="abcast-scaling-"))
    rows = []
    try:
        with standalone_cluster(work / "cluster", memory=args.worker_memory) as cluster:
            workers = [p.pid for p in cluster.processes[1:]]
            warm_up(NODES, None)
            for millions in (float(x) for x in args.sizes.split(",")):
                shape = TraceShape(NODES, int(millions * 1_000_000 / NODES), 64, seed=7)
                trace = work / f"trace-{millions:g}m"
                generate(trace, shape)
                for key, label, master, also in (
                        ("local", "local[2]", "local[2]", []),
                        ("cluster", "standalone 2×2", cluster.url, workers)):
                    if key not in where:
                        continue
                    load = os.getloadavg()[0]
                    seconds, peak, _ = timed_check(trace, master, also)
                    row = _row(shape.events, label, seconds, peak, load)
                    rows.append(row)
                    print(f"{shape.events:,} events, {label}: {seconds:.1f} s, "
                          f"peak RSS {peak / 2**30:.1f} GiB, load {load:.1f}", flush=True)
                    if args.table is not None:
                        with args.table.open("a") as table:
                            table.write(row)
                shutil.rmtree(trace, ignore_errors=True)
    finally:
        if args.out is None:
            shutil.rmtree(work, ignore_errors=True)
    print("\n" + _HEADER + "".join(rows), end="")


if __name__ == "__main__":
    main()
