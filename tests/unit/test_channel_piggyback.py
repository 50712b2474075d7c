"""Piggybacked acks in the reliable channel, driven by hand: what a packet carries, which
delayed ack it replaces, and that a mixed pair still delivers exactly once under faults.

Rules: the channels are driven synchronously, as in test_channel.py. The last tests run
a tiny in-test network (seeded random drop, duplication and reordering; timers fired
when due) between one channel that piggybacks and one that does not, and judge only
what the layer above sees (every packet up exactly once) and what is left in flight. A
planted channel that carries an ack for a packet it never got must be caught by that
same judgement: otherwise the harness could not see the bug the feature risks.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import pytest
from test_channel import _sends, _ups

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel

VIEW = View(1, ("a", "b"))
ON = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000, piggyback_acks=True)
OFF = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000)
KINDS = [ReliableChannel, OpenChannel]  # the open channel has its own per-packet fast path

MakeChannel = Callable[[NodeId, ChannelConfig], ReliableChannel]


def _pair(
    make: MakeChannel = ReliableChannel, a_cfg: ChannelConfig = ON, b_cfg: ChannelConfig = ON,
) -> tuple[ReliableChannel, ReliableChannel]:
    a, b = make("a", a_cfg), make("b", b_cfg)
    a.handle(ViewInstalled(VIEW), 0)
    b.handle(ViewInstalled(VIEW), 0)
    return a, b


def _a_sends_three(a: ReliableChannel) -> list[Send]:
    return [_sends(a.handle(SendRequested("b", Packet((), bytes([i]))), 0))[0]
            for i in range(3)]


def _deliver(to: ReliableChannel, send: Send, sender: NodeId, now: int) -> list[Effect]:
    return to.handle(Received(sender, send.header, send.inner), now)


# -- (a)-(c): what is carried, and which delayed ack it replaces -------------------------
@pytest.mark.parametrize("make", KINDS)
def test_a_reply_carries_the_ack_and_replaces_the_delayed_one(make: MakeChannel) -> None:
    a, b = _pair(make)
    sent = _a_sends_three(a)
    armed = [e for s in sent for e in _deliver(b, s, "a", 10) if isinstance(e, SetTimer)]
    assert armed == [SetTimer(("ack", "a"), 110)]  # one delayed ack for the three
    effects = b.handle(SendRequested("a", Packet((), b"reply")), 20)
    reply = _sends(effects)
    assert [s.header for s in reply] == [RData(1, 3)] and not reply[0].control
    assert CancelTimer(("ack", "a")) in effects
    # Owed once, carried once: the next packet carries nothing.
    assert _sends(b.handle(SendRequested("a", Packet((), b"more")), 30))[0].header == RData(2)
    got = _deliver(a, reply[0], "b", 40)
    assert [u.packet.payload for u in _ups(got)] == [b"reply"]
    assert a.in_flight() == 0 and CancelTimer(("rto", "b")) in got


@pytest.mark.parametrize("make", KINDS)
def test_with_a_hole_the_carried_ack_is_the_high_mark_and_the_sacks_still_go(
    make: MakeChannel,
) -> None:
    a, b = _pair(make)
    one, _, three = _a_sends_three(a)
    _deliver(b, one, "a", 10)
    _deliver(b, three, "a", 10)
    effects = b.handle(SendRequested("a", Packet((), b"reply")), 20)
    assert [s.header for s in _sends(effects)] == [RData(1, 1)]
    assert not any(isinstance(e, CancelTimer) for e in effects)  # the delayed ack stays
    got = _deliver(a, _sends(effects)[0], "b", 30)
    assert a.in_flight() == 2 and CancelTimer(("rto", "b")) not in got
    ack = _sends(b.handle(TimerFired(("ack", "a")), 110))
    assert [s.header for s in ack] == [RAck(1, [3])] and ack[0].control
    _deliver(a, ack[0], "b", 120)
    assert a.in_flight() == 1  # only seq 2, which b never got


@pytest.mark.parametrize("make", KINDS)
def test_without_piggybacking_nothing_is_carried_and_the_delayed_ack_fires(
    make: MakeChannel,
) -> None:
    a, b = _pair(make, ON, OFF)
    for s in _a_sends_three(a):
        _deliver(b, s, "a", 10)
    effects = b.handle(SendRequested("a", Packet((), b"reply")), 20)
    assert [s.header for s in _sends(effects)] == [RData(1)]
    assert _sends(effects)[0].header.ack == 0
    assert not any(isinstance(e, CancelTimer) for e in effects)
    ack = _sends(b.handle(TimerFired(("ack", "a")), 110))
    assert [s.header for s in ack] == [RAck(3, [])]
    _deliver(a, ack[0], "b", 120)
    assert a.in_flight() == 0


@pytest.mark.parametrize("make", KINDS)
def test_a_carried_ack_is_honoured_whatever_the_receivers_own_setting(
    make: MakeChannel,
) -> None:
    a, b = _pair(make, OFF, ON)  # a does not piggyback, but b does
    for s in _a_sends_three(a):
        _deliver(b, s, "a", 10)
    reply = _sends(b.handle(SendRequested("a", Packet((), b"reply")), 20))[0]
    assert reply.header == RData(1, 3)
    got = _deliver(a, reply, "b", 30)
    assert a.in_flight() == 0 and CancelTimer(("rto", "b")) in got
    assert [u.packet.payload for u in _ups(got)] == [b"reply"]


# -- (d), (e): bad and foreign carried acks ----------------------------------------------
@pytest.mark.parametrize("make", KINDS)
def test_a_carried_ack_above_what_was_sent_is_a_protocol_error(make: MakeChannel) -> None:
    a, _ = _pair(make)
    _a_sends_three(a)
    with pytest.raises(RemoteProtocolError, match="never sent"):
        a.handle(Received("b", RData(1, 4), Packet((), b"x")), 10)
    # the same bound as a standalone ack: everything sent is a valid carried ack
    assert a.handle(Received("b", RData(1, 3), Packet((), b"x")), 20) != []
    assert a.in_flight() == 0


def test_a_carried_ack_from_outside_the_view_is_ignored() -> None:
    a = ReliableChannel("a", ON)
    a.handle(ViewInstalled(View(1, ("a", "b", "c"))), 0)
    for i in range(2):
        a.handle(SendRequested("c", Packet((), bytes([i]))), 0)
        a.handle(SendRequested("b", Packet((), bytes([i]))), 0)
    a.handle(ViewInstalled(View(2, ("a", "b"))), 10)  # c leaves: its link is freed
    # neither an ack within what was sent to c nor one far above it does anything
    assert a.handle(Received("c", RData(1, 2), Packet((), b"x")), 20) == []
    assert a.handle(Received("c", RData(2, 99), Packet((), b"x")), 20) == []
    assert a.handle(Received("z", RData(1, 99), Packet((), b"x")), 20) == []  # a stranger
    assert a.in_flight() == 2  # b's packets are still waiting for b's ack


def test_a_forgotten_node_that_returns_carries_acks_up_to_what_was_sent_it() -> None:
    """c lingers, then is forgotten with a packet to it unacked (its numbers kept, that
    packet dropped, its number to be reused). c comes back carrying an ack of it: the
    resumed link moves on past it, nothing refused; an ack beyond anything ever sent to
    c is refused, as from any peer. (It used to be dropped unseen: c was gone for good.)"""
    a = OpenChannel("a", ON, linger_us=1_000)
    a.handle(ViewInstalled(View(1, ("a", "b", "c"))), 0)
    a.handle(SendRequested("c", Packet((), b"farewell")), 0)
    a.handle(ViewInstalled(View(2, ("a", "b"))), 10)  # c lingers, then is forgotten
    a.handle(TimerFired(("linger", "c")), 1_010)
    assert a.in_flight() == 0 and "c" not in a.lingering()
    effects = a.handle(Received("c", RData(1, 1), Packet((), b"x")), 1_020)
    assert [e.packet.payload for e in effects if isinstance(e, Up)] == [b"x"]
    sent = a.handle(SendRequested("c", Packet((), b"next")), 1_030)
    assert [e.header.seq for e in sent if isinstance(e, Send)] == [2]  # past the held 1
    with pytest.raises(RemoteProtocolError):
        a.handle(Received("c", RData(2, 99), Packet((), b"y")), 1_040)


# -- (f): a mixed pair under a seeded faulty network -------------------------------------
class OverAckingAtHoles(ReliableChannel):
    """Planted bug: with a hole, the carried ack claims the first missing packet too
    (`high + 1`). It was sent (something above it arrived), so the peer believes it and
    forgets a packet this side never got: a loss nobody reports."""

    def _send(self, to: NodeId, packet: Packet, now: int, control: bool = False) -> list[Effect]:
        inbound = self._in.get(to)
        if inbound is None or not inbound.ack_armed or not self._overacks(inbound.above):
            return super()._send(to, packet, now, control)
        return [Send(e.to, RData(e.header.seq, e.header.ack + 1), e.inner, e.control)
                if isinstance(e, Send) and isinstance(e.header, RData) and e.header.ack
                else e for e in super()._send(to, packet, now, control)]

    @staticmethod
    def _overacks(above: set[int]) -> bool:
        return bool(above)


class OverAckingAlways(OverAckingAtHoles):
    """Planted bug: every carried ack is `high + 1`. Where nothing is missing that is a
    packet the peer has not sent yet (its channel must refuse it), else a lost one."""

    @staticmethod
    def _overacks(above: set[int]) -> bool:
        return True


@dataclass
class Outcome:
    """What the layer above saw, and what the channels still hold, after a run."""

    sent: dict[NodeId, list[bytes]] = field(default_factory=dict)  # by sender
    got: dict[NodeId, list[bytes]] = field(default_factory=dict)  # by receiver
    in_flight: dict[NodeId, int] = field(default_factory=dict)
    carried: int = 0  # data packets that carried an ack
    errors: list[str] = field(default_factory=list)

    def problems(self) -> list[str]:
        found = list(self.errors)
        for sender, receiver in (("a", "b"), ("b", "a")):
            got = Counter(self.got.get(receiver, []))
            lost = [p for p in self.sent[sender] if p not in got]
            twice = [p for p, n in got.items() if n > 1]
            if lost:
                found.append(f"{sender}→{receiver} lost for good: {lost[:5]}")
            if twice:
                found.append(f"{sender}→{receiver} delivered twice: {twice[:5]}")
        found += [f"{n} still has {k} in flight" for n, k in self.in_flight.items() if k]
        return found


@dataclass(frozen=True, slots=True)
class _SendDue:
    node: NodeId
    payload: bytes


@dataclass(frozen=True, slots=True)
class _Arrival:
    to: NodeId
    sender: NodeId
    send: Send


@dataclass(frozen=True, slots=True)
class _TimerDue:
    node: NodeId
    key: Hashable


def run_faulty_pair(
    seed: int, a: ReliableChannel, b: ReliableChannel, messages: int = 150,
    drop: float = 0.15, dup: float = 0.1, max_delay_us: int = 3_000,
) -> Outcome:
    """Each side sends `messages` packets to the other at random times over a network
    that drops, duplicates and delays (hence reorders) every packet, acks included;
    timers fire when due. Runs until nothing is left to happen."""
    rng = random.Random(seed)
    nodes = {"a": a, "b": b}
    other = {"a": "b", "b": "a"}
    for channel in nodes.values():
        channel.handle(ViewInstalled(VIEW), 0)
    out = Outcome(sent={"a": [], "b": []}, got={"a": [], "b": []})
    # the agenda: (time, tiebreak, what); a timer fires only while its token is current
    agenda: list[tuple[int, int, _SendDue | _Arrival | _TimerDue]] = []
    timers: dict[tuple[NodeId, Hashable], int] = {}
    counter = 0

    def plan(at: int, what: _SendDue | _Arrival | _TimerDue) -> int:
        nonlocal counter
        counter += 1
        heapq.heappush(agenda, (at, counter, what))
        return counter

    def apply(node: NodeId, effects: list[Effect], now: int) -> None:
        for effect in effects:
            if isinstance(effect, Send):
                if isinstance(effect.header, RData) and effect.header.ack:
                    out.carried += 1
                copies = 0 if rng.random() < drop else 1 + (rng.random() < dup)
                for _ in range(copies):
                    plan(now + rng.randrange(1, max_delay_us), _Arrival(effect.to, node, effect))
            elif isinstance(effect, Up):
                out.got[node].append(effect.packet.payload)
            elif isinstance(effect, SetTimer):
                # a timer set again moves: only its latest token may fire
                timers[(node, effect.key)] = plan(effect.at, _TimerDue(node, effect.key))
            elif isinstance(effect, CancelTimer):
                timers.pop((node, effect.key), None)

    for node in nodes:
        for i in range(messages):
            plan(rng.randrange(0, messages * 200), _SendDue(node, f"{node}{i}".encode()))
    steps = 0
    while agenda and steps < 200_000:
        steps += 1
        now, token, what = heapq.heappop(agenda)
        try:
            if isinstance(what, _SendDue):
                out.sent[what.node].append(what.payload)
                request = SendRequested(other[what.node], Packet((), what.payload))
                apply(what.node, nodes[what.node].handle(request, now), now)
            elif isinstance(what, _Arrival):
                send = what.send
                received = Received(what.sender, send.header, send.inner)
                apply(what.to, nodes[what.to].handle(received, now), now)
            elif timers.get((what.node, what.key)) == token:
                del timers[(what.node, what.key)]
                apply(what.node, nodes[what.node].handle(TimerFired(what.key), now), now)
        except RemoteProtocolError as exc:
            out.errors.append(f"at {now}: {exc}")
    if agenda:
        out.errors.append(f"still busy after {steps} steps")
    out.in_flight = {n: c.in_flight() for n, c in nodes.items()}
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_mixed_pair_delivers_exactly_once_under_loss_dup_and_reordering(seed: int) -> None:
    outcome = run_faulty_pair(seed, ReliableChannel("a", ON), ReliableChannel("b", OFF))
    assert outcome.problems() == [], f"seed {seed}"
    assert outcome.carried > 0, "the piggybacking side never carried an ack"
    assert all(len(p) == 150 for p in outcome.got.values())


@pytest.mark.parametrize("seed", range(3))
def test_both_sides_piggybacking_deliver_exactly_once_too(seed: int) -> None:
    outcome = run_faulty_pair(seed, OpenChannel("a", ON), ReliableChannel("b", ON))
    assert outcome.problems() == [], f"seed {seed}"


@pytest.mark.parametrize("seed", range(6))
def test_the_harness_catches_an_ack_for_a_packet_never_received(seed: int) -> None:
    outcome = run_faulty_pair(seed, OverAckingAtHoles("a", ON), ReliableChannel("b", OFF))
    assert any("lost for good" in p for p in outcome.problems()), (seed, outcome.carried)


@pytest.mark.parametrize("seed", range(3))
def test_the_harness_catches_acks_always_one_too_high(seed: int) -> None:
    outcome = run_faulty_pair(seed, OverAckingAlways("a", ON), ReliableChannel("b", OFF))
    problems = outcome.problems()
    assert any("never sent" in p or "lost for good" in p for p in problems), seed
