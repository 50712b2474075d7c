"""The membership layer driven by hand: bad input from peers is a RemoteProtocolError
(the driver logs it and drops the frame), what it shows through `inspect()`, and the
flush's outcome for the per-sender orderings (unordered, fifo)."""

from __future__ import annotations

import logging
import random

import pytest

from abcast.codec import EMPTY, Packet, encode_frame
from abcast.effects import Deliver, InstallView, Multicast, Send
from abcast.errors import RemoteProtocolError
from abcast.events import Received, Suspected, ViewInstalled
from abcast.ids import View
from abcast.membership import FlushMessage, JoinCut, Membership, ViewReport
from abcast.membership.wire import MInstall, MJoin, MJoinFwd, MPrepare, MState, MWelcome
from abcast.ordering.fifo import Fifo
from abcast.ordering.registry import build_stack
from abcast.ordering.unordered import UData, Unordered
from abcast.sim.cluster import SimCluster
from abcast.sim.network import Network
from abcast.sim.scheduler import Scheduler
from abcast.trace.recorder import TraceRecorder

VIEW = View(3, ("n1", "n2", "n3"))


def _member(node: str = "n2", fifo: bool = False) -> Membership:
    layer = Membership(node, Fifo(node) if fifo else Unordered(node))
    layer.handle(ViewInstalled(VIEW), 0)
    return layer


@pytest.mark.parametrize("header", [
    MJoinFwd("n9"),  # a join forwarded by a stranger
    MPrepare(2, 1, ["n2", "n7"]),  # a flush for an old view, from a stranger
    MInstall(3, 1, ["n2", "n7"], []),  # an install of our view, from a stranger
    MWelcome(4, 1, ["n1", "n3", "n7"], JoinCut({}), b""),  # a welcome that leaves us out
])
def test_bad_membership_input_is_a_remote_protocol_error(header: object) -> None:
    layer = _member()
    with pytest.raises(RemoteProtocolError):
        layer.handle(Received("n7", header, EMPTY), 0)
    assert layer.view == VIEW and layer.phase == "member"


def test_a_joiner_asking_a_member_is_forwarded_to_the_leader() -> None:
    assert _member().handle(Received("n9", MJoin(), EMPTY), 0) == [Send("n1", MJoinFwd("n9"))]


def test_a_welcome_for_another_group_is_logged_and_dropped(
        caplog: pytest.LogCaptureFixture) -> None:
    scheduler = Scheduler()
    cluster = SimCluster(scheduler, Network(random.Random(1)), TraceRecorder("r"))
    node = cluster.add(build_stack("n4", "chat", "fifo", View(0, ("n4",))))
    welcome = MWelcome(5, 1, ["n1", "n4"], JoinCut({}), b"state")
    frame = encode_frame("other", "n1", Packet((welcome,), b""))
    with caplog.at_level(logging.WARNING, logger="abcast.sim"):
        cluster._arrive("n1", "n4", frame)
    assert node.bad_frames == 1 and "unknown group 'other'" in caplog.text
    assert node.stack.view.view_id == 0  # still alone


def test_the_flush_delivers_a_crashed_senders_message_in_the_old_view() -> None:
    """n3 sent #1 to n2 only and crashed: the coordinator n1 learns it from n2's report
    and the install makes n1 deliver it before the view without n3."""
    n1 = _member("n1")
    n1.handle(Suspected("n3"), 0)  # the coordinator: prepares n2, waits for its state
    report = ViewReport({"n3": 1}, [FlushMessage("n3", 1, b"x")])
    effects = n1.handle(Received("n2", MState(4, 1, 3, report), EMPTY), 0)
    install = next(e for e in effects if isinstance(e, Multicast))
    assert install.to == ("n2",) and isinstance(install.header, MInstall)
    delivered = [e for e in effects if isinstance(e, Deliver)]
    view = [e for e in effects if isinstance(e, InstallView)]
    assert delivered == [Deliver("n3", 1, b"x")] and view == [InstallView(View(4, ("n1", "n2")))]
    assert effects.index(delivered[0]) < effects.index(view[0])
    # a late copy from the old view is not delivered twice
    assert n1.handle(Received("n3", UData(1), Packet((), b"x")), 0) == []


def test_fifo_settles_the_gapless_run_and_gives_up_past_a_gap() -> None:
    fifo = Fifo("n1")
    reports = [ViewReport({"n3": 1}, [FlushMessage("n3", 2, b"2"), FlushMessage("n3", 4, b"4")]),
               ViewReport({"n3": 2}, [FlushMessage("n3", 2, b"2")])]
    assert [(m.origin, m.seq) for m in fifo.settle(reports)] == [("n3", 2)]


def test_inspect_shows_the_phase_the_view_and_the_fifo_gap() -> None:
    layer = _member("n2", fifo=True)
    layer.handle(Received("n1", UData(2), Packet((), b"b")), 0)
    mine, fifo = layer.snapshots()
    assert mine.phase == "member" and mine.clock["members"] == ["n1", "n2", "n3"]
    assert [h.waiting_for for h in fifo.holdback] == ["n1's #1 (fifo gap)"]
    layer.handle(Received("n1", MPrepare(4, 1, ["n1", "n2", "n3"]), EMPTY), 0)
    assert layer.inspect().phase == "member, flushing"
    assert layer.handle(Received("n1", UData(1), Packet((), b"a")), 0) == []  # buffered
    assert layer.inspect().counters["buffered"] == 1


def test_a_bad_kept_packet_does_not_take_the_deliveries_replayed_before_it(
        caplog: pytest.LogCaptureFixture) -> None:
    """Frozen by a flush, a member keeps its ordering's packets; replayed after the
    install, a packet its ordering refuses is one log line, and the deliveries the
    packets before it made still come out (raised, they were lost while the ordering
    counted them delivered)."""
    layer = _member()
    layer.handle(Received("n1", MPrepare(4, 1, ["n1", "n2", "n3"]), EMPTY), 10)
    layer.handle(Received("n3", UData(1), Packet((), b"kept")), 11)
    layer.handle(Received("n3", UData(1), Packet((), b"twice")), 12)  # again: refused
    with caplog.at_level(logging.WARNING, logger="abcast.membership.layer"):
        effects = layer.handle(Received("n1", MInstall(4, 1, ["n1", "n2", "n3"], []), EMPTY),
                               20)
    assert Deliver("n3", 1, b"kept") in effects
    assert layer.view == View(4, ("n1", "n2", "n3"))
    assert "dropped a kept packet from n3" in caplog.text
