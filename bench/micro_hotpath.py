"""Micro-benchmarks of the per-message hot path, below the runtime: codec, one core step,
the reliable channel alone, and a TCP transport write (issue 8).

Usage: .venv/bin/python bench/micro_hotpath.py [--only codec,core,channel,tcp,lone]
           [--messages N] [--burst B] [--ordering sequencer] [--relay] [--profile [TOP]]
           [--uvloop]

What each line measures (all in one process, best of --repeat runs; the CPU-bound parts
are timed in process CPU time, so other load on the machine disturbs them less):

- codec: `encode_frame` of a sequencer data frame (Fd, RData, SData headers + 64-byte
  payload) and of an order frame; `decode_envelope` + the stack's header decode of each.
- core: a 3-node group (`build_stack` with the runtime's options) driven without IO, the way
  the simulator does it: node n1..n3 broadcast round robin, every Transmit is encoded,
  decoded and received by its destination at once, and every `burst` broadcasts the
  clock moves on 2.5 ms and due timers fire (delayed acks, heartbeats). Printed: µs of CPU per
  ordered message for the whole group (all three nodes' work), and the per-node share.
- channel: two `ReliableChannel` cores alone: packets a → b in bursts, one delayed ack
  per burst back to a. µs per packet (send + receive + its share of the ack).
- tcp: frames/s from one sender to one receiver over loopback (one process, one loop),
  with writes coalesced per loop turn (the transport's behaviour: the turn's first frame
  at once, the rest in one write) and with one `write` per frame (the coalescing turned
  off by a patch, for comparison).
- lone: the runtime's whole per-message path for a message alone in flight: three real
  nodes (Node + Group, tcp on loopback) in one process on one loop broadcast one message
  at a time, round robin, 1 ms apart (the cluster command's `--rate 1000`). Printed: the
  p50 of every delivery's latency (broadcast call to delivery callback) and the CPU per
  message of the whole process. One loop serialises the three nodes, so this is the CPU
  of the critical path plus the acks, without the cross-process wake-ups of
  `abcast cluster`. Also printed: per message, the stack timers that fired (`Stack.fire`:
  delayed acks, heartbeat ticks, stability rounds) and the loop timer callbacks behind
  them (`GroupDriver._fire`, the lazily cancelled or moved ones included).

`--relay` builds the core and lone groups in relay mode (sequencer family).
`--profile` runs the core step under cProfile and prints the top functions by own time.
Nothing is asserted; figures vary with the machine's load, so compare runs made side by
side.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import pstats
import sys
import time
from collections import deque
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, TypeVar

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Deliver, Output, SetTimer, Transmit
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.group.failure_detector import Fd
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import RAck, RData, ReliableChannel
from abcast.runtime.stack_options import for_streams
from abcast.stack import Stack
from abcast.transport import Link, Transport, transport_from_url

T = TypeVar("T")
PAYLOAD = bytes(64)
GROUP = "g"


cpu_clock = time.process_time  # CPU seconds of this process: waiting for a core is not counted


def best_of(repeat: int, run: Callable[[], float]) -> float:
    """The smallest of `repeat` timings (the least disturbed by other load)."""
    return min(run() for _ in range(repeat))


# ------------------------------------------------------------------------------- codec


def bench_codec(count: int, repeat: int) -> None:
    stack = build_stack("n2", GROUP, "sequencer", View(1, ("n1", "n2", "n3")))
    data_packet = Packet((Fd(), RData(12345), SData(678)), PAYLOAD)
    order_packet = Packet((Fd(), RData(12346), SOrder(901, [("n3", 678)])), b"")
    for label, packet in (("data frame", data_packet), ("order frame", order_packet)):
        frame = encode_frame(GROUP, "n1", packet)

        def encode(packet: Packet = packet) -> float:
            started = cpu_clock()
            for _ in range(count):
                encode_frame(GROUP, "n1", packet)
            return cpu_clock() - started

        def decode(frame: bytes = frame) -> float:
            codec = stack.codec
            started = cpu_clock()
            for _ in range(count):
                codec.decode(decode_envelope(frame))
            return cpu_clock() - started

        enc, dec = best_of(repeat, encode), best_of(repeat, decode)
        print(f"  codec  {label:12} {len(frame):4d} B   encode {enc / count * 1e6:6.2f} µs"
              f"   decode {dec / count * 1e6:6.2f} µs")


# ------------------------------------------------------------------------------- core


class Pump:
    """A group of stacks on a perfect in-memory network (no loss, FIFO, zero latency):
    frames go to their destination at once, timers fire when the clock passes them."""

    def __init__(self, ordering: str, nodes: int, relay: bool = False) -> None:
        ids = tuple(f"n{i}" for i in range(1, nodes + 1))
        view = View(1, ids)
        # the runtime's channel (piggybacked acks, 1 s rto)
        options = for_streams(OrderingOptions(relay=relay))
        self.stacks: dict[NodeId, Stack] = {
            n: build_stack(n, GROUP, ordering, view, options) for n in ids}
        self.order = ids
        self.now = 0
        self.delivered = 0
        self.frames = 0
        self.timers: dict[tuple[NodeId, Hashable], int] = {}
        self.wire: deque[tuple[NodeId, bytes]] = deque()
        for node, stack in self.stacks.items():
            self._apply(node, stack.start(self.now))

    def _apply(self, node: NodeId, outputs: list[Output]) -> None:
        for out in outputs:
            kind = type(out)
            if kind is Transmit:
                assert isinstance(out, Transmit)
                for dst in out.to:
                    self.wire.append((dst, out.data))
            elif kind is Deliver:
                self.delivered += 1
            elif kind is SetTimer:
                assert isinstance(out, SetTimer)
                self.timers[(node, out.key)] = out.at
            elif hasattr(out, "key"):  # CancelTimer
                self.timers.pop((node, out.key), None)

    def flow(self) -> None:
        """Carry every frame on the wire (and those it causes) to its destination."""
        wire, stacks = self.wire, self.stacks
        while wire:
            dst, data = wire.popleft()
            self.frames += 1
            outputs, refused = stacks[dst].receive(decode_envelope(data), self.now)
            if refused is not None:
                raise refused
            self._apply(dst, outputs)

    def tick(self, step_us: int) -> None:
        self.now += step_us
        due = sorted((at, node, key) for (node, key), at in self.timers.items()
                     if at <= self.now)
        for _, node, key in due:
            if self.timers.get((node, key), None) is not None:
                del self.timers[(node, key)]
                self._apply(node, self.stacks[node].fire(key, self.now))
        self.flow()

    def run(self, messages: int, burst: int) -> None:
        order, stacks = self.order, self.stacks
        sent = 0
        while sent < messages:
            for _ in range(min(burst, messages - sent)):
                node = order[sent % len(order)]
                _, outputs = stacks[node].broadcast(PAYLOAD, self.now)
                self._apply(node, outputs)
                sent += 1
            self.flow()
            self.tick(2_500)  # acks ride back or fire after the 20 ms ack delay (8 ticks)
        for _ in range(3):
            self.tick(2_500)


def bench_core(ordering: str, messages: int, burst: int, repeat: int, relay: bool) -> None:
    nodes = 3

    def once() -> float:
        pump = Pump(ordering, nodes, relay)
        started = cpu_clock()
        pump.run(messages, burst)
        elapsed = cpu_clock() - started
        if pump.delivered != messages * nodes:
            raise SystemExit(f"core: delivered {pump.delivered}, expected {messages * nodes}")
        once.frames = pump.frames  # type: ignore[attr-defined]
        return elapsed

    elapsed = best_of(repeat, once)
    per_msg = elapsed / messages * 1e6
    frames = once.frames / messages  # type: ignore[attr-defined]
    name = f"{ordering} relay" if relay else ordering
    print(f"  core   {name} n={nodes} burst={burst:<4}  {per_msg:6.1f} µs/msg for the group"
          f"  ({per_msg / nodes:5.1f} µs per node, {frames:.2f} frames/msg,"
          f" {1e6 / per_msg * nodes:,.0f} msgs/s if the group had {nodes} cores)")


def profile_core(ordering: str, messages: int, burst: int, top: int, relay: bool) -> None:
    pump = Pump(ordering, 3, relay)
    profiler = cProfile.Profile(cpu_clock)
    profiler.enable()
    pump.run(messages, burst)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n  cProfile of the core step ({ordering}, {messages} msgs, burst {burst}),"
          f" top {top} by own time:")
    lines = out.getvalue().splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    for line in lines[start:]:
        if line.strip():
            print("   ", line.replace("/work/main/src/", "").replace(sys.prefix, "<py>"))


# ------------------------------------------------------------------------------- channel


def bench_channel(messages: int, burst: int, repeat: int) -> None:
    view = View(1, ("a", "b"))
    packet = Packet((SData(1),), PAYLOAD)

    def once() -> float:
        a, b = ReliableChannel("a"), ReliableChannel("b")
        a.handle(ViewInstalled(view), 0)
        b.handle(ViewInstalled(view), 0)
        now = 0
        ups = 0
        request = SendRequested("b", packet)
        ack_timer = TimerFired(("ack", "a"))
        started = cpu_clock()
        for _ in range(0, messages, burst):
            for _ in range(burst):
                for effect in a.handle(request, now):
                    if type(effect) is not SetTimer:
                        for up in b.handle(Received("a", effect.header, effect.inner), now):  # type: ignore[union-attr]
                            ups += type(up) is not SetTimer
            now += 2_500
            for ack in b.handle(ack_timer, now):
                a.handle(Received("b", ack.header, ack.inner), now)  # type: ignore[union-attr]
        elapsed = cpu_clock() - started
        if ups != -(-messages // burst) * burst or a.in_flight():
            raise SystemExit(f"channel: {ups} packets up, {a.in_flight()} in flight")
        return elapsed

    elapsed = best_of(repeat, once)
    print(f"  channel a->b burst={burst:<4}  {elapsed / messages * 1e6:6.2f} µs/packet"
          f"  (send + receive + 1/{burst} of an ack)")
    _ = RAck  # the ack header type, named for readers of the figures above


# ------------------------------------------------------------------------------- tcp


class _Counter:
    def __init__(self, target: int) -> None:
        self.count = 0
        self.target = target
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def __call__(self, link: Link, frame: bytes) -> None:
        self.count += 1
        if self.count == self.target and not self.done.done():
            self.done.set_result(time.perf_counter())


async def _tcp_once(frames: int, chunk: int, size: int) -> tuple[float, float]:
    """(frames/s of wall time, µs of this process's CPU per frame): both ends share the
    process, so the CPU figure is the whole send + receive path, undisturbed by waits."""
    counter = _Counter(frames)
    receiver = transport_from_url("tcp://127.0.0.1:0")
    address = await receiver.start("r", counter)
    sender: Transport = transport_from_url("tcp://127.0.0.1:0")
    await sender.start("s", lambda link, frame: None)
    sender.add_peer("r", address)
    frame = bytes(size)
    try:
        while sender.buffered("r") or not sender.stats.frames_out:  # connected and flushed
            sender.send("r", frame)
            counter.target += 1
            await asyncio.sleep(0.01)
        started, cpu_started = time.perf_counter(), cpu_clock()
        for start in range(0, frames, chunk):
            for _ in range(min(chunk, frames - start)):
                sender.send("r", frame)
            await asyncio.sleep(0)  # one loop turn: the coalesced write goes out
            await sender.drain()
        finished = await asyncio.wait_for(counter.done, 120)
        cpu = cpu_clock() - cpu_started
    finally:
        await sender.close()
        await receiver.close()
    return frames / (finished - started), cpu / frames * 1e6


def _run(coro: Coroutine[Any, Any, T], use_uvloop: bool) -> T:
    if use_uvloop:
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def bench_tcp(frames: int, repeat: int, use_uvloop: bool, size: int = 100) -> None:
    from abcast.transport import tcp

    loop_name = "uvloop" if use_uvloop else "asyncio"

    def measure(frames: int, chunk: int) -> tuple[float, float]:
        runs = [_run(_tcp_once(frames, chunk, size), use_uvloop) for _ in range(repeat)]
        return max(r[0] for r in runs), min(r[1] for r in runs)

    for chunk in (1, 64, 1024):
        rate, cpu = measure(frames // (4 if chunk == 1 else 1), chunk)
        print(f"  tcp    coalesced, {chunk:4d} frames/turn, {size} B, {loop_name:7}"
              f"  {rate:>10,.0f} frames/s  {cpu:5.2f} µs CPU/frame")
    original = tcp._Channel.schedule_flush

    def write_each(self: Any) -> None:  # one write per frame: what coalescing saves
        if self._conn is not None:
            self._flush()

    tcp._Channel.schedule_flush = write_each  # type: ignore[method-assign]
    try:
        rate, cpu = measure(frames // 4, 1024)
    finally:
        tcp._Channel.schedule_flush = original  # type: ignore[method-assign]
    print(f"  tcp    one write per frame, {size} B, {loop_name:7}        {rate:>10,.0f} frames/s"
          f"  {cpu:5.2f} µs CPU/frame")


# ------------------------------------------------------------------------------- lone


class _FireCounter:
    """Counts `Stack.fire` calls (stack timers that fired) and `GroupDriver._fire` calls
    (loop timer callbacks) while installed, by wrapping the two methods."""

    def __init__(self) -> None:
        from abcast.runtime.driver import GroupDriver

        self.fires = self.callbacks = 0
        self._saved = (Stack.fire, GroupDriver._fire)

    def install(self) -> None:
        from abcast.runtime.driver import GroupDriver

        stack_fire, driver_fire = self._saved

        def fire(stack: Stack, key: Hashable, now: int) -> list[Output]:
            self.fires += 1
            return stack_fire(stack, key, now)

        def callback(driver: GroupDriver, key: Hashable, timer: Any) -> None:
            self.callbacks += 1
            driver_fire(driver, key, timer)

        Stack.fire = fire  # type: ignore[method-assign]
        GroupDriver._fire = callback  # type: ignore[method-assign]

    def remove(self) -> None:
        from abcast.runtime.driver import GroupDriver

        Stack.fire, GroupDriver._fire = self._saved  # type: ignore[method-assign]


async def _lone_once(
    ordering: str, messages: int, gap_s: float, relay: bool = False
) -> tuple[list[int], float, float, float]:
    """Three nodes (Node + Group over tcp, one process, one loop) send one message at a
    time, round robin, `gap_s` apart: (each delivery's latency in ns, CPU µs per message,
    stack timer fires and loop timer callbacks per message)."""
    from abcast.runtime.group import Group
    from abcast.runtime.node import Node

    ids = ("n1", "n2", "n3")
    sent_at: dict[tuple[str, int], int] = {}
    latencies: list[int] = []
    pending = [0]
    idle = asyncio.Event()

    def on_deliver(delivery: Deliver) -> None:
        latencies.append(time.perf_counter_ns() - sent_at[(delivery.origin, delivery.seq)])
        pending[0] -= 1
        if not pending[0]:
            idle.set()

    nodes = [Node("tcp://127.0.0.1:0", node=n) for n in ids]
    for node in nodes:
        await node.start()
    groups: list[Any] = []
    for node in nodes:
        peers = {other.id: other.address for other in nodes if other is not node}
        groups.append(await Group(GROUP, ordering=ordering, host=node, peers=peers,
                                  options=OrderingOptions(relay=relay),
                                  on_deliver=on_deliver).open())
    cpu = 0.0
    counter = _FireCounter()
    try:
        for k in range(messages + messages // 10):
            if k == messages // 10:  # the first tenth warms up (connections, caches)
                latencies.clear()
                counter.install()
                cpu_started = cpu_clock()
            idle.clear()
            pending[0] = len(ids)
            group = groups[k % len(ids)]
            sent_at[(group.node, group.driver.broadcasts + 1)] = time.perf_counter_ns()
            group.broadcast_nowait(PAYLOAD)
            await asyncio.wait_for(idle.wait(), 10)
            await asyncio.sleep(gap_s)
        cpu = cpu_clock() - cpu_started
    finally:
        counter.remove()
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
    return (latencies, cpu / messages * 1e6, counter.fires / messages,
            counter.callbacks / messages)


def bench_lone(ordering: str, messages: int, repeat: int, use_uvloop: bool, relay: bool) -> None:
    loop_name = "uvloop" if use_uvloop else "asyncio"
    runs = [_run(_lone_once(ordering, messages, 0.001, relay), use_uvloop)
            for _ in range(repeat)]
    p50s = []
    for latencies, *_ in runs:
        latencies.sort()
        p50s.append(latencies[len(latencies) // 2] / 1e3)
    cpu = min(r[1] for r in runs)
    fires, callbacks = sorted(r[2] for r in runs), sorted(r[3] for r in runs)
    name = f"{ordering} relay" if relay else ordering
    print(f"  lone   {name} n=3 tcp, one process, {loop_name:7}  p50 {min(p50s):6.1f} µs"
          f" (runs: {', '.join(f'{p:.0f}' for p in p50s)})  {cpu:6.1f} µs CPU/msg"
          f" incl. 1 ms gaps' timers; per msg {fires[len(fires) // 2]:.2f} timer fires,"
          f" {callbacks[len(callbacks) // 2]:.2f} loop timer callbacks (medians)")


# ------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--only", default="codec,core,channel,tcp,lone")
    parser.add_argument("--messages", type=int, default=20_000, help="messages per core run")
    parser.add_argument("--burst", type=int, default=0, help="broadcasts per burst (0: 1 and 64)")
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=int, nargs="?", const=25, default=0, metavar="TOP")
    parser.add_argument("--uvloop", action="store_true", help="tcp on uvloop")
    parser.add_argument("--relay", action="store_true",
                        help="sequencer family: the origin sends to the sequencer only")
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    bursts = [args.burst] if args.burst else [1, 64]
    print(f"hot-path micro-benchmarks ({sys.implementation.name} "
          f"{sys.version.split()[0]}, 64-byte payloads)")
    if "codec" in parts:
        bench_codec(100_000, args.repeat)
    if "core" in parts:
        for burst in bursts:
            bench_core(args.ordering, args.messages, burst, args.repeat, args.relay)
    if "channel" in parts:
        for burst in bursts:
            bench_channel(args.messages * 5, burst, args.repeat)
    if "tcp" in parts:
        bench_tcp(200_000, args.repeat, args.uvloop)
    if "lone" in parts:
        bench_lone(args.ordering, min(args.messages, 2_000), args.repeat, args.uvloop,
                   args.relay)
    if args.profile:
        profile_core(args.ordering, args.messages, bursts[-1], args.profile, args.relay)
    return 0


if __name__ == "__main__":
    sys.exit(main())
