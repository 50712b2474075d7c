"""Benchmark: where a lone message's latency goes — each node process's own time on the
critical path, each delivery's latency by sender and receiver, and what each protocol
layer adds — against the floor's p50 in the same round.

Rules: a round runs the floor's lone-message run (`abcast cluster --serial`'s workload,
abcast.evaluation.floor), then abcast's (n = 3, tcp, tracing off, the event loop of
`--loop`), in alternating order. A `sitecustomize` this script puts first on the node
processes' PYTHONPATH wraps a few methods (nothing in abcast knows of it):

- In abcast's runs every node process times three stretches with `time.perf_counter_ns`:
  send → write, from the workload's `send_next` (where the send time is stamped into the
  payload) to the first socket write it causes — the sender's share of every hop;
  receive → write, from a read (`data_received`) to the first write it causes — at the
  sequencer, a member's data in, the order out; receive → deliver, from a read to the
  first delivery callback it causes. The medians per process are printed, the
  sequencer's row first.
- In every run, the floor's included, each delivery's latency (the workload's stamp to
  the callback, `time.time_ns` on both sides) is kept by its origin, and the p50 of each
  of the nine (receiver, origin) pairs is printed with its hops: the sequencer's own
  message (local, then one hop to each member), a member's message at the sequencer
  (one hop) and at the members (two: data to the sequencer, its order back).
- `--lane` adds, per round, an abcast run with the steady-state lane prototype
  installed in its node processes (bench/_lane_prototype.py): what a lane in Python buys.
- `--tree DIR ...` adds, per round, an abcast run from each of these checkouts (`git
  worktree add /tmp/before <commit>`): two commits compared in the same rounds, each
  variant's p50 also as its ratio to abcast's of the same round (the median printed).
- `--strip` adds, per round, abcast runs with layers taken out of every stack (the
  failure detector, the reliable channel, the membership layer, then all three: only the
  ordering core is left). A measurement, not a protocol: the run is fault-free and TCP
  is reliable and FIFO per link, so the sequencer's deliveries stay what they are; what
  each variant saves is that layer's share of the p50.

A sequencer message's one-hop deliveries take send → write at its origin, the network and
the receiver's wake-up, then receive → deliver; with the floor beside it, what abcast adds
per hop is the sum of these stretches minus the floor's (which does each in a few µs).
The p50 of the serial workload is the fifth of the nine pairs' latencies: it sits between
the one-hop pairs and the two-hop ones, which is why the pair table is printed. A
benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/lone_path.py [--rounds 3] [--messages 3000] [--loop uvloop]
                                        [--strip] [--lane] [--tree DIR ...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
from pathlib import Path

from abcast.evaluation.cluster import ClusterConfig, ClusterResult
from abcast.evaluation.launcher import run_cluster
from abcast.ids import sorted_nodes

#: run in every node process before abcast is imported (`python -m abcast.cli node ...`,
#: `python -m abcast.evaluation.floor ...`)
SITECUSTOMIZE = '''
import atexit, json, os, sys, time
from array import array
out_dir = os.environ.get("ABCAST_LONE_PATH_DIR")
# (at start-up sys.argv[0] is still "-m": tell the floor by its arguments)
is_floor = "node" not in sys.argv and "--run-id" in sys.argv
if out_dir and ("node" in sys.argv or is_floor):
    import abcast.evaluation.worker as worker
    clock = time.perf_counter_ns
    spans = {k: array("q") for k in ("send_write", "recv_write", "recv_deliver")}
    since = {"send": 0, "recv": 0, "recv_write": 0}
    by_origin = {}
    me = []
    stamp_bytes = worker.STAMP_BYTES

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
            payload = delivery.payload
            if len(payload) >= stamp_bytes:
                if not me:
                    me.append(self.node.id)
                latency = time.time_ns() - int.from_bytes(payload[:stamp_bytes], "big")
                by_origin.setdefault(delivery.origin, array("q")).append(latency)
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

    worker._Run.on_deliver = timed_deliver(worker._Run.on_deliver)
    if not is_floor:
        import abcast.transport.tcp as tcp
        worker._Run.send_next = timed_send(worker._Run.send_next)
        tcp._Outbound.write = timed_write(tcp._Outbound.write)
        tcp._Inbound.data_received = timed_read(tcp._Inbound.data_received)

    lane = os.environ.get("ABCAST_LONE_PATH_LANE")
    if lane and not is_floor:  # bench/_lane_prototype.py, from the bench directory named
        sys.path.insert(0, lane)
        import _lane_prototype
        _lane_prototype.install()

    strip = set(filter(None, os.environ.get("ABCAST_LONE_PATH_STRIP", "").split(",")))
    if strip and not is_floor:
        import abcast.runtime.group as group_module
        from abcast.group.failure_detector import FailureDetectorLayer
        from abcast.membership import Membership
        from abcast.reliability.basic_channel import BasicChannel
        from abcast.reliability.channel import ReliableChannel
        from abcast.reliability.nak import NakChannel
        from abcast.stack import Stack
        build_stack = group_module.build_stack

        def stripped(node, name, ordering, view, options=None):
            layers = []
            for layer in build_stack(node, name, ordering, view, options).layers:
                if isinstance(layer, FailureDetectorLayer):
                    if "detector" not in strip:
                        layers.append(layer)
                elif isinstance(layer, ReliableChannel | BasicChannel | NakChannel):
                    if "channel" not in strip:
                        layers.append(layer)
                elif isinstance(layer, Membership) and "membership" in strip:
                    layers.append(layer.ordering)
                else:
                    layers.append(layer)
            return Stack(node, name, layers, view)

        group_module.build_stack = stripped

    def median_us(values):
        kept = sorted(values[len(values) // 10:])  # the first tenth warms up
        return kept[len(kept) // 2] / 1e3 if kept else None

    def dump():
        medians = {key: median_us(values) for key, values in spans.items() if values}
        pairs = {origin: median_us(values) for origin, values in by_origin.items()}
        with open(os.path.join(out_dir, f"{os.getpid()}.json"), "w") as fh:
            json.dump({"node": me[0] if me else None, "spans": medians, "pairs": pairs}, fh)

    atexit.register(dump)
'''

STRETCHES = (("send_write", "send → write"), ("recv_write", "receive → write"),
             ("recv_deliver", "receive → deliver"))
#: the abcast variants of `--strip`: (label, layers taken out)
VARIANTS = (("abcast", ""), ("no detector", "detector"), ("no channel", "channel"),
            ("no membership", "membership"), ("core only", "detector,channel,membership"))
#: the nine (receiver, origin) pairs by role, with their hops; S the sequencer
PAIRS = (("S", "S", "local"), ("M1", "S", "1 hop"), ("M2", "S", "1 hop"),
         ("S", "M1", "1 hop"), ("S", "M2", "1 hop"), ("M2", "M1", "2 hops"),
         ("M1", "M2", "2 hops"), ("M1", "M1", "2 hops"), ("M2", "M2", "2 hops"))


async def serial_run(messages: int, loop: str, floor: bool, env: dict[str, str]
                     ) -> ClusterResult:
    """One serial run (n = 3, tcp, tracing off) with `env` set for its node processes
    (the sitecustomize's settings); bench/floor_budget.py runs its own through this."""
    config = ClusterConfig(nodes=3, ordering="sequencer", transport="tcp",
                           messages=messages, out=Path(tempfile.mkdtemp(prefix="lone-")),
                           serial=True, trace=False, event_loop=loop, floor=floor)
    os.environ.update(env)
    try:
        return await run_cluster(config)
    finally:
        for key in env:
            os.environ.pop(key, None)


async def lone_run(messages: int, loop: str, floor: bool, spans_dir: Path | None,
                   strip: str = "") -> float:
    """One serial run; its p50 in µs. With `spans_dir`, the node processes write what the
    sitecustomize measured there (one JSON file each). `strip` "lane": abcast with the
    lane prototype installed (bench/_lane_prototype.py); "tree:<dir>": abcast from that
    checkout's src; else the layers to take out."""
    env = ({"ABCAST_LONE_PATH_LANE": str(Path(__file__).parent)} if strip == "lane"
           else {"ABCAST_LONE_PATH_STRIP": strip})
    if spans_dir is not None:
        env["ABCAST_LONE_PATH_DIR"] = str(spans_dir)
    saved = os.environ["PYTHONPATH"]
    if strip.startswith("tree:"):  # the sitecustomize's directory first, as in main()
        os.environ["PYTHONPATH"] = os.pathsep.join(
            (saved.split(os.pathsep)[0], str(Path(strip[5:]) / "src")))
    try:
        p50 = (await serial_run(messages, loop, floor, env)).summary()["latency_p50_us"]
    finally:
        os.environ["PYTHONPATH"] = saved
    if not isinstance(p50, float):
        raise SystemExit(f"the {'floor' if floor else 'sequencer'} run measured no latency")
    return p50


def node_files(spans_dir: Path) -> list[dict[str, object]]:
    """Each node process's file, the sequencer (the lowest id, in abcast and the floor)
    first, then the members in id order."""
    nodes = [json.loads(p.read_text()) for p in spans_dir.glob("*.json")]
    nodes = [node for node in nodes if node["node"] is not None]
    order = sorted_nodes([str(node["node"]) for node in nodes])
    return sorted(nodes, key=lambda node: order.index(str(node["node"])))


def pair_p50s(files: list[dict[str, object]]) -> dict[tuple[str, str], float]:
    """(receiver role, origin role) → that pair's p50 in µs."""
    roles = {str(node["node"]): ("S", "M1", "M2")[rank] for rank, node in enumerate(files)}
    found: dict[tuple[str, str], float] = {}
    for node in files:
        pairs = node["pairs"]
        assert isinstance(pairs, dict)
        for origin, p50 in pairs.items():
            if p50 is not None and origin in roles:
                found[(roles[str(node["node"])], roles[origin])] = p50
    return found


async def main(args: argparse.Namespace) -> None:
    site = Path(tempfile.mkdtemp(prefix="lone-path-site-"))
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    variants = (VARIANTS if args.strip else VARIANTS[:1]) + (
        (("lane prototype", "lane"),) if args.lane else ()) + tuple(
        (Path(tree).name or tree, "tree:" + tree) for tree in args.tree)
    runs = [("floor", None), *variants]
    p50s: dict[str, list[float]] = {label: [] for label, _ in runs}
    per_stretch: dict[tuple[int, str], list[float]] = {}
    pairs: dict[str, dict[tuple[str, str], list[float]]] = {label: {} for label, _ in runs}
    for round_ in range(args.rounds):
        for label, strip in runs if round_ % 2 == 0 else runs[::-1]:
            files_dir = Path(tempfile.mkdtemp(prefix="lone-path-"))
            p50 = await lone_run(args.messages, args.loop, strip is None, files_dir,
                                 strip or "")
            p50s[label].append(p50)
            files = node_files(files_dir)
            if label in pairs:
                for pair, value in pair_p50s(files).items():
                    pairs[label].setdefault(pair, []).append(value)
            if label == "abcast":
                for rank, node in enumerate(files):
                    spans = node["spans"]
                    assert isinstance(spans, dict)
                    for key, value in spans.items():
                        per_stretch.setdefault((rank, key), []).append(value)
        floor = p50s["floor"][-1]
        ours_now = ", ".join(f"{label} {p50s[label][-1]:.0f} µs ({p50s[label][-1] / floor:.2f}x)"
                             for label, _ in runs[1:])
        print(f"round {round_ + 1}: floor p50 {floor:.0f} µs, {ours_now}", flush=True)

    floor_p50 = statistics.median(p50s["floor"])
    ours = statistics.median(p50s["abcast"])
    print(f"\nmedians over {args.rounds} rounds ({args.loop}): floor p50 {floor_p50:.0f} µs,"
          f" sequencer p50 {ours:.0f} µs ({ours / floor_p50:.2f}x the floor)")
    if len(variants) > 1:
        print("variants (p50, and what each saves):")
        for label, _ in variants[1:]:
            p50 = statistics.median(p50s[label])
            ratio = statistics.median(
                a / b for a, b in zip(p50s[label], p50s["abcast"], strict=True))
            print(f"  {label:<14} {p50:6.0f} µs  {p50 / floor_p50:5.2f}x the floor"
                  f"  {ours - p50:+6.0f} µs; its p50 ÷ abcast's in each round, median "
                  f"{ratio:.3f}")
    print("each node process's median stretch (µs), the sequencer first:")
    for rank in range(3):
        cells: list[str] = []
        for key, label in STRETCHES:
            values = per_stretch.get((rank, key))
            if values:
                cells.append(f"{label} {statistics.median(values):5.1f}")
        name = "sequencer" if rank == 0 else f"member {rank}"
        print(f"  {name:<10} " + ",  ".join(cells))
    print("each (receiver ← origin) pair's p50 (µs); S the sequencer, M1 and M2 members:")
    print(f"  {'pair':<9} {'hops':<7} " + " ".join(f"{label[:12]:>12}" for label, _ in runs))
    for receiver, origin, hops in PAIRS:
        cells = []  # floor, abcast, the variants
        for label, _ in runs:
            values = pairs[label].get((receiver, origin))
            cells.append(f"{statistics.median(values):12.0f}" if values else f"{'-':>12}")
        print(f"  {receiver + ' ← ' + origin:<9} {hops:<7} " + " ".join(cells))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--strip", action="store_true",
                        help="also run abcast with layers taken out (see the docstring)")
    parser.add_argument("--tree", nargs="*", default=[], metavar="DIR",
                        help="also run abcast from each of these checkouts (its src on "
                             "PYTHONPATH): another commit in the same rounds")
    parser.add_argument("--lane", action="store_true",
                        help="also run abcast with bench/_lane_prototype.py installed")
    asyncio.run(main(parser.parse_args()))
