"""Matrix-clock total order, as the RepMI thesis adapts Lamport's matrix timestamps, in an
open group (members join and leave as ordered operations).

Rules. Every operation — an application write, a JOIN, a LEAVE — is stamped by its
origin with the next value of the origin's Lamport clock; its id is (stamp, origin) and
the total order is by stamp, then origin (node order). The origin multicasts it to the
rest of the view (n−1 packets) as the next packet of its *stream*, piggybacking its
matrix clock (abcast.ordering._matrix_wire), and keeps it in its own queue. Receivers
process each origin's stream in stream order (the channel below reorders), so
M[i][k] — the latest stamp i has processed from k — only grows, and every operation k
sends later carries a larger stamp. Hence node i executes the queued operations with
stamp ≤ min over the view of M[i][k] (its row minimum, its own clock included): no
member can still send one that would come before them.

A silent member would hold everyone up, so members send NOPE heartbeats (stream packets
that carry only a stamp and the matrix). With `adaptive=False` a member sends one after
each `period_us` of silence, the thesis's fixed period. Adaptive (the thesis's future
work, the default): a member that has received an operation stamped above the last
stamp it sent — others wait for it — sends a NOPE after `fast_us` unless it writes first;
when idle it sends keep-alive NOPEs whose period doubles from `period_us` up to
`idle_max_us`. NOPEs are protocol packets (n−1 each) and are counted as such.

Open world. A joiner asks a contact (`MxJoinAsk`; it asks the next contact every
`join_retry_us` until welcomed, at once when a leaving contact redirects it with
`MxJoinRedirect`). The contact stamps JOIN(joiner) as its own operation.
Where the JOIN is executed every member installs the next view (the joiner added) and
tells the joiner where its own stream goes on, with the operations it sent to the old
view that come after the JOIN (`MxCatchup`); the contact, instead, takes a snapshot
(`TakeSnapshot` — the application state right after the operations before the JOIN) and
sends it with its catch-up and the view (`MxWelcome`); the joiner installs the state and
the view and executes from there. A leaver stamps LEAVE(itself) and stops sending
NOPEs (its LEAVE covers every stamp it owes); where the LEAVE is executed the others
install the view without it and send it `MxFarewell` — where their streams end and
their last stamp, which the leaver needs to execute up to its LEAVE once it has
processed those streams. The leaver stops executing at its LEAVE and installs the view
without itself (departs) only once every remaining member has its whole stream (a
farewell, or that member's row in its matrix says so), so nothing it sent is lost when
it stops; a leaver that itself said farewell to earlier leavers first waits for their
`MxFarewellAck` (at most `farewell_wait_us`: the last ack may die with its sender —
only a network outage longer than that could then lose the farewell).

A view change is always the first thing in a batch of effects (a JOIN or LEAVE behind a
delivery waits for a `resume` timer at the same instant), so drivers that label
deliveries with the stack's view label them right. Heartbeat policy and knobs:
abcast.ordering._matrix_heartbeat; wire format: abcast.ordering._matrix_wire.

Claims integrity, validity, agreement, fifo and total order over the network faults;
not crashes (a crashed member's stamps never come again: everyone blocks). Failure-free,
each write costs n−1 data packets plus the NOPEs it draws: with one writer and adaptive
heartbeats, n−1 more multicasts, n(n−1) packets in all.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Final

from abcast.codec import Packet
from abcast.effects import (
    CancelTimer,
    Deliver,
    Effect,
    InstallState,
    InstallView,
    Multicast,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    JoinRequested,
    LeaveRequested,
    Received,
    SnapshotTaken,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View, node_sort_key
from abcast.layer import Layer
from abcast.ordering._matrix_heartbeat import Heartbeat, MatrixConfig
from abcast.ordering._matrix_wire import (
    Catchup,
    MatrixClock,
    MatrixHeader,
    MxCatchup,
    MxFarewell,
    MxFarewellAck,
    MxJoin,
    MxJoinAsk,
    MxJoinRedirect,
    MxLeave,
    MxNope,
    MxWelcome,
    MxWrite,
    OpKind,
    OpRecord,
    StreamHeader,
)
from abcast.snapshot import HeldMessage, LayerSnapshot

__all__ = ["Matrix", "MatrixConfig"]

BEAT: Final = ("beat",)
RESUME: Final = ("resume",)
RETRY: Final = ("retry",)
DEPART: Final = ("depart",)


@dataclass(frozen=True, slots=True)
class _Op:
    ts: int
    origin: NodeId
    kind: OpKind
    seq: int = 0
    subject: NodeId = ""
    payload: bytes = b""

    def record(self) -> OpRecord:
        return OpRecord(self.ts, self.kind, self.seq, self.subject, self.payload)


#: queue entry: (stamp, origin's node-order key, origin, op) — unique per operation
_Entry = tuple[int, Any, NodeId, _Op]


@dataclass(slots=True)
class _Stream:
    """One origin's stream as this node processes it."""

    next_n: int
    held: dict[int, tuple[StreamHeader, bytes]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _WelcomeDraft:
    joiner: NodeId
    view: View
    catchup: Catchup


class Matrix(Layer):
    name = "matrix"
    header_type = MatrixHeader

    def __init__(self, node: NodeId, config: MatrixConfig | None = None) -> None:
        super().__init__(node)
        self.config = config or MatrixConfig()
        self.view: View | None = None
        self.status = "new"  # new → member | joining → member → leaving → left → gone
        self.clock = MatrixClock(node)
        self._counter = 0  # the last stream number this node used
        self._queue: list[_Entry] = []
        self._keys: dict[NodeId, Any] = {}
        self._streams: dict[NodeId, _Stream] = {}
        self._unknown: dict[NodeId, dict[int, tuple[StreamHeader, bytes]]] = {}
        self._ever: set[NodeId] = set()  # every node that was ever a member here
        self._joins_stamped: set[NodeId] = set()
        # joining
        self._contacts: tuple[NodeId, ...] = ()
        self._contact_index = 0
        self._catchups: dict[NodeId, Catchup] = {}
        self._queued: list[tuple[int, bytes]] = []
        self._leave_after_join = False
        # welcoming
        self._drafts: dict[int, _WelcomeDraft] = {}
        self._tokens = 0
        # leaving
        self._leave_ts = 0
        self._leave_view: View | None = None
        self._farewells: dict[NodeId, tuple[int, int]] = {}  # member → (after_n, ts)
        self._farewell_done: set[NodeId] = set()
        self._farewells_unacked: set[NodeId] = set()  # leavers we said farewell to
        self._departable_at: int | None = None
        # effects decided deep inside packet processing, sent with the batch
        self._outbox: list[Effect] = []
        self.heartbeat = Heartbeat(self.config)
        # one handle() call's effects form one batch for the driver
        self._delivered_in_batch = False
        self._resume_armed = False
        self.nopes_sent = 0
        self.catchups_sent = 0

    # -- introspection -------------------------------------------------------------------
    def pending(self) -> int:
        """Operations queued here, not yet executed."""
        return len(self._queue)

    def held(self) -> int:
        """Stream packets waiting for an earlier packet of their origin's stream."""
        return sum(len(s.held) for s in self._streams.values()) + sum(
            len(b) for b in self._unknown.values())

    def bound(self) -> int | None:
        """The row minimum: operations stamped up to it may be executed (None: a member's
        stream has not started here yet)."""
        view = self.view
        if view is None:
            return None
        low = self.clock.time
        for member in view.members:
            if member == self.node:
                continue
            ts = self.clock.direct(member)
            if ts is None:
                return None
            low = min(low, ts)
        return low

    def inspect(self) -> LayerSnapshot:
        bound = self.bound()
        waiting = ("every member's stream to start" if bound is None
                   else f"the row minimum to reach its stamp (now {bound})")
        holdback = [HeldMessage(origin=origin, seq=op.seq or ts,
                                waiting_for=f"{waiting}: stamp {ts}")
                    for ts, _, origin, op in sorted(self._queue)]
        return LayerSnapshot(
            layer=self.name, phase=self.status,
            clock={"matrix": self.clock.rows(), "row_minimum": bound},
            holdback=holdback,
            counters={"nopes_sent": self.nopes_sent, "catchups_sent": self.catchups_sent,
                      "stream_held": self.held()})

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self._delivered_in_batch = False
        if self.status == "gone":
            return []
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload, now)
            case Received(sender, header, inner):
                return self._on_packet(sender, header, inner.payload, now)
            case TimerFired(key):
                return self._on_timer(key, now)
            case ViewInstalled(view):
                return self._start(view, now) if self.status == "new" else []
            case JoinRequested(contacts):
                return self._join(contacts, now)
            case LeaveRequested():
                return self._leave(now)
            case SnapshotTaken(token, state):
                return self._send_welcome(token, state)
            case _:
                return []

    def _start(self, view: View, now: int) -> list[Effect]:
        if self.node not in view.members:
            raise LocalProtocolError(f"{self.node} started in a view without itself: {view}")
        self.view = view
        self.status = "member"
        self._ever.update(view.members)
        for member in view.others(self.node):
            self._streams[member] = _Stream(1)
            self.clock.set_direct(member, 0)
        return self._arm(now + self.config.period_us)

    def _on_timer(self, key: object, now: int) -> list[Effect]:
        if key == BEAT:
            return self._beat(now)
        if key == RESUME:
            self._resume_armed = False
            return self._execute(now)
        if key == RETRY:
            return self._retry_join(now)
        if key == DEPART:
            return self._maybe_depart(now)
        raise LocalProtocolError(f"{self.name} has no timer {key!r}")

    # -- stamping and sending --------------------------------------------------------------
    def _others(self) -> tuple[NodeId, ...]:
        return self.view.others(self.node) if self.view is not None else ()

    def _stream_header(self, op: _Op | None) -> StreamHeader:
        self._counter += 1
        n = self._counter
        wire = self.clock.wire(self.view.members if self.view is not None else (self.node,))
        if op is None:
            return MxNope(n, self.clock.time, wire)
        if op.kind is OpKind.WRITE:
            return MxWrite(n, op.ts, op.seq, wire)
        if op.kind is OpKind.JOIN:
            return MxJoin(n, op.ts, op.subject, wire)
        return MxLeave(n, op.ts, wire)

    def _sent(self, now: int) -> None:
        self.heartbeat.sent(self.clock.time, now)

    def _stamp(self, kind: OpKind, now: int, seq: int = 0, subject: NodeId = "",
               payload: bytes = b"") -> list[Effect]:
        op = _Op(self.clock.tick(), self.node, kind, seq, subject, payload)
        self._push(op)
        header = self._stream_header(op)
        self._sent(now)
        return [Multicast(self._others(), header, Packet((), payload))]

    def _nope(self, now: int) -> list[Effect]:
        others = self._others()
        if not others:
            return []
        header = self._stream_header(None)
        self._sent(now)
        self.nopes_sent += 1
        return [Multicast(others, header)]

    def _broadcast(self, seq: int, payload: bytes, now: int) -> list[Effect]:
        if self.status == "joining":
            self._queued.append((seq, payload))  # stamped once the group has admitted us
            return []
        if self.status != "member":
            raise LocalProtocolError(f"{self.node} is {self.status} and cannot broadcast")
        effects = self._stamp(OpKind.WRITE, now, seq=seq, payload=payload)
        return effects + self._execute(now)

    # -- heartbeats ------------------------------------------------------------------------
    def _arm(self, at: int) -> list[Effect]:
        return [SetTimer(BEAT, at)] if self.heartbeat.arm(at) else []

    def _beat(self, now: int) -> list[Effect]:
        if self.status != "member" or not self._others():
            # a leaver's LEAVE covers every stamp it owes; alone, nobody waits for us
            # (the next view change arms the heartbeat again)
            self.heartbeat.armed_at = None
            return []
        send, next_at = self.heartbeat.due(now)
        effects = self._nope(now) if send else []
        return effects + self._arm(next_at)

    def _after_receipt(self, now: int) -> list[Effect]:
        at = self.heartbeat.urgent_at(now) if self.status == "member" else None
        return self._arm(at) if at is not None else []

    # -- receiving -------------------------------------------------------------------------
    def _on_packet(self, sender: NodeId, header: Any, payload: bytes, now: int) -> list[Effect]:
        if sender == self.node:
            raise RemoteProtocolError(f"{self.node} received its own packet")
        effects: list[Effect] = []
        match header:
            case MxWrite() | MxJoin() | MxLeave() | MxNope():
                self._on_stream(sender, header, payload)
            case MxJoinAsk():
                return self._on_join_ask(sender, now)
            case MxJoinRedirect(members):
                return self._on_redirect(members, now)
            case MxWelcome(view_id, members, state, catchup):
                effects = self._on_welcome(sender, view_id, members, state, catchup, now)
            case MxCatchup(catchup):
                self._on_catchup(sender, catchup)
            case MxFarewell(after_n, ts):
                self._farewells.setdefault(sender, (after_n, ts))
                self._use_farewell(sender)
            case MxFarewellAck():
                self._farewells_unacked.discard(sender)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
        effects += self._execute(now) + self._after_receipt(now)
        if self._outbox:
            effects += self._outbox
            self._outbox = []
        return effects

    def _on_stream(self, sender: NodeId, header: StreamHeader, payload: bytes) -> None:
        stream = self._streams.get(sender)
        if stream is None:
            if sender in self._ever and (self.view is None or sender not in self.view.members):
                return  # a member that has left: nothing of its stream matters any more
            # a member whose catch-up has not come yet, or a joiner not yet admitted here
            self._unknown.setdefault(sender, {}).setdefault(header.n, (header, payload))
            return
        if header.n < stream.next_n or header.n in stream.held:
            return  # already processed or held (a resend)
        stream.held[header.n] = (header, payload)
        self._drain(sender, stream)

    def _drain(self, sender: NodeId, stream: _Stream) -> None:
        held = stream.held
        while stream.next_n in held:
            header, payload = held.pop(stream.next_n)
            stream.next_n += 1
            self._process(sender, header, payload)
        if sender in self._farewells:
            self._use_farewell(sender)

    def _use_farewell(self, member: NodeId) -> None:
        """A leaver takes a member's farewell stamp once it has processed everything
        the member sent before it."""
        stream = self._streams.get(member)
        after_n, ts = self._farewells[member]
        if stream is not None and stream.next_n > after_n and member not in self._farewell_done:
            self._farewell_done.add(member)
            self.clock.set_direct(member, ts)
            self._outbox.append(Send(member, MxFarewellAck()))

    def _process(self, sender: NodeId, header: StreamHeader, payload: bytes) -> None:
        """One packet of `sender`'s stream, in stream order."""
        if header.ts < (self.clock.direct(sender) or 0):
            raise RemoteProtocolError(f"{sender}'s stamps went backwards ({header.ts})")
        self.clock.set_direct(sender, header.ts)
        self.clock.merge(header.clock, self._member_set())
        match header:
            case MxWrite(_, ts, seq, _):
                self._receive_op(_Op(ts, sender, OpKind.WRITE, seq, "", payload))
            case MxJoin(_, ts, joiner, _):
                self._receive_op(_Op(ts, sender, OpKind.JOIN, 0, joiner))
            case MxLeave(_, ts, _):
                self._receive_op(_Op(ts, sender, OpKind.LEAVE))
            case _:
                pass  # a NOPE: its stamp is all it brings

    def _receive_op(self, op: _Op) -> None:
        self._push(op)
        self.heartbeat.saw(op.ts)

    def _member_set(self) -> frozenset[NodeId]:
        return frozenset(self.view.members) if self.view is not None else frozenset()

    def _push(self, op: _Op) -> None:
        key = self._keys.get(op.origin)
        if key is None:
            key = self._keys[op.origin] = node_sort_key(op.origin)
        heapq.heappush(self._queue, (op.ts, key, op.origin, op))

    # -- executing -------------------------------------------------------------------------
    def _execute(self, now: int) -> list[Effect]:
        if self.status not in ("member", "leaving"):
            return self._maybe_depart(now)
        effects: list[Effect] = []
        bound = self.bound()
        queue = self._queue
        while queue and bound is not None and queue[0][0] <= bound:
            op = queue[0][3]
            if op.kind is not OpKind.WRITE and self._delivered_in_batch:
                effects += self._resume_soon(now)
                break
            heapq.heappop(queue)
            if op.kind is OpKind.WRITE:
                self._delivered_in_batch = True
                effects.append(Deliver(op.origin, op.seq, op.payload))
                continue
            if op.kind is OpKind.JOIN:
                effects += self._execute_join(op, now)
            else:
                effects += self._execute_leave(op, now)
                if self.status == "left":
                    break
            bound = self.bound()
        return effects + self._maybe_depart(now)

    def _resume_soon(self, now: int) -> list[Effect]:
        if self._resume_armed:
            return []
        self._resume_armed = True
        return [SetTimer(RESUME, now)]

    def _install(self, view: View, now: int) -> list[Effect]:
        self.view = view
        effects: list[Effect] = [InstallView(view)]
        if self.status == "member" and len(view.members) > 1:
            effects += self._arm(now + self.config.period_us)
        return effects

    def _catchup_after(self, op: _Op) -> Catchup:
        """This node's operations after `op` in the order (sent to the old view), and
        where its stream goes on."""
        mine = sorted((e for e in self._queue if e[2] == self.node), key=lambda e: e[:3])
        after = (op.ts, self._keys.get(op.origin) or node_sort_key(op.origin), op.origin)
        ops = [e[3].record() for e in mine if e[:3] > after]
        members = self.view.members if self.view is not None else (self.node,)
        return Catchup(self._counter + 1, self.clock.time, ops, self.clock.wire(members))

    def _execute_join(self, op: _Op, now: int) -> list[Effect]:
        joiner = op.subject
        self._joins_stamped.discard(joiner)
        if joiner in self._ever or self.view is None:
            return []  # asked twice (a retry): the first JOIN admitted it
        self._ever.add(joiner)
        view = View(self.view.view_id + 1, (*self.view.members, joiner))
        effects = self._install(view, now)
        self._streams[joiner] = stream = _Stream(1)
        self.clock.set_direct(joiner, op.ts)  # its stamps all come after the JOIN
        for n, packet in sorted(self._unknown.pop(joiner, {}).items()):
            stream.held.setdefault(n, packet)
        self._drain(joiner, stream)
        catchup = self._catchup_after(op)
        if op.origin == self.node:
            self._tokens += 1
            self._drafts[self._tokens] = _WelcomeDraft(joiner, view, catchup)
            effects.append(TakeSnapshot(self._tokens))
        else:
            self.catchups_sent += 1
            effects.append(Send(joiner, MxCatchup(catchup)))
        return effects + self._after_receipt(now)

    def _execute_leave(self, op: _Op, now: int) -> list[Effect]:
        leaver = op.origin
        view = self.view
        if view is None or leaver not in view.members:
            return []
        others = tuple(m for m in view.members if m != leaver)
        if leaver == self.node:
            self.status = "left"
            self._leave_view = View(view.view_id + 1, others)
            return []
        self._streams.pop(leaver, None)
        self._unknown.pop(leaver, None)
        self.clock.forget(leaver)
        self._farewells_unacked.add(leaver)
        effects: list[Effect] = [Send(leaver, MxFarewell(self._counter, self.clock.time))]
        return effects + self._install(View(view.view_id + 1, others), now)

    def _maybe_depart(self, now: int) -> list[Effect]:
        final = self._leave_view
        if self.status != "left" or final is None:
            return []
        me, ts = self.node, self._leave_ts
        for member in final.members:
            if member not in self._farewell_done and self.clock.known(member, me) < ts:
                return []
        if self._farewells_unacked:
            # Earlier leavers may still wait for our farewell (and the stream before it):
            # stay until they say they have it, or, as their last ack may die with them,
            # for farewell_wait_us at most.
            if self._departable_at is None:
                self._departable_at = now
                return [SetTimer(DEPART, now + self.config.farewell_wait_us)]
            if now < self._departable_at + self.config.farewell_wait_us:
                return []
        if self._delivered_in_batch:
            return self._resume_soon(now)
        self.status = "gone"
        self._queue.clear()
        effects: list[Effect] = [CancelTimer(key) for key in (BEAT, RESUME, RETRY, DEPART)]
        return effects + self._install(final, now)

    # -- joining ---------------------------------------------------------------------------
    def _join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        if self.view is not None and len(self.view.members) > 1:
            raise LocalProtocolError(f"{self.node} is already a member of {self.view}")
        candidates = tuple(c for c in contacts if c != self.node)
        if not candidates:
            raise LocalProtocolError("join needs at least one contact other than this node")
        if self.status not in ("new", "member") or self._counter or self._queue:
            raise LocalProtocolError(f"{self.node} cannot join now (it is {self.status})")
        self.status = "joining"
        self.view = None
        self._streams.clear()
        self._ever.clear()
        self._contacts = candidates
        self._contact_index = 0
        return [Send(candidates[0], MxJoinAsk()), SetTimer(RETRY, now + self.config.join_retry_us)]

    def _retry_join(self, now: int) -> list[Effect]:
        if self.status != "joining":
            return []
        self._contact_index = (self._contact_index + 1) % len(self._contacts)
        contact = self._contacts[self._contact_index]
        return [Send(contact, MxJoinAsk()), SetTimer(RETRY, now + self.config.join_retry_us)]

    def _on_redirect(self, members: list[str], now: int) -> list[Effect]:
        if self.status != "joining":
            return []
        fresh = [m for m in members if m != self.node and m not in self._contacts]
        self._contacts = (*self._contacts, *fresh)
        return self._retry_join(now)

    def _on_join_ask(self, joiner: NodeId, now: int) -> list[Effect]:
        if self.status in ("leaving", "left"):
            final = self._leave_view or self.view
            members = [m for m in (final.members if final else ()) if m != self.node]
            return [Send(joiner, MxJoinRedirect(members))]
        if self.status != "member" or joiner in self._ever or joiner in self._joins_stamped:
            return []  # not ours to admit now (the joiner asks another contact later)
        self._joins_stamped.add(joiner)
        effects = self._stamp(OpKind.JOIN, now, subject=joiner)
        return effects + self._execute(now)

    def _send_welcome(self, token: int, state: bytes) -> list[Effect]:
        draft = self._drafts.pop(token, None)
        if draft is None:
            raise LocalProtocolError(f"{self.node} took no snapshot with token {token}")
        view = draft.view
        return [Send(draft.joiner,
                     MxWelcome(view.view_id, list(view.members), state, draft.catchup))]

    def _on_welcome(
        self, sender: NodeId, view_id: int, members: list[str], state: bytes,
        catchup: Catchup, now: int,
    ) -> list[Effect]:
        if self.status != "joining":
            return []  # a second welcome (the joiner had asked twice)
        view = View(view_id, tuple(members))
        if self.node not in view.members or sender not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.node} into {view}")
        self.status = "member"
        self._ever.update(view.members)
        effects: list[Effect] = [CancelTimer(RETRY), InstallState(state)]
        effects += self._install(view, now)
        self.clock.merge(catchup.clock, frozenset(view.members))
        self.clock.advance_to(self.clock.highest())
        self._catchups[sender] = catchup
        for member in view.others(self.node):
            got = self._catchups.pop(member, None)
            if got is not None:
                self._start_stream(member, got)
        self._catchups.clear()
        for seq, payload in self._queued:
            effects += self._stamp(OpKind.WRITE, now, seq=seq, payload=payload)
        self._queued.clear()
        if self._leave_after_join:
            effects += self._leave(now)
        self.heartbeat.last_sent_at = now
        return effects + self._arm(now + self.config.period_us)

    def _on_catchup(self, sender: NodeId, catchup: Catchup) -> None:
        if self.status == "joining":
            self._catchups.setdefault(sender, catchup)
            return
        if self.view is not None and sender in self.view.members \
                and sender not in self._streams:
            self._start_stream(sender, catchup)

    def _start_stream(self, sender: NodeId, catchup: Catchup) -> None:
        self._streams[sender] = stream = _Stream(catchup.next_n)
        self.clock.set_direct(sender, catchup.ts)
        self.clock.merge(catchup.clock, self._member_set())
        for record in catchup.ops:
            self._receive_op(_Op(record.ts, sender, record.kind, record.seq, record.subject,
                                 record.payload))
        for n, packet in sorted(self._unknown.pop(sender, {}).items()):
            if n >= stream.next_n:
                stream.held.setdefault(n, packet)
        self._drain(sender, stream)

    # -- leaving ---------------------------------------------------------------------------
    def _leave(self, now: int) -> list[Effect]:
        if self.status == "joining":
            self._leave_after_join = True  # the group may already count on us: join first
            return []
        if self.status != "member":
            return []  # already leaving
        self.status = "leaving"
        effects = self._stamp(OpKind.LEAVE, now)
        self._leave_ts = self.clock.time
        self.heartbeat.armed_at = None
        return [*effects, CancelTimer(BEAT), *self._execute(now)]
