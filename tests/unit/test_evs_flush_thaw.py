"""Under evs, what thaws a frozen member and what must not: a flush given up (on a
catch-up of a missed install, on a restored lower member, on a replaced attempt) or an
install handed late must not thaw, in its old view, a member that answered another
coordinator's flush whose install is on its way (it would deliver there what that
view's outcome left out: SAME_VIEW_DELIVERY), and every member so kept frozen is
prepared again or thawed (liveness). Unit scenes on `Membership` layers of sequencer
cores (`_LateSafePoint`: n0's safe point late); whole splits and merges:
tests/sim/test_evs_sim.py. Moved out of test_membership_merge.py, which keeps the
merge itself."""

from __future__ import annotations

from abcast.codec import EMPTY, Packet
from abcast.effects import (
    Deliver,
    Effect,
    InstallView,
    Multicast,
    Send,
)
from abcast.events import (
    Event,
    Excluded,
    Received,
    Restored,
    Suspected,
    ViewInstalled,
)
from abcast.ids import View
from abcast.membership import Membership, MembershipConfig
from abcast.membership.merge import evs_view_id
from abcast.membership.wire import (
    MAbort,
    MInstall,
    MMergePrepare,
    MMergeState,
    MNotYet,
    MPrepare,
    MRefuse,
    MState,
    ViewReport,
)
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import SData, SOrder, SSafe

VIEW = View(3, ("n1", "n2", "n3"))


def _evs(node: str, view: View) -> Membership:
    layer = Membership(node, Sequencer(node, evs=True), MembershipConfig(partitions="evs"))
    layer.handle(ViewInstalled(view), 0)
    return layer


def _sent(effects: list[Effect], kind: type) -> list[tuple[object, object]]:
    return [(e.to, e.header) for e in effects
            if isinstance(e, (Send, Multicast)) and isinstance(e.header, kind)]


def test_a_refusal_of_a_view_whose_welcome_a_later_flush_replaced_is_old_news() -> None:
    """n1 installs `first`, admitting n8, and is cut off before its welcome reaches n8.
    n2's flush from `first` prepares n8, still joining, which answers not-yet, and
    welcomes it into `second`. n1's welcome to `first` reaches n8 late (after the heal):
    from a node outside its view, so n8 refuses `first` to every member listed. n5 took
    that for a joiner two sides admitted and went on without n8, a member of its view:
    it suspected n8 for good, answered no merge since (a suspect in its own view) and
    the sides never merged (`bench/sweep_churn.py --evs --flapping`, seed 11, once n2
    catches up on n1's install it missed: VIEW_ORDER, STATE). The install names n8 fresh
    (`MInstall.fresh`) and `second` admits it: the refusal of `first` is old news, one
    of `second` still takes n8 out."""
    before = View(3, ("n1", "n2", "n5"))
    first = View(evs_view_id(4, "n1"), ("n1", "n2", "n5", "n8"))
    n5 = _evs("n5", before)
    n5.handle(Received("n1", MPrepare(first.view_id, 1, list(before.members)), EMPTY), 1)
    n5.handle(Received("n1", MInstall(first.view_id, 1, list(first.members), []), EMPTY), 2)
    assert n5.view == first
    n2 = _evs("n2", first)
    n5.handle(Suspected("n1"), 10)
    [(to, prepare)] = _sent(n2.handle(Suspected("n1"), 10), MPrepare)
    assert to == ("n5", "n8")
    n2.handle(Received("n8", MNotYet(prepare.target, prepare.attempt), EMPTY), 11)
    [(_, state)] = _sent(n5.handle(Received("n2", prepare, EMPTY), 11), MState)
    [(to, install)] = _sent(n2.handle(Received("n5", state, EMPTY), 12), MInstall)
    assert to == ("n5",)
    n5.handle(Received("n2", install, EMPTY), 13)
    second = View(prepare.target, ("n2", "n5", "n8"))
    assert n5.view == second
    n5.handle(Received("n8", MRefuse(first.view_id), EMPTY), 20)
    assert "n8" not in n5.s.suspects
    n5.handle(Received("n8", MRefuse(second.view_id), EMPTY), 30)
    assert "n8" in n5.s.suspects
    assert install.fresh == ["n8"]


