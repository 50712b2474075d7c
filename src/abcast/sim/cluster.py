"""Simulated nodes: each hosts a group's stack and carries out its outputs.

Rules: this is the simulator's driver, the twin of the asyncio runtime. It turns
`Transmit` into packets through the `Network`, timers into scheduler entries, and
`Deliver`/`InstallView` into trace rows — the same rows the runtime writes — and answers
the application's effects (`TakeSnapshot`, `InstallState`, `MergeStates`) for the
simulated application (a digest chained over deliveries; merging states digests them in
the order given). Bad frames
are logged and counted, never raised: a peer cannot crash a node; the outputs of a frame
a layer refused are carried out first (`Stack.receive`). Crashed nodes stop:
their timers die and packets to them are lost.

With `native_lane` the cluster steps frames and broadcasts as the runtime does where the
native lane is on (abcast.runtime.lane): a frame that passed the envelope and group
checks (and wrote its net_recv row) is offered to `lane.RECEIVE` first, a broadcast to
`lane.BROADCAST`, for a node whose stack is `lane.eligible`; whatever the lane declines
(None) takes the Python path. The lane changes exactly what that path would, so a run
gives the same rows either way (tests/sim/test_sim_native_lane.py holds it to that). A
switch turned on where the lane is not (not built, stale, ABCAST_NATIVE_LANE=0) is a
ConfigError, never a silent Python run.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from abcast.codec import FLAG_CONTROL, decode_envelope
from abcast.effects import (
    CancelTimer,
    Deliver,
    InstallState,
    InstallView,
    MergeStates,
    Output,
    SetTimer,
    Stage,
    TakeSnapshot,
    Transmit,
)
from abcast.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.sim.network import Network
from abcast.sim.scheduler import Scheduler
from abcast.stack import Stack
from abcast.trace.recorder import DeliveredPrefix, TraceRecorder

log = logging.getLogger(__name__)

DeliverHook = Callable[[NodeId, Deliver], None]


@dataclass(frozen=True, slots=True)
class NativeLane:
    """abcast.runtime.lane's steps, with the cluster's tag (None) for every group."""

    #: receive(frame, peer, {group: (None, stack)}, now) -> (None, outputs) | None
    receive: Callable[[bytes, NodeId, dict[str, tuple[None, Stack]], int],
                      tuple[None, list[Output]] | None]
    #: broadcast(stack, payload, now) -> outputs | None
    broadcast: Callable[[Stack, bytes, int], list[Output] | None]
    eligible: Callable[[Stack], bool]

    @classmethod
    def load(cls) -> NativeLane:
        """The lane's steps, or a ConfigError saying why it is not on (imported here: a
        cluster without the switch never loads the runtime)."""
        from abcast.runtime import lane

        if lane.RECEIVE is None or lane.BROADCAST is None:
            raise ConfigError(f"native_lane: the native lane is not on: {lane.STATUS}")
        receive: Any = lane.RECEIVE  # typed for the runtime's tag, a GroupDriver
        return cls(receive, lane.BROADCAST, lane.eligible)


def _let_go(sim_node: SimNode) -> bool:
    """Whether a node leaving its view left gracefully: it asked to, and no layer says
    the group removed it before its leave was decided (`cut_off`: then it was removed)."""
    return sim_node.leaving and not sim_node.stack.cut_off


@dataclass(slots=True)
class SimNode:
    node: NodeId
    stack: Stack
    crashed: bool = False
    timers: dict[Hashable, int] = field(default_factory=dict)
    prefix: DeliveredPrefix = field(default_factory=DeliveredPrefix)
    bad_frames: int = 0
    # The view as this node's application has seen it: one stack call may deliver in the
    # old view and then install a new one, and each row must say which.
    view_id: int = 0
    members: tuple[NodeId, ...] = ()
    leaving: bool = False
    departed: bool = False  # left gracefully: stopped, but not crashed
    rejoined: int = 0  # times it was admitted again after the group had left it out
    # The application each node runs in the simulator: a digest chained over every
    # delivery, so two nodes hold equal state exactly when they delivered the same
    # messages in the same order since equal states (state transfer included).
    app_state: bytes = b""
    #: the application's updates commute (a set, a sum): its state is the same however
    #: the deliveries were ordered — the simulated application of an ordering without
    #: total order, whose members deliver the same messages in different orders
    commutative: bool = False
    #: the native lane's map for this node's stack ({group: (None, stack)}), when the
    #: cluster runs the lane (SimCluster.lane) and the stack is its shape
    lanes: dict[str, tuple[None, Stack]] | None = None

    @property
    def stopped(self) -> bool:
        return self.crashed or self.departed

    def apply_delivery(self, origin: NodeId, seq: int, payload: bytes) -> None:
        head = f"{origin}:{seq}:".encode()
        if self.commutative:  # a sum of the deliveries' digests (a duplicate still counts)
            total = int.from_bytes(self.app_state or bytes(32), "big")
            total += int.from_bytes(hashlib.sha256(head + payload).digest(), "big")
            self.app_state = (total % 2**256).to_bytes(32, "big")
            return
        self.app_state = hashlib.sha256(self.app_state + head + payload).digest()

    def merge_states(self, states: tuple[bytes, ...]) -> bytes:
        """The simulated application's merge hook: one digest over the sides' states, in
        the order given (every member then holds the same merged state)."""
        return hashlib.sha256(b"merge:" + b"".join(states)).digest()

    def note_delivered(self, origin: NodeId, seq: int) -> None:
        self.prefix.note(origin, seq)

    def deps(self) -> dict[NodeId, int]:
        """What this node had delivered from others, as contiguous prefixes."""
        return self.prefix.deps(self.node)

class SimCluster:
    #: the simulated application has a merge hook (`SimNode.merge_states`); without it a
    #: merge keeps the state of the side holding the lowest member (`states[0]`)
    state_merge: bool = True
    #: the simulated application's updates commute (`SimNode.commutative`): set for
    #: orderings that do not claim total order
    commutative_state: bool = False

    def __init__(
        self, scheduler: Scheduler, network: Network, recorder: TraceRecorder,
        *, net_trace: bool = False, on_deliver: DeliverHook | None = None,
        on_stop: Callable[[NodeId], None] | None = None, native_lane: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.network = network
        self.recorder = recorder
        self.net_trace = net_trace
        self.on_deliver = on_deliver
        self.on_stop = on_stop  # a node crashed, was excluded, or left
        self.nodes: dict[NodeId, SimNode] = {}
        self._removed: set[NodeId] = set()  # nodes some member saw a view leave out
        self._timer_tokens = 0
        self.protocol_packets = 0
        self.control_packets = 0
        #: the native lane's steps, when the switch is on (None: the Python path only)
        self.lane = NativeLane.load() if native_lane else None

    def _t_ns(self) -> int:
        return self.scheduler.now * 1_000

    def add(self, stack: Stack) -> SimNode:
        """Start a node; a node that crashed (or gave its join up) may start again with
        a new stack: a new incarnation (a `recover` row)."""
        old = self.nodes.get(stack.node)
        if old is not None and not old.crashed:
            raise LocalProtocolError(f"node {stack.node} already exists")
        sim_node = self.nodes[stack.node] = SimNode(stack.node, stack,
                                                    commutative=self.commutative_state)
        if self.lane is not None and self.lane.eligible(stack):
            sim_node.lanes = {stack.group: (None, stack)}
        if old is not None:
            self.recorder.record(stack.node, "recover", self._t_ns(), group=stack.group)
        self._apply(sim_node, stack.start(self.scheduler.now))
        return sim_node

    def alive(self) -> list[NodeId]:
        return [n for n, s in self.nodes.items() if not s.stopped]

    def joining(self) -> list[NodeId]:
        """Running nodes not admitted yet (still in the private view 0 they start in)."""
        return [n for n, s in self.nodes.items() if not s.stopped and s.view_id == 0]

    def behind(self) -> list[NodeId]:
        """Running members of the latest view a node installed (by id: one membership
        per id under primary partition) that have not installed it yet."""
        live = [s for s in self.nodes.values() if not s.stopped]
        if not live:
            return []
        top = max(live, key=lambda s: s.view_id)
        return [s.node for s in live if s.node in top.members and s.view_id < top.view_id]

    def join(self, stack: Stack, contacts: tuple[NodeId, ...]) -> SimNode:
        """Start a node outside the group (its stack's view holds only itself) and ask
        to join through `contacts`."""
        sim_node = self.add(stack)
        self._apply(sim_node, stack.join(contacts, self.scheduler.now))
        return sim_node

    def leave(self, node: NodeId) -> None:
        sim_node = self.nodes[node]
        if sim_node.stopped:
            return
        sim_node.leaving = True
        self._apply(sim_node, sim_node.stack.leave(self.scheduler.now))

    def give_up_join(self, node: NodeId, detach_us: int = 2_000_000) -> None:
        """The application gives `node`'s join up (`Group.join` timed out): its stack
        withdraws the ask and, as the runtime does, the node detaches the group once
        its channel has nothing unacked (the withdrawal arrived), or after `detach_us` —
        silent from then on, which the trace writes as a crash. Admitted meanwhile (a
        view the application saw), it leaves gracefully instead."""
        sim_node = self.nodes[node]
        if sim_node.stopped:
            return
        if sim_node.view_id:
            self.leave(node)
            return
        self._apply(sim_node, sim_node.stack.abandon_join(self.scheduler.now))
        deadline = self.scheduler.now + detach_us

        def detach_when_acked() -> None:
            if sim_node.crashed:
                return
            if self.scheduler.now >= deadline or not sim_node.stack.in_flight():
                self.crash(node)
            else:
                self.scheduler.after(10_000, detach_when_acked)

        detach_when_acked()

    def broadcast(self, node: NodeId, payload: bytes) -> int:
        sim_node = self.nodes[node]
        if sim_node.stopped:
            raise LocalProtocolError(f"{node} is stopped and cannot broadcast")
        stack = sim_node.stack
        seq = stack.broadcasts + 1
        self.recorder.record(
            node, "send", self._t_ns(), origin=node, seq=seq, group=stack.group,
            size=len(payload), view_id=sim_node.view_id, deps=sim_node.deps(),
        )
        outputs = None
        if sim_node.lanes is not None and self.lane is not None:  # as the runtime's driver
            outputs = self.lane.broadcast(stack, payload, self.scheduler.now)
        if outputs is None:
            _, outputs = stack.broadcast(payload, self.scheduler.now)
        assert stack.broadcasts == seq
        self._apply(sim_node, outputs)
        return seq

    def crash(self, node: NodeId) -> None:
        sim_node = self.nodes[node]
        if sim_node.crashed:
            return
        sim_node.crashed = True
        sim_node.timers.clear()
        self.recorder.record(node, "crash", self._t_ns(), group=sim_node.stack.group)
        if self.on_stop is not None:
            self.on_stop(node)

    # -- carrying out outputs ----------------------------------------------------------------
    def _apply(self, sim_node: SimNode, outputs: list[Output]) -> None:
        node = sim_node.node
        stack = sim_node.stack
        bound = self.network.frame_bytes
        for out in outputs:
            match out:
                case Transmit(to, data, _) if bound is not None and len(data) > bound:
                    self.network.oversize += 1  # the transport refuses it; nothing is sent
                    log.warning("%s: a %d-byte frame to %s exceeds the frame bound %d",
                                node, len(data), to, bound)
                case Transmit(to, data, control) if len(to) > 1 and self.network.ip_multicast:
                    self._count(node, "*", data, control, stack.group)  # one send on the wire
                    for dst in to:
                        self._deliver_packet(node, dst, data)
                case Transmit(to, data, control):
                    for dst in to:
                        self._transmit(node, dst, data, control, stack.group)
                case Deliver(origin, seq, payload, stage):
                    self.recorder.record(
                        node, stage.value, self._t_ns(), origin=origin, seq=seq,
                        group=stack.group, size=len(payload), view_id=sim_node.view_id,
                    )
                    if stage is Stage.FINAL:  # a tentative delivery changes no state
                        sim_node.note_delivered(origin, seq)
                        sim_node.apply_delivery(origin, seq, payload)
                    if self.on_deliver is not None:
                        self.on_deliver(node, out)
                case SetTimer(key, at):
                    self._timer_tokens += 1
                    token = self._timer_tokens
                    sim_node.timers[key] = token
                    self.scheduler.at(at, partial(self._fire, sim_node, key, token))
                case CancelTimer(key):
                    sim_node.timers.pop(key, None)
                case InstallView(view) if node not in view.members and _let_go(sim_node):
                    sim_node.departed = True  # a graceful leave completed
                    sim_node.timers.clear()
                    if self.on_stop is not None:
                        self.on_stop(node)
                    return
                case InstallView(view) if node not in view.members:
                    # The group gave up on this node (it was suspected and removed): it
                    # must stop rather than go on as if it had not (the Isis rule).
                    self.crash(node)
                    return
                case TakeSnapshot(token):
                    taken = stack.snapshot_taken(token, sim_node.app_state, self.scheduler.now)
                    self._apply(sim_node, taken)
                case MergeStates(token, states):
                    merged = sim_node.merge_states(states) if self.state_merge else states[0]
                    self._apply(sim_node, stack.states_merged(token, merged, self.scheduler.now))
                case InstallState(state, merged):
                    sim_node.app_state = state
                    if sim_node.view_id > 0 and not merged:
                        self._rejoined(sim_node)
                case InstallView(view):
                    self._note_removed(set(sim_node.members) - set(view.members))
                    sim_node.view_id = view.view_id
                    sim_node.members = view.members
                    self.recorder.record(
                        node, "view", self._t_ns(), group=stack.group, view_id=view.view_id,
                        members=view.members,
                    )

    def _note_removed(self, removed: set[NodeId]) -> None:
        """A member installed a view without these nodes. One cut off by a partition is
        still running (it rejoins later, or stops once it hears), but the group goes on
        without it: nobody waits for its broadcasts any more, as for a crashed node."""
        for node in sorted(removed - self._removed):
            self._removed.add(node)
            removed_node = self.nodes.get(node)
            if self.on_stop is not None and removed_node is not None and not removed_node.stopped:
                self.on_stop(node)

    def _rejoined(self, sim_node: SimNode) -> None:
        """A member the group had left out (cut off by a partition) is admitted again
        with a fresh state: its first incarnation ended where the group gave up on it,
        so the trace says it crashed and recovered (it is not a correct node), and the
        workload stops waiting for its broadcasts."""
        group = sim_node.stack.group
        self.recorder.record(sim_node.node, "crash", self._t_ns(), group=group)
        self.recorder.record(sim_node.node, "recover", self._t_ns(), group=group)
        sim_node.rejoined += 1
        if self.on_stop is not None:
            self.on_stop(sim_node.node)

    def _fire(self, sim_node: SimNode, key: Hashable, token: int) -> None:
        if sim_node.stopped or sim_node.timers.get(key) != token:
            return  # cancelled, moved, or the node died
        del sim_node.timers[key]
        self._apply(sim_node, sim_node.stack.fire(key, self.scheduler.now))

    def _transmit(self, src: NodeId, dst: NodeId, data: bytes, control: bool, group: str) -> None:
        self._count(src, dst, data, control, group)
        self._deliver_packet(src, dst, data)

    def _count(self, src: NodeId, dst: NodeId, data: bytes, control: bool, group: str) -> None:
        """One packet on the wire (dst "*": one IP multicast to several nodes)."""
        if control:
            self.control_packets += 1
        else:
            self.protocol_packets += 1
            if self.net_trace:
                self.recorder.record(
                    src, "net_send", self._t_ns(), group=group, size=len(data), peer=dst,
                )

    def _deliver_packet(self, src: NodeId, dst: NodeId, data: bytes) -> None:
        if self.network.held(src, dst):
            self.network.keep(src, dst, data)
            return
        self._schedule(src, dst, data)

    def _schedule(self, src: NodeId, dst: NodeId, data: bytes) -> None:
        for t in self.network.arrivals(src, dst, self.scheduler.now):
            self.scheduler.at(t, lambda: self._arrive(src, dst, data))

    def release(self, src: NodeId, dst: NodeId) -> None:
        """Let a held link's packets go, in the order they were sent."""
        for data in self.network.release(src, dst):
            self._schedule(src, dst, data)

    def _arrive(self, src: NodeId, dst: NodeId, data: bytes) -> None:
        sim_node = self.nodes.get(dst)
        if sim_node is None or sim_node.stopped or self.network.blocked(src, dst):
            return
        stack = sim_node.stack
        try:
            env = decode_envelope(data)
            if env.group != stack.group:
                raise RemoteProtocolError(f"frame for unknown group {env.group!r}")
            if self.net_trace and not env.flags & FLAG_CONTROL:
                self.recorder.record(
                    dst, "net_recv", self._t_ns(), group=stack.group, size=len(data), peer=src,
                )
        except RemoteProtocolError as exc:
            self._bad_frame(sim_node, src, exc)
            return
        lanes = sim_node.lanes
        if lanes is not None and self.lane is not None:  # first, as the runtime's Node
            stepped = self.lane.receive(data, src, lanes, self.scheduler.now)
            if stepped is not None:
                self._apply(sim_node, stepped[1])
                return
        outputs, refused = stack.receive(env, self.scheduler.now)
        self._apply(sim_node, outputs)  # what the layers below a refusal did stands
        if refused is not None:
            self._bad_frame(sim_node, src, refused)

    def _bad_frame(self, sim_node: SimNode, src: NodeId, exc: RemoteProtocolError) -> None:
        sim_node.bad_frames += 1
        log.warning("%s dropped a frame from %s: %s", sim_node.node, src, exc)
