"""The NAK channel across views, driven by hand: a joiner that heard a member's multicast
before its admission (udp://: the whole IP group hears it) starts that member's stream
where the member's digest says (`start_m`), not at 1 — it NAKs none of the member's
history; a stream heard before the first view of a founding member starts at 1."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Effect, Multicast, Send, Up
from abcast.events import MulticastRequested, Received, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.reliability.nak import NakChannel, NakConfig

V1 = View(1, ("a", "b", "c"))


def _multicasts(effects: list[Effect]) -> list[Multicast]:
    return [e for e in effects if isinstance(e, Multicast)]


def _payloads(effects: list[Effect]) -> list[bytes]:
    return [e.packet.payload for e in effects if isinstance(e, Up)]


def test_a_joiner_that_heard_multicast_before_its_view_starts_at_the_digests_start() -> None:
    a = NakChannel("a", open_group=True)
    a.handle(ViewInstalled(V1), 0)
    for _ in range(1000):  # a long-running group: a's stream is at 1000
        a.handle(MulticastRequested(("b", "c"), Packet((), b"old")), 0)
    d = NakChannel("d", NakConfig(frag_bytes=1_400), open_group=True)
    d.handle(ViewInstalled(View(1, ("d",))), 0)  # a joiner's own view
    (m,) = _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"pre")), 10))
    ups = d.handle(Received("a", m.header, m.inner), 11)  # heard, not addressed to d
    v5 = View(5, ("a", "b", "c", "d"))
    a.handle(ViewInstalled(v5), 20)
    ups += d.handle(ViewInstalled(v5), 20)
    (m,) = _multicasts(a.handle(MulticastRequested(("b", "c", "d"), Packet((), b"new")), 30))
    assert m.header.seq == 1002
    ups += d.handle(Received("a", m.header, m.inner), 31)
    (digest,) = _multicasts(a.handle(TimerFired("stable"), 20_000))
    ups += d.handle(Received("a", digest.header, digest.inner), 20_001)
    assert _payloads(ups) == [b"new"]
    assert not [e for e in d.handle(TimerFired("nak"), 22_000) if isinstance(e, Send)]
    assert d.inspect().clock["next"] == {"a/m": 1003}


def test_a_founders_stream_heard_before_its_first_view_starts_at_one() -> None:
    a, b = NakChannel("a", open_group=True), NakChannel("b", open_group=True)
    a.handle(ViewInstalled(V1), 0)
    (m1,) = _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"m1")), 0))
    (m2,) = _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"m2")), 0))
    b.handle(ViewInstalled(View(1, ("b",))), 0)
    ups = b.handle(Received("a", m2.header, m2.inner), 5)  # provisional: kept
    assert not _payloads(ups)
    ups = b.handle(ViewInstalled(V1), 10)
    ups += b.handle(Received("a", m1.header, m1.inner), 11)
    assert _payloads(ups) == [b"m2", b"m1"]
    assert b.inspect().clock["next"] == {"a/m": 3}
