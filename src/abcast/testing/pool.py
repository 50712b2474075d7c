"""`PacketPool`: a few stacks wired through an explicit pool of in-flight packets, for
tests that want to choose every step (Hypothesis state machines, hand-written schedules).

Rules: nothing here is random and nothing reads a clock. The caller picks which packet
arrives next, which is lost, which is duplicated and which timer fires; virtual time
moves only when a timer fires (to its deadline) or the caller lets it pass. Packets
leave a node in the order its stack emits them, so a pool index is a stable name for
"that packet" until the pool changes.

The pool records what the drivers record — a `send` row with the sender's delivered
prefixes as `deps`, a `deliver` row per delivery — so the official checks (`violations`)
can judge it, and it checks the safety part of the claimed guarantees incrementally as
deliveries happen (`problems`): no duplicate or unknown delivery, FIFO as "each origin's
messages arrive 1, 2, 3, …", causal as "every predecessor first", total order as "every
node's delivery sequence is a prefix of one common sequence". Agreement and validity
are liveness-flavoured: ask `missing()` after `flush()`.

No crashes, partitions or view changes here: every node is correct for the whole run.
Stacks with periodic timers (failure detectors, stability reports) never go quiet, so
`flush` also stops once only control traffic has moved for `idle_us` of virtual time.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, replace

from abcast.checks import Violation, check_events, validate_guarantees
from abcast.codec import decode_envelope
from abcast.effects import CancelTimer, Deliver, Output, SetTimer, Stage, Transmit
from abcast.errors import LocalProtocolError
from abcast.group.failure_detector import DetectorConfig
from abcast.ids import MsgId, NodeId, View, node_sort_key
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.stack import Stack
from abcast.trace.recorder import TraceRecorder

NEVER_SUSPECT = DetectorConfig(timeout_us=2**60)


@dataclass(frozen=True, slots=True)
class InFlight:
    src: NodeId
    dst: NodeId
    data: bytes
    control: bool


@dataclass(frozen=True, slots=True)
class ArmedTimer:
    at: int
    node: NodeId
    key: Hashable


class PacketPool:
    def __init__(
        self, stacks: Sequence[Stack], guarantees: Iterable[str], *, run_id: str = "pool"
    ) -> None:
        if not stacks:
            raise LocalProtocolError("a packet pool needs at least one stack")
        self.guarantees = validate_guarantees(guarantees)
        self.stacks = {s.node: s for s in stacks}
        if len(self.stacks) != len(stacks):
            raise LocalProtocolError("two stacks for the same node")
        self.run_id = run_id
        self.now = 0
        self.in_flight: list[InFlight] = []
        self.recorder = TraceRecorder(run_id)
        self.sent: dict[MsgId, dict[NodeId, int]] = {}
        self.deliveries: dict[NodeId, list[MsgId]] = {n: [] for n in self.stacks}
        self.problems: list[str] = []
        self.protocol_packets = 0
        self._timers: dict[NodeId, dict[Hashable, int]] = {n: {} for n in self.stacks}
        self._delivered: dict[NodeId, dict[MsgId, None]] = {n: {} for n in self.stacks}
        self._prefix: dict[NodeId, dict[NodeId, int]] = {n: {} for n in self.stacks}
        self._above: dict[NodeId, dict[NodeId, dict[int, None]]] = {n: {} for n in self.stacks}
        self._common: list[MsgId] = []  # the longest delivery sequence (total order)
        self._active_at = 0  # last protocol packet or delivery (flush's idea of quiet)
        for node, stack in self.stacks.items():
            self._apply(node, stack.start(self.now))

    @classmethod
    def of(
        cls, ordering: str, nodes: int, *, options: OrderingOptions | None = None,
        group: str = "g",
    ) -> PacketPool:
        """`nodes` stacks n1…nN of a named ordering, judged by the guarantees it claims.
        Failure detectors are set never to suspect: every node here is correct, and the
        pool's time jumps (to a timer's deadline, packets still in flight) would
        otherwise look like crashes."""
        ids = tuple(f"n{i}" for i in range(1, nodes + 1))
        options = replace(options or OrderingOptions(), detector=NEVER_SUSPECT)
        view = View(1, ids)
        spec = get_ordering(ordering)
        stacks = [build_stack(node, group, ordering, view, options) for node in ids]
        return cls(stacks, spec.guarantees, run_id=f"pool-{ordering}-n{nodes}")

    # -- the caller's moves ----------------------------------------------------------------
    @property
    def nodes(self) -> tuple[NodeId, ...]:
        return tuple(self.stacks)

    def broadcast(self, node: NodeId, payload: bytes = b"") -> MsgId:
        stack = self.stacks[node]
        mid = MsgId(node, stack.broadcasts + 1)
        deps = {o: k for o, k in self._prefix[node].items() if k and o != node}
        self.sent[mid] = deps
        group = stack.group
        self.recorder.record(node, "send", self._t_ns(), origin=node, seq=mid.seq,
                             group=group, size=len(payload), deps=deps)
        seq, outputs = stack.broadcast(payload, self.now)
        if seq != mid.seq:
            raise LocalProtocolError(f"{node} numbered its broadcast {seq}, expected {mid.seq}")
        self._apply(node, outputs)
        return mid

    def deliver(self, index: int) -> None:
        """The in-flight packet at `index` arrives at its destination; a refusal (every
        node here is correct, so a core's bug) is raised once its outputs are applied."""
        packet = self.in_flight.pop(index)
        stack = self.stacks[packet.dst]
        outputs, refused = stack.receive(decode_envelope(packet.data), self.now)
        self._apply(packet.dst, outputs)
        if refused is not None:
            raise refused

    def drop(self, index: int) -> None:
        del self.in_flight[index]

    def duplicate(self, index: int) -> None:
        self.in_flight.append(self.in_flight[index])

    def advance(self, us: int) -> None:
        """Let time pass without anything happening (timers fire only when asked)."""
        if us < 0:
            raise LocalProtocolError(f"time cannot go back ({us} us)")
        self.now += us

    def timers(self) -> list[ArmedTimer]:
        """Armed timers, earliest first (ties in node order, then by key)."""
        armed = [ArmedTimer(at, node, key)
                 for node, keys in self._timers.items() for key, at in keys.items()]
        armed.sort(key=lambda t: (t.at, node_sort_key(t.node), repr(t.key)))
        return armed

    def fire(self, timer: ArmedTimer) -> None:
        """Fire an armed timer; time moves to its deadline if that is later than now."""
        keys = self._timers[timer.node]
        if keys.get(timer.key) != timer.at:
            raise LocalProtocolError(f"{timer} is not armed")
        del keys[timer.key]
        self.now = max(self.now, timer.at)
        self._apply(timer.node, self.stacks[timer.node].fire(timer.key, self.now))

    def flush(self, max_steps: int = 200_000, idle_us: int = 2_000_000) -> int:
        """Deliver every packet and fire timers until nothing is in flight or armed, or
        until only control traffic (heartbeats, acks) moved for `idle_us`. Returns the
        steps taken; LocalProtocolError if it does not go quiet."""
        steps = 0
        while self.in_flight or any(self._timers.values()):
            if steps >= max_steps:
                raise LocalProtocolError(f"pool not quiet after {max_steps} steps")
            steps += 1
            if self.in_flight:
                self.deliver(0)
                continue
            timer = self.timers()[0]
            if timer.at - self._active_at > idle_us:
                break
            self.fire(timer)
        return steps

    # -- verdicts ---------------------------------------------------------------------------
    def missing(self) -> list[tuple[NodeId, MsgId]]:
        """(node, message) pairs of sent messages a node has not delivered (agreement and
        validity, once the pool is flushed: every node here is correct)."""
        return [(node, mid) for node, got in self._delivered.items()
                for mid in self.sent if mid not in got]

    def violations(self) -> list[Violation]:
        """The official checks (abcast.testing) on the rows recorded so far."""
        return check_events(self.recorder.rows(), self.guarantees, self.run_id)

    # -- bookkeeping -------------------------------------------------------------------------
    def _t_ns(self) -> int:
        return self.now * 1_000

    def _apply(self, node: NodeId, outputs: list[Output]) -> None:
        for out in outputs:
            match out:
                case Transmit(to, data, control):
                    if not control:
                        self.protocol_packets += len(to)
                        self._active_at = self.now
                    self.in_flight.extend(InFlight(node, dst, data, control) for dst in to)
                case Deliver(origin, seq, payload, stage):
                    self.recorder.record(node, stage.value, self._t_ns(), origin=origin,
                                         seq=seq, group=self.stacks[node].group,
                                         size=len(payload))
                    self._active_at = self.now
                    if stage is Stage.FINAL:
                        self._on_deliver(node, MsgId(origin, seq))
                case SetTimer(key, at):
                    self._timers[node][key] = at
                case CancelTimer(key):
                    self._timers[node].pop(key, None)
                case _:
                    pass  # InstallView: every node here stays in the one view

    def _on_deliver(self, node: NodeId, mid: MsgId) -> None:
        claimed = self.guarantees
        prefix = self._prefix[node]
        if "integrity" in claimed:
            if mid in self._delivered[node]:
                self.problems.append(f"{node} delivered {mid} twice")
            if mid not in self.sent:
                self.problems.append(f"{node} delivered {mid}, which was never sent")
        if "fifo" in claimed and prefix.get(mid.origin, 0) != mid.seq - 1:
            self.problems.append(
                f"{node} delivered {mid} after {mid.origin}'s first "
                f"{prefix.get(mid.origin, 0)} messages (FIFO)")
        if "causal" in claimed:
            needs = dict(self.sent.get(mid, {}))
            needs[mid.origin] = mid.seq - 1
            for o, k in sorted(needs.items()):
                if prefix.get(o, 0) < k:
                    self.problems.append(
                        f"{node} delivered {mid} before {o}#{prefix.get(o, 0) + 1} (causal)")
        if "total" in claimed:
            position = len(self.deliveries[node])
            if position < len(self._common):
                if self._common[position] != mid:
                    self.problems.append(
                        f"{node} delivered {mid} at position {position + 1}, where another "
                        f"node delivered {self._common[position]} (total order)")
            else:
                self._common.append(mid)
        self._delivered[node][mid] = None
        self.deliveries[node].append(mid)
        self._note_prefix(node, mid)

    def _note_prefix(self, node: NodeId, mid: MsgId) -> None:
        prefix, above = self._prefix[node], self._above[node]
        k = prefix.get(mid.origin, 0)
        if mid.seq != k + 1:
            above.setdefault(mid.origin, {})[mid.seq] = None
            return
        k = mid.seq
        waiting = above.get(mid.origin)
        while waiting and k + 1 in waiting:
            k += 1
            del waiting[k]
        prefix[mid.origin] = k
