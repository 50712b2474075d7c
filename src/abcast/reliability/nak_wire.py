"""The NAK channel's wire: its four packet headers and its knobs (abcast.reliability.nak
says what each does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.errors import ConfigError
from abcast.reliability.channel import LINGER_US

MCAST: Final = 0  # the sender's multicast stream
UNICAST: Final = 1  # the sender's stream to this node
MAX_LIST: Final = 4096
_Stream = Annotated[int, msgspec.Meta(ge=0, le=1)]
_Seqs = Annotated[list[Seq], msgspec.Meta(max_length=MAX_LIST)]


class NData(Header, frozen=True):
    """Fragment `frag` of `frags` of a packet of the layer above, seq `seq` of `stream`."""

    stream: _Stream
    seq: Seq
    frag: Count = 0
    frags: Annotated[int, msgspec.Meta(ge=1, le=65_536)] = 1


class NNak(Header, frozen=True):
    """The sender of `stream` is asked to resend `seqs`."""

    stream: _Stream
    seqs: _Seqs


class NCancel(Header, frozen=True):
    """The sender gives up `seqs` of `stream` (it no longer holds them): skip them."""

    stream: _Stream
    seqs: _Seqs


class Mark(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What the digest's sender knows about `peer`: received contiguously from its
    multicast stream and its unicast stream, and sent on its own unicast stream to it."""

    peer: NodeField
    recv_m: Count
    recv_u: Count
    sent_u: Count
    stable_u: Count  # what the digest's sender has freed of its stream to `peer`
    start_m: Count  # the first seq of the sender's multicast stream `peer` was sent


class NDigest(Header, frozen=True):
    """Stability round and keep-alive: the highest seq of the sender's multicast stream,
    how far it has freed it, and its marks for each peer."""

    sent_m: Count
    stable_m: Count
    marks: Annotated[list[Mark], msgspec.Meta(max_length=1024)]


NakHeader = NData | NNak | NCancel | NDigest


@dataclass(frozen=True, slots=True)
class NakConfig:
    """Knobs, in microseconds and bytes (defaults suit loopback and the simulator)."""

    nak_delay_us: int = 2_000  # wait this long for a reordered packet before NAKing it
    nak_retry_us: int = 20_000  # NAK again while it is still missing
    gather_us: int = 1_000  # a sender gathers NAKs this long before resending
    stable_us: int = 20_000  # digest period while anything is unstable
    window_bytes: int = 16 * 1024 * 1024  # unstable bytes per stream before back-pressure
    frag_bytes: int = 60_000  # payload bytes per fragment (1_400: MTU-safe)
    max_fragments: int = 1024  # a packet needing more fragments is refused
    max_holdback: int = 65_536  # seqs held above a gap, at most, per stream
    max_waiting: int = 1024  # packets waiting for window room before broadcasts wait
    linger_us: int = LINGER_US  # a departed sender's streams are kept this long

    def __post_init__(self) -> None:
        values = (self.nak_delay_us, self.nak_retry_us, self.gather_us, self.stable_us,
                  self.window_bytes, self.frag_bytes, self.max_fragments, self.max_holdback,
                  self.max_waiting, self.linger_us)
        if min(values) <= 0:
            raise ConfigError(f"NAK channel knobs must be positive: {self}")
        if self.max_fragments > 65_536:
            raise ConfigError("max_fragments above 65536 would not fit a fragment header")