def test_a_coordinator_that_missed_the_install_of_a_flush_it_answered_catches_up() -> None:
    """n2, n3 answer n1's flush for `first`; n1 installs it and is cut off before its
    install reaches n2. n2, suspecting n1, coordinates from `before`; n3 answers from
    `first`. Under evs n2 used to conclude anyway (the missed-install rule was primary
    partition's: a view id may be another side's): it settled reports of two views, and
    each member delivered the outcome in its own old view — messages sent in `first`
    delivered in `before` at n2 (`bench/sweep_churn.py --evs --flapping --rate 5`, seed
    11: SAME_VIEW_DELIVERY). A view whose flush n2 answered is of its lineage (an evs id
    names one coordinator's view): n2 gives its flush up, asks n3 for that install,
    installs `first` and flushes from there."""
    before = View(3, ("n1", "n2", "n3"))
    first = View(evs_view_id(4, "n1"), before.members)
    n2 = _evs("n2", before)
    n2.handle(Received("n1", MPrepare(first.view_id, 1, list(before.members)), EMPTY), 1)
    to, prepare = _sent(n2.handle(Suspected("n1"), 10), MPrepare)[-1]
    # (past the target it answered n1 for: n1 may have installed it)
    assert to == ("n3",) and prepare.target == evs_view_id(first.view_id + 1, "n2")
    ahead = MState(prepare.target, prepare.attempt, first.view_id, ViewReport({}, []))
    effects = n2.handle(Received("n3", ahead, EMPTY), 11)
    assert not any(isinstance(e, InstallView) for e in effects)
    assert _sent(effects, MPrepare) == [("n3", MPrepare(first.view_id, 0, ["n2", "n3"]))]
    # (n3, which answered n1's flush too, stays frozen for its install: the test below)
    assert _sent(effects, MAbort) == [(("n3",), MAbort(prepare.target, prepare.attempt))]
    install = MInstall(first.view_id, 1, list(first.members), [])
    effects = n2.handle(Received("n3", install, EMPTY), 12)
    assert [e.view for e in effects if isinstance(e, InstallView)] == [first]
    [(to, again)] = _sent(effects, MPrepare)
    assert to == ("n3",) and again.target == evs_view_id(first.view_id + 1, "n2")
    assert again.attempt > prepare.attempt and n2.frozen


