"""Chandra-Toueg with dynamic membership in the simulator: joins, graceful leaves, crash
removals and partitions, all decided in the same totally ordered sequence as the
messages. Every run is held to the claimed guarantees and to virtual synchrony (the same
view id means the same members everywhere; each message is delivered in the same view
everywhere; members that install v and then v+1 delivered the same set in v); joiners end
with the others' state; planted bugs — a leaver that departs before delivering its last
view, a member that changes view before the batch that changes it — are caught."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import pairwise

import pytest

from abcast.consensus.membership import Batch, MembershipBook, apply_batch
from abcast.effects import Deliver, Effect, InstallView
from abcast.ids import MsgId, NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.chandra_toueg import ChandraToueg
from abcast.ordering.registry import build_stack, get_ordering
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.stack import Stack
from abcast.trace.rows import EventRow

NET = "drop=0.03,dup=0.02,delay=1-15ms"


def vs_problems(rows: Iterable[EventRow]) -> list[str]:
    """Virtual synchrony, as the brief states it, over one run's trace rows."""
    problems: list[str] = []
    members_of: dict[int, set[tuple[str, ...]]] = defaultdict(set)
    views_of: dict[str, list[int]] = defaultdict(list)
    delivered_in: dict[str, dict[int, set[tuple[str, int]]]] = defaultdict(
        lambda: defaultdict(set))
    views_of_msg: dict[tuple[str, int], set[int]] = defaultdict(set)
    for r in rows:
        if r.kind == "view" and r.view_id is not None:
            if r.view_id:  # 0: a joiner's view of itself alone, before it was admitted
                members_of[r.view_id].add(tuple(r.members or ()))
            views_of[r.node].append(r.view_id)
        elif r.kind == "deliver" and r.origin is not None and r.seq is not None:
            view_id = r.view_id if r.view_id is not None else -1
            delivered_in[r.node][view_id].add((r.origin, r.seq))
            views_of_msg[(r.origin, r.seq)].add(view_id)
    problems += [f"view {v} has members {sorted(m)}" for v, m in members_of.items() if len(m) > 1]
    problems += [f"{n} installs views {v}" for n, v in views_of.items()
                 if any(b <= a for a, b in pairwise(v))]
    problems += [f"{m} delivered in views {sorted(v)}" for m, v in views_of_msg.items()
                 if len(v) > 1]
    moved: dict[tuple[int, int], dict[str, frozenset[tuple[str, int]]]] = defaultdict(dict)
    for node, seq in views_of.items():
        for a, b in pairwise(seq):
            if a != 0:
                moved[(a, b)][node] = frozenset(delivered_in[node][a])
    problems += [f"members moving {a}->{b} delivered different sets in {a}"
                 for (a, b), sets in moved.items() if len(set(sets.values())) > 1]
    return problems


def named(faults: str, kind: str) -> set[str]:
    return {item.split("=")[1].split("@")[0] for item in faults.split(",")
            if item.startswith(f"{kind}=")}


def run(
    nodes: int, seed: int, faults: str, messages: int = 250, rate: float | None = None,
    *, rejoin: bool = True,
) -> SimResult:
    result = run_simulation(SimConfig("chandra-toueg", nodes=nodes, messages=messages,
                                      seed=seed, faults=faults, rate=rate),
                            stack_factory=None if rejoin else _stack_of(ChandraToueg, False))
    where = f"abcast sim --ordering chandra-toueg --nodes {nodes} --seed {seed} --faults {faults}"
    assert result.violations == [], (where, result.counts)
    assert vs_problems(result.recorder.rows()) == [], where
    assert result.quiescent, where
    return result


def crashed(result: SimResult) -> set[str]:
    return {r.node for r in result.recorder.rows() if r.kind == "crash"}


