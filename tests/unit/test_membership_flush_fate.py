"""The fate of a flush a member answered, driven by hand: which abort unfreezes it, and
who tells it a flush is off (abcast.membership.layer's `pledged`; the churn seeds that
found each rule are in tests/sim/test_flapping_seeds.py)."""

from __future__ import annotations

from abcast.codec import EMPTY
from abcast.effects import InstallView, Multicast, Send
from abcast.events import BroadcastRequested, Received, Suspected, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership
from abcast.membership.state import STABLE
from abcast.membership.wire import MAbort, MInstall, MPrepare, MState
from abcast.ordering.unordered import Unordered

FIVE = ("n1", "n2", "n3", "n4", "n5")
VIEW = View(3, FIVE)


def _member(node: str) -> Membership:
    layer = Membership(node, Unordered(node))
    layer.handle(ViewInstalled(VIEW), 0)
    return layer


def _states(effects: list[object]) -> list[tuple[str, int, int]]:
    return [(e.to, e.header.target, e.header.attempt) for e in effects
            if isinstance(e, Send) and isinstance(e.header, MState)]


def test_an_abort_leaves_a_member_frozen_while_an_earlier_flush_it_answered_may_install() -> None:
    """n3 answers n1's flush for view 4, suspects n1, answers n2's for view 5, and n2
    gives that up. n1 may have installed view 4 with n3's state: n3 stays frozen (its
    broadcast queued) until that install comes, and delivers nothing more in view 3."""
    n3 = _member("n3")
    assert _states(n3.handle(Received("n1", MPrepare(4, 1, list(FIVE)), EMPTY), 1)) == [
        ("n1", 4, 1)]
    n3.handle(Suspected("n1"), 2)
    answered = n3.handle(Received("n2", MPrepare(5, 2, list(FIVE[1:])), EMPTY), 3)
    assert _states(answered) == [("n2", 5, 2)]
    assert n3.handle(Received("n2", MAbort(5, 2), EMPTY), 4) == []
    assert n3.frozen
    assert n3.handle(BroadcastRequested(1, b"x"), 5) == []  # queued, not sent in view 3
    effects = n3.handle(Received("n1", MInstall(4, 1, list(FIVE), []), EMPTY), 6)
    assert InstallView(View(4, FIVE)) in effects and not n3.frozen


def test_the_last_open_flush_given_up_unfreezes_the_member() -> None:
    """The same, but n1's flush is given up too (its abort comes after n2's): nothing
    may have installed, n3 goes on in view 3."""
    n3 = _member("n3")
    n3.handle(Received("n1", MPrepare(4, 1, list(FIVE)), EMPTY), 1)
    n3.handle(Suspected("n1"), 2)
    n3.handle(Received("n2", MPrepare(5, 2, list(FIVE[1:])), EMPTY), 3)
    n3.handle(Received("n2", MAbort(5, 2), EMPTY), 4)
    n3.handle(Received("n1", MAbort(4, 1), EMPTY), 5)
    assert not n3.frozen and n3.view == VIEW


def test_a_newer_attempt_of_the_same_coordinator_for_a_lower_view_id_is_answered() -> None:
    """n1 aimed at view 5 (attempt 6), gave it up, and starts again from view 3 for
    view 4 (attempt 7): n3 answers (it used to drop it as older, and n1 waited for ever)."""
    n3 = _member("n3")
    n3.handle(Received("n1", MPrepare(5, 6, list(FIVE)), EMPTY), 1)
    n3.handle(Received("n1", MAbort(5, 6), EMPTY), 2)
    assert not n3.frozen
    again = n3.handle(Received("n1", MPrepare(4, 7, list(FIVE)), EMPTY), 3)
    assert _states(again) == [("n1", 4, 7)]
    # a retransmission of the older prepare is still dropped
    assert n3.handle(Received("n1", MPrepare(5, 6, list(FIVE)), EMPTY), 4) == []


def test_a_coordinator_tells_the_members_of_every_attempt_it_drops() -> None:
    """n2 answered n1's flush for view 4 and, n1 suspected, coordinates: its own state
    says view 4 may be n1's, so it replaces its attempt for view 4 by one for view 5
    (the old one's MAbort goes out); n1's install of view 4 then reaches it through n3,
    and it gives its flush for view 5 up — with its MAbort (before, its members stayed
    frozen for it)."""
    n2 = _member("n2")
    n2.handle(Received("n1", MPrepare(4, 1, list(FIVE)), EMPTY), 1)
    effects = n2.handle(Suspected("n1"), 2)
    others = ("n3", "n4", "n5")
    multicasts = [(e.to, e.header) for e in effects if isinstance(e, Multicast)]
    assert multicasts == [(others, MPrepare(4, 2, list(FIVE[1:]))),
                          (others, MAbort(4, 2)),
                          (others, MPrepare(5, 3, list(FIVE[1:])))]
    installed = n2.handle(Received("n3", MInstall(4, 1, list(FIVE), []), EMPTY), 3)
    assert InstallView(View(4, FIVE)) in installed
    assert Multicast(others, MAbort(5, 3)) in installed
    # n1 is still suspected: the flush view 4 calls for starts, from view 4
    assert Multicast(others, MPrepare(5, 4, list(FIVE[1:]))) in installed


def test_a_prepare_held_back_for_a_member_the_install_leaves_out_is_answered() -> None:
    """n2's prepare for view 5 reaches n5 while n5 still trusts n1, which precedes n2:
    n5 holds it back. n1's install of view 4 leaves n1 out (it left): n2 leads now, and
    n5 answers the held prepare (before, it kept it and n2 waited for ever)."""
    n5 = _member("n5")
    n5.handle(Received("n1", MPrepare(4, 6, list(FIVE)), EMPTY), 1)
    rest = ["n2", "n3", "n5"]
    assert n5.handle(Received("n2", MPrepare(5, 7, rest), EMPTY), 2) == []  # held back
    effects = n5.handle(Received("n1", MInstall(4, 6, rest, []), EMPTY), 3)
    assert InstallView(View(4, tuple(rest))) in effects
    assert _states(effects) == [("n2", 5, 7)] and n5.frozen


def test_a_member_frozen_for_a_lost_coordinator_asks_the_others_for_its_install() -> None:
    """n3 answered n1's flush for view 4 and suspects n1; short of a majority it can
    start no flush of its own. Every stability period it sends a state for no flush
    (attempt 0); n5, which installed view 4, answers with that install, and n3 moves on."""
    n3 = _member("n3")
    n3.handle(Received("n1", MPrepare(4, 1, list(FIVE)), EMPTY), 1)
    for node in ("n1", "n2", "n4"):
        n3.handle(Suspected(node), 2)
    assert n3.frozen
    probes = [e for e in n3.handle(TimerFired(STABLE), 3)
              if isinstance(e, Send) and isinstance(e.header, MState)]
    assert [(p.to, p.header.target, p.header.attempt) for p in probes] == [("n5", 4, 0)]
    n5 = _member("n5")
    n5.handle(Received("n1", MPrepare(4, 1, list(FIVE)), EMPTY), 1)
    install = MInstall(4, 1, ["n3", "n5"], [])
    n5.handle(Received("n1", install, EMPTY), 2)
    answer = n5.handle(Received("n3", probes[0].header, EMPTY), 4)
    assert answer == [Send("n3", install)]
    moved = n3.handle(Received("n5", install, EMPTY), 5)
    assert InstallView(View(4, ("n3", "n5"))) in moved
