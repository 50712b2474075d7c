"""What both ends of a reliable channel's link must agree on: its headers on the wire
and its knobs (abcast.reliability.channel has the rules; it re-exports these).

Rules: `RData` numbers a packet on its link and may carry the cumulative ack of the
opposite link; `RAck` is a standalone cumulative + selective ack. `ChannelConfig` holds
the timing knobs (each node may choose its own) and the bounds every member must share
(`window`, `frame_bytes`, `reassembly_bytes`); it refuses impossible combinations with
ConfigError when built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import msgspec

from abcast.codec import Count, Header, Seq
from abcast.errors import ConfigError
from abcast.reliability.fragments import MIN_FRAME_BYTES, RFrag

__all__ = ["ChannelConfig", "ChannelHeader", "RAck", "RData"]


class RData(Header, frozen=True):
    """A packet of the layer above, numbered on this link; `ack` > 0 also acknowledges
    everything up to it on the opposite link (0: no ack carried)."""

    seq: Seq
    ack: Count = 0


class RAck(Header, frozen=True):
    """Everything up to `high` arrived, and so did each of `sacks` (all above high)."""

    high: Count
    sacks: Annotated[list[Seq], msgspec.Meta(max_length=1024)] = []


ChannelHeader = RData | RAck | RFrag


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    """Knobs, in microseconds. Defaults suit both the simulator and loopback.

    - ack_delay_us: how long a receiver waits to gather one ack for several packets.
    - rto_us: the retransmission timeout of a link before its first round-trip sample.
    - min_rto_us / max_rto_us: the bounds of the adaptive timeout (backoff included);
      min_rto_us None means rto_us, so the default floor is 60 ms. The floor keeps the
      simulator's behaviour (its round trips are a few ms, so the estimate sits on the
      floor there). Over a reliable stream transport (tcp, zmq, grpc, pyro) a frame is
      lost only when a connection breaks, so a runtime there should raise it (rto_us=1 s,
      say): retransmissions then only repair breaks and never race a long queue.
    - max_sacks: selective acks carried by one ack, at most.
    - piggyback_acks: a packet to a peer that is owed an ack carries it (see above). Off
      by default: the simulator's regression scenarios were found, seed by seed, with
      standalone acks; the fault sweeps run both.
    - tick_us: one timer for all links, firing every tick_us while an ack is owed and
      when a retransmission can fall due, in place of a delayed-ack and a retransmission
      timer per link (see abcast.reliability.channel's rules; None: per-link timers). An
      ack then waits one to two ticks, not ack_delay_us (unused then), and a
      retransmission is up to one tick late.
    - window: sequence numbers a link may have in flight past its oldest unacked packet;
      a receiver refuses anything further ahead (every member must use the same value).
    - max_waiting: packets waiting for credit on one link above which the node is
      backpressured (`backlog()`; the runtime's broadcast waits or raises).
    - frame_bytes: the transport's frame bound (the runtime sets it from
      `TransportOptions.max_frame_bytes`); a packet whose frame would be larger leaves in
      fragments of frame_bytes − 1 KiB (abcast.reliability.fragments).
    - reassembly_bytes: bytes one sender's packets under way may reserve at a receiver
      (each count × chunk); a packet larger than it is refused at its sender
      (LocalProtocolError). Every member must use the same frame_bytes and
      reassembly_bytes (a receiver with a smaller bound refuses for good, counting
      `refused_oversize`; one with smaller frames drops the connection).
    """

    ack_delay_us: int = 2_000
    rto_us: int = 60_000
    min_rto_us: int | None = None
    max_rto_us: int = 1_000_000
    max_sacks: int = 256
    piggyback_acks: bool = False
    tick_us: int | None = None
    window: int = 1024
    max_waiting: int = 1024
    frame_bytes: int = 4 * 1024 * 1024
    reassembly_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if min(self.ack_delay_us, self.rto_us, self.rto_floor_us, self.max_sacks,
               self.window, self.max_waiting,
               1 if self.tick_us is None else self.tick_us) <= 0:
            raise ConfigError(f"channel knobs must be positive: {self}")
        if not self.rto_floor_us <= self.rto_us <= self.max_rto_us:
            raise ConfigError(
                f"need min_rto_us <= rto_us <= max_rto_us, got {self.rto_floor_us}, "
                f"{self.rto_us}, {self.max_rto_us}"
            )
        if self.max_sacks > 1024:
            raise ConfigError("max_sacks above 1024 would not fit an ack's header")
        if not MIN_FRAME_BYTES <= self.frame_bytes <= self.reassembly_bytes:
            raise ConfigError(
                f"need {MIN_FRAME_BYTES} <= frame_bytes <= reassembly_bytes, got "
                f"{self.frame_bytes}, {self.reassembly_bytes}")

    @property
    def rto_floor_us(self) -> int:
        """The smallest timeout the estimate may reach: min_rto_us, or rto_us if unset."""
        return self.rto_us if self.min_rto_us is None else self.min_rto_us