class _LateSafePoint:
    """The scene of the evs thaw tests: view `before` = n0..n4, n0 its sequencer; every
    member holds n0's m, ordered, and n0's safe point for it is still on its way when
    they suspect n0. `flush_n0_out` runs n1's flush of n0: `first`'s outcome leaves m
    out (n0's, past the safe point heard) and spends its number; its install is
    returned, delivered to nobody yet. `went`: each member's deliveries (view, origin,
    seq)."""

    def __init__(self) -> None:
        self.before = View(3, ("n0", "n1", "n2", "n3", "n4"))
        self.layers = {n: _evs(n, self.before) for n in ("n1", "n2", "n3", "n4")}
        self.went: dict[str, list[tuple[int, str, int]]] = {n: [] for n in self.layers}
        for n in self.layers:
            self.feed(n, "n0", SData(1), 1)
            self.feed(n, "n0", SOrder(1, [("n0", 1)]), 2)

    def handle(self, node: str, event: Event, now: int) -> list[Effect]:
        layer = self.layers[node]
        effects = layer.handle(event, now)
        in_view = layer.view.view_id if layer.view is not None else 0
        self.went[node] += [(in_view, e.origin, e.seq) for e in effects
                            if isinstance(e, Deliver)]
        return effects

    def feed(self, node: str, sender: str, header: object, now: int) -> list[Effect]:
        """`node` hears `header` from `sender` (None: suspects it)."""
        event: Event = Suspected(sender) if header is None else Received(
            sender, header, Packet((), b"m") if isinstance(header, SData) else EMPTY)
        return self.handle(node, event, now)

    def flush_n0_out(self) -> MInstall:
        [(_, prepare)] = _sent(self.feed("n1", "n0", None, 3), MPrepare)
        installs = []
        for n in ("n2", "n3", "n4"):
            self.feed(n, "n0", None, 3)
            [(_, state)] = _sent(self.feed(n, "n1", prepare, 4), MState)
            installs += _sent(self.feed("n1", n, state, 5), MInstall)
        [(_, install)] = installs
        assert isinstance(install, MInstall) and install.outcome == []  # m is left out
        return install

    def stays_frozen_on_aborts_and_late_safe_point(
            self, member: str, effects: list[Effect], now: int) -> None:
        """`member` hears n2's aborts among `effects` addressed to it, then n0's safe
        point (announced before the cut): it stays frozen and delivers nothing (thawed,
        it delivered m in `before`, which the next view's outcome left out)."""
        for to, abort in _sent(effects, MAbort):
            if member in to:  # type: ignore[operator]
                self.feed(member, "n2", abort, now)
        self.feed(member, "n0", SSafe(1), now + 1)
        assert self.went[member] == [] and self.layers[member].frozen

    def n2_flushes_both(self) -> tuple[MInstall, View, list[Effect]]:
        """After `flush_n0_out`: n1's install reaches n3 only, and n3 and n4 suspect n1;
        n2 coordinates from `before`, n4 answers from there, n3 from `first`. Returns
        n1's install, `first` and n2's effects on the last state (its catch-up: it asks
        n3 for the install and gives its flush up)."""
        install = self.flush_n0_out()
        self.feed("n3", "n1", install, 6)
        for n in ("n3", "n4"):
            self.feed(n, "n1", None, 10)
        _, again = _sent(self.feed("n2", "n1", None, 10), MPrepare)[-1]
        [(_, from_before)] = _sent(self.feed("n4", "n2", again, 11), MState)
        [(_, from_first)] = _sent(self.feed("n3", "n2", again, 11), MState)
        self.feed("n2", "n4", from_before, 12)
        first = View(install.view_id, tuple(install.members))
        return install, first, self.feed("n2", "n3", from_first, 12)


def test_members_of_a_given_up_catch_up_flush_stay_frozen_under_evs() -> None:
    """n0, the sequencer of `before`, numbers its m; every member holds it and acks, and
    n0's safe point for it is still on its way when they suspect n0. n1 flushes n0 out:
    `first`'s outcome leaves m out (n0's, past the safe point heard) and spends its
    number. n1's install reaches n3 only. n2 coordinates from `before`, n4 answers
    from there, n3 from `first`: n2 gives its flush up and asks n3 for the install. Its
    `MAbort` thawed n4 (under evs nothing is pledged), which took n0's late safe point
    and delivered m in `before` — then installed `first` from n2's next flush, as n3
    did without m (SAME_VIEW_DELIVERY; fails on be4c49b). n4 answered n1's flush too,
    which stays pledged (under evs as well): the abort does not thaw it, n4 is
    prepared again from `first`, handed its install, and delivered in `before` what n3
    delivered there."""
    scene = _LateSafePoint()
    layers, went, feed = scene.layers, scene.went, scene.feed
    _, first, effects = scene.n2_flushes_both()
    assert layers["n3"].view == first
    scene.stays_frozen_on_aborts_and_late_safe_point("n4", effects, 13)
    # n3 hands n2 the install; n2 flushes from `first`; n4 is handed that install
    [(_, probe)] = _sent(effects, MPrepare)
    [(_, missed)] = _sent(feed("n3", "n2", probe, 15), MInstall)
    _, prepare = _sent(feed("n2", "n3", missed, 16), MPrepare)[-1]
    assert layers["n2"].view == first
    [(_, state)] = _sent(feed("n4", "n2", prepare, 17), MState)
    [(_, handed)] = _sent(feed("n2", "n4", state, 18), MInstall)
    feed("n4", "n2", handed, 19)
    assert layers["n4"].view == first
    assert went["n4"] == went["n3"] == []  # the same in `before`: nothing


