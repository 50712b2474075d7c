"""One node of a benchmark run: join the group, run the round-robin workload, report.

Rules: the workload is the simulator's (abcast.workload.RoundRobin): closed loop (a node
broadcasts its round-r message once it has delivered every round r−1 message), open
loop (`rate` broadcasts per second over the whole group, each node sending its own share
on a schedule that starts at the instant `go` names, the same on every node) or serial
(one message in flight: message k leaves once its sender delivered message k−1). Each
node knows the expected total M and is done once its state covers all M — delivered, or
received in a snapshot when the group cut it off and admitted it again; it then keeps
serving (retransmissions, acks) until told to stop, because others may still need it.
The start/done/stop handshake goes through a `Control`: the launcher's pipe
(`PipeControl`, JSON lines on stdout, commands on stdin), in-process events
(`LocalControl`, one-process clusters) or the registry (`RegistryControl`, nodes started
by hand). With tracing off nothing is recorded but counters and the latency of each
delivery, read from the send time the origin stamps into the first 8 payload bytes.
With tracing on, rows are streamed to disk by a background thread every half second
(abcast.trace.stream: a killed node's trace stays readable up to its last half second),
with pyarrow warmed up before the run: a loop that stalls misses heartbeats and gets its
node suspected.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from array import array
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import msgspec

from abcast.effects import Deliver, Stage
from abcast.errors import Backpressure, LocalProtocolError
from abcast.evaluation.rss import peak_rss_kib
from abcast.ids import NodeId
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.registry.client import RegistryClient
from abcast.runtime.group import Group
from abcast.runtime.loop import GcMeter, freeze_gc
from abcast.runtime.node import Node
from abcast.tasks import stop_task
from abcast.trace.recorder import TraceRecorder
from abcast.trace.rows import RunInfo, options_label
from abcast.transport import parse_url
from abcast.workload import RoundRobin

STAMP_BYTES: Final = 8
_FINAL: Final = Stage.FINAL


def workload_name(rate: float | None, serial: bool) -> str:
    """The workload as the runs table names it."""
    if serial:
        return "serial-round-robin"
    return "closed-round-robin" if rate is None else f"open-{rate:g}/s"


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    group: str
    ordering: str
    transport: str  # the URL to bind (port 0: any free one)
    size: int
    messages: int
    registry: str
    run_id: str
    node: NodeId | None = None  # an id to claim; None: the registry assigns one
    payload: int = 64
    rate: float | None = None  # broadcasts per second over the whole group; None: closed
    # closed loop with one message in flight: global message k (node k mod N's) leaves
    # once its sender delivered message k-1, so each latency is a lone message's
    serial: bool = False
    out: Path | None = None  # trace directory; None: tracing off
    options: OrderingOptions = field(default_factory=OrderingOptions)
    wan: str | None = None
    metrics_port: int | None = None  # serve /metrics on this port (0: any free one)
    metrics_host: str = "127.0.0.1"
    probe: bool = False  # answer `abcast probe` on a local control socket
    #: the group secret (abcast.security); None: open links
    secret: bytes | None = field(default=None, repr=False)


class WorkerOutcome(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What a node reports when it stops (one JSON line from a node process)."""

    node: str
    delivered: int
    broadcasts: int
    complete: bool
    protocol_packets: int
    control_packets: int
    retransmissions: int
    bad_frames: int
    transport_bad_frames: int
    go_ns: int
    last_deliver_ns: int
    members: list[str] = []
    latencies_ns: list[int] = []  # stamped latencies (tracing off only)
    peak_rss_kib: int = 0  # the node process's peak resident memory
    cpu_ns: int = 0  # the node process's CPU time (user + system) from go to this report
    rss_at_go_kib: int = 0  # its peak resident memory as the workload began (imports, group)
    naks: int = 0  # NAKs the node sent (multicast="nak")
    peak_unstable_bytes: int = 0  # the most its NAK channel held for retransmission
    bytes_out: int = 0  # frame bytes its transport put on the wire
    # garbage collections from `go` to the end, per generation, and their CPU time
    gc_collections: list[int] = []
    gc_cpu_ns: list[int] = []
    gc_max_ns: list[int] = []  # the longest of each generation


