"""The simulated network: per-link latency, loss, duplication, holds and partitions.

Rules: decides the fate of each packet (lost, or arriving at which times) from the one
seeded RNG it is given; it never schedules anything itself. Reordering is what random
per-packet latency does; `hold`/`release` keep a link's packets back until released (the
vocabulary of turmoil); a partition loses every packet across it, in one or both
directions, both when the packet is sent and when it would arrive.

A partition cuts exactly the links between its two sides: a node on neither side keeps
its links to both (a partial partition — it hears both and can relay between them, as a
real network's bridge host would). `partition_rest` cuts a side from *every* other node,
those that start later (joiners) included.

A frame bound (`frame_bytes`) makes the network refuse, at the sender, a frame longer
than it (counted in `oversize`), as a real transport refuses one above max_frame_bytes.

IP multicast (`ip_multicast=True`): a packet to several nodes is one send on the wire
(the cluster counts it once), and each receiver's copy still meets its own fate — loss,
latency, duplication and cuts are per receiver, as on a real multicast tree.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from abcast.errors import LocalProtocolError
from abcast.ids import NodeId


@dataclass(frozen=True, slots=True)
class LinkModel:
    """One-way latency, uniform in [lo_us, hi_us]."""

    lo_us: int
    hi_us: int

    def __post_init__(self) -> None:
        if not 0 <= self.lo_us <= self.hi_us:
            raise LocalProtocolError(f"bad latency range {self.lo_us}-{self.hi_us} us")


DEFAULT_LINK = LinkModel(200, 1_000)

#: a partition side meaning every node not on the other side, joiners included
REST: Final = "*"


def rest_split(
    left: Iterable[NodeId], right: Iterable[NodeId], one_way: bool
) -> tuple[tuple[NodeId, ...], str] | None:
    """For a side against `*`: the named side and the direction cut from it ("both",
    "out": its packets are lost, "in": packets to it are lost); None for two named sides."""
    lnodes, rnodes = tuple(left), tuple(right)
    if rnodes == (REST,):
        return lnodes, "out" if one_way else "both"
    if lnodes == (REST,):
        return rnodes, "in" if one_way else "both"
    return None


class Network:
    def __init__(
        self, rng: random.Random, default: LinkModel = DEFAULT_LINK,
        drop: float = 0.0, dup: float = 0.0, ip_multicast: bool = False,
        frame_bytes: int | None = None,
    ) -> None:
        self.rng = rng
        #: frames longer than this are refused at the sender, as a transport refuses one
        #: above its `max_frame_bytes` (None: no bound); `oversize` counts them
        self.frame_bytes = frame_bytes
        self.oversize = 0
        #: a packet to several nodes is one send (see the module rules)
        self.ip_multicast = ip_multicast
        self.default = default
        self.drop = drop
        self.dup = dup
        self._links: dict[tuple[NodeId, NodeId], LinkModel] = {}
        self._cut: dict[tuple[NodeId, NodeId], int] = {}  # directed link -> active cuts
        # (side, direction) -> active cuts between the side and everyone else; direction
        # "both", "out" (the side's packets are lost) or "in" (packets to it are lost)
        self._splits: dict[tuple[frozenset[NodeId], str], int] = {}
        self._held: dict[tuple[NodeId, NodeId], list[bytes]] = {}
        self.sent = 0
        self.lost = 0
        self.duplicated = 0

    def set_link(self, src: NodeId, dst: NodeId, model: LinkModel) -> None:
        self._links[(src, dst)] = model

    # -- partitions ------------------------------------------------------------------------
    def partition(
        self, left: Iterable[NodeId], right: Iterable[NodeId], one_way: bool = False
    ) -> None:
        """Cut the links between `left` and `right` (only left→right when `one_way`);
        a side `(REST,)` is every node not on the other side."""
        if (split := rest_split(left, right, one_way)) is not None:
            self.partition_rest(*split)
            return
        for a, b in self._pairs(left, right, one_way):
            self._cut[(a, b)] = self._cut.get((a, b), 0) + 1

    def heal(self, left: Iterable[NodeId], right: Iterable[NodeId], one_way: bool = False) -> None:
        if (split := rest_split(left, right, one_way)) is not None:
            self.heal_rest(*split)
            return
        for a, b in self._pairs(left, right, one_way):
            count = self._cut.get((a, b), 0) - 1
            if count > 0:
                self._cut[(a, b)] = count
            else:
                self._cut.pop((a, b), None)

    def partition_rest(self, side: Iterable[NodeId], direction: str = "both") -> None:
        """Cut `side` from every node not in it, now and later started ones."""
        key = self._split_key(side, direction)
        self._splits[key] = self._splits.get(key, 0) + 1

    def heal_rest(self, side: Iterable[NodeId], direction: str = "both") -> None:
        key = self._split_key(side, direction)
        count = self._splits.get(key, 0) - 1
        if count > 0:
            self._splits[key] = count
        else:
            self._splits.pop(key, None)

    @staticmethod
    def _split_key(side: Iterable[NodeId], direction: str) -> tuple[frozenset[NodeId], str]:
        if direction not in ("both", "out", "in"):
            raise LocalProtocolError(f"bad partition direction {direction!r}")
        return frozenset(side), direction

    @staticmethod
    def _pairs(
        left: Iterable[NodeId], right: Iterable[NodeId], one_way: bool
    ) -> list[tuple[NodeId, NodeId]]:
        lnodes, rnodes = list(left), list(right)
        pairs = [(a, b) for a in lnodes for b in rnodes]
        if not one_way:
            pairs += [(b, a) for a in lnodes for b in rnodes]
        return pairs

    def blocked(self, src: NodeId, dst: NodeId) -> bool:
        if (src, dst) in self._cut:
            return True
        for side, direction in self._splits:
            inside, outside = src in side, dst in side
            if inside == outside:
                continue
            if direction == "both" or (direction == "out") == inside:
                return True
        return False

    # -- holds -----------------------------------------------------------------------------
    def hold(self, src: NodeId, dst: NodeId) -> None:
        self._held.setdefault((src, dst), [])

    def held(self, src: NodeId, dst: NodeId) -> bool:
        return (src, dst) in self._held

    def keep(self, src: NodeId, dst: NodeId, data: bytes) -> None:
        self._held[(src, dst)].append(data)

    def release(self, src: NodeId, dst: NodeId) -> list[bytes]:
        """Stop holding the link; returns its packets in the order they were sent."""
        return self._held.pop((src, dst), [])

    # -- fate of one packet ----------------------------------------------------------------
    def arrivals(self, src: NodeId, dst: NodeId, now: int) -> list[int]:
        """Times at which one packet sent now arrives: [] lost, two entries duplicated."""
        self.sent += 1
        if self.blocked(src, dst) or (self.drop and self.rng.random() < self.drop):
            self.lost += 1
            return []
        model = self._links.get((src, dst), self.default)
        times = [now + self.rng.randint(model.lo_us, model.hi_us)]
        if self.dup and self.rng.random() < self.dup:
            self.duplicated += 1
            times.append(now + self.rng.randint(model.lo_us, model.hi_us))
        return times
