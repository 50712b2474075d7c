"""Discovery under evs (abcast.membership.discovery), by hand: a view's coordinator probes
the nodes its lineage lost every `probe_us` for `probe_for_us`, then every
`probe_slow_us` for ever (it used to stop after `probe_for_us`, so sides cut apart for
longer never merged); what it remembers is bounded (MAX_LOST, the longest lost forgotten
first), a leaver it let go and a joiner that withdrew are not probed, a side heard from
is probed at the fast period again, and a runtime keeps the address of every node
probed (`Stack.peers`). Whole long splits: tests/sim/test_evs_sim.py."""

from __future__ import annotations

import heapq
import itertools

import pytest

from abcast.codec import EMPTY
from abcast.effects import CancelTimer, Effect, Output, Send, SetTimer
from abcast.errors import LocalProtocolError
from abcast.events import Received, Suspected, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership, MembershipConfig
from abcast.membership.merge import evs_view_id
from abcast.membership.state import MAX_LOST, MERGE_PROBE
from abcast.membership.wire import (
    MInstall,
    MLeave,
    MMergeProbe,
    MPrepare,
    MState,
    ViewReport,
)
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer import Sequencer
from abcast.reliability.channel import LINGER_US

VIEW = View(3, ("n1", "n2", "n3"))
CONFIG = MembershipConfig(partitions="evs")
FAST, FOR, SLOW = CONFIG.probe_us, CONFIG.probe_for_us, CONFIG.probe_slow_us


def _alone(node: str = "n1", at: int = 10) -> tuple[Membership, list[Effect]]:
    """`node`, leader of VIEW, suspects the other two at `at`: alone in a view of its own,
    it lost them. Also the effects of the view change."""
    layer = Membership(node, Sequencer(node, evs=True), CONFIG)
    layer.handle(ViewInstalled(VIEW), 0)
    effects: list[Effect] = []
    for other in VIEW.members:
        if other != node:
            effects += layer.handle(Suspected(other), at)
    assert layer.view is not None and layer.view.members == (node,)
    return layer, effects


def _flush_out(layer: Membership, gone: str, answering: tuple[str, ...], now: int) -> None:
    """`layer`, the leader, flushes `gone` out of its view on a suspicion; `answering`
    give their states."""
    layer.handle(Suspected(gone), now)
    flush = layer.s.flush
    assert flush is not None
    for m in answering:
        layer.handle(Received(m, MState(flush.target, flush.attempt, layer.view.view_id
                                        if layer.view else 0, ViewReport({}, [])), EMPTY), now)


def _timer(effects: list[Effect]) -> int | None:
    """When the probe timer is (re)armed for, if these effects arm it."""
    times = [e.at for e in effects if isinstance(e, SetTimer) and e.key == MERGE_PROBE]
    return times[-1] if times else None


def _probed(effects: list[Effect]) -> list[str]:
    return [e.to for e in effects if isinstance(e, Send) and isinstance(e.header, MMergeProbe)]


def _run_probes(layer: Membership, due: int, until: int) -> list[tuple[int, list[str]]]:
    """Fire the probe timer whenever it is due, until `until`: (when, whom it probed)."""
    rounds = []
    while due <= until:
        effects = layer.handle(TimerFired(MERGE_PROBE), due)
        rounds.append((due, _probed(effects)))
        nxt = _timer(effects)
        assert nxt is not None, f"the probe timer stopped at {due}"
        due = nxt
    return rounds


def test_the_lost_are_probed_fast_for_a_minute_then_slowly_for_ever() -> None:
    """A leader alone since t=10 probes n2 and n3 every `probe_us` for `probe_for_us`,
    then every `probe_slow_us`, still after an hour. It used to stop probing after
    `probe_for_us`: sides cut apart for longer stayed apart for ever."""
    layer, effects = _alone()
    due = _timer(effects)
    assert due == 10 + FAST
    rounds = _run_probes(layer, due, 3_600_000_000)
    assert all(whom == ["n2", "n3"] for _, whom in rounds)
    times = [t for t, _ in rounds]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    fast = [g for a, g in zip(times, gaps, strict=False) if a < 10 + FOR]
    slow = [g for a, g in zip(times, gaps, strict=False) if a > 10 + FOR + SLOW]
    assert set(fast) == {FAST} and len(fast) >= FOR // FAST - 1
    assert set(slow) == {SLOW} and times[-1] > 3_600_000_000 - SLOW
    assert len(rounds) < FOR // FAST + 3_600_000_000 // SLOW + 2  # no more than that


