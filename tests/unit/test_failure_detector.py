"""The heartbeat failure detector core: silence → Suspect, speech → Restore and a longer
timeout, traffic counts as a heartbeat; a member's NotMember is a claim asked back before
it is believed."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Effect, NotifyExcluded, Restore, Send, SetTimer, Suspect, Up
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.group.failure_detector import (
    DetectorConfig,
    FailureDetectorLayer,
    Fd,
    Heartbeat,
    NotMember,
    Probe,
)
from abcast.ids import View

CFG = DetectorConfig(period_us=10, timeout_us=50, timeout_increment_us=20)


def _fd() -> FailureDetectorLayer:
    fd = FailureDetectorLayer("a", CFG)
    effects = fd.handle(ViewInstalled(View(1, ("a", "b", "c"))), 0)
    assert effects == [SetTimer("tick", 10)]
    return fd


def _kinds(effects: list[Effect]) -> list[str]:
    return [type(e).__name__ for e in effects]


def test_idle_links_get_heartbeats_busy_links_do_not() -> None:
    fd = _fd()
    fd.handle(SendRequested("b", Packet((), b"x")), 5)
    effects = fd.handle(TimerFired("tick"), 10)
    heartbeats = [e for e in effects if isinstance(e, Send)]
    assert [(h.to, h.header, h.control) for h in heartbeats] == [("c", Heartbeat(), True)]


def test_silence_is_suspected_and_speech_restores_with_a_longer_timeout() -> None:
    fd = _fd()
    now = 0
    suspects: list[str] = []
    for now in range(10, 70, 10):
        fd.handle(Received("c", Heartbeat(), Packet()), now)  # c keeps talking, b is silent
        suspects += [e.node for e in fd.handle(TimerFired("tick"), now) if isinstance(e, Suspect)]
    assert suspects == ["b"] and fd.suspects() == ["b"]
    effects = fd.handle(Received("b", Fd(), Packet((), b"late")), now + 1)
    assert effects[0] == Restore("b") and isinstance(effects[1], Up)
    assert fd.timeout_of("b") == 70 and fd.suspects() == []


def test_any_packet_is_a_sign_of_life() -> None:
    fd = _fd()
    for now in range(10, 200, 10):
        fd.handle(Received("b", Fd(), Packet((), b"data")), now)
        fd.handle(Received("c", Fd(), Packet((), b"data")), now)
        assert not [e for e in fd.handle(TimerFired("tick"), now) if isinstance(e, Suspect)]


def test_a_pause_of_this_node_is_not_the_peers_silence() -> None:
    # The node stalls from 10 to 500 (its tick, due at 20, fires at 500): b and c spoke
    # at 10 and their later packets wait unread. Nobody is suspected on the late tick;
    # b speaks right after it (its queued packets are read), c stays silent and is
    # suspected a timeout after the credit, not at once.
    fd = _fd()
    fd.handle(TimerFired("tick"), 10)  # on time: the next is due at 20
    fd.handle(Received("b", Fd(), Packet((), b"x")), 10)
    fd.handle(Received("c", Fd(), Packet((), b"x")), 10)
    assert not [e for e in fd.handle(TimerFired("tick"), 500) if isinstance(e, Suspect)]
    fd.handle(Received("b", Fd(), Packet((), b"queued")), 501)
    suspected: dict[str, int] = {}
    for now in range(510, 600, 10):
        fd.handle(Received("b", Heartbeat(), Packet()), now)
        for e in fd.handle(TimerFired("tick"), now):
            if isinstance(e, Suspect):
                suspected.setdefault(e.node, now)
    # c was last heard at 10, credited with the 480 pause: silent past its timeout of
    # 50 after 540
    assert suspected == {"c": 550}


def test_on_time_ticks_get_no_credit() -> None:
    # The same silence without a pause: c (and b) are suspected on the first tick past
    # their timeout, as before.
    fd = _fd()
    suspected: dict[str, int] = {}
    for now in range(10, 100, 10):
        for e in fd.handle(TimerFired("tick"), now):
            if isinstance(e, Suspect):
                suspected.setdefault(e.node, now)
    assert suspected == {"b": 60, "c": 60}


def test_control_flag_passes_through() -> None:
    fd = _fd()
    (send,) = fd.handle(SendRequested("b", Packet((), b""), control=True), 1)
    assert isinstance(send, Send) and send.control and send.header == Fd()


# -- a NotMember is a claim, checked before it is believed (issue #21) -----------------


def _probe_of(effects: list[Effect]) -> Probe:
    probes = [e.header for e in effects if isinstance(e, Send) and isinstance(e.header, Probe)]
    assert len(probes) == 1, effects
    return probes[0]


def test_a_not_member_from_a_live_member_is_asked_back_and_its_heartbeat_refutes_it() -> None:
    fd = _fd()
    effects = fd.handle(Received("b", NotMember(9), Packet()), 5)
    assert not [e for e in effects if isinstance(e, NotifyExcluded)]
    _probe_of(effects)
    # the probe is asked again every tick while the claim is held, never believed alone;
    # b's packets meanwhile wait (they are a sign of life all the same)
    for now in range(10, 200, 10):
        assert fd.handle(Received("b", Fd(), Packet((), b"%d" % now)), now) == []
        fd.handle(Received("c", Fd(), Packet((), b"data")), now)
        ticked = fd.handle(TimerFired("tick"), now)
        assert not [e for e in ticked if isinstance(e, NotifyExcluded | Suspect)]
        _probe_of(ticked)
    released = fd.handle(Received("b", Heartbeat(), Packet()), 200)
    assert released == [Up("b", Packet((), b"%d" % now)) for now in range(10, 200, 10)]
    counters = fd.inspect().counters
    assert counters["refuted_not_member"] == 1 and counters["probes"] == 20
    assert not [e for e in fd.handle(TimerFired("tick"), 210) if isinstance(e, Send)
                and isinstance(e.header, Probe)]


def test_a_claim_confirmed_on_the_claimants_own_link_is_believed() -> None:
    fd = _fd()
    probe = _probe_of(fd.handle(Received("b", NotMember(9), Packet()), 5))
    # a guessed nonce (a forger's) confirms nothing; the claimant's echo does
    assert fd.handle(Received("b", NotMember(9, probe.nonce + 1), Packet()), 6) == []
    assert fd.handle(Received("b", NotMember(9, probe.nonce), Packet()), 7) == [
        NotifyExcluded("b", 9)]


def test_a_stale_not_member_is_passed_up_and_a_suspected_ones_believed_at_once() -> None:
    fd = _fd()
    # not after my view: no claim against it (the layers above drop it, or a joiner
    # learns from it), so nothing is probed or held
    assert fd.handle(Received("b", NotMember(1), Packet()), 5) == [NotifyExcluded("b", 1)]
    assert fd.inspect().counters["stale_not_member"] == 1
    for now in range(10, 70, 10):  # c keeps talking, b is silent and suspected
        fd.handle(Received("c", Heartbeat(), Packet()), now)
        fd.handle(TimerFired("tick"), now)
    assert fd.suspects() == ["b"]
    assert fd.handle(Received("b", NotMember(2), Packet()), 70) == [Restore("b"),
                                                                  NotifyExcluded("b", 2)]


def test_a_second_members_claim_corroborates_the_first() -> None:
    fd = _fd()
    _probe_of(fd.handle(Received("b", NotMember(9), Packet()), 5))
    assert fd.handle(Received("b", Fd(), Packet((), b"held")), 6) == []
    assert fd.handle(Received("c", NotMember(9), Packet()), 7) == [
        NotifyExcluded("c", 9), Up("b", Packet((), b"held"))]


def test_a_probe_is_answered_with_a_heartbeat_by_a_member_and_its_nonce_by_a_stranger() -> None:
    fd = _fd()
    assert fd.handle(Received("b", Probe(77), Packet()), 5) == [Send("b", Heartbeat(),
                                                                    control=True)]
    assert fd.handle(Received("z", Probe(78), Packet()), 6) == [Send("z", NotMember(1, 78),
                                                                    control=True)]
