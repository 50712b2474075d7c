"""Basic multicast: the channel slot of a group created with `multicast="basic"` — best
effort, each packet sent once, never acknowledged or retransmitted.

Rules: one sequence space per directed link, as in the reliable channel, but used only to
drop duplicates (the network may duplicate; an ordering above must still see each packet
at most once). The receiver remembers a contiguous high-water mark plus the numbers
above it; a packet that never comes leaves a hole, and once more than `window` numbers
wait above a hole the mark jumps past it (that packet is lost for good), so memory stays
bounded however much is lost. No control traffic at all: no acks, no timers.

What a basic group can then claim (abcast.ordering.registry): the safety properties of
its ordering — integrity, and fifo/causal/total where the ordering has them, since a
holdback never delivers past a missing message — but not validity or agreement: a lost
packet is lost, and whatever waits on it waits for ever. Without loss it delivers like
the reliable channel, at n−1 packets per multicast and no acks.

Packets larger than a frame leave in fragments (`BFrag`, abcast.reliability.fragments)
as on the reliable channel, each sent once: a lost fragment loses its whole packet,
which is what best effort means. Reassembly is bounded as there (per sender, for
strangers together, over all), and where the reliable channel refuses a fragment beyond
a bound (to take it when resent), this one first makes room by dropping the same
sender's oldest partial packets (lost too; another sender's are never dropped), and a
fragment that still does not fit is refused (lost). A partial packet whose lost fragment
the mark gives up is dropped with it (its room freed; others' at a refusal for room). A
duplicate is dropped before any of that. An open group's channel forgets the partial
packets of members that leave the view.

A closed group's channel drops packets to and from nodes outside the view; an open
group's (`open_group=True`, for orderings that admit joiners themselves) lets them
through and leaves the decision to the ordering above.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Final

import msgspec

from abcast.codec import Header, Packet, Seq
from abcast.effects import Effect, Send, Up
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
from abcast.ids import NodeId
from abcast.layer import Layer
from abcast.reliability.fragments import (
    HEADROOM,
    MAX_COUNT,
    Fragment,
    InnerCodec,
    Reassembly,
    SizeGate,
    encode_header,
    measure,
)

#: numbers remembered above a hole before the hole is given up
WINDOW: Final = 1_024


class BData(Header, frozen=True):
    """A packet of the layer above, numbered on this link (for duplicate detection)."""

    seq: Seq


class BFrag(Header, frozen=True):
    """Fragment `index` of `count` of one packet of the layers above, numbered `seq` on
    this link; the packet's key is the number of its fragment 0, `seq - index`."""

    seq: Seq
    index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_COUNT)]
    count: Annotated[int, msgspec.Meta(ge=2, le=MAX_COUNT)]


@dataclass(slots=True)
class _InLink:
    high: int = 0
    above: set[int] = field(default_factory=set)