class StoppedError(Exception):
    """The launcher went away or stopped the run before it started."""


class Control(Protocol):
    async def ready(self, node: NodeId, address: str) -> None: ...
    async def wait_go(self) -> int | None:
        """Wait for `go`; returns the wall-clock instant (ns) at which every node starts
        its workload, or None for "now"."""
    async def done(self, node: NodeId) -> None: ...
    def stop_requested(self) -> asyncio.Event: ...


# ------------------------------------------------------------------------ controls


class Ready(msgspec.Struct, tag="ready", frozen=True, gc=False):
    node: str
    address: str


class Finished(msgspec.Struct, tag="done", frozen=True, gc=False):
    node: str


class Result(msgspec.Struct, tag="result", frozen=True, gc=False):
    outcome: WorkerOutcome


class Failed(msgspec.Struct, tag="failed", frozen=True, gc=False):
    error: str


NodeReport = Ready | Finished | Result | Failed
_report_encoder: Final = msgspec.json.Encoder()
_report_decoder: Final = msgspec.json.Decoder(NodeReport)


def decode_report(line: bytes) -> NodeReport:
    report: NodeReport = _report_decoder.decode(line)
    return report


def emit(report: NodeReport) -> None:
    """One JSON line on stdout (the launcher's pipe).

    Written straight to fd 1, made blocking, until every byte is out: a result line
    carries every stamped latency (often several pipe buffers' worth), and through
    `sys.stdout.buffer` after a uvloop run such a line was seen cut off at a multiple of
    64 KiB with no error raised — the launcher then read a truncated report."""
    line = _report_encoder.encode(report) + b"\n"
    sys.stdout.flush()
    fd = sys.stdout.fileno()
    if not os.get_blocking(fd):
        os.set_blocking(fd, True)
    view = memoryview(line)
    while view:
        view = view[os.write(fd, view):]


