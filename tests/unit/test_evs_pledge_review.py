"""Review of evs's pledges (be8d75c, merged as 6e79a6e), by hand: what an abort may thaw
once a member keeps pledges under evs too. Whole splits and merges:
tests/sim/test_evs_sim.py."""

from __future__ import annotations

from abcast.codec import EMPTY, Packet
from abcast.effects import Deliver, Effect, Multicast, Send
from abcast.events import Excluded, Received, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership, MembershipConfig
from abcast.membership.merge import evs_view_id
from abcast.membership.wire import MAbort, MInstall, MMergePrepare, MMergeState, MPrepare, MState
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import SData, SOrder

VIEW = View(3, ("n1", "n2", "n3"))


def _evs(node: str) -> Membership:
    layer = Membership(node, Sequencer(node, evs=True), MembershipConfig(partitions="evs"))
    layer.handle(ViewInstalled(VIEW), 0)
    return layer


def _headers(effects: list[Effect], kind: type) -> list[object]:
    return [e.header for e in effects if isinstance(e, Send) and isinstance(e.header, kind)]


def test_a_late_abort_of_the_flush_answered_does_not_thaw_a_member_a_merge_holds() -> None:
    """n3 answers n1's flush (attempt 1). n1 replaces it (attempt 2, the same target:
    under evs its abort of attempt 1 goes out now too) and gives attempt 2 up; the
    channel keeps no order, and attempt 2's abort comes first: it releases attempt 1
    as well (an earlier attempt of that target installed nothing), so n3 thaws —
    rightly, nothing it answered is open. n0, the lowest node of another side, merges
    it with ours: n3 answers, frozen for the merge. Then attempt 1's abort comes: the
    flush n3 answered last, so `on_abort` thawed it (`unfreeze`) while the merge held
    it, and n3 delivered in its old view after its report went to the merge — what the
    merge's members settle without (the rule says: not while a merge holds us). Fails
    on 6e79a6e; on 2dc2558 attempt 2's abort thawed nothing under evs, so the route was
    not there."""
    n3 = _evs("n3")
    target = evs_view_id(VIEW.view_id + 1, "n1")
    members = list(VIEW.members)
    assert _headers(n3.handle(Received("n1", MPrepare(target, 1, members), EMPTY), 1), MState)
    assert n3.frozen
    n3.handle(Received("n1", MAbort(target, 2), EMPTY), 2)
    assert not n3.frozen and not n3.s.pledged
    merge = MMergePrepare(evs_view_id(target + 1, "n0"), 1, ["n0", *VIEW.members])
    assert _headers(n3.handle(Received("n0", merge, EMPTY), 3), MMergeState)
    assert n3.frozen and n3.s.merging is not None
    n3.handle(Received("n1", MAbort(target, 1), EMPTY), 4)
    assert n3.frozen, "thawed in its old view while the merge it answered holds it"
    n3.handle(Received("n1", SData(1), Packet((), b"m")), 5)
    effects = n3.handle(Received("n1", SOrder(1, [("n1", 1)]), EMPTY), 6)
    assert not [e for e in effects if isinstance(e, Deliver)]  # held for the merge
    assert n3.s.buffered


def test_a_member_pledged_to_a_coordinator_that_left_it_out_goes_on_under_evs() -> None:
    """Liveness of the pledges when the coordinator is cut off, not crashed: n2 and n3
    answer n1's flush (n1 the lowest member, trusted); n1 suspects them, gives that
    flush up (its abort lost in the cut) and installs a view of its own. Under evs
    nothing asks for a missed install (`ask_for_install` is primary's), and n2 and n3
    may hear n1 again (its probes) before they suspect it: what releases them is n1's
    "not a member" (the detector's `Excluded`, or a farewell) — they go on without it,
    n2 coordinates their side, and its install settles n1's pledged flush."""
    n2, n3 = _evs("n2"), _evs("n3")
    target = evs_view_id(VIEW.view_id + 1, "n1")
    prepare = MPrepare(target, 1, list(VIEW.members))
    for layer in (n2, n3):
        assert _headers(layer.handle(Received("n1", prepare, EMPTY), 1), MState)
        assert layer.frozen and layer.s.pledged == {("n1", target, 1)}
    apart = evs_view_id(target + 1, "n1")  # n1's view without them
    n3.handle(Excluded("n1", apart), 10)
    effects = n2.handle(Excluded("n1", apart), 10)
    *_, again = [e.header for e in effects  # (re-aimed past n1's target: it answered it)
                 if isinstance(e, Multicast) and isinstance(e.header, MPrepare)]
    assert isinstance(again, MPrepare) and again.members == ["n2", "n3"]
    assert again.target > target
    [state] = _headers(n3.handle(Received("n2", again, EMPTY), 11), MState)
    effects = n2.handle(Received("n3", state, EMPTY), 12)
    [install] = [e.header for e in effects
                 if isinstance(e, Multicast) and isinstance(e.header, MInstall)]
    n3.handle(Received("n2", install, EMPTY), 13)
    for layer in (n2, n3):
        assert layer.view is not None and layer.view.members == ("n2", "n3")
        assert not layer.frozen and not layer.s.pledged
