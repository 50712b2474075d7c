"""The per-packet fast paths of the bottom layers change nothing but their cost.

The failure detector, the reliable channel and their open-group variants dispatch the
commonest events by exact type before the general `match`. Instances of event
subclasses never take those fast paths (the general path still matches them by class),
so driving two copies of a layer with the same seeded random history — one with plain
events, one with the same events as subclasses — must give equal effects, equal errors
and equal state at every step. Histories mix sends, multicasts, data and acks (some
duplicated, some for packets never sent), data carrying acks (mostly valid, a few for
packets never sent), timers, strangers and view changes; the channels run with
standalone acks and with piggybacked ones.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Send
from abcast.errors import AbcastError
from abcast.events import (
    Event,
    MulticastRequested,
    Received,
    SendRequested,
    TimerFired,
    ViewInstalled,
)
from abcast.group.failure_detector import (
    TICK,
    DetectorConfig,
    FailureDetectorLayer,
    Fd,
    Heartbeat,
    NotMember,
)
from abcast.ids import View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.reliability.channel import ChannelConfig, RAck, RData, ReliableChannel
from abcast.stack import Layer


class SlowReceived(Received, frozen=True, gc=False):
    """Takes the general path only."""


class SlowSendRequested(SendRequested, frozen=True, gc=False):
    """Takes the general path only."""


class SlowMulticastRequested(MulticastRequested, frozen=True, gc=False):
    """Takes the general path only."""


class SlowTimerFired(TimerFired, frozen=True, gc=False):
    """Takes the general path only."""


def slow(event: Event) -> Event:
    """The same event as an instance of a subclass: only the general path takes it."""
    match event:
        case Received(sender, header, inner):
            return SlowReceived(sender, header, inner)
        case SendRequested(to, packet, control):
            return SlowSendRequested(to, packet, control)
        case MulticastRequested(to, packet):
            return SlowMulticastRequested(to, packet)
        case TimerFired(key):
            return SlowTimerFired(key)
    return event


ME = "a"
PEERS = ("b", "c", "d")  # d starts outside the view: a stranger, or a guest
VIEWS = (("a", "b", "c"), ("a", "b", "c", "d"), ("a", "c"), ("a", "b"))


def outcome(layer: Layer, event: Event, now: int) -> tuple[str, Any]:
    try:
        return "effects", layer.handle(event, now)
    except AbcastError as exc:  # the message names the event's class: Slow… or not
        return type(exc).__name__, str(exc).replace("Slow", "")


def packet(rng: random.Random) -> Packet:
    return Packet((), rng.randbytes(rng.randrange(0, 4)))


def channel_event(rng: random.Random, sent: dict[str, int], view_id: int) -> Event:
    roll = rng.random()
    peer = rng.choice(PEERS)
    if roll < 0.25:
        return SendRequested(peer, packet(rng), rng.random() < 0.2)
    if roll < 0.35:
        return MulticastRequested(tuple(rng.sample(PEERS, rng.randrange(1, 3))), packet(rng))
    if roll < 0.6:
        return Received(peer, RData(rng.randrange(1, 12), carried_ack(rng, sent, peer)),
                        packet(rng))
    if roll < 0.75:
        # Mostly acks for what was sent; now and then one for packets never sent (an error)
        top = sent.get(peer, 0) + (rng.random() < 0.05)
        high = rng.randrange(0, top + 1)
        sacks = sorted(rng.sample(range(high + 1, top + 2), min(2, top + 1 - high)))
        return Received(peer, RAck(high, [s for s in sacks if s <= top]), Packet())
    if roll < 0.85:
        return TimerFired((rng.choice(("ack", "rto")), peer))
    if roll < 0.9:
        return TimerFired(("linger", peer))
    if roll < 0.93:
        return TimerFired(("other", peer))  # no layer's timer: an error on both paths
    return ViewInstalled(View(view_id, rng.choice(VIEWS)))


def carried_ack(rng: random.Random, sent: dict[str, int], peer: str) -> int:
    """The ack a data packet piggybacks: half carry none; the rest mostly one for what
    was sent, now and then one above anything ever sent (an error on both paths, also
    on a link the open channel resumed: acks up to what was sent are taken there)."""
    if rng.random() < 0.5:
        return 0
    if rng.random() < 0.05:
        return sent.get(peer, 0) + rng.randrange(1, 4)
    return rng.randrange(0, sent.get(peer, 0) + 1)


def channel_state(layer: ReliableChannel) -> tuple[Any, ...]:
    state: tuple[Any, ...] = (
        layer.in_flight(), layer.held_above(), layer.retransmissions, layer.duplicates,
    )
    if isinstance(layer, OpenChannel):
        state += (layer.guests(), layer.lingering())
    return state


def note_sends(sent: dict[str, int], effects: list[Effect]) -> None:
    for effect in effects:
        if isinstance(effect, Send) and isinstance(effect.header, RData):
            sent[effect.to] = max(sent.get(effect.to, 0), effect.header.seq)


@dataclass(frozen=True, slots=True)
class Exercised:
    """What a compared history went through (so a test can tell it was not vacuous)."""

    fast_steps: int  # events of the kinds a fast path takes
    acks_carried: int  # data packets sent with a piggybacked ack
    carried_refused: int  # received data whose carried ack was refused (an error)


def compare_channels(make: Callable[[], ReliableChannel], seed: int, steps: int) -> Exercised:
    """Drive two copies alike; say what the history exercised."""
    rng = random.Random(seed)
    fast, general = make(), make()
    start = ViewInstalled(View(1, VIEWS[0]))
    assert outcome(fast, start, 0) == outcome(general, start, 0)
    sent: dict[str, int] = {}
    now = view_id = 1
    fast_steps = acks_carried = carried_refused = 0
    for _ in range(steps):
        now += rng.randrange(0, 3_000)
        view_id += 1
        event = channel_event(rng, sent, view_id)
        got, want = outcome(fast, event, now), outcome(general, slow(event), now)
        assert got == want, f"seed {seed}: {event!r} at {now}"
        assert channel_state(fast) == channel_state(general), f"seed {seed}: {event!r}"
        if got[0] == "effects":
            note_sends(sent, got[1])
            acks_carried += sum(isinstance(e, Send) and isinstance(e.header, RData)
                                and e.header.ack > 0 for e in got[1])
        elif type(event) is Received and isinstance(event.header, RData) and event.header.ack:
            carried_refused += got[0] == "RemoteProtocolError"
        fast_steps += type(event) in (Received, SendRequested, MulticastRequested, TimerFired)
    return Exercised(fast_steps, acks_carried, carried_refused)


CHANNEL_CFG = ChannelConfig(ack_delay_us=500, rto_us=2_000, max_rto_us=16_000)
PIGGYBACK_CFG = ChannelConfig(ack_delay_us=500, rto_us=2_000, max_rto_us=16_000,
                              piggyback_acks=True)
CHANNEL_CFGS = pytest.mark.parametrize(
    "cfg", [CHANNEL_CFG, PIGGYBACK_CFG], ids=["standalone-acks", "piggybacked-acks"])


@CHANNEL_CFGS
@pytest.mark.parametrize("seed", range(12))
def test_reliable_channel_fast_paths_match_the_general_path(
    seed: int, cfg: ChannelConfig
) -> None:
    assert compare_channels(lambda: ReliableChannel(ME, cfg), seed, 400).fast_steps > 200


@CHANNEL_CFGS
@pytest.mark.parametrize("seed", range(12))
def test_open_channel_fast_paths_match_the_general_path(seed: int, cfg: ChannelConfig) -> None:
    def make() -> ReliableChannel:
        return OpenChannel(ME, cfg, linger_us=5_000)

    assert compare_channels(make, seed, 400).fast_steps > 200


@pytest.mark.parametrize("kind", [ReliableChannel, OpenChannel])
def test_piggybacked_histories_carry_acks_and_refuse_bad_ones(
    kind: Callable[[str, ChannelConfig], ReliableChannel],
) -> None:
    """Over the seeds above, both paths were compared sending acks on data and refusing
    carried acks for packets never sent (not a vacuous comparison). The open channel
    lingers 5 ms, as above: its random linger timers then forget removed peers that
    fell silent, and their links start again under the history's acks."""
    def make() -> ReliableChannel:
        return OpenChannel(ME, PIGGYBACK_CFG, linger_us=5_000) if kind is OpenChannel \
            else kind(ME, PIGGYBACK_CFG)

    runs = [compare_channels(make, seed, 400) for seed in range(12)]
    assert sum(r.acks_carried for r in runs) > 50
    assert sum(r.carried_refused for r in runs) > 10


