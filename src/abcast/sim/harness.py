"""One simulated run, end to end: build the cluster, run the workload under the faults,
check the trace, summarise.

Rules: everything random comes from one `random.Random(seed)`; the run id is derived
from the arguments, so the same arguments give the same rows (and overwrite the same
run in an output directory). Faults an ordering cannot honour are refused up front with
a ConfigError, never half-simulated.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path

from abcast.checks import Violation, check_events, count_by_code
from abcast.effects import Deliver, Stage
from abcast.errors import ConfigError
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, OrderingSpec, build_stack, get_ordering
from abcast.sim.cluster import SimCluster
from abcast.sim.faults import FaultPlan, parse_faults
from abcast.sim.network import DEFAULT_LINK, LinkModel, Network
from abcast.sim.scheduler import Scheduler
from abcast.stack import Stack
from abcast.trace.recorder import TraceRecorder
from abcast.trace.rows import RunInfo, options_label
from abcast.trace.writer import write_run
from abcast.workload import RoundRobin

#: build the stack of one node; the default is `build_stack` with the named ordering
StackFactory = Callable[[NodeId, View], Stack]

HOUR_US = 3_600_000_000
#: await_credit: how often a node whose broadcasts wait for credit looks again
CREDIT_POLL_US = 1_000


@dataclass(frozen=True, slots=True)
class SimConfig:
    ordering: str
    nodes: int
    messages: int
    seed: int
    faults: str = ""
    payload: int = 64
    rate: float | None = None  # total broadcasts per second (open loop); None = closed
    net_trace: bool = False
    options: OrderingOptions = field(default_factory=OrderingOptions)
    group: str = "g"
    link: LinkModel = DEFAULT_LINK
    #: per-link latencies (src, dst, model) over `link` (a WAN model: bench/wan_optimistic.py)
    links: tuple[tuple[NodeId, NodeId, LinkModel], ...] = ()
    #: the network delivers a packet to several nodes as one IP multicast (one send)
    ip_multicast: bool = False
    #: the network refuses frames above this many bytes (a transport's max_frame_bytes);
    #: the stacks' channels are told, as the runtime tells them (None: no bound)
    frame_bytes: int | None = None
    #: open loop only: the nodes that broadcast, round robin (empty: every node)
    senders: tuple[NodeId, ...] = ()
    #: open loop only: a node's broadcasts wait while its stack is backpressured, as the
    #: runtime's `broadcast()` does (polled every CREDIT_POLL_US); otherwise they ignore it
    await_credit: bool = False
    max_time_us: int = HOUR_US
    #: with periodic timers (failure detectors) a run never goes quiet: it ends once every
    #: broadcast went out and nothing was delivered for this long, counted from the last
    #: delivery or the last scheduled fault, whichever is later
    settle_us: int = 5_000_000
    #: ...and it gives up once nothing at all was delivered for this long (a stuck run;
    #: the checks then say what is missing)
    stall_us: int = 30_000_000
    #: step frames and broadcasts through the native lane (abcast.runtime.lane, the C
    #: extension abcast._lane) first, as the runtime does, where a node's stack is its
    #: shape (the sequencer family's); the rows must not change (they are the Python
    #: path's: tests/sim/test_sim_native_lane.py). The lane only takes frames of a
    #: channel with the runtime's one tick (abcast.sim.churn.STREAM_SHAPE, sweep_churn's
    #: --stream-channel): with the simulator's default per-link timers it declines
    #: everything. A ConfigError where the lane is not on (not built, stale, switched off).
    #: Not in the run id: a run writes the same rows either way.
    native_lane: bool = False

    def quiet_us(self) -> tuple[int, int]:
        """settle_us and stall_us as this run uses them: each longer by the sequencer's
        order interval, which an id may wait out before anything is delivered (so every
        interval the options accept ends in a correct run, not a false VALIDITY); the
        stall also by the open loop's gap between two broadcasts (a slow rate is no stall)."""
        interval_us = math.ceil(self.options.order_interval_ms * 1000)
        gap_us = math.ceil(1e6 / self.rate) if self.rate else 0
        return self.settle_us + interval_us, self.stall_us + interval_us + gap_us

    def node_ids(self) -> tuple[NodeId, ...]:
        return tuple(f"n{i}" for i in range(1, self.nodes + 1))

    def run_id(self) -> str:
        text = repr((self.faults, self.payload, self.rate, self.options, self.link,
                     self.group, self.net_trace, self.max_time_us)
                     + ((self.links,) if self.links else ())
                     + ((self.senders,) if self.senders else ()))
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        return f"{self.ordering}-n{self.nodes}-m{self.messages}-s{self.seed}-{digest}"