def test_a_coordinator_handed_a_late_install_does_not_thaw_its_members_under_evs() -> None:
    """n0, the sequencer of `before`, numbers its m; every member holds it, and n0's
    safe point for it is still on its way when they suspect n0. n1 flushes n0 out:
    `first`'s outcome leaves m out. Its install is slow to come; n2 and n3 suspect n1,
    n2 coordinates from `before` (past `first`: it answered n1 for it) and n3 answers;
    then n1's install reaches n2. Installing it gave n2's own flush up with `MAbort`
    under evs too (015af48), which thawed n3 in `before`: it took n0's late safe point
    and delivered m there, then installed `first` as n2 had without m
    (SAME_VIEW_DELIVERY; fails on be4c49b, passes on f7cf303, where n2 stayed frozen).
    n3 answered n1's flush too, which stays pledged (under evs as well): n2's abort
    does not thaw it, and n2's next flush prepares it again (a higher attempt)."""
    scene = _LateSafePoint()
    layers, went, feed = scene.layers, scene.went, scene.feed
    install = scene.flush_n0_out()
    first = View(install.view_id, tuple(install.members))
    feed("n3", "n1", None, 10)
    _, again = _sent(feed("n2", "n1", None, 10), MPrepare)[-1]
    [(_, state)] = _sent(feed("n3", "n2", again, 11), MState)
    feed("n2", "n3", state, 12)  # (n4's state is still to come)
    effects = feed("n2", "n1", install, 13)
    assert layers["n2"].view == first
    scene.stays_frozen_on_aborts_and_late_safe_point("n3", effects, 14)
    _, prepare = _sent(effects, MPrepare)[-1]  # n2's flush from `first`
    assert prepare.attempt > again.attempt and "n3" in prepare.members
    [(_, state)] = _sent(feed("n3", "n2", prepare, 16), MState)
    [(_, handed)] = _sent(feed("n2", "n3", state, 17), MInstall)
    assert handed == install
    feed("n3", "n2", handed, 18)
    assert layers["n3"].view == first
    assert went["n3"] == went["n2"] == []  # the same in `before`: nothing



def _given_up_on_restored(scene: _LateSafePoint) -> tuple[MInstall, MAbort]:
    """The scene's n1 flushes n0 out (`first`, its install on its way). n2 and n3 suspect
    n1; n2 coordinates from view 3 (past `first`: it answered n1 for it) and n3 answers;
    then n1 is heard again at n2, which gives its flush up (n1 precedes it): the abort
    it sends, and n1's install, are returned, delivered to nobody yet."""
    feed = scene.handle
    install = scene.flush_n0_out()
    feed("n3", Suspected("n1"), 10)
    _, again = _sent(feed("n2", Suspected("n1"), 10), MPrepare)[-1]
    [(_, state)] = _sent(feed("n3", Received("n2", again, EMPTY), 11), MState)
    feed("n2", Received("n3", state, EMPTY), 12)
    effects = feed("n2", Restored("n1"), 13)  # n1 heard again: n2 gives its flush up
    [(to, abort)] = _sent(effects, MAbort)
    assert "n3" in to and isinstance(abort, MAbort)  # type: ignore[operator]
    assert (abort.target, abort.attempt) == (again.target, again.attempt)
    return install, abort


