"""The reliable channel for an open group: links to nodes outside the view stay usable.

Rules: this is `ReliableChannel` (exactly-once per link, any order, acks and
retransmissions as control traffic) with a wider idea of whom it may talk to. The plain
channel drops packets to and from nodes outside the current view, which makes a join
impossible: the joiner's stack starts with a view that holds only itself, and the
contact's view does not hold the joiner until the group has ordered its JOIN. Here the
channel admits as a *guest* any node the layer above sends to or that sends it data,
until a view holds it; a node that a view change removes *lingers* for `linger_us`, so
what was sent to it just before (a leaver's farewell) is still retransmitted until
acknowledged, and after that it is gone for good: its packets are dropped and it is
never admitted again (node ids are not reused within a group) — as long as it is among
the last MAX_GONE departed (older ones are forgotten, so a long-lived member's memory
does not grow with every node that ever left; one that speaks again is a guest at most).

It drives the plain channel only through its public `handle`, by installing the widened
view (members ∪ guests ∪ lingering) whenever that set changes. What it does not know:
who is right to talk to whom — the ordering above ignores what it must not act on.
"""

from __future__ import annotations

from typing import Final

from abcast.effects import Effect, SetTimer
from abcast.events import (
    Event,
    MulticastRequested,
    Received,
    SendRequested,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel
from abcast.reliability.fragments import RFrag

#: how long a removed member's link is kept (µs): several maximum retransmission timeouts
LINGER_US: Final = 10_000_000
#: guests admitted at once; beyond it unknown senders are dropped (a bound, not a policy)
MAX_GUESTS: Final = 1_024
#: departed nodes remembered as gone (oldest forgotten first)
MAX_GONE: Final = 1_024


class OpenChannel(ReliableChannel):
    name = "open-channel"

    def __init__(
        self, node: NodeId, config: ChannelConfig | None = None, linger_us: int = LINGER_US
    ) -> None:
        super().__init__(node, config)
        self.linger_us = linger_us
        self._view: View | None = None
        self._guests: set[NodeId] = set()
        self._lingering: set[NodeId] = set()
        self._gone: dict[NodeId, None] = {}  # insertion order: the oldest first
        #: the widened view last installed in the plain channel; between calls it always
        #: equals `_allowed()` (every change of the sets reinstalls), except before the
        #: first view, when it is empty — so "in it" means "needs no admission"
        self._installed: frozenset[NodeId] = frozenset()

    # -- introspection -------------------------------------------------------------------
    def guests(self) -> frozenset[NodeId]:
        return frozenset(self._guests)

    def lingering(self) -> frozenset[NodeId]:
        return frozenset(self._lingering)

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        # The per-packet events first, by exact type: a peer already in the installed
        # (widened) view needs no admission, and the plain channel's handlers are called
        # directly. Anything else — a stranger, a view, a timer, subclasses — takes the
        # general path below.
        installed = self._installed
        kind = type(event)
        if kind is Received:
            received: Received = event  # type: ignore[assignment]  # the type test above
            header = received.header
            if received.sender in installed:
                if type(header) is RData:
                    return self._on_data(
                        received.sender, header.seq, received.inner, now, header.ack)
                if type(header) is RAck:
                    return self._on_ack(received.sender, header.high, header.sacks, now)
        elif kind is SendRequested:
            request: SendRequested = event  # type: ignore[assignment]
            if request.to in installed:
                return self._send(request.to, request.packet, now, request.control)
        elif kind is MulticastRequested:
            multicast: MulticastRequested = event  # type: ignore[assignment]
            for peer in multicast.to:  # a loop, not all(<generator>): once per multicast
                if peer not in installed:
                    break
            else:
                return self._multicast(multicast.to, multicast.packet, now)
        elif kind is TimerFired:
            key = event.key  # type: ignore[union-attr]
            if type(key) is tuple and key and key[0] != "linger":
                return super().handle(event, now)  # an ack or rto timer of the plain channel
        return self._handle_general(event, now)

    def _handle_general(self, event: Event, now: int) -> list[Effect]:
        match event:
            case ViewInstalled(view):
                return self._on_view(view, now)
            case SendRequested(to, _, _):
                return self._admit((to,), now) + super().handle(event, now)
            case MulticastRequested(to, _):
                return self._admit(to, now) + super().handle(event, now)
            case Received(sender, RData() | RFrag(), _):
                return self._admit((sender,), now) + super().handle(event, now)
            case TimerFired(("linger", str(peer))):
                return self._forget(peer, now)
            case _:
                return super().handle(event, now)

    def _reassembly_members(self) -> frozenset[NodeId]:
        """Only the view's members: guests and lingering nodes share a guest's
        reassembly budget (MAX_GUESTS of them must not each reserve a member's)."""
        return frozenset(self._view.members) if self._view is not None else frozenset()

    def _allowed(self) -> set[NodeId]:
        members = set(self._view.members) if self._view is not None else {self.node}
        return members | self._guests | self._lingering

    def _reinstall(self, now: int) -> list[Effect]:
        wanted = frozenset(self._allowed())
        if wanted == self._installed:
            return []
        self._installed = wanted
        view_id = self._view.view_id if self._view is not None else 0
        return super().handle(ViewInstalled(View(view_id, tuple(wanted))), now)

    def _admit(self, peers: tuple[NodeId, ...], now: int) -> list[Effect]:
        known = self._allowed()
        fresh = [p for p in peers if p not in known and p not in self._gone and p != self.node]
        room = MAX_GUESTS - len(self._guests)
        if not fresh or room <= 0:
            return []
        self._guests.update(fresh[:room])
        return self._reinstall(now)

    def _on_view(self, view: View, now: int) -> list[Effect]:
        before = set(self._view.members) if self._view is not None else set()
        self._view = view
        members = set(view.members)
        self._guests -= members
        self._lingering -= members
        for peer in members:
            self._gone.pop(peer, None)
        effects: list[Effect] = []
        for peer in sorted(before - members):
            if peer == self.node:
                continue
            self._lingering.add(peer)
            effects.append(SetTimer(("linger", peer), now + self.linger_us))
        effects += self._reinstall(now)
        self._reassembly.members = self._reassembly_members()  # if the widened set held
        return effects

    def _forget(self, peer: NodeId, now: int) -> list[Effect]:
        if peer not in self._lingering:
            return []
        self._lingering.discard(peer)
        self._gone[peer] = None
        if len(self._gone) > MAX_GONE:
            del self._gone[next(iter(self._gone))]
        return self._reinstall(now)