# -- joins and leaves ------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [5, 7])
@pytest.mark.parametrize("seed", [1, 2])
def test_a_joiner_starts_from_the_state_at_its_admission(nodes: int, seed: int) -> None:
    joiner = f"n{nodes + 1}"
    result = run(nodes, seed, f"{NET},join={joiner}@60ms")
    rows = result.recorder.rows()
    assert len(set(result.app_states.values())) == 1, "replica states differ"
    assert joiner in result.app_states
    view = next(r for r in rows if r.kind == "view" and r.node == joiner and r.view_id)
    assert view.members is not None and joiner in view.members
    # It delivers exactly what the others deliver from that view on, and nothing before.
    mine = [(r.origin, r.seq) for r in rows if r.kind == "deliver" and r.node == joiner]
    theirs = [(r.origin, r.seq) for r in rows if r.kind == "deliver" and r.node == "n1"
              and (r.view_id or 0) >= (view.view_id or 0)]
    assert mine == theirs and mine


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_leaver_delivers_its_last_view_then_departs(seed: int) -> None:
    result = run(5, seed, f"{NET},leave=n2@70ms")
    assert result.departed == ("n2",)
    rows = result.recorder.rows()
    views = [r.members for r in rows if r.kind == "view" and r.node == "n1"]
    assert views[-1] == ("n1", "n3", "n4", "n5")
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node == "n2"}
    got = {(r.origin, r.seq) for r in rows if r.kind == "deliver" and r.node == "n2"}
    assert sent <= got  # its own broadcasts were decided before it left


@pytest.mark.parametrize("faults", [
    "join=n8@30ms,leave=n1@40ms,join=n9@50ms",  # the lowest member (first welcomer) leaves
    f"{NET},join=n8@20ms,crash=n3@25ms,leave=n5@200ms",
    f"{NET},crash=n1@0ms,join=n8@10ms,join=n9@15ms,leave=n2@300ms",
    "delay=1-10ms,join=n8@10ms,leave=n8@12ms",  # asked to leave before it was admitted
])
def test_churn_keeps_views_consistent_and_states_equal(faults: str) -> None:
    result = run(7, 4, faults)
    staying = ({f"n{i}" for i in range(1, 8)} | named(faults, "join")) - named(
        faults, "leave") - named(faults, "crash")
    assert set(result.app_states) == staying
    assert len(set(result.app_states.values())) == 1
    assert set(result.departed) == named(faults, "leave")


def test_a_one_node_group_admits_a_joiner_and_leaves_it_alone() -> None:
    result = run(1, 1, "join=n2@5ms,leave=n1@50ms", messages=40)
    assert result.departed == ("n1",) and set(result.app_states) == {"n2"}
    rows = result.recorder.rows()
    assert [r.members for r in rows if r.kind == "view" and r.node == "n2"][-1] == ("n2",)


# -- partitions ------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
def test_a_short_partition_heals_and_the_minority_catches_up(seed: int) -> None:
    # open loop: broadcasts go on during the partition on both sides
    result = run(5, seed, "delay=1-10ms,partition=n1+n2|n3+n4+n5@100ms-600ms", messages=300,
                 rate=300)
    rows = result.recorder.rows()
    sent_during = {(r.origin, r.seq) for r in rows if r.kind == "send"
                   and 100_000_000 <= r.t_ns < 600_000_000}
    minority_then = {(r.origin, r.seq) for r in rows if r.kind == "deliver"
                     and r.node in ("n1", "n2") and 100_000_000 <= r.t_ns < 600_000_000}
    assert sent_during and not sent_during & minority_then  # it decided nothing new
    assert not crashed(result) and result.delivered == 5 * 300


@pytest.mark.parametrize("seed", range(3))
def test_without_rejoin_a_long_partition_removes_the_minority_for_good(seed: int) -> None:
    # (with rejoin, the default, they come back: tests/sim/test_ct_rejoin_partition.py)
    result = run(5, seed, "drop=0.03,delay=1-10ms,partition=n4+n5|n1+n2+n3@100ms-3s",
                 rate=100, rejoin=False)
    rows = result.recorder.rows()
    sent_during = {(r.origin, r.seq) for r in rows if r.kind == "send"
                   and 100_000_000 <= r.t_ns < 3_000_000_000}
    minority = {(r.origin, r.seq) for r in rows if r.kind == "deliver"
                and r.node in ("n4", "n5")}
    assert sent_during and not sent_during & minority
    assert crashed(result) == {"n4", "n5"}  # they stopped when they heard of it
    assert [r.members for r in rows if r.kind == "view" and r.node == "n1"][-1] == (
        "n1", "n2", "n3")


