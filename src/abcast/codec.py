"""The wire format: one frame = an envelope, one header per layer, one payload.

Rules: this is the only place bytes become objects. Every layer declares the msgspec
Structs it puts on the wire (subclasses of `Header`); a frame carries the headers of the
layers that handled it, bottom layer first, so a packet that a low layer makes itself (an
ack) simply has fewer headers. Any bytes that are not a valid frame raise `DecodeError`
and nothing else: drivers rely on that to drop a bad peer without crashing.

Frame layout (msgpack array): [version, group, sender, flags, [h0, h1, ...], payload].
"""

from __future__ import annotations

from typing import Annotated, Any, Final

import msgspec

from abcast.errors import DecodeError

WIRE_VERSION: Final = 1
FLAG_CONTROL: Final = 1  # reliability traffic (acks, retransmissions): not a protocol packet

# Constraints every decoder enforces, so cores never see absurd values from a peer.
NodeField = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
GroupField = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Seq = Annotated[int, msgspec.Meta(ge=1, le=2**62)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


class Header(msgspec.Struct, frozen=True, array_like=True, tag=True, gc=False):
    """Base of every per-layer wire header. Subclasses are tagged by class name."""


class Packet(msgspec.Struct, frozen=True, gc=False):
    """What a layer hands to the layer below (or receives from it): the headers of the
    layers above it, outermost first, and the application payload."""

    # A Struct, not a dataclass: several are made per message and layer, and a frozen
    # dataclass costs ~10x more to build. gc=False is safe: headers and bytes never
    # refer back to a packet, so no cycle can go through one.
    headers: tuple[Any, ...] = ()
    payload: bytes = b""

    def push(self, header: Header) -> Packet:
        return Packet((header, *self.headers), self.payload)


EMPTY: Final = Packet()


class Envelope(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A frame whose per-layer headers are still raw bytes (decoded by the group's stack)."""

    version: int
    group: GroupField
    sender: NodeField
    flags: Annotated[int, msgspec.Meta(ge=0, le=255)]
    headers: Annotated[list[msgspec.Raw], msgspec.Meta(max_length=32)]
    payload: bytes


class Frame(msgspec.Struct, frozen=True, gc=False):
    group: str
    sender: str
    flags: int
    packet: Packet

    @property
    def control(self) -> bool:
        return bool(self.flags & FLAG_CONTROL)


#: What msgspec raises for bytes that are not a valid message, for every decoder of a
#: peer's bytes to catch: invalid UTF-8 in a str field is a UnicodeDecodeError (a
#: ValueError), and nesting deeper than the interpreter's recursion limit (even inside a
#: Raw field it only skips) a RecursionError; the fuzz tests found both.
NOT_A_MESSAGE: Final = (msgspec.MsgspecError, ValueError, RecursionError)
_NOT_A_FRAME = NOT_A_MESSAGE

_encode = msgspec.msgpack.Encoder().encode
_envelope_decoder = msgspec.msgpack.Decoder(Envelope)
_decode_with = msgspec.msgpack.Decoder.decode


def encode_frame(group: str, sender: str, packet: Packet, *, control: bool = False) -> bytes:
    # A plain tuple encodes to the same msgpack array as an array_like Struct would,
    # without building one per frame.
    return _encode((
        WIRE_VERSION, group, sender, FLAG_CONTROL if control else 0,
        packet.headers, packet.payload,
    ))


def decode_envelope(data: bytes) -> Envelope:
    """Decode the envelope only; raises DecodeError for anything that is not one."""
    try:
        env = _envelope_decoder.decode(data)
    except _NOT_A_FRAME as exc:
        raise DecodeError(f"not an abcast frame: {exc}") from None
    if env.version != WIRE_VERSION:
        raise DecodeError(f"wire version {env.version}, expected {WIRE_VERSION}")
    return env


class HeaderCodec:
    """Decodes the headers of one group's stack: header i belongs to layer i (bottom 0)."""

    def __init__(self, header_types: list[Any]) -> None:
        self._decoders = [msgspec.msgpack.Decoder(t) for t in header_types]

    def decode(self, env: Envelope) -> Frame:
        return Frame(env.group, env.sender, env.flags, Packet(self.headers(env), env.payload))

    def headers(self, env: Envelope) -> tuple[Any, ...]:
        """The envelope's headers decoded, bottom layer first; DecodeError if any is bad."""
        raws = env.headers
        if len(raws) > len(self._decoders):
            raise DecodeError(
                f"frame has {len(raws)} headers, the stack has {len(self._decoders)} layers"
            )
        try:
            # map over the unbound C method: no Python frame per header
            return tuple(map(_decode_with, self._decoders, raws))
        except _NOT_A_FRAME as exc:
            raise DecodeError(f"bad header in group {env.group!r}: {exc}") from None


class FrameCodec:
    """Full decoder for one group layout: bytes → Frame, DecodeError on anything else."""

    def __init__(self, groups: dict[str, list[Any]]) -> None:
        self._groups = {g: HeaderCodec(types) for g, types in groups.items()}

    def decode(self, data: bytes) -> Frame:
        env = decode_envelope(data)
        codec = self._groups.get(env.group)
        if codec is None:
            raise DecodeError(f"frame for unknown group {env.group!r}")
        return codec.decode(env)