class PipeControl:
    """The launcher's pipe: reports on stdout, `go [start_ns]`/`stop` lines on stdin (EOF
    = stop).

    `start()` begins reading stdin at once, so a node still joining can be stopped too."""

    def __init__(self) -> None:
        self._go = asyncio.Event()
        self._start_ns: int | None = None
        self._stop = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._reader is not None:
            return
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        self._reader = asyncio.create_task(self._read_stdin(reader))

    async def _read_stdin(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            command, _, argument = line.strip().partition(b" ")
            if command == b"go":
                self._start_ns = int(argument) if argument.isdigit() else None
                self._go.set()
            elif command == b"stop" or not line:
                self._stop.set()
                return

    async def ready(self, node: NodeId, address: str) -> None:
        emit(Ready(node, address))

    async def wait_go(self) -> int | None:
        await _first(self._go, self._stop)
        if not self._go.is_set():
            raise StoppedError("stopped before the run started")
        return self._start_ns

    async def done(self, node: NodeId) -> None:
        emit(Finished(node))

    def stop_requested(self) -> asyncio.Event:
        return self._stop

    @property
    def started(self) -> bool:
        """True once `go` arrived."""
        return self._go.is_set()


@dataclass(slots=True)
class LocalBarrier:
    """The launcher's side of `LocalControl`, shared by every node of a one-process run."""

    expected: int
    ready: dict[NodeId, str] = field(default_factory=dict)
    finished: set[NodeId] = field(default_factory=set)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    go: asyncio.Event = field(default_factory=asyncio.Event)
    start_ns: int | None = None  # set before `go`: when every node starts its workload
    stop: asyncio.Event = field(default_factory=asyncio.Event)


class LocalControl:
    def __init__(self, barrier: LocalBarrier) -> None:
        self.barrier = barrier

    async def ready(self, node: NodeId, address: str) -> None:
        self.barrier.ready[node] = address
        if len(self.barrier.ready) >= self.barrier.expected:
            self.barrier.all_ready.set()

    async def wait_go(self) -> int | None:
        await _first(self.barrier.go, self.barrier.stop)
        if not self.barrier.go.is_set():
            raise StoppedError("stopped before the run started")
        return self.barrier.start_ns

    async def done(self, node: NodeId) -> None:
        self.barrier.finished.add(node)
        if len(self.barrier.finished) >= self.barrier.expected:
            self.barrier.all_done.set()

    def stop_requested(self) -> asyncio.Event:
        return self.barrier.stop


class RegistryControl:
    """Nodes started by hand: start once the group is complete, report done to the
    registry, stop once every member has."""

    def __init__(self, registry: RegistryClient, group: str, size: int) -> None:
        self._registry = registry
        self._group = group
        self._size = size
        self._stop = asyncio.Event()

    async def ready(self, node: NodeId, address: str) -> None:
        emit(Ready(node, address))

    async def wait_go(self) -> int | None:
        return None  # the group opened only once all `size` members had joined

    async def done(self, node: NodeId) -> None:
        emit(Finished(node))
        await self._registry.done(self._group)
        await self._registry.wait_done(self._group, self._size)
        self._stop.set()

    def stop_requested(self) -> asyncio.Event:
        return self._stop


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


# ------------------------------------------------------------------------ the run


PipeWorker = Callable[[WorkerConfig, Control], Coroutine[Any, Any, WorkerOutcome]]


class Drains(Protocol):
    async def drain(self) -> None: ...


class WorkloadNode(Protocol):
    """What the workload needs of its node: abcast's `Node` or the floor's."""

    @property
    def id(self) -> NodeId: ...

    @property
    def transport(self) -> Drains: ...


class WorkloadGroup(Protocol):
    """What the workload needs of its group: abcast's `Group` or the floor's."""

    @property
    def members(self) -> tuple[NodeId, ...]: ...

    def broadcast_nowait(self, payload: bytes) -> object: ...

    def send_queued(self) -> None: ...


async def run_worker(
    config: WorkerConfig, make_control: Callable[[Node], Control], *,
    own_process: bool = False,
) -> WorkerOutcome:
    """Run one node of the benchmark to the end; `make_control(node)` picks the handshake
    once the node is up (RegistryControl needs its registry client). `own_process`: the
    node is its process's only one, which freezes what it built once its group is open
    (abcast.runtime.loop.freeze_gc)."""
    sink = None
    if config.out is not None:  # tracing: only then load the trace files (and pyarrow)
        from abcast.trace.stream import StreamingSink

        sink = StreamingSink(config.out, config.run_id)
        sink.warm_up()
    recorder = TraceRecorder(config.run_id, sink=sink, keep_rows=False) if sink else None
    node = Node(config.transport, node=config.node, registry=config.registry,
                recorder=recorder, wan=config.wan, metrics_port=config.metrics_port,
                metrics_host=config.metrics_host, probe=config.probe, secret=config.secret)
    try:
        await node.start()
        control = make_control(node)
        run = _Run(config, node)
        group = Group(config.group, ordering=config.ordering, host=node, size=config.size,
                      options=config.options, on_deliver=run.on_deliver,
                      get_state=run.get_state, set_state=run.set_state)
        await group.open()
        if own_process:
            freeze_gc(node.gc_mode)
        try:
            run.group = group
            await run.run_to_stop(control, node.address)
            return run.outcome(list(group.members), **abcast_counters(node, group))
        finally:
            await group.close()
    finally:
        await node.close()
        if sink is not None:
            sink.close()


def abcast_counters(node: Node, group: Group) -> dict[str, int]:
    """An abcast node's counters for its outcome (`_Run.outcome`)."""
    driver = group.driver
    layers = driver.stack.layers
    return {
        "broadcasts": driver.broadcasts, "protocol_packets": driver.protocol_packets,
        "control_packets": driver.control_packets,
        "retransmissions": driver.retransmissions, "bad_frames": node.stats.bad_frames,
        "transport_bad_frames": node.transport.stats.bad_frames,
        "naks": sum(getattr(layer, "naks_sent", 0) for layer in layers),
        "peak_unstable_bytes": sum(getattr(layer, "peak_unstable_bytes", 0)
                                   for layer in layers),
        "bytes_out": node.transport.stats.bytes_out,
    }


class _Run:
    """The workload on one node (closed or open loop) and its counters."""

    def __init__(self, config: WorkerConfig, node: WorkloadNode) -> None:
        self.config = config
        self.node = node
        self.group: WorkloadGroup | None = None
        self.workload: RoundRobin | None = None
        self.finished = asyncio.Event()
        self.stopped = False
        self.delivered = 0
        self.go_ns = 0
        self.cpu_at_go_ns = 0
        self.rss_at_go_kib = 0
        self.last_deliver_ns = 0
        self.latencies = array("q")
        self.stamp = config.payload >= STAMP_BYTES
        # the zero bytes after the send-time stamp (all of it when there is no stamp),
        # made once: a payload is built per broadcast
        self._padding = bytes(config.payload - STAMP_BYTES if self.stamp else config.payload)
        self.keep_latencies = self.stamp and config.out is None
        self.closed_loop = config.rate is None and not config.serial
        # serial: the (origin, seq) whose delivery lets this node send its next message,
        # and whether it came before this node's start (peers may start a little sooner)
        self.serial_trigger: tuple[NodeId, int] | None = None
        self._serial_released = False
        self.expected = config.messages
        # The node's replicated state: how many messages of each origin it holds. A node
        # the group cut off and admitted again (a false suspicion under load) gets the
        # others' counts as a snapshot instead of those deliveries, so it is complete
        # once its state covers every message, not once it delivered every one itself.
        self.per_origin: dict[NodeId, int] = {}
        self.covered = 0
        self._pacer: asyncio.Task[None] | None = None
        self._starting: asyncio.TimerHandle | None = None
        self._early: list[tuple[NodeId, int]] = []  # delivered before the workload existed
        self.gc = GcMeter()  # counts from `go`
        if config.messages == 0:
            self.finished.set()

    def _group(self) -> WorkloadGroup:
        if self.group is None:
            raise LocalProtocolError("the run has no open group")
        return self.group

    async def run_to_stop(self, control: Control, address: str) -> None:
        """The group is open: ready → go → the workload → done → stop."""
        self.prepare()
        me = self.node.id
        with self.gc:
            await control.ready(me, address)
            self.begin(await control.wait_go())
            stop = control.stop_requested()
            await _first(self.finished, stop)
            if self.finished.is_set() and not stop.is_set():
                await control.done(me)
                await stop.wait()
        self.stopped = True

    def prepare(self) -> None:
        """The group is open: set up the workload, counting what was delivered so far
        (peers that got `go` earlier may already have broadcast)."""
        workload = self.workload = RoundRobin(self._group().members, self.config.messages)
        if self.config.serial:
            self._arm_serial()
            self._serial_released = self.serial_trigger in self._early
        for origin, seq in self._early:
            workload.on_deliver(self.node.id, origin, seq)
        self._early.clear()

    def begin(self, start_ns: int | None = None) -> None:
        """Start the workload at wall-clock `start_ns` (now if None or past). The launcher
        gives every node the same instant, so an open loop's slots interleave across the
        group as the rate says: at 1,000 msgs/s one message every millisecond, not three
        nodes' messages at phases that happen to collide."""
        loop = asyncio.get_running_loop()
        delay_s = 0.0 if start_ns is None else max(0.0, (start_ns - time.time_ns()) / 1e9)
        # the loop-clock twin of start_ns: the pacer's slots count from it, not from when
        # the timer below happens to fire (uvloop's timers are only millisecond-precise)
        start = loop.time() + delay_s
        self._starting = loop.call_later(delay_s, self._start, start)

    def _start(self, start: float) -> None:
        self._starting = None
        if self.stopped:
            return
        self.go_ns = time.time_ns()
        self.cpu_at_go_ns = time.process_time_ns()
        self.rss_at_go_kib = peak_rss_kib()
        self.gc.reset()
        if self.workload is None:
            self.prepare()
        assert self.workload is not None
        if self.config.serial:
            if self.serial_trigger is None or self._serial_released:
                self._serial_released = False
                self.send_next()  # message 0, or one released before this node started
        elif self.config.rate is None:
            if self.node.id in self.workload.initial():
                asyncio.get_running_loop().call_soon(self.send_next)
        else:
            self._pacer = asyncio.create_task(self._paced(self.config.rate, start))

    def payload(self) -> bytes:
        if not self.stamp:
            return self._padding
        return time.time_ns().to_bytes(STAMP_BYTES, "big") + self._padding

    def send_next(self) -> None:
        workload = self.workload
        me = self.node.id
        if self.stopped or workload is None or workload.sent_by(me) >= workload.total_of(me):
            return
        group = self._group()
        try:
            group.broadcast_nowait(self.payload())
        except Backpressure:  # a closed loop has few in flight: unlikely, but not lost
            asyncio.get_running_loop().call_later(0.001, self.send_next)
            return
        workload.note_sent(me)
        if self.config.serial:
            group.send_queued()  # alone by construction: no turn's end to wait for
            self._arm_serial()

    def _arm_serial(self) -> None:
        """Serial loop: note which delivery releases this node's next message (global
        message k−1 for its next k); None when nothing does — the run's very first
        message (sent at the start) or none left to send."""
        workload = self.workload
        assert workload is not None
        members = workload.nodes
        n, me = len(members), self.node.id
        k = workload.sent_by(me) * n + members.index(me)  # this node's next message
        before = k - 1
        self.serial_trigger = (
            (members[before % n], before // n + 1) if 0 < k < workload.messages else None)

    async def _paced(self, rate: float, start: float) -> None:
        """Offer this node's share of `rate` on schedule. Each loop turn broadcasts every
        message that is due by then (they leave as one batch), then waits for the
        transport to drain and for the next one to fall due: behind schedule the node
        catches up in bursts instead of one loop turn per message, and past saturation
        the backlog waits here, not in socket buffers and retransmission queues. A group
        that refuses a broadcast (`Backpressure`: its credit or max_unstable bound) is
        asked again after a backoff of 1 ms doubling to 50 ms; that message keeps its slot."""
        group = self._group()
        members = group.members
        share = len(members)
        ks = range(members.index(self.node.id), self.config.messages, share)
        loop = asyncio.get_running_loop()
        next_k = 0  # index into ks
        backoff = 0.0  # > 0 while the group refuses broadcasts (Backpressure)
        while next_k < len(ks) and not self.stopped:
            due = min(len(ks), next_k + self._BURST)
            now = loop.time()
            # a message is due once its slot k/rate has passed
            try:
                while next_k < due and start + ks[next_k] / rate <= now:
                    group.broadcast_nowait(self.payload())
                    next_k += 1
                backoff = 0.0
            except Backpressure:  # credit comes back with acks: retry this message later
                backoff = min(max(2 * backoff, 0.001), 0.05)
            group.send_queued()  # the burst is over: no need to wait for the turn's end
            await self.node.transport.drain()
            if backoff:
                await asyncio.sleep(backoff)
            elif next_k < len(ks):
                await asyncio.sleep(max(0.0, start + ks[next_k] / rate - loop.time()))

    #: at most this many broadcasts per loop turn: a node far behind schedule still lets
    #: receiving and timers (heartbeats, acks) run between its bursts
    _BURST = 1024

    def on_deliver(self, d: Deliver) -> None:
        # Runs once per delivered message on every node: at saturation it is the busiest
        # function of a node process, hence the local names and the early returns.
        if d.stage is not _FINAL:
            return
        now = time.time_ns()
        self.delivered += 1
        self.covered = covered = self.covered + 1
        per_origin = self.per_origin
        per_origin[d.origin] = per_origin.get(d.origin, 0) + 1
        self.last_deliver_ns = now
        if self.keep_latencies:
            payload = d.payload
            if len(payload) >= STAMP_BYTES:
                self.latencies.append(now - int.from_bytes(payload[:STAMP_BYTES], "big"))
        workload = self.workload
        if workload is None:
            self._early.append((d.origin, d.seq))
        elif self.closed_loop and workload.on_deliver(self.node.id, d.origin, d.seq):
            # Not from inside the stack's outputs: broadcast on the next loop turn, as the
            # simulator schedules it at the same instant.
            asyncio.get_running_loop().call_soon(self.send_next)
        elif self.serial_trigger is not None and self.serial_trigger == (d.origin, d.seq):
            if self.go_ns:
                asyncio.get_running_loop().call_soon(self.send_next)
            else:
                self._serial_released = True  # sent once this node starts
        if covered >= self.expected:
            self.finished.set()

    def get_state(self) -> bytes:
        return msgspec.msgpack.encode(self.per_origin)

    def set_state(self, state: bytes) -> None:
        per_origin = msgspec.msgpack.decode(state, type=dict[str, int]) if state else {}
        self.per_origin = per_origin
        self.covered = sum(per_origin.values())
        if self.covered >= self.expected:
            self.finished.set()

    def outcome(self, members: list[NodeId], **counters: int) -> WorkerOutcome:
        """What this node reports: the workload's figures and the node's `counters`
        (broadcasts, packets, …: `abcast_counters`, or the floor's)."""
        if self._starting is not None:
            self._starting.cancel()
        if self._pacer is not None:
            self._pacer.cancel()
        return WorkerOutcome(
            node=self.node.id, delivered=self.delivered,
            complete=self.covered >= self.config.messages,
            go_ns=self.go_ns, last_deliver_ns=self.last_deliver_ns, members=members,
            latencies_ns=list(self.latencies),
            peak_rss_kib=peak_rss_kib(),
            cpu_ns=time.process_time_ns() - self.cpu_at_go_ns if self.go_ns else 0,
            rss_at_go_kib=self.rss_at_go_kib,
            gc_collections=list(self.gc.collections), gc_cpu_ns=list(self.gc.cpu_ns),
            gc_max_ns=list(self.gc.max_ns), **counters,
        )


# ------------------------------------------------------------------------ node processes


async def run_pipe_node(config: WorkerConfig, run: PipeWorker | None = None) -> WorkerOutcome:
    """A node driven by the launcher's pipe; StoppedError if stopped before the run began.
    `run`: the node to run (default: abcast's, `run_worker`; the floor has its own)."""
    control = PipeControl()
    await control.start()
    worker = asyncio.create_task(
        run_worker(config, lambda _node: control, own_process=True) if run is None
        else run(config, control))
    stopper = asyncio.ensure_future(control.stop_requested().wait())
    try:
        await asyncio.wait({worker, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if not worker.done() and not control.started:
            await stop_task(worker)  # still joining when told to stop: nothing to report
            raise StoppedError("stopped before the run started")
        return await worker
    finally:
        stopper.cancel()


async def run_manual_node(config: WorkerConfig) -> WorkerOutcome:
    """A node started by hand: the registry coordinates start and finish. The group's
    leader commits the runs row when tracing (the others' event files join it in `out`
    when it is shared, or when gathered there later)."""
    def control(node: Node) -> Control:
        if node.registry is None:
            raise LocalProtocolError("a node started by hand needs a registry")
        return RegistryControl(node.registry, config.group, config.size)

    outcome = await run_worker(config, control, own_process=True)
    if config.out is not None and outcome.members and outcome.node == outcome.members[0]:
        from abcast.trace.writer import add_run

        spec = get_ordering(config.ordering)
        add_run(config.out, RunInfo(
            run_id=config.run_id, ordering=config.ordering,
            transport=parse_url(config.transport).scheme, nodes=config.size,
            payload_bytes=config.payload,
            workload=workload_name(config.rate, config.serial),
            seed=None, faults=None, guarantees=spec.claimed(config.options),
            started_ns=outcome.go_ns,
            duration_ns=max(0, outcome.last_deliver_ns - outcome.go_ns),
            options=options_label(config.options),
        ))
    return outcome