def test_chandra_toueg_honours_every_fault_kind() -> None:
    get_ordering("chandra-toueg").refuse_faults({"join", "leave", "crash", "partition", "drop"})


# -- the membership rules on their own ---------------------------------------------------


def test_a_batch_changes_the_membership_the_same_way_everywhere() -> None:
    members = ("n1", "n2", "n3", "n4")
    batch = Batch((MsgId("n1", 1),), remove=("n2",), add=("n10", "n5"))
    assert apply_batch(members, batch) == ("n1", "n3", "n4", "n5", "n10")
    assert apply_batch(members, Batch((MsgId("n1", 1),))) == members


def test_a_leaver_is_removed_only_with_its_last_broadcast() -> None:
    book = MembershipBook("n1")
    book.note_leave("n3", 4)
    members = ("n1", "n2", "n3")
    assert book.changes(members, {"n3": 4}, ()) == ((), ())  # n3#4 still undecided
    assert book.changes(members, {"n3": 5}, ()) == (("n3",), ())
    assert book.changes(members, {"n3": 5}, (), cut_short=("n3",)) == ((), ())


def test_a_side_that_suspects_a_majority_proposes_no_removals() -> None:
    book = MembershipBook("n4")
    members = ("n1", "n2", "n3", "n4", "n5")
    assert book.changes(members, {}, ("n1", "n2", "n3")) == ((), ())
    assert book.changes(members, {}, ("n1", "n2")) == (("n1", "n2"), ())


def test_a_joiner_is_proposed_until_added_and_after_removal_only_on_its_own_ask() -> None:
    book = MembershipBook("n1")
    assert book.note_join("n9", ("n1", "n2")) and not book.note_join("n9", ("n1", "n2"))
    assert book.changes(("n1", "n2"), {}, ()) == ((), ("n9",))
    book.decided(3, Batch(add=("n9",)), ("n1", "n2"), ("n1", "n2", "n9"), {})
    assert not book.joiners
    assert not book.note_join("n9", ("n1", "n2", "n9"))  # a member already
    book.decided(4, Batch(remove=("n9",)), ("n1", "n2", "n9"), ("n1", "n2"), {})
    # a forward may be the old ask that admitted it, retransmitted after a heal
    assert not book.note_join("n9", ("n1", "n2"), direct=False)
    assert book.changes(("n1", "n2"), {}, ()) == ((), ())
    assert book.note_join("n9", ("n1", "n2"), direct=True)  # it comes back
    assert book.changes(("n1", "n2"), {}, ()) == ((), ("n9",))


# -- planted bugs ------------------------------------------------------------------------


class LeavesAtOnce(ChandraToueg):
    """Departs as soon as it learns of its removal, before delivering the batches up to
    it (the pre-membership behaviour)."""

    def _decide(self, batch: Batch, source: NodeId) -> list[Effect]:
        effects = super()._decide(batch, source)
        if self.removed and self.view is not None:
            self.phase = "stopped"
            self.view = View(self.view.view_id + 1, self.members)
            effects.append(InstallView(self.view))
        return effects


class ChangesViewFirst(ChandraToueg):
    """The lowest member installs a batch's new view before delivering its messages."""

    def deliver_ready(self) -> list[Effect]:
        effects = super().deliver_ready()
        if self.node != min(self.members, default=""):
            return effects
        views = [e for e in effects if isinstance(e, InstallView)]
        deliveries = [e for e in effects if isinstance(e, Deliver)]
        rest = [e for e in effects if not isinstance(e, (InstallView, Deliver))]
        return [*views, *deliveries, *rest]


def _stack_of(
    core: type[ChandraToueg], rejoin: bool = True
) -> Callable[[NodeId, View], Stack]:
    def make(node: NodeId, view: View) -> Stack:
        layers = [OpenDetector(node), OpenChannel(node), core(node, rejoin=rejoin)]
        return Stack(node, "g", layers, view)
    return make


