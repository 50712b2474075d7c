"""Ticket order: a sequencer variant whose numbers come from a ticket server outside the
group (RepMI's comparison), with failover to a member when that server crashes.

| phase    | event                                   | next     | effects                         |
|----------|-----------------------------------------|----------|---------------------------------|
| steady   | broadcast(seq, body)                    | steady   | TRequest if none outstanding    |
| steady   | TTicket of this epoch                   | steady   | TData to all; next TRequest     |
| steady   | TData(number) from a member             | steady   | deliver numbers in order        |
| steady   | request unanswered `timeout_us` (epoch 0)| moving  | TSuspect to all                 |
| any      | TSuspect(e) / TCollect(e+1), e = epoch  | moving   | epoch += 1; TReport to issuer   |
| moving   | (issuer) every member's TReport         | steady   | TResume(start, skipped) to all  |
| moving   | TResume of this epoch                   | steady   | TRequest for what waits          |

Rules: an origin sends its message's body to the members only once it holds a number
for it: it asks the epoch's issuer (`TRequest`) for numbers for every message it has
waiting, one request outstanding at a time, and gets consecutive numbers back
(`TTicket`), so its messages are numbered in its own order (FIFO). It then multicasts
`TData(number, seq)` and delivers like every member: numbers in order, 1, 2, 3, …

Issuers: epoch 0's is the ticket server when the group has one (`server`), else the
view's lowest member (the ordering is then a sequencer with the order carried by the
origins). If a request to the server goes unanswered for `timeout_us`, the member
suspects it and the group moves to epoch 1, whose issuer is the view's lowest member:
everyone stops taking epoch-0 tickets (a late one is ignored and asked for again) and
reports what it delivered (`floor`), the tickets it holds for its own undelivered
messages, and the highest number it saw. Every number a member delivered or an origin
holds will be delivered everywhere (the origin multicast its TData when the ticket
came); any other number up to the highest seen was lost with the server and is
skipped. The new issuer numbers on from above all of them: no number is given twice,
none is waited for forever. Only the server's failure is handled: a member crash, a
join or a leave is not (the ordering tolerates the network's faults only).
The ticket server's own core is `TicketServer` (below); it keeps one counter, and
`server_layers` is its stack (in the simulator, and in `abcast ticket-server`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from abcast.codec import Packet
from abcast.effects import Deliver, Effect, Multicast, Send, SetTimer
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, TimerFired, ViewInstalled
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.ticket_wire import (
    TCollect,
    TData,
    TicketHeader,
    TReport,
    TRequest,
    TResume,
    TSuspect,
    TTicket,
)
from abcast.reliability.channel import ChannelConfig
from abcast.snapshot import HeldMessage, LayerSnapshot

#: the ticket server's node id (the process `abcast ticket-server` runs under it)
TICKET_NODE: Final = "ticket"
#: how long a request to the server may go unanswered before it is suspected (µs)
TIMEOUT_US: Final = 1_000_000
_TIMER: Final = "ticket-timeout"


@dataclass(frozen=True, slots=True)
class TicketConfig:
    server: NodeId | None = None  # None: the view's lowest member issues from epoch 0
    timeout_us: int = TIMEOUT_US


class Ticket(Layer):
    name = "ticket"
    header_type = TicketHeader

    def __init__(self, node: NodeId, config: TicketConfig | None = None) -> None:
        super().__init__(node)
        self.config = config or TicketConfig()
        self.view: View | None = None
        self.epoch = 0
        self.phase = "steady"
        # this node as origin
        self._waiting: dict[int, bytes] = {}  # seq -> body, no number yet (in seq order)
        self._asked: tuple[int, int, int] | None = None  # (first_seq, count, at) outstanding
        self._own: set[int] = set()  # numbers of own messages not yet delivered here
        # delivery
        self._held: dict[int, tuple[NodeId, int, bytes]] = {}
        self._skipped: set[int] = set()
        self._next = 1  # the number delivered next
        self._top = 0  # highest number seen
        # this node as an epoch's issuer
        self._issue_next = 1
        self._reports: dict[NodeId, TReport] = {}
        self.failovers = 0

    # -- who issues ----------------------------------------------------------------------
    def issuer(self) -> NodeId:
        view = self._require_view()
        if self.epoch == 0 and self.config.server is not None:
            return self.config.server
        return view.members[0]

    def _require_view(self) -> View:
        if self.view is None:
            raise LocalProtocolError(f"{self.node}: no view installed yet")
        return self.view

    def _others(self) -> tuple[NodeId, ...]:
        return self._require_view().others(self.node)

    def _to_others(self, header: TicketHeader) -> list[Effect]:
        others = self._others()
        return [Multicast(others, header)] if others else []

    # -- events ------------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                self._waiting[seq] = payload
                return self._ask(now)
            case Received(sender, header, inner):
                return self._received(sender, header, inner, now)
            case TimerFired(key) if key == _TIMER:
                return self._check_timeout(now)
            case ViewInstalled(view):
                self.view = view
                return []
            case _:
                return []

    def _received(self, sender: NodeId, header: object, inner: Packet,
                  now: int) -> list[Effect]:
        match header:
            case TData(number, seq):
                self._check_member(sender, header)
                return self._hold(number, sender, seq, inner.payload)
            case TTicket(epoch, first_number, first_seq, count):
                if sender != self.issuer() or epoch != self.epoch or self.phase != "steady":
                    return []  # a late ticket of an epoch given up: asked for again
                if self._asked is None or self._asked[:2] != (first_seq, count):
                    raise RemoteProtocolError(f"{sender} sent a ticket for {first_seq}+{count}"
                                              f", which this node did not ask for")
                self._asked = None
                return self._ticketed(first_number, first_seq, count, now)
            case TRequest(epoch, first_seq, count):
                self._check_member(sender, header)
                if epoch != self.epoch or self.issuer() != self.node or self.phase != "steady":
                    return []
                first = self._issue(count)
                return [Send(sender, TTicket(epoch, first, first_seq, count))]
            case TSuspect(epoch) | TCollect(epoch) if epoch in (self.epoch, self.epoch + 1):
                self._check_member(sender, header)
                return self._move(epoch if type(header) is TCollect else epoch + 1)
            case TSuspect() | TCollect():
                return []
            case TReport(epoch):
                self._check_member(sender, header)
                # a report can overtake the suspicion that caused it: it is one too
                effects = self._move(epoch) if epoch == self.epoch + 1 else []
                if epoch == self.epoch and self.phase == "moving" and self.issuer() == self.node:
                    self._reports[sender] = header
                    effects.extend(self._maybe_resume(now))
                return effects
            case TResume(epoch, start, skipped):
                self._check_member(sender, header)
                if epoch != self.epoch or sender != self.issuer():
                    return []
                return self._resume(start, skipped, now)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    def _check_member(self, sender: NodeId, header: object) -> None:
        if sender not in self._require_view().members:
            raise RemoteProtocolError(f"{sender}, not a member, sent {type(header).__name__}")

    # -- origin: asking for numbers ----------------------------------------------------------
    def _ask(self, now: int) -> list[Effect]:
        if self._asked is not None or not self._waiting or self.phase != "steady":
            return []
        first = next(iter(self._waiting))
        count = len(self._waiting)
        issuer = self.issuer()
        if issuer == self.node:
            return self._ticketed(self._issue(count), first, count, now)
        self._asked = (first, count, now)
        effects: list[Effect] = [Send(issuer, TRequest(self.epoch, first, count))]
        if self.epoch == 0 and self.config.server is not None:
            effects.append(SetTimer(_TIMER, now + self.config.timeout_us))
        return effects

    def _ticketed(self, first_number: int, first_seq: int, count: int,
                  now: int) -> list[Effect]:
        effects: list[Effect] = []
        others = self._others()
        for i in range(count):
            number, seq = first_number + i, first_seq + i
            body = self._waiting.pop(seq)
            self._own.add(number)
            if others:
                effects.append(Multicast(others, TData(number, seq), Packet((), body)))
            effects.extend(self._hold(number, self.node, seq, body))
        return [*effects, *self._ask(now)]

    def _check_timeout(self, now: int) -> list[Effect]:
        if self._asked is None or self.epoch != 0 or self.phase != "steady":
            return []
        due = self._asked[2] + self.config.timeout_us
        if now < due:
            return [SetTimer(_TIMER, due)]
        return [*self._to_others(TSuspect(self.epoch)), *self._move(self.epoch + 1)]

    # -- an epoch's issuer -----------------------------------------------------------------
    def _issue(self, count: int) -> int:
        first = self._issue_next
        self._issue_next += count
        self._top = max(self._top, self._issue_next - 1)
        return first

    # -- failover ------------------------------------------------------------------------------
    def _move(self, epoch: int) -> list[Effect]:
        if epoch <= self.epoch:
            return []  # already there (a TCollect after the TSuspect, say)
        self.epoch = epoch
        self.phase = "moving"
        self.failovers += 1
        self._asked = None  # the old issuer's answer, if it comes, is ignored
        self._reports = {}
        report = TReport(epoch, self._next - 1, self._top, sorted(self._own))
        issuer = self.issuer()
        if issuer == self.node:
            self._reports[self.node] = report
            return [*self._to_others(TCollect(epoch)), *self._maybe_resume(0)]
        return [Send(issuer, report)]

    def _maybe_resume(self, now: int) -> list[Effect]:
        members = self._require_view().members
        if any(m not in self._reports for m in members):
            return []
        reports = list(self._reports.values())
        floor = max(r.floor for r in reports)
        top = max(r.top for r in reports)
        held = {n for r in reports for n in r.held}
        skipped = [n for n in range(floor + 1, top + 1) if n not in held]
        self._issue_next = top + 1
        resume = TResume(self.epoch, top + 1, skipped)
        return [*self._to_others(resume), *self._resume(resume.start, resume.skipped, now)]

    def _resume(self, start: int, skipped: list[int], now: int) -> list[Effect]:
        if self.phase != "moving":
            return []
        self.phase = "steady"
        self._skipped.update(n for n in skipped if n >= self._next)
        self._top = max(self._top, start - 1)
        return [*self._deliver_ready(), *self._ask(now)]

    # -- delivery --------------------------------------------------------------------------
    def _hold(self, number: int, origin: NodeId, seq: int, body: bytes) -> list[Effect]:
        if number < self._next or number in self._held:
            raise RemoteProtocolError(f"{origin} sent number {number} twice")
        self._held[number] = (origin, seq, body)
        self._top = max(self._top, number)
        return self._deliver_ready()

    def _deliver_ready(self) -> list[Effect]:
        effects: list[Effect] = []
        while True:
            number = self._next
            if number in self._skipped:
                self._skipped.discard(number)
            elif number in self._held:
                origin, seq, body = self._held.pop(number)
                self._own.discard(number)
                effects.append(Deliver(origin, seq, body))
            else:
                return effects
            self._next += 1

    def inspect(self) -> LayerSnapshot:
        holdback = [HeldMessage(origin=o, seq=s, waiting_for=f"ticket #{self._next}")
                    for _n, (o, s, _b) in sorted(self._held.items())]
        return LayerSnapshot(
            layer=self.name, phase=self.phase, holdback=holdback,
            clock={"epoch": self.epoch, "next": self._next, "top": self._top,
                   "issuer": self.issuer() if self.view is not None else ""},
            counters={"waiting_for_ticket": len(self._waiting), "failovers": self.failovers})


class TicketServer(Layer):
    """The ticket server's core: consecutive numbers, in request order, for epoch 0."""

    name = "ticket-server"
    header_type = TicketHeader

    def __init__(self, node: NodeId = TICKET_NODE) -> None:
        super().__init__(node)
        self.issued = 0

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case Received(sender, TRequest(0, first_seq, count), _):
                first = self.issued + 1
                self.issued += count
                return [Send(sender, TTicket(0, first, first_seq, count))]
            case Received(sender, TRequest(), _):
                return []  # a later epoch's request went astray: not ours
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent the ticket server {header!r}")
            case _:
                return []

    def inspect(self) -> LayerSnapshot:
        return LayerSnapshot(layer=self.name, phase="serving",
                             clock={"issued": self.issued})


def server_layers(channel: ChannelConfig | None = None,
                  node: NodeId = TICKET_NODE) -> list[Layer]:
    """The ticket server's stack, bottom first — the reliable channel for open groups
    (each member becomes a guest with its first request) under `TicketServer` — for
    `Stack(node, group, server_layers(), View(1, (node,)))`: a view of itself alone."""
    return [OpenChannel(node, channel), TicketServer(node)]
