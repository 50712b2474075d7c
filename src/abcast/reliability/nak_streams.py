"""The NAK channel's stream records (abcast.reliability.nak says how they move): what a
node keeps of one stream it sends, and of one stream it receives."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from abcast.codec import Packet
from abcast.reliability.nak_wire import NData


@dataclass(slots=True)
class OutStream:
    """One outbound stream: what is unstable (kept for retransmission) and what waits."""

    last: int = 0  # the highest seq sent
    buf: dict[int, tuple[NData, Packet]] = field(default_factory=dict)
    buf_bytes: int = 0
    stable: int = 0  # every seq up to it is freed
    waiting: deque[tuple[Packet, bool]] = field(default_factory=deque)


#: what `InStream.held` keeps for a seq above `next`: True handed up, False lost (cancelled, or a
#: fragment whose packet lost another fragment), or a fragment waiting for the rest of its packet
Held = tuple[NData, Packet] | bool


@dataclass(slots=True)
class InStream:
    """One inbound stream: the next seq not yet settled (below it every seq was handed up
    or lost), what is settled or waiting above it, the sender's highest seq as far as
    known, and the fragments each fragmented packet has here (by its first seq)."""

    next: int = 0  # 0: not started (a joiner waits for the member's digest: `early`)
    held: dict[int, Held] = field(default_factory=dict)
    known: int = 0
    runs: dict[int, int] = field(default_factory=dict)
    early: dict[int, tuple[NData, Packet]] = field(default_factory=dict)

    def missing(self, limit: int) -> list[int]:
        top = max(self.known, max(self.held, default=0))
        out: list[int] = []
        for seq in range(self.next, top + 1):
            if seq not in self.held:
                out.append(seq)
                if len(out) >= limit:
                    break
        return out
