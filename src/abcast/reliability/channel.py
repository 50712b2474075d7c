"""Reliable channel: exactly-once delivery of every packet on every link, in any order.

Rules: one sequence space per directed link (this node → peer). The receiver hands a
packet up the first time it sees its sequence number, remembers what it has seen as a
contiguous high-water mark plus the few numbers above it, and acknowledges with a
delayed cumulative + selective ack. With `piggyback_acks` (the runtime's stream channel)
a packet it sends that peer anyway carries the cumulative ack too (`RData.ack`), and
when nothing is missing that replaces the delayed one: in a group where every node talks
to every other most acks then ride on protocol packets instead of costing a frame, a
write and a wake-up of their own. A carried ack is honoured whatever the receiver's own
setting. The sender keeps each packet until it is acked and retransmits it once its
deadline passes. Acked packets are forgotten, so memory is bounded by what is in flight,
not by the length of the run.

The timeout is adaptive per link (RFC 6298: Karn's rule, backoff, the clock restarted
while the cumulative ack advances); flow control is a window per link in sequence numbers,
beyond which a sender queues and a receiver refuses (RemoteProtocolError); the timers are
a delayed-ack and a retransmission timer per link, or one tick for every link with
`tick_us` (the runtime's stream channel). docs/channel.md has all three.

What it does not do: order (orderings above hold packets back as they need), or relay a
crashed sender's packets to others (agreement under crashes is the ordering's or the
membership layer's job). Packets to or from nodes outside the current view are dropped
and their link state freed.

A packet whose frame would exceed `frame_bytes` leaves as numbered fragments (`RFrag`),
reassembled within `reassembly_bytes` a sender (abcast.reliability.fragments;
docs/orderings.md, "Packets larger than a frame"). Acks and retransmissions are sent with
`control=True` (not counted as protocol packets).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    Event,
    Excluded,
    Forgotten,
    MulticastRequested,
    Received,
    Restored,
    SendRequested,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.reliability.channel_wire import ChannelConfig, ChannelHeader, RAck, RData
from abcast.reliability.fragments import (
    HEADROOM,
    Fragment,
    InnerCodec,
    Reassembly,
    RFrag,
    SizeGate,
    encode_header,
    measure,
)
from abcast.reliability.rto import RtoEstimator
from abcast.snapshot import LayerSnapshot

#: the channel's public names; its headers and knobs live in channel_wire
__all__ = ["LINGER_US", "TICK", "ChannelConfig", "ChannelHeader", "RAck", "RData",
           "ReliableChannel"]

#: how long a departed peer's link state is kept (µs): several maximum retransmission
#: timeouts, so its late packets are still known duplicates (the open channel, the NAK one)
LINGER_US: Final = 10_000_000
#: a time before any other: a link whose cumulative ack has never advanced
_NEVER: Final = -(2**62)
_NO_SACKS: Final[list[int]] = []  # a piggybacked ack's (never mutated)
#: the one timer of a channel with `tick_us` (the per-link ones are ("ack"|"rto", peer))
TICK: Final = ("tick",)


@dataclass(slots=True)
class _Pending:
    packet: Packet
    sent: int  # first transmission: the start of its round-trip sample
    deadline: int
    tries: int = 0  # retransmissions so far; Karn's rule: only 0 gives a sample


@dataclass(slots=True)
class _OutLink:
    timer: RtoEstimator
    next_seq: int = 1
    unacked: dict[int, _Pending] = field(default_factory=dict)
    rto_armed_at: int | None = None
    #: when the cumulative ack last advanced (RFC 6298 §5.3 restarts the clock there)
    progress_at: int = _NEVER
    #: packets (and their control flag) waiting for the window to open
    waiting: deque[tuple[Packet, bool]] = field(default_factory=deque)
    #: a link the open channel resumed at reused numbers: the highest number sent on it
    #: before (acks up to it move `next_seq` on; see `_on_ack`)
    resumed_through: int = 0


@dataclass(slots=True)
class _InLink:
    high: int = 0
    above: set[int] = field(default_factory=set)
    #: an ack is owed (per-link timers: its timer is set)
    ack_armed: bool = False
    #: with `tick_us`: a tick has passed since the ack fell due (it leaves at the next)
    ack_aged: bool = False


class ReliableChannel(Layer):
    __slots__ = (
        "_bounds", "_gate", "_gated", "_in", "_inner", "_max_sacks", "_members", "_out",
        "_piggyback", "_reassembly", "_room", "_rto_floor", "_steady", "_tick_at", "_tick_period",
        "_tick_set", "acks_sent", "config", "duplicates", "fragmented", "gap_acks", "refused_far",
        "retransmissions", "undecodable", "window_waits",
    )

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
        self.acks_sent = 0  # standalone acks (piggybacked ones are not counted)
        self.gap_acks = 0  # of which: acks naming packets above a gap (this channel's NAKs)
        self.window_waits = 0  # packets that waited for credit (the window was full)
        self.refused_far = 0  # packets refused: sequence number beyond the window
        # fragmentation (abcast.reliability.fragments): off until `decode_above` (the
        # receiver must know the header types of the layers above to decode a packet)
        self._gate = SizeGate()
        #: the gate's table and room, held here too: read on every packet sent
        self._bounds = self._gate.bounds
        self._room = self._gate.room
        self._inner: InnerCodec | None = None
        self._reassembly = Reassembly(self.config.reassembly_bytes, self.config.window)
        #: selective acks one ack carries: max_sacks, or as many as fit a frame
        self._max_sacks = min(self.config.max_sacks,
                              (self.config.frame_bytes - HEADROOM) // 10)
        #: during a multicast, its packet and what `measure` made of it, so that it is
        #: gated, encoded and split once for all its destinations (None: none under way)
        self._gated: tuple[Packet, list[Fragment] | None] | None = None
        self.fragmented = 0  # packets sent in fragments (once per destination)
        self.undecodable = 0  # reassembled packets that did not decode (dropped)
        #: the tick's period (`tick_us`), 0 with per-link timers; whether it is set, and
        #: for when (never later than an RTO floor from now, so a packet sent finds it
        #: set before its deadline)
        self._tick_period = self.config.tick_us or 0
        self._tick_set = False
        self._tick_at = 0
        self._rto_floor = self.config.rto_floor_us
        #: the peers whose packets may take the shortcuts (see `pass_up`): the view's
        #: members here; the open channel's non-guests
        self._steady: frozenset[NodeId] = frozenset()
        self._piggyback = self.config.piggyback_acks

    def decode_above(self, header_types: list[object]) -> None:
        """The header types of the layers above, bottom first (the stack builder's
        call): with them this channel splits packets too large for `frame_bytes` and
        reassembles its peers'."""
        self._inner = InnerCodec(self.node, list(header_types))
        self._gate.room = self._room = self._reassembly.chunk = (
            self.config.frame_bytes - HEADROOM)

    @property
    def largest_split(self) -> int:
        """Bytes of the largest packet sent in fragments (its inner frame)."""
        return self._gate.largest

    # -- introspection (tests and metrics) -------------------------------------------
    def inspect(self) -> LayerSnapshot:
        """Per link: the last sequence number sent and acked, the contiguous high mark
        received and the RTO; in flight and held above are gauges."""
        links = {
            peer: {"sent": link.next_seq - 1, "unacked": len(link.unacked),
                   "waiting": len(link.waiting), "rto_us": link.timer.rto}
            for peer, link in sorted(self._out.items())
        }
        received = {peer: {"high": link.high, "above": len(link.above)}
                    for peer, link in sorted(self._in.items())}
        return LayerSnapshot(
            layer=self.name, phase="steady",
            clock={"out": links, "in": received, "in_flight": self.in_flight(),
                   "held_above": self.held_above(), "backlog": self.backlog()},
            counters={"retransmissions": self.retransmissions, "duplicates": self.duplicates,
                      "acks_sent": self.acks_sent, "gap_acks": self.gap_acks,
                      "window_waits": self.window_waits, "refused_far": self.refused_far,
                      "fragmented": self.fragmented, "largest_split": self.largest_split,
                      "measured": self._gate.measured,
                      "reassembled": self._reassembly.completed,
                      "refused_fragments": self._reassembly.refused,
                      "refused_oversize": self._reassembly.oversize,
                      "abandoned_fragmented": self._reassembly.abandoned,
                      "undecodable": self.undecodable})

    def in_flight(self) -> int:
        """Packets sent and not yet acknowledged, over all links."""
        return sum(len(link.unacked) for link in self._out.values())

    def backlog(self) -> int:
        """Packets waiting for credit on the most backlogged link."""
        return max((len(link.waiting) for link in self._out.values()), default=0)

    def backpressured(self) -> bool:
        """The longest credit queue is past `max_waiting`: new broadcasts should wait.
        (Asked on every non-waiting broadcast: a plain loop, no generator.)"""
        limit = self.config.max_waiting
        for link in self._out.values():  # noqa: SIM110 (any(): 2.6× slower)
            if len(link.waiting) >= limit:
                return True
        return False

    def held_above(self) -> int:
        """Sequence numbers remembered above the contiguous high marks."""
        return sum(len(link.above) for link in self._in.values())

    def rto_estimate(self, peer: NodeId) -> RtoEstimator | None:
        """The link's RTO estimator (SRTT, RTTVAR, current timeout), None before any send."""
        link = self._out.get(peer)
        return None if link is None else link.timer

    def _new_out_link(self) -> _OutLink:
        cfg = self.config
        return _OutLink(RtoEstimator(cfg.rto_us, cfg.rto_floor_us, cfg.max_rto_us))

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        # Exact-type tests for the per-packet events (cheaper than the class patterns of
        # `match`); everything else, subclasses included, goes through `_handle_other`.
        kind = type(event)
        if kind is Received:
            received: Received = event  # type: ignore[assignment]  # the type test above
            header = received.header
            if type(header) is RData:
                return self._on_data(
                    received.sender, header.seq, received.inner, now, header.ack)
            if type(header) is RAck:
                return self._on_ack(received.sender, header.high, header.sacks, now)
        elif kind is SendRequested:
            request: SendRequested = event  # type: ignore[assignment]
            return self._send(request.to, request.packet, now, request.control)
        elif kind is MulticastRequested:
            multicast: MulticastRequested = event  # type: ignore[assignment]
            return self._multicast(multicast.to, multicast.packet, now, multicast.control)
        elif kind is TimerFired:
            # A delayed ack falls due about once per packet received: skip the patterns.
            key = event.key  # type: ignore[union-attr]
            if key == TICK:
                return self._tick(now)
            if type(key) is tuple and len(key) == 2 and type(key[1]) is str:
                if key[0] == "ack":
                    return self._flush_ack(key[1])
                if key[0] == "rto":
                    return self._retransmit(key[1], now)
        return self._handle_other(event, now)

    def _handle_other(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return self._send(to, packet, now, control)
            case MulticastRequested(to, packet, control):
                return self._multicast(to, packet, now, control)
            case Received(sender, RData(seq, ack), inner):
                return self._on_data(sender, seq, inner, now, ack)
            case Received(sender, RAck(high, sacks), _):
                return self._on_ack(sender, high, sacks, now)
            case Received(sender, RFrag() as fragment, inner):
                return self._on_fragment(sender, fragment, inner, now)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case TimerFired(("ack", str(peer))):
                return self._flush_ack(peer)
            case TimerFired(("rto", str(peer))):
                return self._retransmit(peer, now)
            case TimerFired(("tick",)):
                return self._tick(now)
            case ViewInstalled(view):
                return self._install(view)
            case Suspected() | Restored() | Excluded() | Forgotten():
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _install(self, view: View) -> list[Effect]:
        self._members = self._steady = frozenset(view.members)
        effects: list[Effect] = []
        ticking = bool(self._tick_period)  # no per-link timers to cancel
        for peer in [p for p in self._out if p not in self._members]:
            del self._out[peer]
            if not ticking:
                effects.append(CancelTimer(("rto", peer)))
        for peer in [p for p in self._in if p not in self._members]:
            del self._in[peer]
            if not ticking:
                effects.append(CancelTimer(("ack", peer)))
        self._reassembly.forget(self._members)
        self._reassembly.members = self._reassembly_members()
        return effects

    def _reassembly_members(self) -> frozenset[NodeId]:
        """The senders with a member's reassembly budget (the others share a guest's)."""
        return self._members

    def _multicast(self, to: tuple[NodeId, ...], packet: Packet, now: int,
                   control: bool = False) -> list[Effect]:
        """`_send` to each destination (a control packet stays one), the packet gated
        (and, if large, split) once."""
        self._gated = (packet, measure(self._gate, self._inner, packet,
                                       self.config.reassembly_bytes))
        effects: list[Effect] = []
        try:
            for dest in to:
                effects += self._send(dest, packet, now, control)
        finally:
            self._gated = None  # do not keep a large packet past its multicast
        return effects

    def _send(self, to: NodeId, packet: Packet, now: int, control: bool = False) -> list[Effect]:
        if to not in self._members:
            return []  # a peer outside the view: nobody is listening for it there
        gated = self._gated
        if gated is not None and gated[0] is packet:  # a multicast's: gated once
            if gated[1] is not None:
                return self._send_large(to, packet, now, control, gated[1])
        else:
            size = len(packet.payload)  # SizeGate.over, inlined: a lookup per header
            bounds = self._bounds
            for header in packet.headers:
                size += bounds[type(header)] or len(encode_header(header))
            if size > self._room:
                return self._send_large(to, packet, now, control, measure(
                    self._gate, self._inner, packet, self.config.reassembly_bytes) or [])
        link = self._out.get(to)
        if link is None:
            link = self._out[to] = self._new_out_link()
        unacked = link.unacked
        if link.waiting or (unacked and link.next_seq - next(iter(unacked)) >=
                            self.config.window):
            link.waiting.append((packet, control))
            self.window_waits += 1
            return []
        return self._transmit(to, link, packet, now, control)

    def _send_large(self, to: NodeId, packet: Packet, now: int, control: bool,
                    fragments: list[Fragment]) -> list[Effect]:
        """A packet the size gate could not clear, measured (`fragments.measure`): whole
        if it fits a frame after all ([]), else its fragments."""
        if fragments:
            self.fragmented += 1
        link = self._out.get(to)
        if link is None:
            link = self._out[to] = self._new_out_link()
        effects: list[Effect] = []
        for item in fragments or (packet,):
            if link.waiting or (link.unacked and link.next_seq - next(iter(link.unacked))
                                >= self.config.window):
                link.waiting.append((item, control))
                self.window_waits += 1
            elif type(item) is Fragment:
                effects += self._transmit_fragment(to, link, item, now, control)
            else:
                effects += self._transmit(to, link, item, now, control)
        return effects

    def _transmit_fragment(
        self, to: NodeId, link: _OutLink, fragment: Fragment, now: int, control: bool
    ) -> list[Effect]:
        """`_transmit`, with the fragment's header in place of `RData`."""
        effects = self._transmit(to, link, fragment, now, control)
        data: RData = effects[0].header  # type: ignore[union-attr]  # _transmit's Send
        effects[0] = Send(to, RFrag(data.seq, data.ack, fragment.index, fragment.count),
                          fragment, control)
        return effects

    def _on_fragment(
        self, sender: NodeId, fragment: RFrag, inner: Packet, now: int
    ) -> list[Effect]:
        codec = self._inner
        if sender not in self._members:
            return []
        if codec is None:
            raise RemoteProtocolError(f"{sender} sent a fragment; this channel has no "
                                      "decoder for the layers above (decode_above)")
        first, index, count = fragment.first(), fragment.index, fragment.count
        link = self._in.get(sender)
        if link is not None and (fragment.seq <= link.high or fragment.seq in link.above):
            return self._on_data(sender, fragment.seq, inner, now, fragment.ack)  # acked
        # Refused before the link records it: a reliable sender resends it later. One
        # refused for room only is dropped quietly (counted): its sender did no wrong,
        # and a raise would make the runtime drop the connection.
        # Its ack is taken even so (piggybacked: the peer's packets would wait for RTO).
        low = (0 if link is None else link.high) + 1
        if not self._reassembly.admit(sender, first, index, count, len(inner.payload), low,
                                      self._marks):
            return self._on_ack(sender, fragment.ack, _NO_SACKS, now) if fragment.ack else []
        effects = self._on_data(sender, fragment.seq, inner, now, fragment.ack)
        for i, effect in enumerate(effects):
            if type(effect) is Up:
                whole = self._reassembly.add(sender, first, index, count, inner.payload,
                                             low, checked=True)
                if whole is None:
                    del effects[i]
                    break
                try:
                    effects[i] = Up(sender, codec.decode(sender, whole))
                except RemoteProtocolError:
                    self.undecodable += 1  # the link's state moved on: drop, do not raise
                    del effects[i]
                break
        return effects

    def _marks(self) -> dict[NodeId, int]:
        """Each sender's lowest number its link waits for (reassembly's `low`)."""
        return {peer: link.high + 1 for peer, link in self._in.items()}

    def _transmit(
        self, to: NodeId, link: _OutLink, packet: Packet, now: int, control: bool
    ) -> list[Effect]:
        if self._tick_period:
            effects: list[Effect] = [Send(to, self._number(to, link, packet, now), packet,
                                          control)]
            self._arm_tick(effects, now, now + self._rto_floor)  # by its deadline
            return effects
        inbound = self._in.get(to) if self._piggyback else None
        # the delayed ack this packet replaces (see `_number`): its timer goes
        replaced = inbound is not None and inbound.ack_armed and not inbound.above
        effects = [Send(to, self._number(to, link, packet, now), packet, control)]
        if replaced:
            effects.append(CancelTimer(("ack", to)))
        deadline = now + link.timer.rto
        armed = link.rto_armed_at
        # The timeout can shrink (a sample after a backoff): move the timer forward then.
        if armed is None or deadline < armed:
            link.rto_armed_at = deadline
            effects.append(SetTimer(("rto", to), deadline))
        return effects

    def _number(self, to: NodeId, link: _OutLink, packet: Packet, now: int) -> RData:
        """A transmission's state change, and its header: `packet` numbered on the link
        and kept until acked, carrying the ack owed to `to` (piggyback_acks), which then
        replaces the delayed one when nothing is missing. (The caller adds the timers.)"""
        seq = link.next_seq
        link.next_seq = seq + 1
        link.unacked[seq] = _Pending(packet, now, now + link.timer.rto)
        inbound = self._in.get(to) if self._piggyback else None
        if inbound is not None and inbound.ack_armed:
            if not inbound.above:  # nothing missing: this was all the delayed ack would say
                inbound.ack_armed = False
            return RData(seq, inbound.high)
        return RData(seq)

    # -- the stack's shortcuts (Layer.pass_up / pass_down_each) ---------------------------
    def pass_up(self, sender: NodeId, header: object, now: int) -> bool:
        """`handle` of a member's next packet in sequence, when all it would return is
        `[Up]`: with a tick already set (`tick_us`; never with per-link timers, whose
        ack timer is set per packet) soon enough for an ack it makes due, no hole on the
        link, and a carried ack that releases nothing waiting for credit. The state
        change is `_on_data`'s."""
        if type(header) is not RData or not self._tick_set or sender not in self._steady:
            return False
        data: RData = header  # (the type test above)
        link = self._in.get(sender)
        if link is None or link.above or data.seq != link.high + 1:
            return False
        if not link.ack_armed and self._tick_at > now + self._tick_period:
            return False  # an ack falls due and the tick is set later: `handle` moves it
        ack = data.ack
        if ack:
            out = self._out.get(sender)
            if out is not None and (ack >= out.next_seq or out.waiting):
                return False  # refused, or credit released: `handle` decides
            self._on_ack(sender, ack, _NO_SACKS, now)  # [] here: no timer, nothing waiting
        link.high += 1
        if not link.ack_armed:
            link.ack_armed = True
            link.ack_aged = False
        return True

    def pass_down_each(
        self, to: tuple[NodeId, ...], packet: Packet, now: int
    ) -> list[object] | None:
        """`handle` of a send (or a non-control multicast) of `packet` to `to`, when all
        it would return is one `Send` per destination, in order: with a tick already
        set, every destination a member with a link, room in its window and nobody
        waiting, and a packet that fits a frame. The headers, one per destination; the
        state change is `_number`'s, as `_transmit` makes it."""
        if not self._tick_set:
            return None
        size = len(packet.payload)  # the size gate of `_send`
        bounds = self._bounds
        for header in packet.headers:
            size += bounds[type(header)] or len(encode_header(header))
        if size > self._room:
            return None
        steady, out, window = self._steady, self._out, self.config.window
        links: list[_OutLink] = []
        for dest in to:
            link = out.get(dest)
            if (link is None or dest not in steady or link.waiting or (
                    link.unacked and link.next_seq - next(iter(link.unacked)) >= window)):
                return None
            links.append(link)
        number = self._number
        return [number(dest, link, packet, now) for dest, link in zip(to, links, strict=True)]

    def _on_data(
        self, sender: NodeId, seq: int, inner: Packet, now: int, ack: int = 0,
    ) -> list[Effect]:
        if sender not in self._members:
            return []
        link = self._in.get(sender)
        if seq > (0 if link is None else link.high) + self.config.window:
            self.refused_far += 1
            raise RemoteProtocolError(
                f"{sender} sent seq {seq}, beyond the window of {self.config.window} "
                f"above {0 if link is None else link.high}")
        effects = self._on_ack(sender, ack, _NO_SACKS, now) if ack else []
        if link is None:
            link = self._in[sender] = _InLink()
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
            if not self._tick_period:
                effects.append(SetTimer(("ack", sender), now + self.config.ack_delay_us))
            else:
                link.ack_aged = False
                self._arm_tick(effects, now)
        return effects

    def _flush_ack(self, peer: NodeId) -> list[Effect]:
        link = self._in.get(peer)
        if link is None:
            return []
        link.ack_armed = False
        self.acks_sent += 1
        sacks = sorted(link.above)[: self._max_sacks] if link.above else []
        if sacks:
            self.gap_acks += 1
        return [Send(peer, RAck(link.high, sacks), control=True)]

    def _on_ack(self, sender: NodeId, high: int, sacks: list[int], now: int) -> list[Effect]:
        link = self._out.get(sender)
        if link is None:
            return []
        # (max(), not any(<generator>): a piggybacked ack, once per packet, has no sacks)
        if high >= link.next_seq or (sacks and max(sacks) >= link.next_seq):
            top = max(high, *sacks) if sacks else high
            if top > link.resumed_through:
                raise RemoteProtocolError(
                    f"{sender} acked packets never sent to it (high={high})")
            # A resumed link (abcast.ordering._open_channel): the peer holds numbers sent
            # before the link was forgotten. Its cumulative mark moves the link on past
            # them; a selective ack does not (the peer lacks a number below it, which
            # must be sent again or its mark waits below the hole for good).
            if high >= link.next_seq:
                link.next_seq = high + 1
        unacked = link.unacked
        # Keys were inserted in increasing order and never re-inserted, so the acked
        # prefix is at the front: stop at the first one above `high`. The oldest packet
        # acked that was never retransmitted is timed: it waited longest for this ack, so
        # its round trip is the one the timeout must cover.
        acked: list[int] = []
        timed: _Pending | None = None
        for seq, pending in unacked.items():
            if seq > high:
                break
            acked.append(seq)
            if timed is None and not pending.tries:
                timed = pending
        if acked:
            link.progress_at = now
            for seq in acked:
                del unacked[seq]
        for seq in sacks:
            pending_or_none = unacked.pop(seq, None)
            if timed is None and pending_or_none is not None and not pending_or_none.tries:
                timed = pending_or_none
        if timed is not None:
            link.timer.sample(now - timed.sent)
        if link.waiting:
            return self._release(sender, link, now)
        if not unacked and link.rto_armed_at is not None:  # (never set with a tick)
            link.rto_armed_at = None
            return [CancelTimer(("rto", sender))]
        return []

    def _release(self, to: NodeId, link: _OutLink, now: int) -> list[Effect]:
        """Send what waited for credit, as far as the window now reaches."""
        effects: list[Effect] = []
        waiting, window = link.waiting, self.config.window
        while waiting and link.next_seq - next(iter(link.unacked), link.next_seq) < window:
            packet, control = waiting.popleft()
            if type(packet) is Fragment:
                effects += self._transmit_fragment(to, link, packet, now, control)
            else:
                effects += self._transmit(to, link, packet, now, control)
        return effects

    def _retransmit(self, peer: NodeId, now: int) -> list[Effect]:
        """The link's retransmission timer (per-link timers): resend what is due and set
        the timer for the next deadline."""
        link = self._out.get(peer)
        if link is None:
            return []
        link.rto_armed_at = None
        if not link.unacked:
            return []
        effects, next_deadline = self._resend_due(peer, link, now)
        link.rto_armed_at = next_deadline
        effects.append(SetTimer(("rto", peer), next_deadline))
        return effects

    def _resend_due(self, peer: NodeId, link: _OutLink, now: int) -> tuple[list[Effect], int]:
        """Retransmit the link's packets whose deadline has passed (none while its
        cumulative ack advanced within an RTO), backing its timeout off: (the packets,
        the next deadline). The link has unacked packets."""
        unacked = link.unacked
        timer = link.timer
        # RFC 6298 §5.3: an ack that advanced the window restarts the clock, so nothing
        # is retransmitted until a whole RTO has passed without progress.
        quiet_until = link.progress_at + timer.rto
        due: list[tuple[int, _Pending]] = []
        if quiet_until <= now:
            due = [(seq, p) for seq, p in unacked.items() if p.deadline <= now]
        effects: list[Effect] = []
        if due:
            most_tries = 0
            for _, pending in due:
                pending.tries += 1
                most_tries = max(most_tries, pending.tries)
            timer.back_off(most_tries)
            deadline = now + timer.rto
            for seq, pending in due:
                pending.deadline = deadline
                self.retransmissions += 1
                packet = pending.packet
                header: RData | RFrag = (RFrag(seq, 0, packet.index, packet.count)
                                         if isinstance(packet, Fragment) else RData(seq))
                effects.append(Send(peer, header, packet, control=True))
        return effects, max(min(p.deadline for p in unacked.values()), quiet_until)

    def _tick(self, now: int) -> list[Effect]:
        """The tick (`tick_us`): the acks owed since the last tick leave, due packets are
        retransmitted, and the tick is set again: one tick on while an ack is owed, else
        while a packet is unacked for when the first retransmission can fall due (at
        least one tick on, at most an RTO floor: a dead peer's packets, backing off, do
        not keep it firing every tick)."""
        self._tick_set = False
        effects: list[Effect] = []
        owed = False
        for peer, inbound in self._in.items():
            if inbound.ack_armed:
                if inbound.ack_aged:
                    effects += self._flush_ack(peer)
                else:
                    inbound.ack_aged = owed = True
        wake: int | None = None  # the earliest a retransmission can fall due
        for peer, link in self._out.items():
            if link.unacked:
                # nothing is due while the cumulative ack advanced within an RTO (§5.3):
                # a busy link's unacked packets are not looked at tick after tick
                due = link.progress_at + link.timer.rto
                if due <= now:
                    resent, due = self._resend_due(peer, link, now)
                    effects += resent
                if wake is None or due < wake:
                    wake = due
        if owed:
            self._arm_tick(effects, now)
        elif wake is not None:
            self._arm_tick(effects, now, min(max(wake, now + self._tick_period),
                                             now + self._rto_floor))
        return effects

    def _arm_tick(self, effects: list[Effect], now: int, at: int | None = None) -> None:
        """Have the tick (`tick_us`) fire by `at` (one tick from now by default): set it,
        or move it earlier, unless it is set that soon already; its timer goes into
        `effects`."""
        if not self._tick_period:
            return
        if at is None:
            at = now + self._tick_period
        if not self._tick_set or at < self._tick_at:
            self._tick_set = True
            self._tick_at = at
            effects.append(SetTimer(TICK, at))
