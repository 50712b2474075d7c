"""An open group's guests that go silent are forgotten (docs/orderings.md, "Packets
larger than a frame" and the open channel's rules): a guest neither heard from nor sent
to for `linger_us` is freed by the same `_forget` as a lingering node — its links, timers
and partial reassemblies, its place among MAX_GUESTS — while traffic keeps a guest, a
view keeps a member, and a forgotten guest that speaks again resumes its link numbers.
Each check runs against a planted broken variant too, which it must catch."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable

import pytest

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import ConfigError, RemoteProtocolError
from abcast.events import Event, Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import NodeId, View
from abcast.ordering import _open_channel
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel

ABOVE = [SData | SOrder]
CONFIG = ChannelConfig(frame_bytes=2_048, reassembly_bytes=8_192)
LINGER = 10_000
LINGER_FIRED = TimerFired(("linger", "x"))

Make = Callable[[], OpenChannel]


# -- planted broken variants -------------------------------------------------------------
class ForgetsTalkingGuests(OpenChannel):
    """Planted bug: a guest is forgotten when its first timer fires, talking or not."""

    def _expire(self, peer: NodeId, now: int) -> list[Effect]:
        return self._forget(peer, now)


class KeepsPartialPackets(OpenChannel):
    """Planted bug: forgetting a guest frees its links but keeps its half-reassembled
    packets, and with them its share of the guests' budget."""

    def _forget(self, peer: NodeId, now: int) -> list[Effect]:
        kept = dict(self._reassembly._senders)
        effects = super()._forget(peer, now)
        self._reassembly._senders.update(kept)
        return effects


class ForgetsLinkNumbers(OpenChannel):
    """Planted bug: a forgotten guest that speaks again starts on fresh links."""

    def _resume(self, peer: NodeId, marks: object) -> None:
        return None


class NeverForgetsGuests(OpenChannel):
    """Planted bug: the channel as it was — a guest stays until a view holds it."""

    def _expire(self, peer: NodeId, now: int) -> list[Effect]:
        return [] if peer in self._guests else super()._expire(peer, now)


# -- helpers -----------------------------------------------------------------------------
def _open(kind: type[OpenChannel] = OpenChannel) -> OpenChannel:
    a = kind("a", CONFIG, linger_us=LINGER)
    a.decode_above(ABOVE)
    a.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    return a


def _peer(node: str) -> ReliableChannel:
    """A guest's side: a plain channel whose view holds it and `a`."""
    peer = ReliableChannel(node, CONFIG)
    peer.decode_above(ABOVE)
    peer.handle(ViewInstalled(View(1, (node, "a"))), 0)
    return peer


def _sends(effects: list[Effect]) -> list[Send]:
    return [e for e in effects if isinstance(e, Send)]


def _ups(effects: list[Effect]) -> list[Up]:
    return [e for e in effects if isinstance(e, Up)]


def _from(sender: str, to: OpenChannel, sends: list[Send], now: int) -> list[Effect]:
    effects: list[Effect] = []
    for s in sends:
        effects += to.handle(Received(sender, s.header, s.inner), now)
    return effects