class BasicChannel(Layer):
    name = "basic-channel"
    header_type = BData | BFrag

    def __init__(
        self, node: NodeId, open_group: bool = False, window: int = WINDOW,
        frame_bytes: int = 4 * 1024 * 1024, reassembly_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        super().__init__(node)
        if window < 1:
            raise LocalProtocolError("window must be >= 1")
        self.open_group = open_group
        self.window = window
        self.frame_bytes = frame_bytes
        self._gate = SizeGate()  # off until decode_above
        self._inner: InnerCodec | None = None
        self._reassembly = Reassembly(reassembly_bytes, window)
        #: during a multicast, its packet and what `measure` made of it (as the
        #: reliable channel's): gated, encoded and split once for all destinations
        self._gated: tuple[Packet, list[Fragment] | None] | None = None
        self.fragmented = 0  # packets sent in fragments
        self.evicted = 0  # partial packets dropped to make room (lost)
        self._next: dict[NodeId, int] = {}
        self._in: dict[NodeId, _InLink] = {}
        self._members: frozenset[NodeId] = frozenset()
        self.duplicates = 0
        self.given_up = 0  # packets counted as lost when the mark jumped past them

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return self._send(to, packet, control)
            case MulticastRequested(to, packet, control):
                return self._multicast(to, packet, control)
            case Received(sender, BData(seq), inner):
                return self._on_data(sender, seq, inner)
            case Received(sender, BFrag() as fragment, inner):
                return self._on_fragment(sender, fragment, inner)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case ViewInstalled(view):
                left = self._members - frozenset(view.members)
                self._members = frozenset(view.members)
                if not self.open_group:
                    self._forget_outside()
                    self._reassembly.forget(self._members)
                else:  # strangers stay (a joiner may be one); departed members go
                    self._reassembly.drop(left)
                self._reassembly.members = self._members
                return []
            case Suspected() | Restored() | Excluded() | Forgotten() | TimerFired():
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _allowed(self, peer: NodeId) -> bool:
        return self.open_group or peer in self._members

    def _forget_outside(self) -> None:
        for links in (self._next, self._in):
            for peer in [p for p in links if p not in self._members]:
                del links[peer]

    def decode_above(self, header_types: list[object]) -> None:
        """As `ReliableChannel.decode_above`: with the header types of the layers above,
        packets too large for `frame_bytes` leave in fragments."""
        self._inner = InnerCodec(self.node, list(header_types))
        self._gate.room = self._reassembly.chunk = self.frame_bytes - HEADROOM

    def _multicast(self, to: tuple[NodeId, ...], packet: Packet, control: bool = False
                   ) -> list[Effect]:
        self._gated = (packet, measure(self._gate, self._inner, packet,
                                       self._reassembly.max_bytes))
        try:
            return [e for dest in to for e in self._send(dest, packet, control)]
        finally:
            self._gated = None  # do not keep a large packet past its multicast

    def _send(self, to: NodeId, packet: Packet, control: bool) -> list[Effect]:
        if not self._allowed(to):
            return []
        gated = self._gated
        if gated is not None and gated[0] is packet:  # a multicast's: gated once
            fragments = gated[1]
        else:
            size = len(packet.payload)  # SizeGate.over, inlined: a lookup per header
            bounds = self._gate.bounds
            for header in packet.headers:
                size += bounds[type(header)] or len(encode_header(header))
            fragments = None if size <= self._gate.room else measure(
                self._gate, self._inner, packet, self._reassembly.max_bytes)
        if not fragments:  # cleared by the gate (None), or it fits after all ([])
            seq = self._next.get(to, 0) + 1
            self._next[to] = seq
            return [Send(to, BData(seq), packet, control)]
        self.fragmented += 1
        first = self._next.get(to, 0) + 1
        self._next[to] = first + len(fragments) - 1
        return [Send(to, BFrag(first + f.index, f.index, f.count), f, control)
                for f in fragments]

    def _on_fragment(self, sender: NodeId, fragment: BFrag, inner: Packet) -> list[Effect]:
        codec = self._inner
        if not self._allowed(sender):
            return []
        if codec is None:
            raise RemoteProtocolError(f"{sender} sent a fragment; this channel has no "
                                      "decoder for the layers above (decode_above)")
        first, index, count = fragment.seq - fragment.index, fragment.index, fragment.count
        link = self._in.get(sender)
        if link is not None and (fragment.seq <= link.high or fragment.seq in link.above):
            self.duplicates += 1  # before making room: a duplicate must not evict
            return []
        reassembly = self._reassembly
        low = (0 if link is None else link.high) + 1
        reassembly.settle(sender, low)  # its packets the mark gave up on are lost
        if first >= low:  # (a packet already lost evicts nothing)
            self.evicted += reassembly.make_room(sender, first, count)
        if not reassembly.admit(sender, first, index, count, len(inner.payload), low,
                                self._marks, lowest_opens=False):
            return []  # no room left by other senders, or lost already (counted)
        if not self._on_data(sender, fragment.seq, inner):
            return []  # a duplicate
        whole = reassembly.add(sender, first, index, count, inner.payload, low, checked=True)
        if whole is None:
            return []
        return [Up(sender, codec.decode(sender, whole))]

    def _marks(self) -> dict[NodeId, int]:
        """Each sender's lowest number its link waits for (reassembly's `low`)."""
        return {peer: link.high + 1 for peer, link in self._in.items()}

    def _on_data(self, sender: NodeId, seq: int, inner: Packet) -> list[Effect]:
        if not self._allowed(sender):
            return []
        link = self._in.get(sender)
        if link is None:
            link = self._in[sender] = _InLink()
        if seq <= link.high or seq in link.above:
            self.duplicates += 1
            return []
        link.above.add(seq)
        while link.high + 1 in link.above:
            link.high += 1
            link.above.discard(link.high)
        if len(link.above) > self.window:
            self._give_up_holes(link)
        return [Up(sender, inner)]

    def _give_up_holes(self, link: _InLink) -> None:
        """Too much waits above the lowest hole: that packet is not coming."""
        lowest = min(link.above)
        self.given_up += lowest - link.high - 1
        link.high = lowest
        link.above.discard(lowest)
        while link.high + 1 in link.above:
            link.high += 1
            link.above.discard(link.high)