def test_a_leaver_that_departs_early_is_caught() -> None:
    found = 0
    for seed in range(4):
        result = run_simulation(
            SimConfig("chandra-toueg", nodes=5, messages=250, seed=seed,
                      faults=f"{NET},leave=n2@50ms,leave=n4@80ms"),
            stack_factory=_stack_of(LeavesAtOnce),
        )
        found += result.counts.get("AGREEMENT", 0) + result.counts.get("VALIDITY", 0)
    assert found > 0


def test_changing_view_before_the_batch_is_caught() -> None:
    problems: list[str] = []
    for seed in range(2):
        result = run_simulation(
            SimConfig("chandra-toueg", nodes=5, messages=200, seed=seed,
                      faults=f"{NET},join=n6@40ms,crash=n3@90ms"),
            stack_factory=_stack_of(ChangesViewFirst),
        )
        problems += vs_problems(result.recorder.rows())
    assert any("delivered in views" in p for p in problems), problems


def test_the_standard_stack_is_open() -> None:
    stack = build_stack("n1", "g", "chandra-toueg", View(1, ("n1",)))
    assert [type(layer) for layer in stack.layers] == [OpenDetector, OpenChannel, ChandraToueg]


# -- a leaver cut off by a partition, without rejoin -------------------------------------
# (with rejoin it comes back and leaves from there: tests/sim/test_ct_rejoin_leaver.py)

# n2 asks to leave while n1+n2 are cut off in a minority: the majority removes them before
# n2's leave (or its last broadcast) is decided. Planted (`ClaimsItLeft`), seeds 4 and 7
# lose the end of n2's last view or its last broadcast while n2 passes for departed.
CUT_OFF_LEAVER = (
    "drop=0.03,dup=0.02,delay=1-20ms,partition=n4+n5|n1+n2+n3+n6@834ms-1302ms,"
    "partition=n1+n2|*@3055ms-6192ms,join=n7@3426ms,crash=n4@1899ms,leave=n2@5200ms"
)


class ClaimsItLeft(ChandraToueg):
    """Planted: a leaver removed before its leave was decided still says it left."""

    @property
    def cut_off(self) -> bool:
        return False

    @cut_off.setter
    def cut_off(self, value: bool) -> None:
        pass


@pytest.mark.parametrize("seed", [4, 7])
def test_a_leaver_removed_before_its_leave_was_decided_is_removed_not_departed(
    seed: int,
) -> None:
    result = run(6, seed, CUT_OFF_LEAVER, messages=200, rejoin=False)
    assert "n2" in crashed(result)  # the trace shows the removal (the Isis rule)
    assert "n2" not in result.departed


def test_a_member_removed_before_it_broadcasts_and_leaves_is_removed_not_departed() -> None:
    # The group removes n1 (cut off with n2, n4) at about 5.1 s; n1 hears of it only after
    # the heal, broadcasts once more (lost: the group no longer counts it) and then asks
    # to leave: that was no graceful leave.
    faults = ("drop=0.03,dup=0.02,delay=1-20ms,partition=n1+n3+n6|n2+n4+n5+n7@1401ms-1645ms,"
              "partition=n4+n6|*@3677ms-6340ms,partition=n1+n2+n4|n3+n5+n6+n7@3983ms-5574ms,"
              "join=n8@240ms,crash=n2@4206ms,leave=n1@5627ms")
    result = run(7, 12, faults, messages=200, rejoin=False)
    assert "n1" in crashed(result)
    assert result.departed == ()


def test_a_cut_off_leaver_that_claims_it_left_is_caught() -> None:
    found = 0
    for seed in (4, 7):
        result = run_simulation(
            SimConfig("chandra-toueg", nodes=6, messages=200, seed=seed, faults=CUT_OFF_LEAVER),
            stack_factory=_stack_of(ClaimsItLeft, rejoin=False),
        )
        found += result.counts.get("AGREEMENT", 0) + result.counts.get("VALIDITY", 0)
    assert found > 0
