"""Fragmentation: a packet whose frame would exceed the transport's frame bound leaves
as fragments, each a packet of its own on the link, and is reassembled whole on arrival
(JGroups' FRAG2/FRAG3 idea; docs/orderings.md, "Packets larger than a frame").

    event at a receiver (one sender, one packet)      what reassembly does
    a fragment of a packet not under way, room left   opens it (count × chunk), holds it
    a fragment of a packet under way, same count      holds it (an index held: ignored)
    a fragment of the packet the link waits on        opens it whatever the room
    the last missing fragment                         joins, decodes, hands the packet up
    the link's mark passes all its numbers            drops it (abandoned: never completes)
    no room left (after dropping the abandoned)       refuses it quietly (NoRoomError)
    its packet starts below the mark                  refuses it quietly (lost)
    a count that disagrees, a size not the chunk's,   refuses it (RemoteProtocolError)
      a range across another packet of the sender
    the sender leaves the view                        drops its packets under way

Rules:
- What is split is the whole packet of the layers above — their headers and the
  payload, encoded as one inner frame (`abcast.codec.encode_frame`) — since a view
  change's state transfer sits in a header (the flush's MState/MInstall), not in the
  payload. The receiver decodes it with the header types of the layers above
  (`InnerCodec`), so a fragment's own frame carries only the channel's header.
- A fragment is numbered on its link like any packet, so a reliable channel acks and
  retransmits each one alone; fragments of one packet take consecutive sequence numbers
  and say only their `index` and `count`: the receiver keys a packet by the number of its
  fragment 0 (`seq - index`).
- Reassembly reserves a packet's count × chunk bytes (this node's chunk: every fragment
  but the last is that size, the last no larger, so what is stored never exceeds what is
  reserved) when the first of its fragments to arrive opens it, and never refuses a
  fragment of a packet under way, nor one of the packet starting at the lowest number
  the reliable link still waits for (`low`): a packet opened completes once its sender
  (re)sends the rest, and the lowest always opens, so no bound can block a link. A packet
  whose numbers the link's mark has all passed can never complete and is dropped
  (`settle`); a sender's packets never overlap, so it has one lowest at a time. What
  other packets may open is bounded: `max_bytes` per sender, `guest_bytes` for the
  senders outside the view together (an open group's strangers and joiners),
  `total_bytes` over all senders, `max_partial` packets per sender; the lowest come on
  top (see `Reassembly` for the worst case). A fragment refused for room is dropped
  before the channel records it (a reliable sender retransmits it once room is back); a
  sender's partial packets are forgotten when it leaves the view. Every member must use
  the same frame_bytes and reassembly_bytes: a packet whose reservation exceeds this
  node's `max_bytes` is refused for good (counted `oversize`, its message says so).
- The per-packet test (`SizeGate.over`) costs a dict lookup per header and one
  comparison: a header type whose msgspec annotations bound its encoding (every field a
  number, a bounded string or a bounded container of such) adds that bound; any other
  (lists of bodies, state bytes) adds its encoding's length (msgspec, ~80 ns for a
  small header), unless the header class declares `WIRE_BOUND: ClassVar[int]` (what
  its sender's own rules keep it under). Only a packet the test cannot clear is encoded
  whole, and if it does not fit that encoding is what is split.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import msgspec
import msgspec.inspect as mi

from abcast.codec import (
    Count,
    Envelope,
    Header,
    HeaderCodec,
    Packet,
    Seq,
    decode_envelope,
    encode_frame,
)
from abcast.errors import ConfigError, DecodeError, LocalProtocolError, RemoteProtocolError

#: bytes of a frame that are not the split inner packet: the envelope (group ≤ 128 and
#: sender ≤ 64 characters, utf-8), the headers of the layers at and below the channel
HEADROOM: Final = 1_024
#: the smallest frame bound fragmentation works with
MIN_FRAME_BYTES: Final = 2 * HEADROOM
#: fragments of one packet, at most (a 16 MiB frame bound allows 64 TiB packets)
MAX_COUNT: Final = 1 << 22
#: the inner frame's group field (the channel does not know its group; nobody reads it)
_INNER_GROUP: Final = "-"
#: a header type whose encoding nothing bounds
UNBOUNDED: Final = sys.maxsize // 4
#: the bound over all senders, in units of one sender's (`Reassembly.total_bytes`)
TOTAL_SENDERS: Final = 4
#: a header's msgpack encoding (its length is what the gate adds for an unbounded type)
encode_header: Final = msgspec.msgpack.Encoder().encode


class RFrag(Header, frozen=True):
    """Fragment `index` of `count` of one packet of the layers above, numbered `seq` on
    this link; `ack` as in `RData` (0: none carried)."""

    seq: Seq
    ack: Count
    index: Annotated[int, msgspec.Meta(ge=0, lt=MAX_COUNT)]
    count: Annotated[int, msgspec.Meta(ge=2, le=MAX_COUNT)]

    def first(self) -> int:
        """The sequence number of the packet's fragment 0: its reassembly key."""
        return self.seq - self.index


