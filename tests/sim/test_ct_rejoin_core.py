"""The Chandra-Toueg rejoin handshake on one core, driven by hand (no simulator): a
member that decides its own removal asks to join again, refuses a welcome into an earlier
incarnation, accepts a current one (state first, then the view) and sends again exactly
its broadcasts the group had not decided; a member that hears "not in my view" does the
same; without `rejoin` it stops; and the group re-admits a removed node on its own ask
only. Also on one core: the phase `inspect()` shows, and a leaver's `MLeave` going out
only once its own broadcasts are decided."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.consensus.lifecycle import DEPART
from abcast.consensus.messages import CtData, Decide
from abcast.effects import Effect, InstallState, InstallView, Multicast, Send
from abcast.events import (
    BroadcastRequested,
    Excluded,
    LeaveRequested,
    Received,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import View
from abcast.membership import JoinCut
from abcast.membership.wire import MJoin, MJoinFwd, MLeave, MWelcome
from abcast.ordering.chandra_toueg import ChandraToueg

MEMBERS = ("n1", "n2", "n3")


def member(node: str = "n3", *, rejoin: bool = True) -> ChandraToueg:
    core = ChandraToueg(node, rejoin=rejoin)
    core.handle(ViewInstalled(View(1, MEMBERS)), 0)
    return core


def removed_by_decision(core: ChandraToueg) -> list[Effect]:
    """n1 decides instance 1: it removes n3 (nothing else in the batch)."""
    return core.handle(Received("n1", Decide(1, [], ["n3"]), Packet()), 10)


def welcome(k: int, delivered: dict[str, int]) -> MWelcome:
    """The welcome of instance k (its `attempt`), with per origin how many it decided."""
    return MWelcome(k + 1, k, list(MEMBERS), JoinCut(delivered), b"state")


def test_ct_rejoin_a_member_that_decides_its_removal_asks_to_join_again() -> None:
    core = member()
    effects = removed_by_decision(core)
    assert core.joining and core.rejoins == 1 and not core.stopped
    asks = [e for e in effects if isinstance(e, Send) and isinstance(e.header, MJoin)]
    assert len(asks) == 1 and asks[0].to in ("n1", "n2")
    assert not any(isinstance(e, InstallView) for e in effects)  # it does not stop


def test_ct_rejoin_refuses_a_welcome_into_an_earlier_incarnation() -> None:
    core = member()
    removed_by_decision(core)
    # a welcome from instance 1 or before admitted the incarnation removed since
    stale = core.handle(Received("n1", welcome(1, {}), Packet()), 20)
    assert stale == [] and core.joining
    fresh = core.handle(Received("n1", welcome(3, {}), Packet()), 30)
    kinds = [type(e) for e in fresh]
    assert kinds.index(InstallState) < kinds.index(InstallView)  # state, then the view
    assert not core.joining and core.view == View(4, MEMBERS) and core.k == 4


def test_ct_rejoin_sends_again_only_what_the_group_had_not_decided() -> None:
    core = member()
    for seq in (1, 2, 3):
        core.handle(BroadcastRequested(seq, f"m{seq}".encode()), 5)
    removed_by_decision(core)
    core.handle(BroadcastRequested(4, b"m4"), 15)  # while on its way back: kept
    # the group decided n3#1 before it removed n3 (n3 had not heard): the cut says so
    effects = core.handle(Received("n2", welcome(3, {"n3": 1}), Packet()), 30)
    again = [(e.header.seq, e.inner.payload) for e in effects
             if isinstance(e, Multicast) and isinstance(e.header, CtData)]
    assert again == [(2, b"m2"), (3, b"m3"), (4, b"m4")]


def test_ct_rejoin_a_member_told_it_is_not_in_a_later_view_comes_back() -> None:
    core = member()
    effects = core.handle(Excluded("n1", 5), 10)
    assert core.joining and any(isinstance(e, Send) and isinstance(e.header, MJoin)
                                for e in effects)
    # an older view than ours says nothing about a removal
    other = member()
    assert other.handle(Excluded("n1", 1), 10) == [] and not other.joining


def test_ct_rejoin_off_the_removed_member_stops() -> None:
    core = member(rejoin=False)
    effects = removed_by_decision(core)
    assert core.phase == "expelled" and core.rejoins == 0
    assert not any(isinstance(e, Send) and isinstance(e.header, MJoin) for e in effects)
    # it lingers, then installs a view without itself (the driver stops it there)
    assert core.handle(TimerFired(DEPART), 2_000_000) == [InstallView(View(2, ("n1", "n2")))]
    assert core.stopped


def test_ct_rejoin_the_group_readmits_a_removed_node_on_its_own_ask_only() -> None:
    core = member("n1")
    removal = core.handle(Received("n2", Decide(1, [], ["n3"]), Packet()), 10)
    assert core.members == ("n1", "n2") and not any(
        isinstance(e, Send) and isinstance(e.header, MJoin) for e in removal)
    # n2 forwarding an old ask of n3 (retransmitted after a heal) does not bring it back
    assert core.handle(Received("n2", MJoinFwd("n3"), Packet()), 20) == []
    assert core.book.joiners == {}
    # n3 asking itself does: n1 records it and tells the others (whoever coordinates)
    effects = core.handle(Received("n3", MJoin(), Packet()), 30)
    assert "n3" in core.book.joiners
    assert any(isinstance(e, Multicast) and e.header == MJoinFwd("n3") for e in effects)


def test_ct_inspect_shows_the_phase_through_a_removal_and_the_way_back() -> None:
    core = member()
    assert core.inspect().phase == "member" and core.inspect().clock["instance"] == 1
    core.handle(Received("n1", Decide(1, [], ["n2"]), Packet()), 10)  # another one removed
    assert core.inspect().clock["members"] == ["n1", "n3"]
    removed_by_decision(core)  # n3's own removal, as instance 1's decision, is old: ignored
    assert core.inspect().phase == "member"
    core.handle(Received("n1", Decide(2, [], ["n3"]), Packet()), 20)
    assert core.inspect().phase == "joining" and core.inspect().counters["rejoins"] == 1
    core.handle(Received("n1", welcome(5, {}), Packet()), 30)
    snapshot = core.inspect()
    assert snapshot.phase == "member" and snapshot.clock["instance"] == 6


def test_ct_a_leaver_asks_once_its_own_broadcasts_are_decided() -> None:
    core = member()
    for seq in (1, 2):
        core.handle(BroadcastRequested(seq, f"m{seq}".encode()), 5)
    asked = core.handle(LeaveRequested(), 6)
    assert core.phase == "leaving"
    assert not any(isinstance(e, Multicast) and isinstance(e.header, MLeave) for e in asked)
    # instance 1 decides n3#1 only: n3#2 is still undecided, so no MLeave yet
    first = core.handle(Received("n1", Decide(1, [("n3", 1)], []), Packet()), 10)
    assert not any(isinstance(e, Multicast) and isinstance(e.header, MLeave) for e in first)
    second = core.handle(Received("n2", Decide(2, [("n3", 2)], []), Packet()), 20)
    leaves = [e for e in second if isinstance(e, Multicast) and isinstance(e.header, MLeave)]
    assert len(leaves) == 1 and set(leaves[0].to) == {"n1", "n2"}
    # once only, and a member takes it (with nothing of the leaver's left to decide)
    assert not any(isinstance(e, Multicast) and isinstance(e.header, MLeave)
                   for e in core.handle(Received("n1", Decide(3, [], []), Packet()), 30))
    other = member("n1")
    other.handle(Received("n3", MLeave(), Packet()), 40)
    assert other.book.leavers == {"n3": 0}
