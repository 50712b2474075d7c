"""Matrix-clock total order, as the RepMI thesis adapts Lamport's matrix timestamps; views
by the membership layer (abcast.membership).

Rules. Every write is stamped by its origin with the next value of the origin's Lamport
clock; its id is (stamp, origin) and the total order is by stamp, then origin (node
order). The origin multicasts it to the rest of the view (n−1 packets) as the next packet
of its *stream* in that view, piggybacking its matrix clock (abcast.ordering._matrix_wire),
and keeps it in its own queue. Receivers process each origin's stream in stream order
(the channel below reorders), so M[i][k] — the latest stamp i has processed from k — only
grows, and every write k sends later carries a larger stamp. Hence node i executes the
queued writes stamped ≤ its row minimum (min over its own row of the clock, its own
Lamport clock included): no member can still send one that would come before them.

A silent member would hold everyone up, so members send NOPE heartbeats (stream packets
that carry only a stamp and the matrix). With `adaptive=False` a member sends one after
each `period_us` of silence, the thesis's fixed period. Adaptive (the thesis's future
work, the default): a member that has received a write stamped above the last stamp it
sent — others wait for it — sends a NOPE after `fast_us` unless it writes first; when
idle it sends keep-alive NOPEs whose period doubles from `period_us` up to
`idle_max_us`. NOPEs are protocol packets (n−1 each) and are counted as such. Policy and
knobs: abcast.ordering._matrix_heartbeat.

Views (abcast.membership.api). Joins, leaves and crashes are the membership layer's: it
freezes the ordering, asks every survivor for its `report` — what it delivered in the
view and the writes it has processed but not executed, each with its stamp, and its
clock row — and has every survivor `conclude` the coordinator's `settle`: every reported
write, by (stamp, origin, seq). Each member delivered exactly the writes stamped up to
its row minimum (it had processed every write below it), a prefix of that order, so each
delivers what it lacks of it in the old view and all end the view with the same set in
the same order; a crashed member's write any survivor processed is delivered by all.
At the view change a departed member's row and column leave the clock (the dead row
would hold the row minimum down forever), each member's stream starts again at packet 1
of the new view (stream packets carry their view: a late packet of an older view is
dropped), and a joiner's column starts at 0 (its first packet raises it).

Claims integrity, validity, agreement, fifo, total order and virtual synchrony, under
every fault the membership layer handles. Failure-free, each write costs n−1 data packets
plus the NOPEs it draws: with one writer and adaptive heartbeats, n−1 more multicasts,
n(n−1) packets in all.

Flow control (abcast.ordering._credit): the origin is backpressured while
`max_unstable` of its own writes are not yet delivered by every member (the membership
layer's stable point, and each flush). A receiver refuses a stream packet of a sender
that already has `max_held` waiting here — out of stream order, queued unexecuted, or
kept for a view not yet installed (RemoteProtocolError).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Final

from abcast.codec import Packet
from abcast.effects import Deliver, Effect, Multicast, SetTimer
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, TimerFired, ViewInstalled
from abcast.ids import MsgId, NodeId, View, node_sort_key
from abcast.layer import Layer
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering._credit import MAX_HELD, MAX_UNSTABLE, HeldCap, OriginCredit
from abcast.ordering._delivered import DeliveredIds, above_base, common_base, forget_stable
from abcast.ordering._matrix_heartbeat import Heartbeat, MatrixConfig
from abcast.ordering._matrix_wire import MatrixClock, MatrixHeader, MxNope, MxWrite, StreamHeader
from abcast.snapshot import HeldMessage, LayerSnapshot

__all__ = ["Matrix", "MatrixConfig"]

BEAT: Final = ("beat",)
#: most views ahead of ours whose packets are kept until we install them
_AHEAD: Final = 4


@dataclass(frozen=True, slots=True)
class _Write:
    ts: int
    origin: NodeId
    seq: int
    payload: bytes


#: queue entry: (stamp, origin's node-order key, seq, write) — unique per write
_Entry = tuple[int, Any, int, _Write]


@dataclass(slots=True)
class _Stream:
    """One origin's stream in the current view, as this node processes it."""

    next_n: int = 1
    held: dict[int, tuple[StreamHeader, bytes]] = field(default_factory=dict)