@dataclass(slots=True)
class SimResult:
    config: SimConfig
    run_id: str
    guarantees: tuple[str, ...]
    recorder: TraceRecorder
    violations: list[Violation]
    delivered: int
    broadcasts: int
    protocol_packets: int
    control_packets: int
    retransmissions: int
    quiescent: bool
    end_us: int
    events: int
    #: the simulated application's state (SimNode.app_state) of each node still running
    app_states: dict[NodeId, bytes] = field(default_factory=dict)
    #: nodes that left the group gracefully
    departed: tuple[NodeId, ...] = ()
    #: nodes asked to leave that had not departed when the run ended (still running)
    leaving: tuple[NodeId, ...] = ()
    #: frames the network refused: longer than `SimConfig.frame_bytes`
    oversize_frames: int = 0

    @property
    def counts(self) -> dict[str, int]:
        return count_by_code(self.violations)

    @property
    def packets_per_broadcast(self) -> float:
        return self.protocol_packets / self.broadcasts if self.broadcasts else 0.0

    def run_info(self) -> RunInfo:
        cfg = self.config
        workload = "closed-round-robin" if cfg.rate is None else f"open-{cfg.rate:g}/s"
        return RunInfo(
            run_id=self.run_id, ordering=cfg.ordering, transport="sim", nodes=cfg.nodes,
            payload_bytes=cfg.payload, workload=workload, seed=cfg.seed,
            faults=cfg.faults or None, guarantees=self.guarantees, started_ns=0,
            duration_ns=self.end_us * 1_000, options=options_label(cfg.options),
        )

    def summary(self) -> dict[str, object]:
        return {
            "run_id": self.run_id, "ordering": self.config.ordering,
            "nodes": self.config.nodes, "messages": self.config.messages,
            "delivered": self.delivered, "violations": self.counts,
            "packets_per_broadcast": round(self.packets_per_broadcast, 4),
            "retransmissions": self.retransmissions, "virtual_ms": self.end_us / 1_000,
            "quiescent": self.quiescent,
        }

    def write(self, out_dir: str | Path) -> None:
        write_run(out_dir, self.recorder, self.run_info())


def _validate(config: SimConfig, plan: FaultPlan, spec: OrderingSpec) -> None:
    if config.nodes < 1:
        raise ConfigError("--nodes must be at least 1")
    if config.messages < 0:
        raise ConfigError("--messages must be >= 0")
    if config.payload < 0:
        raise ConfigError("--payload must be >= 0")
    if config.rate is not None and config.rate <= 0:
        raise ConfigError("--rate must be positive")
    if config.senders and config.rate is None:
        raise ConfigError("senders needs an open-loop workload (a rate)")
    strangers = set(config.senders) - set(config.node_ids())
    if strangers:
        raise ConfigError(f"senders outside n1..n{config.nodes}: {sorted(strangers)}")
    spec.refuse_faults(plan.kinds())
    spec.claimed(config.options)  # refuses --safe where there is no safe mode
    unknown = plan.nodes_named() - set(config.node_ids()) - {j.node for j in plan.joins}
    if unknown:
        raise ConfigError(f"faults name nodes outside n1..n{config.nodes}: {sorted(unknown)}")


