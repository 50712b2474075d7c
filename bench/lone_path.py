"""Benchmark: where a lone message's latency goes — each node process's own time on the
critical path, against the floor's p50 in the same round.

Rules: a round runs the floor's lone-message run (`abcast cluster --serial`'s workload,
abcast.evaluation.floor), then abcast's (n = 3, tcp, tracing off, the event loop of
`--loop`), in alternating order. In abcast's run every node process times three stretches
with `time.perf_counter_ns` (a `sitecustomize` this script puts first on the node
processes' PYTHONPATH wraps three methods; nothing in abcast knows of it):

- send → write: from the workload's `send_next` (where the send time is stamped into
  the payload) to the first socket write it causes — the sender's share of every hop;
- receive → write: from a read (`data_received`) to the first write it causes — at the
  sequencer, a member's data in, the order out;
- receive → deliver: from a read to the first delivery callback it causes.

The medians per process are printed, the sequencer's row marked. A sequencer message's
one-hop deliveries take send → write at its origin, the network and the receiver's
wake-up, then receive → deliver; so with the floor's p50 beside it, what abcast adds per
hop is the sum of these stretches minus the floor's (which does each in a few µs). The
p50 of the serial workload sits in the one-hop deliveries' upper tail (of every three
messages' nine deliveries one is local, four take one hop and four take two). A
benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/lone_path.py [--rounds 3] [--messages 3000] [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path

from abcast.evaluation.cluster import ClusterConfig
from abcast.evaluation.launcher import run_cluster

#: run in every node process before abcast is imported (`python -m abcast.cli node ...`)
SITECUSTOMIZE = '''
import atexit, json, os, sys, time
from array import array
out_dir = os.environ.get("ABCAST_LONE_PATH_DIR")
if out_dir and "node" in sys.argv:
    import abcast.evaluation.worker as worker
    import abcast.transport.tcp as tcp
    clock = time.perf_counter_ns
    spans = {k: array("q") for k in ("send_write", "recv_write", "recv_deliver")}
    since = {"send": 0, "recv": 0, "recv_write": 0}

    def timed_send(send_next):
        def wrapper(self):
            since["send"] = clock()
            try:
                return send_next(self)
            finally:
                since["send"] = 0
        return wrapper

    def timed_deliver(on_deliver):
        def wrapper(self, delivery):
            if since["recv"]:
                spans["recv_deliver"].append(clock() - since["recv"])
                since["recv"] = 0
            return on_deliver(self, delivery)
        return wrapper

    def timed_write(write):
        def wrapper(self, data):
            now = clock()
            for key, span in (("send", "send_write"), ("recv_write", "recv_write")):
                if since[key]:
                    spans[span].append(now - since[key])
                    since[key] = 0
            return write(self, data)
        return wrapper

    def timed_read(data_received):
        def wrapper(self, data):
            since["recv"] = since["recv_write"] = clock()
            try:
                return data_received(self, data)
            finally:
                since["recv"] = since["recv_write"] = 0
        return wrapper

    worker._Run.send_next = timed_send(worker._Run.send_next)
    worker._Run.on_deliver = timed_deliver(worker._Run.on_deliver)
    tcp._Outbound.write = timed_write(tcp._Outbound.write)
    tcp._Inbound.data_received = timed_read(tcp._Inbound.data_received)

    def dump():
        medians = {}
        for key, values in spans.items():
            kept = sorted(values[len(values) // 10:])  # the first tenth warms up
            if kept:
                medians[key] = kept[len(kept) // 2] / 1e3
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as fh:
            json.dump(medians, fh)

    atexit.register(dump)
'''

STRETCHES = (("send_write", "send → write"), ("recv_write", "receive → write"),
             ("recv_deliver", "receive → deliver"))


async def lone_run(messages: int, loop: str, floor: bool, spans_dir: Path | None
                   ) -> float:
    """One serial run; its p50 in µs."""
    config = ClusterConfig(nodes=3, ordering="sequencer", transport="tcp",
                           messages=messages, out=Path(tempfile.mkdtemp(prefix="lone-")),
                           serial=True, trace=False, event_loop=loop, floor=floor)
    if spans_dir is not None:
        os.environ["ABCAST_LONE_PATH_DIR"] = str(spans_dir)
    try:
        result = await run_cluster(config)
    finally:
        os.environ.pop("ABCAST_LONE_PATH_DIR", None)
    p50 = result.summary()["latency_p50_us"]
    if not isinstance(p50, float):
        raise SystemExit(f"the {'floor' if floor else 'sequencer'} run measured no latency")
    return p50


def node_spans(spans_dir: Path) -> list[dict[str, float]]:
    """Each node process's medians, the sequencer (the one that times receive → write,
    i.e. sends orders on reads) first."""
    nodes = [json.loads(p.read_text()) for p in sorted(spans_dir.glob("*.json"))]
    return sorted(nodes, key=lambda spans: "recv_write" not in spans)


async def main(args: argparse.Namespace) -> None:
    site = Path(tempfile.mkdtemp(prefix="lone-path-site-"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    floors: list[float] = []
    ours: list[float] = []
    per_stretch: dict[tuple[int, str], list[float]] = {}
    for round_ in range(args.rounds):
        order = (True, False) if round_ % 2 == 0 else (False, True)
        for floor in order:
            spans_dir = None if floor else Path(tempfile.mkdtemp(prefix="lone-path-"))
            p50 = await lone_run(args.messages, args.loop, floor, spans_dir)
            (floors if floor else ours).append(p50)
            if spans_dir is not None:
                for rank, spans in enumerate(node_spans(spans_dir)):
                    for key, value in spans.items():
                        per_stretch.setdefault((rank, key), []).append(value)
        print(f"round {round_ + 1}: floor p50 {floors[-1]:.0f} µs, sequencer p50 "
              f"{ours[-1]:.0f} µs ({ours[-1] / floors[-1]:.2f}x)", flush=True)
    floor_p50, our_p50 = statistics.median(floors), statistics.median(ours)
    print(f"\nmedians over {args.rounds} rounds ({args.loop}): floor p50 {floor_p50:.0f} µs,"
          f" sequencer p50 {our_p50:.0f} µs ({our_p50 / floor_p50:.2f}x the floor)")
    print("each node process's median stretch (µs), the sequencer first:")
    for rank in range(3):
        cells = []
        for key, label in STRETCHES:
            values = per_stretch.get((rank, key))
            if values:
                cells.append(f"{label} {statistics.median(values):5.1f}")
        name = "sequencer" if rank == 0 else f"member {rank}"
        print(f"  {name:<10} " + ",  ".join(cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    asyncio.run(main(parser.parse_args()))
