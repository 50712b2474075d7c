"""Whom a udp:// transport hears from: one source per sending node, the rule that a
sender's incarnations and sessions only move forward, and the bound on how many sources
are kept.

    verdict of a datagram's (incarnation, session) against its sender's source
    no source, or a later incarnation, or the same one and a later session -> NEWER
    the source's incarnation and session                                  -> CURRENT
    an earlier incarnation, or the same one and an earlier session        -> STALE

Rules:
- Incarnations are ordered by start (`next_incarnation`): a restarted node's is larger,
  so NEWER starts a fresh source (and link); STALE is a replay or a late datagram of a
  restarted sender's old process: counted and dropped, nothing else changes.
- At most `max_sources` sources are live. Before a new sender's source is added, those
  silent (no datagram accepted) for `source_idle_s` are forgotten, and while the table is
  still full the least recently heard one; a peer removed from the transport is
  forgotten at once. A forgotten source's link is retired and its reassemblies dropped;
  what judges its datagrams (incarnation, session, the last seq handed over per path)
  stays behind as a tombstone, up to 4 × `max_sources` of them (the oldest go first), so
  a replay after forgetting is still stale and a sender heard again resumes where it was.
"""

from __future__ import annotations

import enum
import heapq
import secrets
import time
from typing import Final

from abcast.ids import NodeId
from abcast.transport.base import Link

#: random low bits of an incarnation, below its start time (ms since the epoch)
INCARNATION_RANDOM_BITS: Final = 17
_issued = [0]  # the last incarnation this process issued


def next_incarnation() -> int:
    """A transport's incarnation, larger than any earlier start's: the wall-clock start
    in ms above 17 random bits (below 2**61 until the year 2527), and above the last one
    this process issued. The price of ordering by the clock: a node restarted with its
    clock set back before its previous start is STALE where the old one is remembered."""
    now_ms = time.time_ns() // 1_000_000
    value = max(now_ms << INCARNATION_RANDOM_BITS | secrets.randbits(INCARNATION_RANDOM_BITS),
                _issued[0] + 1)
    _issued[0] = value
    return value


class Assembly:
    """One frame being put back together from its fragments."""

    __slots__ = ("got", "parts", "size", "started")

    def __init__(self, frags: int, size: int, started: float) -> None:
        self.parts: list[bytes | None] = [None] * frags
        self.got = 0
        self.size = size
        self.started = started


class Source:
    """What this node knows of one sending transport (node, incarnation, session)."""

    __slots__ = ("addr", "assemblies", "dropped", "heard", "incarnation", "last", "link",
                 "reset_at", "session")

    def __init__(self, incarnation: int, session: int, link: Link, addr: tuple[str, int],
                 heard: float) -> None:
        self.incarnation = incarnation
        self.session = session
        self.link = link
        self.addr = addr
        self.last = [0, 0]  # the last seq handed over, per path
        self.assemblies: dict[tuple[int, int], Assembly] = {}
        self.dropped = False
        self.reset_at = 0.0
        self.heard = heard  # loop time of the last datagram accepted from it


class Verdict(enum.Enum):
    NEWER = "newer"
    CURRENT = "current"
    STALE = "stale"


def judge(source: Source | None, incarnation: int, session: int) -> Verdict:
    """The table at the top of this module."""
    if source is None or incarnation > source.incarnation or (
            incarnation == source.incarnation and session > source.session):
        return Verdict.NEWER
    if incarnation == source.incarnation and session == source.session:
        return Verdict.CURRENT
    return Verdict.STALE


class SourceTable:
    """The live sources and the tombstones of forgotten ones (see the module rules)."""

    __slots__ = ("_pruned_at", "forgotten", "idle_s", "live", "max_sources")

    def __init__(self, max_sources: int, idle_s: float) -> None:
        self.max_sources = max_sources
        self.idle_s = idle_s
        self.live: dict[NodeId, Source] = {}
        self.forgotten: dict[NodeId, Source] = {}
        self._pruned_at = float("-inf")

    def known(self, sender: NodeId) -> tuple[Source | None, bool]:
        """(its source, whether that is a tombstone) — (None, False) if never heard."""
        source = self.live.get(sender)
        if source is not None:
            return source, False
        source = self.forgotten.get(sender)
        return source, source is not None

    def to_forget(self, now: float) -> list[tuple[NodeId, str]]:
        """Before a new sender is added: the senders to forget, and why (at most once a
        second a sweep for the silent; the least recently heard while the table is full)."""
        live = self.live
        out: list[tuple[NodeId, str]] = []
        if now - self._pruned_at >= 1.0 or len(live) >= self.max_sources:
            self._pruned_at = now
            limit = now - self.idle_s
            out = [(sender, "silent") for sender, s in live.items() if s.heard < limit]
        room = len(live) - len(out)
        if room >= self.max_sources:
            gone = {sender for sender, _ in out}
            oldest = heapq.nsmallest(room - self.max_sources + 1, (
                (s.heard, sender) for sender, s in live.items() if sender not in gone))
            out += [(sender, "table full") for _, sender in oldest]
        return out

    def forget(self, sender: NodeId) -> Source | None:
        """Move a live source to the tombstones; the caller releases its link and frames."""
        source = self.live.pop(sender, None)
        if source is None:
            return None
        self.forgotten.pop(sender, None)
        self.forgotten[sender] = source
        if len(self.forgotten) > 4 * self.max_sources:
            del self.forgotten[next(iter(self.forgotten))]
        return source

    def add(self, sender: NodeId, source: Source) -> None:
        self.forgotten.pop(sender, None)
        self.live[sender] = source

    def clear(self) -> None:
        self.live.clear()
        self.forgotten.clear()