def run_simulation(
    config: SimConfig, *, stack_factory: StackFactory | None = None,
    guarantees: tuple[str, ...] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    """Run one simulation. `stack_factory`/`guarantees` replace the named ordering's
    stack and claims (tests use them to plant broken variants); the faults honoured are
    always the named ordering's.
    `on_progress(delivered, expected)` is called now and then."""
    spec = get_ordering(config.ordering)
    plan = parse_faults(config.faults)
    _validate(config, plan, spec)
    rng = random.Random(config.seed)
    link = LinkModel(*plan.delay_us) if plan.delay_us else config.link
    network = Network(rng, link, plan.drop, plan.dup, ip_multicast=config.ip_multicast,
                      frame_bytes=config.frame_bytes)
    for src, dst, model in config.links:
        network.set_link(src, dst, model)
    scheduler = Scheduler()
    run_id = config.run_id()
    recorder = TraceRecorder(run_id)
    ids = config.node_ids()
    workload = RoundRobin(config.senders or ids, config.messages)
    payload = bytes(config.payload)
    delivered = 0
    last_delivery_us = 0
    expected = config.messages * config.nodes

    def on_deliver(node: NodeId, d: Deliver) -> None:
        nonlocal delivered, last_delivery_us
        if d.stage is not Stage.FINAL:
            return  # a tentative delivery (ordering "optimistic"): the final one counts
        delivered += 1
        last_delivery_us = scheduler.now
        if config.rate is None and workload.on_deliver(node, d.origin, d.seq):
            scheduler.at(scheduler.now, partial(send_when_ready, node))

    def stop_sending(node: NodeId) -> None:
        """The node crashed, was excluded or left: nobody waits for its messages now."""
        for ready in workload.on_crash(node) if config.rate is None else []:
            scheduler.at(scheduler.now, partial(send_when_ready, ready))

    cluster = SimCluster(scheduler, network, recorder, net_trace=config.net_trace,
                         on_deliver=on_deliver, on_stop=stop_sending,
                         native_lane=config.native_lane)
    cluster.commutative_state = "total" not in spec.guarantees

    waiting: dict[NodeId, int] = {}  # await_credit: broadcasts due but not yet sent

    def send(node: NodeId) -> None:
        sim_node = cluster.nodes[node]
        if sim_node.stopped or sim_node.leaving or (
                workload.sent_by(node) >= workload.total_of(node)):
            return
        if config.await_credit and (node in waiting or sim_node.stack.backpressured()):
            if node not in waiting:
                scheduler.at(scheduler.now + CREDIT_POLL_US, partial(send_waiting, node))
            waiting[node] = waiting.get(node, 0) + 1
            return
        workload.note_sent(node)
        cluster.broadcast(node, payload)

    def send_waiting(node: NodeId) -> None:
        due = waiting.pop(node, 0)
        stack = cluster.nodes[node].stack
        while due and not stack.backpressured():
            due -= 1
            send(node)
        if due and not cluster.nodes[node].stopped:
            waiting[node] = due
            scheduler.at(scheduler.now + CREDIT_POLL_US, partial(send_waiting, node))

    def send_when_ready(node: NodeId) -> None:
        # Several deliveries in one instant each find the node ready; only the first
        # scheduled send may go, the others find the round already started.
        if workload.ready(node):
            send(node)

    view = View(1, ids)
    options = config.options
    if config.frame_bytes is not None:
        options = options.within_frames(config.frame_bytes)
    make = stack_factory or (
        lambda node, v: build_stack(node, config.group, config.ordering, v, options)
    )
    for node in ids:
        cluster.add(make(node, view))

    if config.rate is None:
        for node in workload.initial():
            scheduler.at(0, partial(send, node))
    else:
        gap = 1_000_000 / config.rate
        senders = config.senders or ids
        for k in range(config.messages):
            node = senders[k % len(senders)]
            scheduler.at(round(k * gap), partial(send, node))

    def do_leave(node: NodeId) -> None:
        cluster.leave(node)
        stop_sending(node)

    def do_join(node: NodeId) -> None:
        alone = View(0, (node,))
        cluster.join(make(node, alone), tuple(cluster.alive()))

    for crash in plan.crashes:
        scheduler.at(crash.at_us, partial(cluster.crash, crash.node))
    for leave in plan.leaves:
        scheduler.at(leave.at_us, partial(do_leave, leave.node))
    for join in plan.joins:
        scheduler.at(join.at_us, partial(do_join, join.node))
    for part in plan.partitions:
        scheduler.at(part.start_us, partial(network.partition, part.left, part.right, part.one_way))
        scheduler.at(part.end_us, partial(network.heal, part.left, part.right, part.one_way))
    for hold in plan.holds:
        for src, dst in hold.links():
            scheduler.at(hold.start_us, partial(network.hold, src, dst))
            scheduler.at(hold.end_us, partial(cluster.release, src, dst))

    settled = stalled = False
    settle_us, stall_us = config.quiet_us()
    # the last scheduled fault: a run is not settled while its schedule still plays out
    # (a node cut off after the last delivery has yet to be excluded, a joiner welcomed)
    faults_end = max([c.at_us for c in plan.crashes] + [lv.at_us for lv in plan.leaves]
                     + [j.at_us for j in plan.joins] + [p.end_us for p in plan.partitions]
                     + [h.end_us for h in plan.holds], default=0)

    def check_settled() -> None:
        nonlocal settled, stalled
        # quiet: nothing delivered, and the fault schedule over (a stall is counted so too)
        quiet = scheduler.now - max(last_delivery_us, faults_end)
        # A joiner still asking, or (primary partition) a member of the latest view that
        # has yet to install it, is unfinished business: the run settles once they are
        # in (or stalls, and the checks say what they lack).
        pending = cluster.joining() or (not config.options.evs and cluster.behind())
        if workload.done_sending() and quiet >= settle_us and not pending:
            settled = True
            scheduler.stop()
        elif quiet >= stall_us:
            stalled = True
            scheduler.stop()
        else:
            scheduler.after(settle_us // 5, check_settled)

    if spec.needs_detector or spec.periodic:
        scheduler.at(settle_us, check_settled)
    tick = (lambda _t: on_progress(delivered, expected)) if on_progress else None
    quiescent = (scheduler.run(config.max_time_us, on_tick=tick) or settled) and not stalled
    if on_progress:
        on_progress(delivered, expected)

    claimed = guarantees if guarantees is not None else spec.claimed(config.options)
    violations = check_events(recorder.rows(), claimed, run_id)
    channels = [layer for n in cluster.nodes.values() for layer in n.stack.layers]
    retransmissions = sum(getattr(layer, "retransmissions", 0) for layer in channels)
    return SimResult(
        config=config, run_id=run_id, guarantees=claimed, recorder=recorder,
        violations=violations, delivered=delivered,
        broadcasts=sum(workload.sent_by(n) for n in workload.nodes),
        protocol_packets=cluster.protocol_packets, control_packets=cluster.control_packets,
        retransmissions=retransmissions, quiescent=quiescent, end_us=scheduler.now,
        events=scheduler.events_run,
        app_states={n: s.app_state for n, s in cluster.nodes.items() if not s.stopped},
        departed=tuple(n for n, s in cluster.nodes.items() if s.departed),
        leaving=tuple(n for n, s in cluster.nodes.items() if s.leaving and not s.stopped),
        oversize_frames=network.oversize,
    )


#: SimResult's fields that are not its outcome: what the run was asked (the config, its
#: id and guarantees), its rows and its violations (compared on their own)
_NOT_OUTCOME = frozenset({"config", "run_id", "guarantees", "recorder", "violations"})


def first_difference(a: SimResult, b: SimResult) -> str | None:
    """Where run `b` first departs from run `a` of the same arguments (`native_lane`
    aside): the first row that differs (every row, in order; its fields that differ, as
    `a`'s != `b`'s, then `a`'s row), else the first outcome field or the violations; None
    when they are the same run."""
    rows_a, rows_b = a.recorder.rows(), b.recorder.rows()
    for i, (row_a, row_b) in enumerate(zip(rows_a, rows_b, strict=False)):
        if row_a != row_b:
            differ = ", ".join(
                f"{f.name} {getattr(row_a, f.name)!r} != {getattr(row_b, f.name)!r}"
                for f in fields(row_a) if getattr(row_a, f.name) != getattr(row_b, f.name))
            return f"row {i} ({differ}): {row_a!r}"
    if len(rows_a) != len(rows_b):
        i = min(len(rows_a), len(rows_b))
        extra = rows_a[i] if len(rows_a) > i else rows_b[i]
        return (f"row {i}: one run has {len(rows_a)} rows, the other {len(rows_b)}; "
                f"the first extra: {extra!r}")
    for name in (f.name for f in fields(SimResult) if f.name not in _NOT_OUTCOME):
        if getattr(a, name) != getattr(b, name):
            return f"{name}: {getattr(a, name)!r} != {getattr(b, name)!r}"
    if a.violations != b.violations:
        return f"violations: {a.counts} != {b.counts}"
    return None