class Matrix(Layer):
    name = "matrix"
    header_type = MatrixHeader

    def __init__(self, node: NodeId, config: MatrixConfig | None = None,
                 max_unstable: int = MAX_UNSTABLE, max_held: int = MAX_HELD) -> None:
        super().__init__(node)
        self.credit = OriginCredit(max_unstable)
        self._cap = HeldCap(max_held)
        self.config = config or MatrixConfig()
        self.view: View | None = None
        self.clock = MatrixClock(node)
        self._counter = 0  # the last stream number this node used in this view
        self._queue: list[_Entry] = []
        self._keys: dict[NodeId, Any] = {}
        self._streams: dict[NodeId, _Stream] = {}
        #: packets of views we have not installed yet, by view id
        self._ahead: dict[int, list[tuple[NodeId, StreamHeader, bytes]]] = {}
        self._done = DeliveredIds()  # what was delivered, per origin
        #: writes delivered in the current view (stamp, body), for its flush
        self._log: dict[MsgId, tuple[int, bytes]] = {}
        #: the view is over here (concluded at a flush): no heartbeats until the next
        self._over = False
        self.heartbeat = Heartbeat(self.config)
        self.nopes_sent = 0

    # -- introspection -------------------------------------------------------------------
    def pending(self) -> int:
        """Writes queued here, not yet executed."""
        return len(self._queue)

    def waiting(self) -> int:
        """Writes queued unexecuted (our own included) and stream packets out of order."""
        return self.pending() + self.held()

    def backpressured(self) -> bool:
        """`max_unstable` of our own writes are not yet delivered everywhere."""
        return self.credit.exhausted()

    def held(self) -> int:
        """Stream packets waiting for an earlier packet of their origin's stream."""
        return sum(len(s.held) for s in self._streams.values())

    def bound(self) -> int | None:
        """The row minimum: writes stamped up to it may be executed (None: no view)."""
        if self.view is None:
            return None
        return min(self.clock.row().values())

    def inspect(self) -> LayerSnapshot:
        bound = self.bound()
        holdback = [HeldMessage(origin=w.origin, seq=w.seq,
                                waiting_for=f"the row minimum (now {bound}) to reach "
                                            f"its stamp {ts}")
                    for ts, _, _, w in sorted(self._queue)]
        return LayerSnapshot(
            layer=self.name, phase="concluded" if self._over else "steady",
            clock={"matrix": self.clock.rows(), "row_minimum": bound,
                   "credit": self.credit.snapshot()},
            holdback=holdback,
            counters={"nopes_sent": self.nopes_sent, "stream_held": self.held(),
                      "logged_this_view": len(self._log),
                      "refused_far": self._cap.refused})

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload, now)
            case Received(sender, MxWrite() | MxNope() as header, inner):
                return self._on_packet(sender, header, inner.payload, now)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case TimerFired(key):
                if key != BEAT:
                    raise LocalProtocolError(f"{self.name} has no timer {key!r}")
                return self._beat(now)
            case ViewInstalled(view):
                return self._install(view, now)
            case _:
                return []

    def _install(self, view: View, now: int) -> list[Effect]:
        """A new view: departed members' rows leave the clock, streams start again."""
        if self.node not in view.members:
            return []  # left out: the membership layer stops us
        self.view = view
        self._over = False
        self._counter = 0
        self._streams = {m: _Stream() for m in view.others(self.node)}
        self._drop_departed(view)
        for member in view.others(self.node):
            if self.clock.direct(member) is None:
                self.clock.set_direct(member, 0)  # a joiner: its first packet raises it
        self.heartbeat.last_sent_ts = -1  # a write seen in this view is owed a stamp
        effects: list[Effect] = []
        kept = self._ahead.pop(view.view_id, [])
        self._ahead = {v: p for v, p in self._ahead.items() if v > view.view_id}
        self._recount()
        for sender, header, payload in kept:
            if sender in self._streams:
                # past the cap (counted): the sender is hostile or broken
                with suppress(RemoteProtocolError):
                    self._on_stream(sender, header, payload)
        effects += self._execute()
        if len(view.members) > 1:
            effects += self._arm(now + self.config.period_us)
        return effects

    def _drop_departed(self, view: View) -> None:
        """The dead row (and column) leaves the clock: nobody waits for a gone member."""
        self.clock.keep(frozenset(view.members))

    # -- stamping and sending --------------------------------------------------------------
    def _others(self) -> tuple[NodeId, ...]:
        return self.view.others(self.node) if self.view is not None else ()

    def _broadcast(self, seq: int, payload: bytes, now: int) -> list[Effect]:
        view = self.view
        if view is None or self._over:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view to send in")
        self.credit.sent = seq
        write = _Write(self.clock.tick(), self.node, seq, payload)
        self._push(write)
        self._counter += 1
        header = MxWrite(view.view_id, self._counter, write.ts, seq,
                         self.clock.wire(view.members))
        self.heartbeat.sent(write.ts, now)
        others = self._others()
        effects: list[Effect] = [Multicast(others, header, Packet((), payload))] if others \
            else []
        return effects + self._execute()

    def _nope(self, now: int) -> list[Effect]:
        view = self.view
        others = self._others()
        if view is None or not others:
            return []
        self._counter += 1
        header = MxNope(view.view_id, self._counter, self.clock.time,
                        self.clock.wire(view.members))
        self.heartbeat.sent(self.clock.time, now)
        self.nopes_sent += 1
        return [Multicast(others, header)]

    # -- heartbeats ------------------------------------------------------------------------
    def _arm(self, at: int) -> list[Effect]:
        return [SetTimer(BEAT, at)] if self.heartbeat.arm(at) else []

    def _beat(self, now: int) -> list[Effect]:
        if self._over or not self._others():
            # the view is over here, or we are alone: nobody waits for us (the next view
            # arms the heartbeat again)
            self.heartbeat.armed_at = None
            return []
        send, next_at = self.heartbeat.due(now)
        effects = self._nope(now) if send else []
        return effects + self._arm(next_at)

    # -- receiving -------------------------------------------------------------------------
    def _on_packet(self, sender: NodeId, header: StreamHeader, payload: bytes,
                   now: int) -> list[Effect]:
        if sender == self.node:
            raise RemoteProtocolError(f"{self.node} received its own packet")
        view = self.view
        if view is None or header.view < view.view_id:
            return []  # a packet of a view the flush has settled
        if header.view > view.view_id:
            if header.view <= view.view_id + _AHEAD:
                self._cap.admit(sender, f"a packet of view {header.view}")
                self._ahead.setdefault(header.view, []).append((sender, header, payload))
            return []
        if sender not in self._streams:
            return []
        self._on_stream(sender, header, payload)
        effects = self._execute()
        at = None if self._over else self.heartbeat.urgent_at(now)
        return effects + (self._arm(at) if at is not None else [])

    def _on_stream(self, sender: NodeId, header: StreamHeader, payload: bytes) -> None:
        stream = self._streams[sender]
        if header.n < stream.next_n or header.n in stream.held:
            return  # already processed or held (a resend)
        self._cap.admit(sender, f"stream packet {header.n}")
        stream.held[header.n] = (header, payload)
        held = stream.held
        while stream.next_n in held:
            packet, body = held.pop(stream.next_n)
            stream.next_n += 1
            self._process(sender, packet, body)
            if type(packet) is MxNope:
                self._cap.release(sender)  # a write stays counted until executed

    def _process(self, sender: NodeId, header: StreamHeader, payload: bytes) -> None:
        """One packet of `sender`'s stream, in stream order."""
        if header.ts < (self.clock.direct(sender) or 0):
            raise RemoteProtocolError(f"{sender}'s stamps went backwards ({header.ts})")
        self.clock.set_direct(sender, header.ts)
        self.clock.merge(header.clock, self._member_set())
        if isinstance(header, MxWrite):
            self._push(_Write(header.ts, sender, header.seq, payload))
            self.heartbeat.saw(header.ts)

    def _member_set(self) -> frozenset[NodeId]:
        return frozenset(self.view.members) if self.view is not None else frozenset()

    def _push(self, write: _Write) -> None:
        key = self._keys.get(write.origin)
        if key is None:
            key = self._keys[write.origin] = node_sort_key(write.origin)
        heapq.heappush(self._queue, (write.ts, key, write.seq, write))

    # -- executing -------------------------------------------------------------------------
    def _execute(self) -> list[Effect]:
        effects: list[Effect] = []
        bound = self.bound()
        queue, node = self._queue, self.node
        while queue and bound is not None and queue[0][0] <= bound:
            write = heapq.heappop(queue)[3]
            if write.origin != node:
                self._cap.release(write.origin)
            self._deliver(write.origin, write.seq, write.payload, write.ts, effects)
        return effects

    def _deliver(self, origin: NodeId, seq: int, payload: bytes, ts: int,
                 effects: list[Effect]) -> None:
        self._done.add(origin, seq)
        self._log[MsgId(origin, seq)] = (ts, payload)
        effects.append(Deliver(origin, seq, payload))

    # -- under the membership layer (abcast.membership.api) ------------------------------
    def report(self) -> ViewReport:
        """What this member delivered in the view and the writes it has processed but not
        executed, each with its stamp; its clock row."""
        messages = [FlushMessage(m.origin, m.seq, body, stamp=ts, final=True, delivered=True)
                    for m, (ts, body) in self._log.items()]
        messages += [FlushMessage(w.origin, w.seq, w.payload, stamp=ts, final=True)
                     for ts, _, _, w in self._queue]
        return ViewReport(self._done.prefixes(), messages, self.clock.row())

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        """Every reported write, in the total order (stamp, origin, seq): each member
        delivered a prefix of it."""
        union: dict[MsgId, FlushMessage] = {}
        for m in above_base(reports, common_base(reports)):
            union.setdefault(MsgId(m.origin, m.seq), m)
        return sorted(union.values(),
                      key=lambda m: (m.stamp, node_sort_key(m.origin), m.seq))

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        effects: list[Effect] = []
        for m in outcome:
            self.clock.advance_to(m.stamp)
            if not self._done.has(m.origin, m.seq):
                self._deliver(m.origin, m.seq, m.body, m.stamp, effects)
        self._done.give_up_gaps()
        self._end_view()
        self.credit.settle()
        return effects

    def _end_view(self) -> None:
        self._over = True
        self._queue.clear()
        self._log.clear()
        self._streams.clear()
        self._recount()

    def _recount(self) -> None:
        """What each sender has waiting here, counted afresh (at view changes)."""
        counts: dict[NodeId, int] = {}
        for sender, stream in self._streams.items():
            if stream.held:
                counts[sender] = len(stream.held)
        for _, _, _, write in self._queue:
            if write.origin != self.node:
                counts[write.origin] = counts.get(write.origin, 0) + 1
        for packets in self._ahead.values():
            for sender, _, _ in packets:
                counts[sender] = counts.get(sender, 0) + 1
        self._cap.count = counts

    def stable_point(self) -> dict[NodeId, int]:
        return self._done.prefixes()

    def forget(self, stable: Mapping[NodeId, int]) -> None:
        forget_stable(self._log, stable)
        self.credit.learn(self.node, stable)

    def join_cut(self) -> JoinCut:
        return JoinCut(self._done.prefixes(), self.clock.row())

    def start_from(self, cut: JoinCut) -> None:
        self._done.reset(cut.delivered)
        self.clock.advance_to(max(cut.clock.values(), default=0))
        self._end_view()
        self.credit.learn(self.node, cut.delivered)
        self.credit.settle()