def _big(size: int, tag: int = 1) -> Packet:
    bodies = [bytes([(i + tag) % 251]) * 1_000 for i in range(size // 1_000)]
    return Packet((SOrder(tag, [("a", i + 1) for i in range(len(bodies))], bodies),), b"p")


def _linger_timer(effects: list[Effect], peer: str = "x") -> int | None:
    at = [e.at for e in effects if isinstance(e, SetTimer) and e.key == ("linger", peer)]
    return at[-1] if at else None


# -- the checks (each takes the channel's class, so the planted ones can be run) -------
def check_a_silent_guest_is_forgotten(kind: type[OpenChannel]) -> None:
    a = _open(kind)
    admitted = a.handle(Received("x", RData(1), Packet((), b"hello")), 0)
    assert _linger_timer(admitted) == LINGER and len(_ups(admitted)) == 1
    a.handle(SendRequested("x", Packet((), b"welcome?")), 0)
    assert a.in_flight() == 1  # unacked: retransmitted to a guest that never answers
    assert a.handle(TimerFired(("rto", "x")), 60_000)
    effects = a.handle(LINGER_FIRED, LINGER + 60_000)
    assert "x" not in a.guests() and a.in_flight() == 0 and a.held_above() == 0
    assert CancelTimer(("rto", "x")) in effects and CancelTimer(("ack", "x")) in effects
    assert a.handle(TimerFired(("rto", "x")), LINGER + 70_000) == []
    assert a.inspect().counters["guests_forgotten"] == 1


def check_traffic_keeps_a_guest(kind: type[OpenChannel]) -> None:
    a = _open(kind)
    a.handle(Received("x", RData(1), Packet((), b"hello")), 0)
    a.handle(SendRequested("x", Packet((), b"reply")), 6_000)  # the layer above: heard
    moved = a.handle(LINGER_FIRED, LINGER)
    assert "x" in a.guests() and _linger_timer(moved) == 6_000 + LINGER
    a.handle(Received("x", RAck(1), Packet()), 12_000)  # an ack alone: heard too
    moved = a.handle(LINGER_FIRED, 6_000 + LINGER)
    assert "x" in a.guests() and _linger_timer(moved) == 12_000 + LINGER
    a.handle(LINGER_FIRED, 12_000 + LINGER)
    assert "x" not in a.guests()


def check_a_guest_that_joins_stays(kind: type[OpenChannel]) -> None:
    a = _open(kind)
    a.handle(Received("x", RData(1), Packet((), b"join")), 0)
    a.handle(ViewInstalled(View(2, ("a", "b", "x"))), 5)
    assert a.handle(LINGER_FIRED, LINGER) == []
    # still a member's link: the next packet is new, the first a duplicate
    assert len(_ups(a.handle(Received("x", RData(2), Packet((), b"m")), LINGER + 1))) == 1
    assert _ups(a.handle(Received("x", RData(1), Packet((), b"join")), LINGER + 2)) == []


def check_a_dead_guests_reassembly_is_freed(kind: type[OpenChannel]) -> None:
    """x stops mid-packet: its reservation keeps y's packet out until x is forgotten;
    then y's packet, the whole guests' budget, comes through."""
    a = _open(kind)
    x, y = _peer("x"), _peer("y")
    x_frags = _sends(x.handle(SendRequested("a", _big(5_000, 1)), 0))
    _from("x", a, x_frags[:1], 1)  # x crashes after its first fragment
    held = a._reassembly.guests_held()
    assert held > 0
    y_packet = _big(8_000, 2)  # 8 fragments of 1,024: all of guest_bytes (8,192)
    y_frags = _sends(y.handle(SendRequested("a", y_packet), 0))
    assert len(y_frags) * 1_024 == a._reassembly.guest_bytes
    before = a._reassembly.refused
    _from("y", a, y_frags[1:2], 2)  # not y's lowest: bounded, refused for room
    assert a._reassembly.refused == before + 1
    a.handle(LINGER_FIRED, LINGER + 1)  # x silent since 1; y keeps talking
    assert "x" not in a.guests() and "y" in a.guests()
    assert a._reassembly.guests_held() == 0
    got = _ups(_from("y", a, y_frags[1:] + y_frags[:1], LINGER + 2))
    assert [u.packet for u in got] == [y_packet]


def check_max_guests_no_longer_locks_out(kind: type[OpenChannel]) -> None:
    a = _open(kind)
    for i in range(_open_channel.MAX_GUESTS):
        a.handle(Received(f"g{i}", RData(1), Packet((), b"hi")), 0)
    assert len(a.guests()) == _open_channel.MAX_GUESTS
    assert a.handle(Received("late", RData(1), Packet((), b"hi")), 1) == []  # no room
    for i in range(_open_channel.MAX_GUESTS):
        a.handle(TimerFired(("linger", f"g{i}")), LINGER)
    assert not a.guests()
    assert len(_ups(a.handle(Received("late", RData(1), Packet((), b"hi")), LINGER + 1))) == 1


def check_a_forgotten_guest_resumes_its_numbers(kind: type[OpenChannel]) -> None:
    """a forgets x while x (partitioned, or slower to time out) keeps its link: x's next
    packet continues the link, a late retransmission is still a duplicate, and what a
    sends x continues x's numbers."""
    a = _open(kind)
    x = _peer("x")
    for i in range(3):
        _from("x", a, _sends(x.handle(SendRequested("a", Packet((), bytes([i]))), 0)), 1)
    to_x = _sends(a.handle(SendRequested("x", Packet((), b"r")), 1))
    for s in to_x:
        x.handle(Received("a", s.header, s.inner), 2)
    a.handle(Received("x", RAck(1), Packet()), 3)
    a.handle(LINGER_FIRED, 3 + LINGER)
    assert "x" not in a.guests()
    late = a.handle(Received("x", RData(3), Packet((), b"\x02")), 4 + LINGER)
    assert _ups(late) == [] and "x" in a.guests()  # re-admitted; seen before: a duplicate
    nxt = _sends(x.handle(SendRequested("a", Packet((), b"n")), 5 + LINGER))
    assert [u.packet.payload for u in _ups(_from("x", a, nxt, 6 + LINGER))] == [b"n"]
    assert a.held_above() == 0  # no hole below it
    again = _sends(a.handle(SendRequested("x", Packet((), b"s")), 7 + LINGER))
    got = [e for s in again for e in x.handle(Received("a", s.header, s.inner), 8 + LINGER)]
    assert [u.packet.payload for u in _ups(got)] == [b"s"]


CHECKS = [check_a_silent_guest_is_forgotten, check_traffic_keeps_a_guest,
          check_a_guest_that_joins_stays, check_a_dead_guests_reassembly_is_freed,
          check_max_guests_no_longer_locks_out, check_a_forgotten_guest_resumes_its_numbers]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_open_channel_passes(check: Callable[[type[OpenChannel]], None]) -> None:
    check(OpenChannel)


@pytest.mark.parametrize(("kind", "check"), [
    (ForgetsTalkingGuests, check_traffic_keeps_a_guest),
    (KeepsPartialPackets, check_a_dead_guests_reassembly_is_freed),
    (ForgetsLinkNumbers, check_a_forgotten_guest_resumes_its_numbers),
    (NeverForgetsGuests, check_a_silent_guest_is_forgotten),
    (NeverForgetsGuests, check_max_guests_no_longer_locks_out),
], ids=lambda v: getattr(v, "__name__", ""))
def test_a_planted_broken_variant_is_caught(
    kind: type[OpenChannel], check: Callable[[type[OpenChannel]], None]
) -> None:
    with pytest.raises(AssertionError):
        check(kind)


class GoneForGood(OpenChannel):
    """Planted bug: the channel as it was — a lingering node silent for its linger is
    gone for good, its packets dropped for ever."""

    gone: frozenset[NodeId] = frozenset()

    def _forget(self, peer: NodeId, now: int) -> list[Effect]:
        if peer in self._lingering:
            self.gone |= {peer}
        effects = super()._forget(peer, now)
        if peer in self.gone:
            self._resumable.pop(peer, None)
        return effects

    def _admit(self, peers: tuple[NodeId, ...], now: int) -> list[Effect]:
        return super()._admit(tuple(p for p in peers if p not in self.gone), now)


def check_a_forgotten_lingering_node_resumes(kind: type[OpenChannel]) -> None:
    """A removed member silent for its linger is forgotten as a silent guest is: links
    freed, numbers kept; should it speak again (a member cut off by a partition, back
    after the heal) it is a guest on its old numbers — a late copy of an old packet is a
    duplicate, its next packet goes up. It used to be gone for good: its packets dropped
    for ever, so a member cut off longer could never rejoin (chandra-toueg) or merge."""
    a = _open(kind)
    assert _ups(a.handle(Received("b", RData(1), Packet((), b"m1")), 0))
    a.handle(ViewInstalled(View(2, ("a",))), 1)  # b is removed: it lingers
    a.handle(TimerFired(("linger", "b")), 1 + LINGER)
    assert "b" not in a.lingering() and a.removed_forgotten == 1
    assert not _ups(a.handle(Received("b", RData(1), Packet((), b"late")), 2 + LINGER))
    assert [u.packet.payload for u in _ups(
        a.handle(Received("b", RData(2), Packet((), b"m2")), 3 + LINGER))] == [b"m2"]
    assert "b" in a.guests()


def test_a_forgotten_lingering_node_resumes() -> None:
    check_a_forgotten_lingering_node_resumes(OpenChannel)


def test_a_channel_whose_departed_are_gone_for_good_is_caught() -> None:
    with pytest.raises(AssertionError):
        check_a_forgotten_lingering_node_resumes(GoneForGood)


class ForgetsTalkingLingerers(OpenChannel):
    """Planted bug: the channel as it was — a removed member is gone `linger_us` after
    the view that removed it, however recently it spoke."""

    def _expire(self, peer: NodeId, now: int) -> list[Effect]:
        return self._forget(peer, now) if peer in self._lingering else super()._expire(
            peer, now)


class KeptBySends(OpenChannel):
    """Planted bug: what we send a lingering node keeps it, as it keeps a guest (a
    crashed node the merge probes for a minute would be retransmitted to all along)."""

    def _handle_general(self, event: Event, now: int) -> list[Effect]:
        if isinstance(event, SendRequested) and event.to in self._spoke:
            self._spoke[event.to] = now
        return super()._handle_general(event, now)


def check_a_lingering_node_that_speaks_keeps_its_link(kind: type[OpenChannel]) -> None:
    """A node another side removed may still merge with us long after (evs): while it
    speaks, its link is kept whole; once silent for `linger_us` it is gone as before."""
    a = _open(kind)
    a.handle(ViewInstalled(View(2, ("a",))), 1)  # b is removed: it lingers
    assert _ups(a.handle(Received("b", RData(1), Packet((), b"m1")), LINGER // 2))
    moved = a.handle(TimerFired(("linger", "b")), 1 + LINGER)
    assert "b" in a.lingering() and _linger_timer(moved, "b") == LINGER // 2 + LINGER
    assert _ups(a.handle(Received("b", RData(2), Packet((), b"m2")), LINGER + 10))
    a.handle(TimerFired(("linger", "b")), LINGER // 2 + LINGER)
    a.handle(TimerFired(("linger", "b")), 2 * LINGER + 10)  # silent since LINGER + 10
    assert "b" not in a.lingering() and "b" not in a.guests()  # forgotten


def check_what_we_send_a_lingering_node_does_not_keep_it(kind: type[OpenChannel]) -> None:
    a = _open(kind)
    a.handle(ViewInstalled(View(2, ("a",))), 1)
    assert _sends(a.handle(SendRequested("b", Packet((), b"probe"), True), LINGER // 2))
    a.handle(TimerFired(("linger", "b")), 1 + LINGER)
    assert "b" not in a.lingering() and a.in_flight() == 0


@pytest.mark.parametrize("check", [check_a_lingering_node_that_speaks_keeps_its_link,
                                   check_what_we_send_a_lingering_node_does_not_keep_it])
def test_a_lingering_node_is_kept_while_it_speaks(check: Callable[[type[OpenChannel]], None]
                                                  ) -> None:
    check(OpenChannel)


@pytest.mark.parametrize(("check", "planted"), [
    (check_a_lingering_node_that_speaks_keeps_its_link, ForgetsTalkingLingerers),
    (check_what_we_send_a_lingering_node_does_not_keep_it, KeptBySends),
])
def test_planted_lingering_rules_are_caught(check: Callable[[type[OpenChannel]], None],
                                            planted: type[OpenChannel]) -> None:
    with pytest.raises(AssertionError):
        check(planted)


class RemovedLingerIgnored(OpenChannel):
    """Planted bug: the channel as it was — a removed member is gone once silent for the
    guests' `linger_us`, whatever `removed_linger_us` says (an evs side cut off for
    longer than 10 s was never merged with: its probes were dropped)."""

    def __init__(self, node: NodeId, config: ChannelConfig | None = None,
                 linger_us: int = LINGER, removed_linger_us: int | None = None) -> None:
        super().__init__(node, config, linger_us, removed_linger_us)
        self.removed_linger_us = self.linger_us


def check_a_removed_member_lingers_for_the_removed_linger(kind: type[OpenChannel]) -> None:
    """A removed member keeps its link while silent for `removed_linger_us` (the evs
    merge's probing time), a guest only for `linger_us`; then each goes as before."""
    a = kind("a", CONFIG, linger_us=LINGER, removed_linger_us=3 * LINGER)
    a.decode_above(ABOVE)
    a.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    assert _ups(a.handle(Received("b", RData(1), Packet((), b"m1")), 1))
    removed = a.handle(ViewInstalled(View(2, ("a",))), 2)  # b lingers, silent from now
    assert _linger_timer(removed, "b") == 2 + 3 * LINGER
    assert _ups(a.handle(Received("x", RData(1), Packet((), b"g1")), 3))  # x: a guest
    a.handle(TimerFired(("linger", "x")), 3 + LINGER)
    assert "x" not in a.guests()  # the guest went after linger_us
    a.handle(TimerFired(("linger", "b")), 2 + LINGER)  # early: a timer set for linger_us
    assert "b" in a.lingering()
    # silent for 2.5 × linger_us behind a partition, b speaks again: the next number,
    # its link whole (not a duplicate, not refused)
    assert _ups(a.handle(Received("b", RData(2), Packet((), b"m2")), 2 + 5 * LINGER // 2))
    a.handle(TimerFired(("linger", "b")), 2 + 3 * LINGER)
    assert "b" in a.lingering()
    a.handle(TimerFired(("linger", "b")), 3 + 11 * LINGER // 2)  # silent for 3 × linger
    assert "b" not in a.lingering() and "b" not in a.guests()  # forgotten


def test_a_removed_member_lingers_for_the_removed_linger() -> None:
    check_a_removed_member_lingers_for_the_removed_linger(OpenChannel)


def test_a_channel_that_ignores_the_removed_linger_is_caught() -> None:
    with pytest.raises(AssertionError):
        check_a_removed_member_lingers_for_the_removed_linger(RemovedLingerIgnored)


def test_linger_times_must_be_positive() -> None:
    with pytest.raises(ConfigError):
        OpenChannel("a", CONFIG, removed_linger_us=0)
    with pytest.raises(ConfigError):
        OpenChannel("a", CONFIG, linger_us=-1)


# -- a pair of guests over a faulty network, quiet spells between bursts -----------------
PAIR_CONFIG = ChannelConfig(ack_delay_us=500, rto_us=2_000, max_rto_us=16_000)


def run_guest_pair(seed: int, a: OpenChannel, x: OpenChannel, bursts: int = 6,
                   per_burst: int = 20, gap_us: int = 200_000
                   ) -> tuple[dict[str, list[bytes]], dict[str, list[bytes]], list[str]]:
    """a and x, each outside the other's view (each the other's guest), send each other
    bursts of packets over a network that drops, duplicates and reorders, with quiet
    spells of `gap_us` between bursts; timers fire when due. Returns what each side
    sent, what each got, and the errors raised."""
    rng = random.Random(seed)
    nodes = {"a": a, "x": x}
    other = {"a": "x", "x": "a"}
    a.handle(ViewInstalled(View(1, ("a", "m"))), 0)
    x.handle(ViewInstalled(View(1, ("x", "n"))), 0)
    sent: dict[str, list[bytes]] = {"a": [], "x": []}
    got: dict[str, list[bytes]] = {"a": [], "x": []}
    errors: list[str] = []
    agenda: list[tuple[int, int, str, object]] = []
    timers: dict[tuple[str, object], int] = {}
    counter = 0

    def plan(at: int, node: str, what: object) -> int:
        nonlocal counter
        counter += 1
        heapq.heappush(agenda, (at, counter, node, what))
        return counter

    def apply(node: str, effects: list[Effect], now: int) -> None:
        for e in effects:
            if isinstance(e, Send):
                for _ in range(0 if rng.random() < 0.15 else 1 + (rng.random() < 0.1)):
                    plan(now + rng.randrange(1, 3_000), e.to, (node, e))
            elif isinstance(e, Up):
                got[node].append(e.packet.payload)
            elif isinstance(e, SetTimer):
                timers[(node, e.key)] = plan(e.at, node, e.key)
            elif isinstance(e, CancelTimer):
                timers.pop((node, e.key), None)

    for burst in range(bursts):
        for node in nodes:
            for i in range(per_burst):
                at = burst * gap_us + rng.randrange(0, 20_000)
                plan(at, node, f"{node}{burst}.{i}".encode())
    while agenda:
        now, token, node, what = heapq.heappop(agenda)
        try:
            if isinstance(what, bytes):
                sent[node].append(what)
                apply(node, nodes[node].handle(SendRequested(other[node], Packet((), what)),
                                               now), now)
            elif isinstance(what, tuple) and isinstance(what[1], Send):
                sender, send = what
                apply(node, nodes[node].handle(Received(sender, send.header, send.inner),
                                               now), now)
            elif timers.get((node, what)) == token:
                del timers[(node, what)]
                apply(node, nodes[node].handle(TimerFired(what), now), now)
        except RemoteProtocolError as exc:
            errors.append(f"{node} at {now}: {exc}")
    return sent, got, errors


def check_quiet_guests_resume_exactly_once(kind: type[OpenChannel]) -> None:
    """a forgets x in every quiet spell (linger 100 ms < the 200 ms gaps), x never
    forgets a (linger 1 s): each burst still arrives exactly once, both ways."""
    for seed in range(4):
        a = kind("a", PAIR_CONFIG, linger_us=100_000)
        x = OpenChannel("x", PAIR_CONFIG, linger_us=1_000_000)
        sent, got, errors = run_guest_pair(seed, a, x)
        assert errors == [], (seed, errors[:2])
        for node, peer in (("a", "x"), ("x", "a")):
            assert sorted(got[node]) == sorted(sent[peer]), (seed, node)
        # a in every spell; x only once everything is over
        assert a.guests_forgotten == 6 and x.guests_forgotten == 1


def test_quiet_guests_resume_exactly_once() -> None:
    check_quiet_guests_resume_exactly_once(OpenChannel)


def test_quiet_guests_on_fresh_links_lose_packets_and_the_test_says_so() -> None:
    with pytest.raises(AssertionError):
        check_quiet_guests_resume_exactly_once(ForgetsLinkNumbers)