def test_a_flush_given_up_on_a_restored_node_does_not_thaw_members_under_evs() -> None:
    """View 3 holds n0's message 1, ordered, not yet safe. n1 coordinates the flush that
    suspects n0 and installs `first`, whose outcome leaves message 1 out; the install is
    slow to reach n2 and n3. n2, suspecting n1 meanwhile, coordinates from view 3 and n3
    answers it; then n1 is heard again, so n2 gives its flush up (n1 precedes it) and
    aborts it. n3, thawed in view 3 (under evs nothing was pledged), took n0's late safe
    point and delivered message 1 there; then n1's install arrived and n2 and n3 both
    installed `first`, having delivered different sets in view 3 (SAME_VIEW_DELIVERY;
    a strict xfail on 2dc2558, found by the session-16 review). Now evs keeps pledges
    too: n1's flush is still open for n3 (and for n2), so the abort thaws neither; the
    install settles view 3 and both go on in `first` (fails on 2dc2558, where n3 also
    ended frozen in `first` for n2's dead flush: its install re-froze it)."""
    scene = _LateSafePoint()
    layers, went, feed = scene.layers, scene.went, scene.handle
    install, abort = _given_up_on_restored(scene)
    assert layers["n2"].frozen  # its own flush given up, n1's still open
    feed("n3", Received("n2", abort, EMPTY), 14)
    assert layers["n3"].frozen
    feed("n3", Received("n0", SSafe(1), EMPTY), 15)  # n0's safe point, announced before
    assert went["n3"] == []  # (was [(3, "n0", 1)], thawed)
    first = View(install.view_id, tuple(install.members))
    for n in ("n2", "n3", "n4"):
        feed(n, Received("n1", install, EMPTY), 16)
    for n in ("n2", "n3", "n4"):
        assert layers[n].view == first and not layers[n].frozen, n
    assert went["n3"] == went["n2"] == went["n4"] == []  # the same in view 3: nothing


def test_a_member_that_installs_before_the_abort_thaws_on_it_under_evs() -> None:
    """The scene above with n1's install ahead of n2's abort at n3: n3 installs `first`
    and stays frozen for n2's flush, still open for all it knows (it sends n2 its state
    again, from `first`); the abort then thaws it there. n2, whose own flush is given
    up, thaws as n1's install settles view 3. Nobody stays frozen."""
    scene = _LateSafePoint()
    layers, feed = scene.layers, scene.handle
    install, abort = _given_up_on_restored(scene)
    first = View(install.view_id, tuple(install.members))
    effects = feed("n3", Received("n1", install, EMPTY), 14)
    assert layers["n3"].view == first and layers["n3"].frozen
    [(to, again)] = _sent(effects, MState)
    assert to == "n2" and again.view_id == first.view_id  # type: ignore[attr-defined]
    feed("n2", Received("n1", install, EMPTY), 15)
    assert layers["n2"].view == first and not layers["n2"].frozen
    assert feed("n2", Received("n3", again, EMPTY), 16) == []  # a flush it gave up
    feed("n3", Received("n2", abort, EMPTY), 17)
    assert not layers["n3"].frozen
    effects = feed("n3", Received("n1", SData(2), EMPTY), 18)  # first's traffic flows
    assert not layers["n3"].s.buffered


