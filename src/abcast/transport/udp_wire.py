"""The udp:// datagram header, in the spirit of MIOP/ROMIOP: a fixed layout, then the
sender's node id, then (a fragment of) one frame.

    offset  size  field
    0       2     magic b"AB"
    2       1     version (1)
    3       1     packet type (PacketType)
    4       1     flags (LAST_FRAGMENT, MULTICAST)
    5       1     sender id length (1..64)
    6       2     fragment count (1: a whole frame)
    8       4     group id (CRC-32 of the multicast group "ip:port"; 0 without a group)
    12      8     incarnation of the sender's transport
    20      4     session (a receiver's RESET makes the sender start a new one)
    24      8     sequence number (per sender, incarnation and session)
    32      2     fragment index
    34      4     frame size (the whole frame's bytes, all fragments together)
    38      ..    sender id (utf-8), then the fragment's bytes

Rules: `decode` refuses, with a DecodeError saying why, a datagram shorter than the
header, a wrong magic or version, an unknown type, a sender id that is not 1..64 bytes
of utf-8, a fragment index not below the count, a frame size above the receiver's limit,
and a whole frame (count 1) whose bytes do not match its size — so a 64 KB length on a
100-byte datagram is refused before anything is allocated. It knows nothing of sockets.

Packet types: the transport sends DATA (a frame or a fragment of one) and RESET (a
receiver dropped the sender's session: start a new one, the datagram analogue of a TCP
reset). The NAK channel's packets — ACK (its stability digest), NAK, KEEPALIVE (the
digest's highest seq), CANCEL — and the sequencer's ORDER ride inside DATA frames as
typed headers of their layers; the numbers are reserved here so that a capture can be
read with one table. MEMBER is reserved for membership announcements.
"""

from __future__ import annotations

import enum
import struct
import zlib
from typing import Final

from abcast.errors import DecodeError

MAGIC: Final = b"AB"
VERSION: Final = 1
HEADER: Final = struct.Struct("!2sBBBBHIQIQHI")
HEADER_BYTES: Final = HEADER.size  # 38
MAX_SENDER_BYTES: Final = 64
#: the largest UDP payload over IPv4
MAX_DATAGRAM: Final = 65_507

LAST_FRAGMENT: Final = 0x01
MULTICAST: Final = 0x02


class PacketType(enum.IntEnum):
    DATA = 1
    ACK = 2
    NAK = 3
    KEEPALIVE = 4
    CANCEL = 5
    MEMBER = 6
    ORDER = 7
    RESET = 8


_TYPES: Final = frozenset(int(t) for t in PacketType)


class Datagram:
    """One decoded datagram (a frame, or one fragment of it)."""

    __slots__ = ("body", "flags", "frag", "frags", "group", "incarnation", "kind", "sender",
                 "seq", "session", "size")

    def __init__(self, kind: int, flags: int, frags: int, group: int, incarnation: int,
                 session: int, seq: int, frag: int, size: int, sender: str,
                 body: bytes) -> None:
        self.kind = kind
        self.flags = flags
        self.frags = frags
        self.group = group
        self.incarnation = incarnation
        self.session = session
        self.seq = seq
        self.frag = frag
        self.size = size
        self.sender = sender
        self.body = body


def group_id(address: str) -> int:
    """The 32-bit id of a multicast group "ip:port" (0 is "no group")."""
    return zlib.crc32(address.encode()) or 1


def encode(kind: int, flags: int, frags: int, group: int, incarnation: int, session: int,
           seq: int, frag: int, size: int, sender: bytes, body: bytes) -> bytes:
    """One datagram; `sender` is the utf-8 node id."""
    return HEADER.pack(MAGIC, VERSION, kind, flags, len(sender), frags, group, incarnation,
                       session, seq, frag, size) + sender + body


def decode(data: bytes, max_frame_bytes: int) -> Datagram:
    """Parse one datagram; DecodeError for anything malformed (see the rules)."""
    if len(data) < HEADER_BYTES:
        raise DecodeError(f"truncated datagram: {len(data)} bytes, header needs {HEADER_BYTES}")
    (magic, version, kind, flags, sender_len, frags, group, incarnation, session, seq, frag,
     size) = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise DecodeError(f"bad magic {magic!r}")
    if version != VERSION:
        raise DecodeError(f"unsupported version {version}")
    if kind not in _TYPES:
        raise DecodeError(f"unknown packet type {kind}")
    if not 1 <= sender_len <= MAX_SENDER_BYTES:
        raise DecodeError(f"sender id of {sender_len} bytes")
    start = HEADER_BYTES + sender_len
    if len(data) < start:
        raise DecodeError(f"truncated datagram: {len(data)} bytes, sender id ends at {start}")
    try:
        sender = data[HEADER_BYTES:start].decode()
    except UnicodeDecodeError:
        raise DecodeError("sender id is not utf-8") from None
    if frags < 1 or frag >= frags:
        raise DecodeError(f"fragment {frag} of {frags}")
    if size > max_frame_bytes:
        raise DecodeError(f"frame size {size} exceeds max_frame_bytes {max_frame_bytes}")
    body = data[start:]
    if frags == 1 and len(body) != size:
        raise DecodeError(f"frame size {size} on a datagram carrying {len(body)} bytes")
    if len(body) > size:
        raise DecodeError(f"fragment of {len(body)} bytes of a {size}-byte frame")
    return Datagram(kind, flags, frags, group, incarnation, session, seq, frag, size, sender,
                    body)
