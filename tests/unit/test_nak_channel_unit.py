"""The NAK channel driven by hand: a packet is handed up the moment it is whole, whatever
the gap below it; a sender asked for a packet it has freed answers NCancel, and the
receiver skips it as a counted gap instead of waiting for ever; a packet two members ask
for is resent once, by multicast; a lost last packet is found through the keep-alive
digest."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Multicast, Send, Up
from abcast.events import MulticastRequested, Received, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.reliability.nak import Mark, NakChannel, NCancel, NData, NDigest, NNak

VIEW = View(1, ("a", "b", "c"))


def test_a_freed_packet_is_cancelled_and_skipped_with_a_counted_gap() -> None:
    a, b = NakChannel("a"), NakChannel("b")
    for layer in (a, b):
        layer.handle(ViewInstalled(VIEW), 0)
    sent = []
    for k in (1, 2, 3):
        effects = a.handle(MulticastRequested(("b", "c"), Packet((), b"m%d" % k)), 0)
        sent += [e for e in effects if isinstance(e, Multicast)]
    assert [m.header.seq for m in sent] == [1, 2, 3]  # one multicast each
    # b hears 2 and 3, not 1: it hands them up at once and asks for 1 once the NAK
    # delay is over
    ups = []
    for m in sent[1:]:
        ups += [e for e in b.handle(Received("a", m.header, m.inner), 10) if isinstance(e, Up)]
    assert [u.packet.payload for u in ups] == [b"m2", b"m3"]
    naks = [e for e in b.handle(TimerFired("nak"), 3_000) if isinstance(e, Send)]
    assert [(s.to, s.header) for s in naks] == [("a", NNak(0, [1]))]
    # meanwhile digests from b and c (b's a lie) made a free everything
    for peer in ("b", "c"):
        a.handle(Received(peer, NDigest(0, 0, [Mark("a", 3, 0, 0, 0, 1)]), Packet()), 3_000)
    assert a.inspect().counters["unstable_bytes"] == 0
    a.handle(Received("b", naks[0].header, Packet()), 3_100)
    answer = a.handle(TimerFired("xmit"), 4_100)
    assert [(s.to, s.header) for s in answer if isinstance(s, Send)] == [("b", NCancel(0, [1]))]
    assert not [e for e in b.handle(Received("a", NCancel(0, [1]), Packet()), 4_200)
                if isinstance(e, Up)]
    assert b.skipped == 1 and a.cancels_sent == 1
    assert b.inspect().clock["next"] == {"a/m": 4}  # the gap is settled
    assert not [e for e in b.handle(TimerFired("nak"), 30_000) if isinstance(e, Send)]


def test_a_lost_packet_asked_by_two_members_is_resent_once_by_multicast() -> None:
    a = NakChannel("a")
    a.handle(ViewInstalled(VIEW), 0)
    (m,) = [e for e in a.handle(MulticastRequested(("b", "c"), Packet((), b"x")), 0)
            if isinstance(e, Multicast)]
    assert isinstance(m.header, NData)
    a.handle(Received("b", NNak(0, [1]), Packet()), 100)
    a.handle(Received("c", NNak(0, [1]), Packet()), 200)
    resent = a.handle(TimerFired("xmit"), 1_100)
    assert [(type(e), e.control) for e in resent] == [(Multicast, True)]
    assert a.retransmissions == 1 and a.multicast_retransmissions == 1


def test_a_lost_last_packet_is_found_by_the_keep_alive_digest() -> None:
    a, b = NakChannel("a"), NakChannel("b")
    for layer in (a, b):
        layer.handle(ViewInstalled(VIEW), 0)
    a.handle(MulticastRequested(("b", "c"), Packet((), b"last")), 0)  # lost on the way to b
    stable = a.handle(TimerFired("stable"), 20_000)  # a still holds it: digest
    (digest,) = [e for e in stable if isinstance(e, Multicast)]
    assert isinstance(digest.header, NDigest) and digest.header.sent_m == 1 and digest.control
    armed = b.handle(Received("a", digest.header, Packet()), 20_100)
    assert any(getattr(e, "key", None) == "nak" for e in armed)
    naks = b.handle(TimerFired("nak"), 22_100)
    assert [(s.to, s.header) for s in naks if isinstance(s, Send)] == [("a", NNak(0, [1]))]


def test_in_a_stack_a_large_payload_is_split_as_one_inner_frame_without_headers() -> None:
    """What the rules block says: with `decode_above` (every stack) a packet above
    frag_bytes is encoded whole and the inner frame split; no fragment carries headers."""
    from abcast.ordering.sequencer_wire import SData
    from abcast.reliability.nak import NakConfig

    config = NakConfig(frag_bytes=1_000)
    a, b = NakChannel("a", config), NakChannel("b", config)
    for layer in (a, b):
        layer.decode_above([SData])
        layer.handle(ViewInstalled(VIEW), 0)
    packet = Packet((SData(7),), bytes(range(256)) * 20)
    sent = [e for e in a.handle(MulticastRequested(("b", "c"), packet), 0)
            if isinstance(e, Multicast)]
    assert len(sent) > 5 and all(m.inner.headers == () for m in sent)
    assert a.largest_split > len(packet.payload)  # the inner frame: headers and payload
    ups = [u for m in sent for u in b.handle(Received("a", m.header, m.inner), 1)
           if isinstance(u, Up)]
    assert [u.packet for u in ups] == [packet]