def _held_while_cut_off(slow_us: int, until_us: int) -> list[int]:
    """An evs stack of n1 in VIEW whose every packet is lost (n2 and n3 crashed, or cut
    off), its timers fired in order until `until_us`: how many of n1's packets to n2
    its channel holds unacknowledged, sampled every second past the removed linger."""
    stack = build_stack("n1", "g", "sequencer", VIEW, OrderingOptions(partitions="evs"))
    (layer,) = [x for x in stack.layers if isinstance(x, Membership)]
    layer.config = layer.s.config = MembershipConfig(partitions="evs", probe_slow_us=slow_us)
    channel = stack.layers[1]
    assert isinstance(channel, OpenChannel)
    due: dict[object, int] = {}
    queue: list[tuple[int, int, object]] = []
    counter = itertools.count()

    def take(outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, SetTimer):
                due[out.key] = out.at
                heapq.heappush(queue, (out.at, next(counter), out.key))
            elif isinstance(out, CancelTimer):
                due.pop(out.key, None)

    take(stack.start(0))
    held = []
    sample = channel.removed_linger_us + slow_us
    while queue and queue[0][0] <= until_us:
        at, _, key = heapq.heappop(queue)
        if due.get(key) != at:
            continue  # moved or cancelled
        del due[key]
        while sample <= at:
            link = channel._out.get("n2")
            held.append(0 if link is None else len(link.unacked) + len(link.waiting))
            sample += 1_000_000
        take(stack.fire(key, at))
    assert layer.view is not None and layer.view.members == ("n1",)
    return held


def test_a_node_probed_for_ever_holds_one_probe_at_a_time_in_the_channel() -> None:
    """The slow period (15 s) is longer than the open channel's guest linger (LINGER_US,
    10 s): between two slow probes of a node that does not answer, the channel forgets
    it (its link numbers kept), so it never holds more than the one probe in flight,
    however long the cut (here 20 minutes). With a period within the linger (planted:
    5 s) each probe keeps the guest, and every unanswered probe stays on its link,
    retransmitted, for ever."""
    assert SLOW > LINGER_US
    held = _held_while_cut_off(SLOW, 1_200_000_000)
    assert len(held) > 1_000 and max(held) == 1
    planted = _held_while_cut_off(5_000_000, 600_000_000)
    assert planted[-1] > 100 and planted == sorted(planted)  # one more every 5 s
    with pytest.raises(LocalProtocolError, match="probe_slow_us"):
        MembershipConfig(partitions="evs", probe_slow_us=FAST - 1)


def test_a_node_lost_meanwhile_is_probed_at_once_not_at_the_next_slow_round() -> None:
    """In the slow phase the timer waits up to `probe_slow_us`; a view that loses a node
    brings it forward to `probe_us`, and only the new node is probed fast."""
    layer = Membership("n1", Sequencer("n1", evs=True), CONFIG)
    layer.handle(ViewInstalled(View(3, ("n1", "n2", "n3", "n4"))), 0)
    _flush_out(layer, "n4", ("n2", "n3"), 20)
    assert layer.view is not None and layer.view.members == ("n1", "n2", "n3")
    assert set(layer.s.lost) == {"n4"}
    late = 20 + FOR + 5 * FAST
    rounds = _run_probes(layer, 20 + FAST, late)
    assert rounds and all(whom == ["n4"] for _, whom in rounds)
    slow_due = layer.s.probe_at
    assert slow_due is not None and slow_due > late + FAST  # waiting for the slow round
    effects: list[Effect] = []
    for m in ("n2", "n3"):  # n2 and n3 cut away: a view of n1 alone
        effects += layer.handle(Suspected(m), late + 1)
    assert layer.view is not None and layer.view.members == ("n1",)
    assert _timer(effects) == late + 1 + FAST
    effects = layer.handle(TimerFired(MERGE_PROBE), late + 1 + FAST)
    assert _probed(effects) == ["n2", "n3"]  # n4 waits for its slow round
    assert _timer(effects) == late + 1 + 2 * FAST


def test_what_a_member_remembers_of_lost_nodes_is_bounded() -> None:
    """A long-lived group that loses members for good (crashes) keeps at most MAX_LOST of
    them, the longest lost forgotten first; a slow round probes no more than that."""
    layer = Membership("n1", Sequencer("n1", evs=True), CONFIG)
    members = ["n1"]
    view = View(1, tuple(members))
    layer.handle(ViewInstalled(view), 0)
    merger = layer.merger
    for k in range(MAX_LOST + 50):
        joined = View(view.view_id + 1, ("n1", f"x{k}"))
        merger.discovery.view_installed(view, joined)
        layer.s.view = joined
        view = View(joined.view_id + 1, ("n1",))
        layer.s.now = 1_000 * k
        merger.discovery.view_installed(joined, view)
        layer.s.view = view
    assert len(layer.s.lost) == MAX_LOST
    assert set(layer.s.lost) == {f"x{k}" for k in range(50, MAX_LOST + 50)}
    effects = layer.handle(TimerFired(MERGE_PROBE), 1_000 * (MAX_LOST + 50) + FOR + 1)
    assert len(_probed(effects)) == MAX_LOST