class Fragment(Packet, frozen=True, gc=False):
    """A fragment as the sending channel keeps it (window queue, retransmission buffer):
    `payload` is the chunk, `headers` is empty; `index`/`count` go into its `RFrag`."""

    index: int = 0
    count: int = 1


def split(inner: bytes, chunk: int) -> list[Fragment]:
    """`inner` (an encoded packet) in fragments of at most `chunk` bytes, in order."""
    if chunk < 1:
        raise ConfigError(f"fragment size must be positive, got {chunk}")
    count = max(1, -(-len(inner) // chunk))
    view = memoryview(inner)
    return [Fragment((), bytes(view[i * chunk:(i + 1) * chunk]), i, count)
            for i in range(count)]


class InnerCodec:
    """Encodes a packet of the layers above as one inner frame, and decodes it back with
    their header types (from the stack builder: `ReliableChannel.decode_above`)."""

    def __init__(self, node: str, header_types: list[Any]) -> None:
        self.node = node
        self._headers = HeaderCodec(header_types)

    def encode(self, packet: Packet) -> bytes:
        return encode_frame(_INNER_GROUP, self.node, packet)

    def decode(self, sender: str, data: bytes) -> Packet:
        """The packet `sender` split; RemoteProtocolError for anything else."""
        try:
            env: Envelope = decode_envelope(data)
            headers = self._headers.headers(env)
        except DecodeError as exc:
            raise RemoteProtocolError(f"{sender} sent a packet in fragments that does not "
                                      f"decode: {exc}") from None
        if env.sender != sender:
            raise RemoteProtocolError(f"{sender} sent fragments of {env.sender}'s packet")
        return Packet(headers, env.payload)


# -- the size gate -------------------------------------------------------------------------
def static_bound(kind: Any) -> int:
    """An upper bound of the msgpack encoding of any value of `kind` (a msgspec type),
    or UNBOUNDED when its annotations set none (no max_length, Any, Raw)."""
    return min(_bound(mi.type_info(kind), 0), UNBOUNDED)


def _bound(t: mi.Type, depth: int) -> int:
    if depth > 8:
        return UNBOUNDED
    if isinstance(t, mi.IntType | mi.FloatType | mi.BoolType | mi.NoneType | mi.EnumType):
        return 9 if not isinstance(t, mi.EnumType) else 64
    if isinstance(t, mi.StrType | mi.BytesType | mi.ByteArrayType):
        size = t.max_length
        if size is None:
            return UNBOUNDED
        return 5 + (4 * size if isinstance(t, mi.StrType) else size)
    if isinstance(t, mi.LiteralType):
        return max(5 + 4 * len(str(v)) + 9 for v in t.values)
    if isinstance(t, mi.UnionType):
        return max(_bound(u, depth + 1) for u in t.types)
    if isinstance(t, mi.ListType | mi.SetType | mi.FrozenSetType | mi.VarTupleType):
        if t.max_length is None:
            return UNBOUNDED
        return 5 + t.max_length * _bound(t.item_type, depth + 1)
    if isinstance(t, mi.TupleType):
        return 5 + sum(_bound(item, depth + 1) for item in t.item_types)
    if isinstance(t, mi.DictType):
        if t.max_length is None:
            return UNBOUNDED
        pair = _bound(t.key_type, depth + 1) + _bound(t.value_type, depth + 1)
        return 5 + t.max_length * pair
    if isinstance(t, mi.StructType):
        declared = getattr(t.cls, "WIRE_BOUND", None)
        if isinstance(declared, int):
            return declared  # the sender's own rules bound it (a ClassVar of the header)
        tag = 0 if t.tag is None else 5 + 4 * len(str(t.tag))
        return 5 + tag + sum((0 if t.array_like else 5 + 4 * len(f.encode_name))
                             + _bound(f.type, depth + 1) for f in t.fields)
    return UNBOUNDED  # Any, Raw, custom types: nothing known


class HeaderBounds(dict[type, int]):
    """Header type -> the static bound of its encoding, or 0 when it has none (then its
    encoding is measured: `bounds[kind] or len(encode(header))`); filled on first sight."""

    def __missing__(self, kind: type) -> int:
        bound = static_bound(kind)
        self[kind] = value = 0 if bound >= UNBOUNDED else bound
        return value


@dataclass(slots=True)
class SizeGate:
    """Decides, per packet, whether it might not fit a frame (see the rules); `room` is
    the largest packet of the layers above that goes whole (sys.maxsize: off)."""

    room: int = sys.maxsize
    bounds: HeaderBounds = field(default_factory=HeaderBounds)
    measured: int = 0  # packets encoded whole to learn whether they fit (see the channels)
    largest: int = 0  # bytes of the largest packet split (its inner frame)

    def over(self, packet: Packet) -> bool:
        """True when the packet may not fit: it must be encoded whole to know. (The
        channels inline this loop on their per-packet path.)"""
        size = len(packet.payload)
        bounds = self.bounds
        for header in packet.headers:
            size += bounds[type(header)] or len(encode_header(header))
        return size > self.room


# -- measuring and splitting (both channels) ---------------------------------------------
def measure(gate: SizeGate, codec: InnerCodec | None, packet: Packet, max_bytes: int
            ) -> list[Fragment] | None:
    """What a channel sends for `packet`: None when the gate clears it (it goes whole,
    never encoded), [] when it was encoded and fits a frame after all, else its
    fragments. LocalProtocolError when no peer of the same configuration could
    reassemble it (`reservation` of its fragments above `max_bytes`)."""
    size = len(packet.payload)  # SizeGate.over, inlined
    bounds = gate.bounds
    for header in packet.headers:
        size += bounds[type(header)] or len(encode_header(header))
    if size <= gate.room:
        return None
    gate.measured += 1
    if codec is None:
        return []
    inner = codec.encode(packet)
    if len(inner) <= gate.room:
        return []
    count = -(-len(inner) // gate.room)
    if reservation(count, gate.room) > max_bytes:
        raise LocalProtocolError(
            f"a {len(inner)}-byte packet ({count} fragments of {gate.room} bytes) exceeds "
            f"reassembly_bytes {max_bytes}: no peer would take it")
    gate.largest = max(gate.largest, len(inner))
    return split(inner, gate.room)


def reservation(count: int, chunk: int) -> int:
    """Bytes reassembly reserves for a packet of `count` fragments of `chunk` bytes."""
    return count * chunk


# -- reassembly ----------------------------------------------------------------------------
class NoRoomError(RemoteProtocolError):
    """A fragment refused through no fault of its sender: no room (an honest sender's,
    taken when resent) or its packet already lost (a basic channel gave up one of its
    numbers). A channel drops it quietly, counted, instead of treating its peer as
    faulty."""


@dataclass(slots=True)
class _Partial:
    count: int
    reserved: int  # bytes counted against the bounds (count × chunk) until it completes
    parts: dict[int, bytes] = field(default_factory=dict)


@dataclass(slots=True)
class _Sender:
    partial: dict[int, _Partial] = field(default_factory=dict)  # by the first fragment's seq
    held: int = 0  # bytes reserved over all of them
    low: int = 0  # the lowest seq its link waits for, as last told (`settle`)


#: the state of a sender with nothing under way (never mutated)
_NOBODY: Final = _Sender()


class Reassembly:
    """The packets under way, per sender (see the rules). `check` says, without changing
    anything, whether `add` would take a fragment; `add` returns the inner frame once its
    last fragment came; `settle` drops the packets that can no longer complete.

    Bounds, in bytes reserved (a packet reserves count × `chunk` when it is opened, and
    every fragment but the last is `chunk` bytes, the last at most that, so what is
    stored never exceeds what is reserved, and a packet under way is never refused a
    fragment for room): `max_bytes` per sender, `guest_bytes` over all senders outside
    `members` together, `total_bytes` over all senders; and `max_partial` packets under
    way per sender. The packet spanning a link's `low` opens on top of them: one a
    sender, at most `max_bytes` (no two packets of a sender overlap, and one whose
    numbers are all below `low` is dropped), guests' together within `guest_bytes`.
    Worst case: a member's `2 × max_bytes`, the guests' `2 × guest_bytes`, everything
    `total_bytes + members × max_bytes + guest_bytes`."""

    def __init__(self, max_bytes: int, max_partial: int, total_bytes: int | None = None,
                 guest_bytes: int | None = None, chunk: int = 0) -> None:
        if max_bytes < 1 or max_partial < 1:
            raise ConfigError("reassembly bounds must be positive")
        self.max_bytes = max_bytes
        self.max_partial = max_partial
        self.total_bytes = TOTAL_SENDERS * max_bytes if total_bytes is None else total_bytes
        self.guest_bytes = max_bytes if guest_bytes is None else guest_bytes
        if not self.guest_bytes <= self.max_bytes <= self.total_bytes:
            raise ConfigError("need guest_bytes <= max_bytes <= total_bytes")
        #: the size of every fragment but a packet's last (this node's own; 0: none yet)
        self.chunk = chunk
        #: the senders with a member's budget (None: every sender); the others share
        #: guest_bytes
        self.members: frozenset[str] | None = None
        self._senders: dict[str, _Sender] = {}
        self.refused = 0
        self.oversize = 0  # of which: a packet that could never fit this node's bound
        self.completed = 0
        self.abandoned = 0  # packets dropped under way: their numbers went by (`settle`)

    def held(self, sender: str | None = None) -> int:
        """Bytes reserved (for one sender, or all)."""
        if sender is not None:
            state = self._senders.get(sender)
            return 0 if state is None else state.held
        return sum(s.held for s in self._senders.values())

    def stored(self, sender: str | None = None) -> int:
        """Bytes of fragments actually held (for one sender, or all): never above `held`."""
        states = (self._senders.values() if sender is None
                  else [self._senders.get(sender) or _NOBODY])
        return sum(len(b) for s in states for p in s.partial.values() for b in p.parts.values())

    def guests_held(self) -> int:
        """Bytes reserved by senders outside `members`."""
        members = self.members
        if members is None:
            return 0
        return sum(s.held for n, s in self._senders.items() if n not in members)

    def _guests_lowest(self) -> int:
        """Bytes reserved by guests' packets at or below their links' `low` (spanning
        it, or not yet settled past it)."""
        members = self.members or frozenset()
        return sum(part.reserved for name, state in self._senders.items()
                   if name not in members
                   for first, part in state.partial.items() if first <= state.low)

    def partial(self, sender: str) -> int:
        state = self._senders.get(sender)
        return 0 if state is None else len(state.partial)

    def _refuse(self, message: str, oversize: bool = False, room: bool = False
                ) -> RemoteProtocolError:
        self.refused += 1
        self.oversize += oversize
        return NoRoomError(message) if room else RemoteProtocolError(message)

    def settle(self, sender: str, low: int) -> int:
        """`sender`'s link now waits for `low` (its high mark + 1; numbers only grow):
        drop its packets all of whose numbers are below it — taken by something else or
        given up, they can never complete. Returns how many were dropped."""
        state = self._senders.get(sender)
        if state is None or low <= state.low:
            return 0
        state.low = low
        gone = [first for first, part in state.partial.items() if first + part.count <= low]
        for first in gone:
            state.held -= state.partial.pop(first).reserved
        if not state.partial:
            del self._senders[sender]
        self.abandoned += len(gone)
        return len(gone)

    def admit(self, sender: str, first: int, index: int, count: int, size: int, low: int,
              lows: Callable[[], Mapping[str, int]], lowest_opens: bool = True) -> bool:
        """`check` once `sender` is settled at `low`; refused for room, every sender is
        settled at its link's mark (`lows()`, asked only then) and it is checked again.
        False: refused through no fault of the sender (NoRoomError, counted);
        RemoteProtocolError for the rest."""
        self.settle(sender, low)
        try:
            self.check(sender, first, index, count, size, low, lowest_opens)
            return True
        except NoRoomError:
            if not sum(self.settle(peer, mark) for peer, mark in lows().items()):
                return False
            self.refused -= 1  # counted once, if refused again
        try:
            self.check(sender, first, index, count, size, low, lowest_opens)
            return True
        except NoRoomError:
            return False

    def check(self, sender: str, first: int, index: int, count: int, size: int,
              low: int = 0, lowest_opens: bool = True) -> None:
        """RemoteProtocolError if `add` must refuse this fragment; nothing changes. `low`
        is the lowest sequence number the link still waits for (its high mark + 1; 0:
        none): a packet starting below it cannot complete, and the one starting there is
        never refused for room (unless not `lowest_opens`: a best-effort channel's)."""
        if not 0 <= index < count or count < 2:
            raise self._refuse(f"{sender} sent fragment {index} of {count}")
        chunk = self.chunk
        if size > chunk or (size != chunk and index < count - 1):
            raise self._refuse(
                f"{sender} sent fragment {index} of {count} of {size} bytes; this node's "
                f"fragments are {chunk} bytes (every member must use the same frame_bytes)")
        state = self._senders.get(sender) or _NOBODY
        part = state.partial.get(first)
        if part is not None:
            if part.count != count:
                raise self._refuse(f"{sender} sent fragment {index} of {count} of a packet "
                                   f"of {part.count}")
            return  # a packet under way: its room is reserved (a duplicate: ignored)
        need = reservation(count, chunk)
        if need > self.max_bytes:
            raise self._refuse(
                f"{sender} sent fragments of a packet of about {need} bytes, above this "
                f"node's reassembly_bytes {self.max_bytes} (every member must use the same "
                "frame_bytes and reassembly_bytes)", oversize=True)
        if first < low:
            raise self._refuse(f"{sender} sent fragment {index} of a packet whose first "
                               "numbers went by (lost)", room=True)
        for other, opened in state.partial.items():
            if other < first + count and first < other + opened.count:
                raise self._refuse(f"{sender} sent fragments {first}..{first + count - 1}"
                                   f" across its packet {other}..{other + opened.count - 1}")
        guest = self.members is not None and sender not in self.members
        if lowest_opens and first == low:
            # The packet the link waits on: were it refused for room that packets above
            # it hold, and they waited on the link's window, the link would block for
            # ever. It is bounded apart: one a sender; guests' together by guest_bytes.
            if guest:
                lowest = self._guests_lowest()
                if lowest + need > self.guest_bytes:
                    raise self._refuse(f"guests' lowest packets would hold {lowest + need} "
                                       f"bytes (max {self.guest_bytes})", room=True)
            return
        if len(state.partial) >= self.max_partial:
            raise self._refuse(
                f"{sender} has {len(state.partial)} packets in fragments under way", room=True)
        held = state.held
        if held + need > self.max_bytes:
            raise self._refuse(f"{sender}'s packets under way would hold {held + need} "
                               f"bytes (max {self.max_bytes})", room=True)
        if guest:
            guests = self.guests_held()
            if guests + need > self.guest_bytes:
                raise self._refuse(f"guests' packets under way would hold {guests + need} "
                                   f"bytes (max {self.guest_bytes})", room=True)
        total = self.held()
        if total + need > self.total_bytes:
            raise self._refuse(f"packets under way would hold {total + need} bytes "
                               f"(max {self.total_bytes})", room=True)

    def add(self, sender: str, first: int, index: int, count: int, chunk: bytes,
            low: int = 0, checked: bool = False) -> bytes | None:
        """Take a fragment (settled and checked first, unless `checked`: `admit` said
        yes); the inner frame when it completes a packet."""
        if not checked:
            self.settle(sender, low)
            self.check(sender, first, index, count, len(chunk), low)
        state = self._senders.get(sender)
        if state is None:
            state = self._senders[sender] = _Sender(low=low)
        part = state.partial.get(first)
        if part is None:
            part = state.partial[first] = _Partial(count, reservation(count, self.chunk))
            state.held += part.reserved
        if index in part.parts:
            return None
        part.parts[index] = chunk
        if len(part.parts) < count:
            return None
        del state.partial[first]
        state.held -= part.reserved
        if not state.partial:
            del self._senders[sender]
        self.completed += 1
        return b"".join(part.parts[i] for i in range(count))

    def make_room(self, sender: str, first: int, count: int) -> int:
        """Drop `sender`'s oldest partial packets (not `first`'s) until opening packet
        `first` fits `sender`'s own bounds: a best-effort channel's way to make room,
        those packets are lost (another sender's are never dropped). Returns how many
        were dropped."""
        state = self._senders.get(sender)
        if state is None or first in state.partial:
            return 0
        need = reservation(count, self.chunk)
        dropped = 0
        while state.partial and (state.held + need > self.max_bytes
                                 or len(state.partial) >= self.max_partial):
            state.held -= state.partial.pop(min(state.partial)).reserved
            dropped += 1
        if not state.partial:
            del self._senders[sender]
        return dropped

    def forget(self, keep: frozenset[str]) -> None:
        """Drop the partial packets of every sender not in `keep` (it left the view)."""
        self.drop([s for s in self._senders if s not in keep])

    def drop(self, senders: Iterable[str]) -> None:
        """Drop the partial packets of these senders."""
        for sender in senders:
            self._senders.pop(sender, None)