def test_the_last_open_flush_given_up_thaws_a_member_under_evs() -> None:
    """Liveness of the pledges under evs. In the scene, n1's flush of n0 has n2's and
    n3's states, not n4's yet; n2, n3 and n4 suspect n1. n2 coordinates: its first
    attempt is aimed at the next id, its second (at once, its own state saying it
    answered n1 for `first`) past `first`. n4, which answered nobody yet, answers both
    (its states are slow to come); n3 answered n1 for `first`, so only the second. n1
    is heard again, and n2 gives its flush up: n3 stays frozen for n1's, still open;
    n4 thaws — n2 aborted its first attempt as it replaced it (under evs too: else
    that one, aimed lower and so maybe one n2 installed before for all n4 knows,
    stayed pledged and n4 frozen for good). n1 gives its own flush up too (n0 heard
    again): the last one open for n3 and for n2, its abort thaws them in view 3 —
    nobody installed a view with their reports — where n0's safe point is taken (an
    abort of a flush answered before the last one used to thaw nothing under evs)."""
    scene = _LateSafePoint()
    layers, went, feed = scene.layers, scene.went, scene.handle
    [(_, prepare)] = _sent(feed("n1", Suspected("n0"), 3), MPrepare)
    for n in ("n2", "n3"):
        feed(n, Suspected("n0"), 3)
        [(_, state)] = _sent(feed(n, Received("n1", prepare, EMPTY), 4), MState)
        assert _sent(feed("n1", Received(n, state, EMPTY), 5), MInstall) == []
    feed("n3", Suspected("n1"), 10)
    feed("n4", Suspected("n0"), 10)
    feed("n4", Suspected("n1"), 10)
    effects = feed("n2", Suspected("n1"), 10)
    flush = [header for _, header in _sent(effects, MPrepare)]
    assert [p.attempt for p in flush] == [2, 3]  # type: ignore[attr-defined]
    for n in ("n3", "n4"):
        states = []
        for _, header in [*_sent(effects, MPrepare), *_sent(effects, MAbort)]:
            states += _sent(feed(n, Received("n2", header, EMPTY), 11), MState)
        assert len(states) == (1 if n == "n3" else 2), n
        if n == "n3":  # (n4's are still on their way)
            feed("n2", Received(n, states[0][1], EMPTY), 12)
    [(_, abort)] = _sent(feed("n2", Restored("n1"), 13), MAbort)
    for n in ("n3", "n4"):
        feed(n, Received("n2", abort, EMPTY), 14)
    assert layers["n2"].frozen and layers["n3"].frozen  # n1's flush may install
    assert not layers["n4"].frozen
    [(to, aborted)] = _sent(feed("n1", Restored("n0"), 15), MAbort)
    assert to == ("n2", "n3", "n4")
    for n in ("n2", "n3"):
        feed(n, Received("n1", aborted, EMPTY), 16)
        assert not layers[n].frozen and layers[n].view == scene.before, n
        feed(n, Received("n0", SSafe(1), EMPTY), 17)
        assert went[n] == [(3, "n0", 1)], n


def test_a_catch_up_given_up_for_a_restored_node_leaves_nobody_frozen_under_evs() -> None:
    """Liveness. n1's install of `first` reaches n3 only; n2, suspecting n1, flushes
    from `before`: n4 answers from there, n3 from `first`, so n2 gives its flush up to
    ask n3 for the install it missed. n1 is then heard again at n2: n1 coordinates, not
    n2. Under evs that give-up sent no abort, so n4 stayed frozen for n2's flush: n1's
    install made it install `first` still frozen for it (it resends its state to n2),
    and nobody would prepare it again — n2, in `first` too, is not its coordinator
    (fails on 2dc2558). Now the abort is sent: n4, which answered n1's flush too, stays
    frozen for n1's install (pledged: no delivery of n0's late safe point in `before`)
    and then goes on in `first`, as n3 and n2 do."""
    scene = _LateSafePoint()
    layers, went, feed = scene.layers, scene.went, scene.feed
    install, first, effects = scene.n2_flushes_both()
    assert _sent(scene.handle("n2", Restored("n1"), 13), MAbort) == []  # (no flush now)
    for to, abort in _sent(effects, MAbort):
        for n in to:  # type: ignore[attr-defined]
            feed(n, "n2", abort, 14)
    assert layers["n4"].frozen and not layers["n3"].frozen
    feed("n4", "n0", SSafe(1), 15)  # n0's safe point, announced before the cut
    assert went["n4"] == []
    feed("n4", "n1", install, 16)
    [(_, probe)] = _sent(effects, MPrepare)
    [(_, missed)] = _sent(feed("n3", "n2", probe, 17), MInstall)
    feed("n2", "n3", missed, 18)
    for n in ("n2", "n3", "n4"):
        assert layers[n].view == first and not layers[n].frozen, n
    assert went["n2"] == went["n3"] == went["n4"] == []


# ---- from the review of evs's pledges (be8d75c): what an abort may thaw


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
    n3 = _evs("n3", VIEW)
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
    n2, n3 = _evs("n2", VIEW), _evs("n3", VIEW)
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