DETECTOR_CFG = DetectorConfig(period_us=1_000, timeout_us=4_000, timeout_increment_us=1_000)


def detector_event(rng: random.Random, view_id: int) -> Event:
    roll = rng.random()
    peer = rng.choice(PEERS)
    if roll < 0.2:
        return SendRequested(peer, packet(rng), rng.random() < 0.2)
    if roll < 0.3:
        return MulticastRequested(tuple(rng.sample(PEERS, rng.randrange(1, 3))), packet(rng))
    if roll < 0.7:
        header = rng.choice((Fd(), Fd(), Fd(), Heartbeat(), NotMember(rng.randrange(0, 9))))
        return Received(peer, header, packet(rng))
    if roll < 0.9:
        return TimerFired(TICK)
    return ViewInstalled(View(view_id, rng.choice(VIEWS)))


def detector_state(layer: FailureDetectorLayer) -> tuple[Any, ...]:
    members = [p for p in PEERS if p in layer._s.peers]
    return tuple(layer.suspects()), tuple(layer.timeout_of(p) for p in members)


@pytest.mark.parametrize("kind", [FailureDetectorLayer, OpenDetector])
@pytest.mark.parametrize("seed", range(10))
def test_detector_fast_paths_match_the_general_path(
    kind: type[FailureDetectorLayer], seed: int
) -> None:
    rng = random.Random(seed)
    fast, general = kind(ME, DETECTOR_CFG), kind(ME, DETECTOR_CFG)
    start = ViewInstalled(View(1, VIEWS[0]))
    assert outcome(fast, start, 0) == outcome(general, start, 0)
    now = 1
    restores = 0
    for view_id in range(2, 402):
        # Long silences now and then, so that peers are suspected and then restored.
        now += rng.choice((10, 300, 900, 6_000))
        event = detector_event(rng, view_id)
        got, want = outcome(fast, event, now), outcome(general, slow(event), now)
        assert got == want, f"seed {seed}: {event!r} at {now}"
        assert detector_state(fast) == detector_state(general)
        restores += sum(type(e).__name__ == "Restore" for e in got[1])
    assert restores, "the history never exercised a restore"


def test_a_stranger_is_answered_and_only_the_open_detector_hands_its_packet_up() -> None:
    data = Packet((), b"hello")
    for kind, ups in ((FailureDetectorLayer, 0), (OpenDetector, 1)):
        layer = kind(ME, DETECTOR_CFG)
        layer.handle(ViewInstalled(View(1, ("a", "b"))), 0)
        effects = layer.handle(Received("z", Fd(), data), 10)
        assert [type(e).__name__ for e in effects].count("Up") == ups
        assert any(isinstance(e, Send) and e.header == NotMember(1) for e in effects)
        # at most one NotMember a period, however much the stranger sends
        again = layer.handle(Received("z", Fd(), data), 20)
        assert not any(isinstance(e, Send) for e in again)
        assert layer.handle(Received("z", NotMember(5), Packet()), 30) == []