def test_a_leaver_let_go_is_not_probed_a_crashed_member_is() -> None:
    """n3 asks n1, the leader, to leave; n1's flush, which n3 answers, lets it go: gone
    for good, nobody remembers it as lost — neither n1, nor n2, which answered the same
    flush (a member the install of a flush leaves out answered it: it asked to leave),
    so no runtime keeps its address. A crashed member, left out of the flush's prepare,
    is lost, and probed."""
    target = evs_view_id(VIEW.view_id + 1, "n1")
    for leaves in (True, False):
        n1 = Membership("n1", Sequencer("n1", evs=True), CONFIG)
        n1.handle(ViewInstalled(VIEW), 0)
        if leaves:
            n1.handle(Received("n3", MLeave(), EMPTY), 10)
            flush = n1.s.flush
            assert flush is not None and flush.members == VIEW.members
            for m in ("n2", "n3"):
                n1.handle(Received(m, MState(flush.target, flush.attempt, 3,
                                             ViewReport({}, [])), EMPTY), 20)
        else:
            _flush_out(n1, "n3", ("n2",), 20)
        n2 = Membership("n2", Sequencer("n2", evs=True), CONFIG)
        n2.handle(ViewInstalled(VIEW), 0)
        prepared = list(VIEW.members) if leaves else ["n1", "n2"]
        n2.handle(Received("n1", MPrepare(target, 1, prepared), EMPTY), 10)
        n2.handle(Received("n1", MInstall(target, 1, ["n1", "n2"], []), EMPTY), 20)
        for layer in (n1, n2):
            assert layer.view is not None and layer.view.members == ("n1", "n2")
            assert set(layer.s.lost) == (set() if leaves else {"n3"})
            assert layer.kept_peers() == (frozenset() if leaves else {"n3"})


def test_a_leaving_coordinator_is_not_probed_by_the_members_it_let_go_on() -> None:
    """n1, the leader, leaves: its own flush installs n2 and n3 without it. They answered
    that flush, which listed n1: they know it left, and n2, the new leader, does not
    probe it (nor does n3 keep its address)."""
    target = evs_view_id(VIEW.view_id + 1, "n1")
    for node in ("n2", "n3"):
        layer = Membership(node, Sequencer(node, evs=True), CONFIG)
        layer.handle(ViewInstalled(VIEW), 0)
        layer.handle(Received("n1", MPrepare(target, 1, list(VIEW.members)), EMPTY), 10)
        layer.handle(Received("n1", MInstall(target, 1, ["n2", "n3"], []), EMPTY), 20)
        assert layer.view is not None and layer.view.members == ("n2", "n3")
        assert layer.s.lost == {} and layer.kept_peers() == frozenset()


def test_a_side_heard_from_is_probed_fast_again() -> None:
    """Sides cut apart for long meet again: the first probe heard (here from n2's side:
    n1, lower, starts the merge) puts that side back on the fast period, so a merge given
    up is tried again within `probe_us`, not `probe_slow_us`."""
    layer, effects = _alone("n1")
    later = 10 + FOR + 3 * SLOW + SLOW // 2  # between two slow rounds
    _run_probes(layer, _timer(effects) or 0, later)
    assert layer.s.probe_at is not None and layer.s.probe_at - later > FAST
    probe = MMergeProbe(evs_view_id(9, "n2"), ["n2", "n3"])
    effects = layer.handle(Received("n2", probe, EMPTY), later + 1)
    assert layer.merger.busy  # n1 started the merge
    assert _timer(effects) == later + 1 + FAST
    layer.handle(TimerFired("m-merge-timeout"), later + 2)  # given up
    assert not layer.merger.busy
    effects = layer.handle(TimerFired(MERGE_PROBE), later + 1 + FAST)
    assert _probed(effects) == ["n2", "n3"]


def test_a_stack_keeps_talking_to_the_nodes_its_membership_probes() -> None:
    """`Stack.peers` (a runtime keeps these addresses: abcast.runtime.node, `prune_peers`)
    holds the nodes discovery probes, for as long as it probes them — after the channel
    forgot them too. It held the channel's alone, which forgets a silent removed member
    after `removed_linger_us`: the probes that go on after it had no address to go to."""
    stack = build_stack("n1", "g", "sequencer", VIEW, OrderingOptions(partitions="evs"))
    stack.start(0)
    top = len(stack.layers) - 1
    stack._run([(top, Suspected("n2")), (top, Suspected("n3"))], 10)
    (layer,) = [x for x in stack.layers if isinstance(x, Membership)]
    assert layer.view is not None and layer.view.members == ("n1",)
    channel = stack.layers[1]
    assert isinstance(channel, OpenChannel)
    later = 10 + channel.removed_linger_us + 1
    for m in ("n2", "n3"):
        stack.fire((1, ("linger", m)), later)
    assert channel.kept_peers() == frozenset()  # the channel forgot them
    assert stack.peers() == {"n1", "n2", "n3"}
