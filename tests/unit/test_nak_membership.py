"""The NAK channel across views, driven by hand: a joiner that heard a member's multicast
before its admission (udp://: the whole IP group hears it) starts that member's stream
where the member's digest says (`start_m`), not at 1 — it NAKs none of the member's
history; a stream heard before the first view of a founding member starts at 1. A sender a
view removes is NAKed no more, and its streams are forgotten after linger_us; one that a
view holds again is NAKed again. A member the detector suspects is neither NAKed nor a
reason for a digest until it speaks again (`Restored`), and what it lacks stays buffered."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Effect, Multicast, Send, SetTimer, Up
from abcast.events import (
    MulticastRequested,
    Received,
    Restored,
    SendRequested,
    Suspected,
    TimerFired,
    ViewInstalled,
)
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


def _naks_to(effects: list[Effect], peer: str) -> int:
    return sum(1 for e in effects if isinstance(e, Send) and e.to == peer)


def test_a_departed_senders_gaps_are_not_naked_and_its_streams_are_forgotten() -> None:
    cfg = NakConfig(linger_us=1_000_000)
    a, b = NakChannel("a", cfg, open_group=True), NakChannel("b", cfg, open_group=True)
    for layer in (a, b):
        layer.handle(ViewInstalled(V1), 0)
    sent = [m for _ in range(4)
            for m in _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"x")), 0))]
    for m in sent[2:]:  # b misses 1 and 2, hands up 3 and 4
        b.handle(Received("a", m.header, m.inner), 10)
    assert _naks_to(b.handle(TimerFired("nak"), 3_000), "a") == 1
    effects = b.handle(ViewInstalled(View(2, ("b", "c"))), 5_000)  # a crashed
    assert [(e.key, e.at) for e in effects if isinstance(e, SetTimer)] == [("linger", 1_005_000)]
    naks = sum(_naks_to(b.handle(TimerFired("nak"), t), "a")
               for t in range(25_000, 1_000_000, 20_000))
    assert naks == 0
    assert b.handle(TimerFired("linger"), 1_005_000) == []
    assert b.inspect().clock["next"] == {} and b.inspect().counters["held_above_gaps"] == 0


def test_a_member_a_view_holds_again_is_naked_again() -> None:
    a, b = NakChannel("a", open_group=True), NakChannel("b", open_group=True)
    for layer in (a, b):
        layer.handle(ViewInstalled(V1), 0)
    sent = [m for _ in range(2)
            for m in _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"x")), 0))]
    b.handle(Received("a", sent[1].header, sent[1].inner), 10)
    b.handle(ViewInstalled(View(2, ("b", "c"))), 100)
    assert _naks_to(b.handle(TimerFired("nak"), 3_000), "a") == 0
    b.handle(ViewInstalled(View(3, ("a", "b", "c"))), 4_000)
    assert _naks_to(b.handle(TimerFired("nak"), 6_000), "a") == 1
    assert b.handle(TimerFired("linger"), 20_000_000) == []
    assert b.inspect().clock["next"] == {"a/m": 1}


def test_a_forgotten_joiners_next_stack_is_heard_from_its_first_packet() -> None:
    """`Forgotten` (a joiner withdrew: membership's `Forget`) drops its streams at once:
    the retry's stack numbers from 1 again and is not taken for duplicates."""
    from abcast.codec import Packet
    from abcast.effects import Up
    from abcast.events import Forgotten, Received, ViewInstalled
    from abcast.ids import View
    from abcast.reliability.nak import UNICAST, NakChannel, NData

    channel = NakChannel("n1", open_group=True)
    channel.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    for seq in (1, 2, 3):  # the first stack's MJoin, MJoin again, MWithdraw
        channel.handle(Received("n9", NData(UNICAST, seq), Packet((), b"A%d" % seq)), seq)
    channel.handle(Forgotten("n9"), 20)
    effects = channel.handle(Received("n9", NData(UNICAST, 1), Packet((), b"B1")), 30)
    assert [e.packet.payload for e in effects if isinstance(e, Up)] == [b"B1"]


def test_a_guests_unicast_is_acknowledged_and_its_lost_tail_naked() -> None:
    """A joiner (its view holds only itself) digests the member it sent to; the member
    NAKs the lost tail and answers what arrived, which frees it: `in_flight` 0."""
    from abcast.reliability.nak import NDigest, NNak

    member = NakChannel("a", open_group=True)
    member.handle(ViewInstalled(View(1, ("a",))), 0)
    joiner = NakChannel("j", open_group=True)
    joiner.handle(ViewInstalled(View(0, ("j",))), 0)
    (ask,) = [e for e in joiner.handle(SendRequested("a", Packet((), b"ask"), False), 1)
              if isinstance(e, Send)]
    (ack,) = [e for e in member.handle(Received("j", ask.header, ask.inner), 2)
              if isinstance(e, Send)]
    assert isinstance(ack.header, NDigest) and ack.to == "j"
    joiner.handle(Received("a", ack.header, ack.inner), 3)
    assert joiner.in_flight() == 0
    joiner.handle(SendRequested("a", Packet((), b"withdraw"), False), 4)  # lost
    assert joiner.in_flight() == 1
    (digest,) = [e for e in joiner.handle(TimerFired("stable"), 30_000)
                 if isinstance(e, Send)]
    assert member.handle(Received("j", digest.header, digest.inner), 30_001)
    (nak,) = [e for e in member.handle(TimerFired("nak"), 40_000) if isinstance(e, Send)]
    assert isinstance(nak.header, NNak) and nak.header.seqs == [2]
    (resent,) = [e for e in joiner.handle(Received("a", nak.header, nak.inner), 40_001)
                 if isinstance(e, Send)]
    out = member.handle(Received("j", resent.header, resent.inner), 40_002)
    assert _payloads(out) == [b"withdraw"]
    (ack,) = [e for e in out if isinstance(e, Send)]
    joiner.handle(Received("a", ack.header, ack.inner), 40_003)
    assert joiner.in_flight() == 0


def test_a_suspected_member_is_not_naked_until_it_speaks_again() -> None:
    """A crashed member was NAKed every nak_retry_us until the view without it."""
    a, b = NakChannel("a"), NakChannel("b")
    for layer in (a, b):
        layer.handle(ViewInstalled(V1), 0)
    sent = [m for _ in range(3)
            for m in _multicasts(a.handle(MulticastRequested(("b", "c"), Packet((), b"x")), 0))]
    for m in (sent[0], sent[2]):  # b misses 2
        b.handle(Received("a", m.header, m.inner), 10)
    assert _naks_to(b.handle(TimerFired("nak"), 3_000), "a") == 1
    assert b.handle(Suspected("a"), 4_000) == []
    assert b.inspect().clock["suspects"] == ["a"]
    rounds = range(23_000, 500_000, 20_000)
    assert sum(_naks_to(b.handle(TimerFired("nak"), t), "a") for t in rounds) == 0
    armed = b.handle(Restored("a"), 500_000)  # a slow member: repaired once it speaks
    assert [e.key for e in armed if isinstance(e, SetTimer)] == ["nak", "stable"]
    assert b.inspect().clock["suspects"] == []
    (nak,) = [e for e in b.handle(TimerFired("nak"), 502_000) if isinstance(e, Send)]
    assert nak.to == "a" and nak.header.seqs == [2]


def test_a_suspected_member_is_no_reason_for_a_digest_but_its_packets_stay() -> None:
    """Only the suspected a has not acked b's multicast: b's digests stop (they went out
    every stable_us until the view change), the packet stays buffered for a, and once a
    speaks again a digest tells it what b sent."""
    b, c = NakChannel("b"), NakChannel("c")
    for layer in (b, c):
        layer.handle(ViewInstalled(V1), 0)
    (m,) = _multicasts(b.handle(MulticastRequested(("a", "c"), Packet((), b"x")), 0))
    c.handle(Received("b", m.header, m.inner), 5)
    (ack,) = _multicasts(c.handle(TimerFired("stable"), 20_000))
    b.handle(Received("c", ack.header, ack.inner), 20_005)
    assert len(_multicasts(b.handle(TimerFired("stable"), 20_000))) == 1  # a has not acked
    b.handle(Suspected("a"), 30_000)
    assert _multicasts(b.handle(TimerFired("stable"), 40_000)) == []
    assert b.in_flight() == 1  # kept: a slow member may still NAK it
    b.handle(Restored("a"), 50_000)
    (digest,) = _multicasts(b.handle(TimerFired("stable"), 50_000))
    assert digest.header.sent_m == 1
