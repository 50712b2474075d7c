"""Reliable channel: exactly-once delivery of every packet on every link, in any order.

Rules: one sequence space per directed link (this node → peer). The receiver hands a
packet up the first time it sees its sequence number, remembers what it has seen as a
contiguous high-water mark plus the few numbers above it, and acknowledges with a
delayed cumulative + selective ack. The sender keeps each packet until it is acked and
retransmits it on a per-packet timeout that backs off exponentially. Acked packets are
forgotten, so memory is bounded by what is in flight, not by the length of the run.

What it does not do: order (orderings above hold packets back as they need), relay a
crashed sender's packets to others (agreement under crashes is the ordering's or the
membership layer's job), or flow control. Packets to or from nodes outside the current
view are dropped and their link state freed.

Acks and retransmissions are sent with `control=True`, so drivers do not count them as
protocol packets (the thesis's message counts are about the protocols above).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

import msgspec

from abcast.codec import Count, Header, Packet, Seq
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    Event,
    Excluded,
    MulticastRequested,
    Received,
    Restored,
    SendRequested,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.stack import Layer


class RData(Header, frozen=True):
    """A packet of the layer above, numbered on this link."""

    seq: Seq


class RAck(Header, frozen=True):
    """Everything up to `high` arrived, and so did each of `sacks` (all above high)."""

    high: Count
    sacks: Annotated[list[Seq], msgspec.Meta(max_length=1024)] = []


ChannelHeader = RData | RAck


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """Knobs, in microseconds. Defaults suit both the simulator and loopback."""

    ack_delay_us: int = 2_000
    rto_us: int = 60_000
    max_rto_us: int = 1_000_000
    max_sacks: int = 256

    def __post_init__(self) -> None:
        if min(self.ack_delay_us, self.rto_us, self.max_sacks) <= 0:
            raise LocalProtocolError(f"channel knobs must be positive: {self}")
        if self.max_rto_us < self.rto_us:
            raise LocalProtocolError("max_rto_us must be at least rto_us")


@dataclass(slots=True)
class _Pending:
    packet: Packet
    deadline: int
    rto: int


@dataclass(slots=True)
class _OutLink:
    next_seq: int = 1
    unacked: dict[int, _Pending] = field(default_factory=dict)
    rto_armed_at: int | None = None


@dataclass(slots=True)
class _InLink:
    high: int = 0
    above: set[int] = field(default_factory=set)
    ack_armed: bool = False


class ReliableChannel(Layer):
    name = "channel"
    header_type = ChannelHeader

    def __init__(self, node: NodeId, config: ChannelConfig | None = None) -> None:
        super().__init__(node)
        self.config = config or ChannelConfig()
        self._out: dict[NodeId, _OutLink] = {}
        self._in: dict[NodeId, _InLink] = {}
        self._members: frozenset[NodeId] = frozenset()
        self.retransmissions = 0
        self.duplicates = 0

    # -- introspection (tests and metrics) -------------------------------------------
    def in_flight(self) -> int:
        """Packets sent and not yet acknowledged, over all links."""
        return sum(len(link.unacked) for link in self._out.values())

    def held_above(self) -> int:
        """Sequence numbers remembered above the contiguous high marks."""
        return sum(len(link.above) for link in self._in.values())

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        # Exact-type tests for the per-packet events (cheaper than the class patterns of
        # `match`); everything else, subclasses included, goes through `_handle_other`.
        kind = type(event)
        if kind is Received:
            received: Received = event  # type: ignore[assignment]  # the type test above
            header = received.header
            if type(header) is RData:
                return self._on_data(received.sender, header.seq, received.inner, now)
            if type(header) is RAck:
                return self._on_ack(received.sender, header.high, header.sacks, now)
        elif kind is SendRequested:
            request: SendRequested = event  # type: ignore[assignment]
            return self._send(request.to, request.packet, now, request.control)
        elif kind is MulticastRequested:
            multicast: MulticastRequested = event  # type: ignore[assignment]
            effects: list[Effect] = []
            for dest in multicast.to:
                effects += self._send(dest, multicast.packet, now)
            return effects
        return self._handle_other(event, now)

    def _handle_other(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return self._send(to, packet, now, control)
            case MulticastRequested(to, packet):
                effects: list[Effect] = []
                for dest in to:
                    effects.extend(self._send(dest, packet, now))
                return effects
            case Received(sender, RData(seq), inner):
                return self._on_data(sender, seq, inner, now)
            case Received(sender, RAck(high, sacks), _):
                return self._on_ack(sender, high, sacks, now)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case TimerFired(("ack", str(peer))):
                return self._flush_ack(peer)
            case TimerFired(("rto", str(peer))):
                return self._retransmit(peer, now)
            case ViewInstalled(view):
                return self._install(view)
            case Suspected() | Restored() | Excluded():
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _install(self, view: View) -> list[Effect]:
        self._members = frozenset(view.members)
        effects: list[Effect] = []
        for peer in [p for p in self._out if p not in self._members]:
            del self._out[peer]
            effects.append(CancelTimer(("rto", peer)))
        for peer in [p for p in self._in if p not in self._members]:
            del self._in[peer]
            effects.append(CancelTimer(("ack", peer)))
        return effects

    def _send(self, to: NodeId, packet: Packet, now: int, control: bool = False) -> list[Effect]:
        if to not in self._members:
            return []  # a peer outside the view: nobody is listening for it there
        link = self._out.get(to)
        if link is None:
            link = self._out[to] = _OutLink()
        seq = link.next_seq
        link.next_seq += 1
        rto = self.config.rto_us
        link.unacked[seq] = _Pending(packet, now + rto, rto)
        effects: list[Effect] = [Send(to, RData(seq), packet, control)]
        if link.rto_armed_at is None:
            link.rto_armed_at = now + rto
            effects.append(SetTimer(("rto", to), now + rto))
        return effects

    def _on_data(self, sender: NodeId, seq: int, inner: Packet, now: int) -> list[Effect]:
        if sender not in self._members:
            return []
        link = self._in.get(sender)
        if link is None:
            link = self._in[sender] = _InLink()
        effects: list[Effect] = []
        if seq <= link.high or seq in link.above:
            self.duplicates += 1
        else:
            if seq == link.high + 1:
                link.high = seq
                while link.high + 1 in link.above:
                    link.high += 1
                    link.above.discard(link.high)
            else:
                link.above.add(seq)
            effects.append(Up(sender, inner))
        # Ack duplicates too: the sender retransmitted because it missed our last ack.
        if not link.ack_armed:
            link.ack_armed = True
            effects.append(SetTimer(("ack", sender), now + self.config.ack_delay_us))
        return effects

    def _flush_ack(self, peer: NodeId) -> list[Effect]:
        link = self._in.get(peer)
        if link is None:
            return []
        link.ack_armed = False
        sacks = sorted(link.above)[: self.config.max_sacks] if link.above else []
        return [Send(peer, RAck(link.high, sacks), control=True)]

    def _on_ack(self, sender: NodeId, high: int, sacks: list[int], now: int) -> list[Effect]:
        link = self._out.get(sender)
        if link is None:
            return []
        if high >= link.next_seq or any(s >= link.next_seq for s in sacks):
            raise RemoteProtocolError(f"{sender} acked packets never sent to it (high={high})")
        unacked = link.unacked
        # Keys were inserted in increasing order and never re-inserted, so the acked
        # prefix is at the front: stop at the first one above `high`.
        acked: list[int] = []
        for seq in unacked:
            if seq > high:
                break
            acked.append(seq)
        for seq in acked:
            del unacked[seq]
        for seq in sacks:
            unacked.pop(seq, None)
        if not unacked and link.rto_armed_at is not None:
            link.rto_armed_at = None
            return [CancelTimer(("rto", sender))]
        return []

    def _retransmit(self, peer: NodeId, now: int) -> list[Effect]:
        link = self._out.get(peer)
        if link is None:
            return []
        link.rto_armed_at = None
        effects: list[Effect] = []
        next_deadline: int | None = None
        for seq, pending in link.unacked.items():
            if pending.deadline <= now:
                pending.rto = min(pending.rto * 2, self.config.max_rto_us)
                pending.deadline = now + pending.rto
                self.retransmissions += 1
                effects.append(Send(peer, RData(seq), pending.packet, control=True))
            if next_deadline is None or pending.deadline < next_deadline:
                next_deadline = pending.deadline
        if next_deadline is not None:
            link.rto_armed_at = next_deadline
            effects.append(SetTimer(("rto", peer), next_deadline))
        return effects
