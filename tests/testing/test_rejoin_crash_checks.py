"""FIFO_ORDER and CAUSAL_ORDER judge each delivery with the snapshot of the incarnation it
belongs to (docs/checks.md, "Joiners and rejoined nodes"): a node's `recover` rows begin
new incarnations, each admitted in the first view after its start. A node that rejoined
and later really crashed keeps its rejoin snapshot (the bug: its last crash row, with no
view after it, hid that snapshot and its catch-up looked like FIFO holes), faults after
the rejoin are still found, and its first incarnation no longer borrows the snapshot of
its second."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import flapping_faults
from abcast.testing import (
    CAUSAL_ORDER,
    FIFO_ORDER,
    TraceBuilder,
    check_causal,
    check_fifo,
    count_by_code,
)
from abcast.testing.builders import rejoined_then_crashed
from abcast.trace import EventRow, TraceRecorder

ORDER_CODES = (FIFO_ORDER, CAUSAL_ORDER)
Msg = tuple[str | None, str, int]


def _order_counts(rows: list[EventRow]) -> dict[str, int]:
    return count_by_code(check_fifo(rows) + check_causal(rows), ORDER_CODES)


def test_rejoin_crash_a_clean_rejoined_then_crashed_node_has_no_hole() -> None:
    assert _order_counts(rejoined_then_crashed().rows()) == {FIFO_ORDER: 0, CAUSAL_ORDER: 0}


def test_rejoin_crash_a_later_recover_without_a_view_keeps_the_rejoin_snapshot() -> None:
    rows = rejoined_then_crashed(recover_again=True).rows()
    assert _order_counts(rows) == {FIFO_ORDER: 0, CAUSAL_ORDER: 0}


def test_rejoin_crash_a_hole_after_the_rejoin_is_still_found() -> None:
    rows = rejoined_then_crashed(skip_after=True).rows()
    holes = check_fifo(rows)
    assert [(v.nodes, v.messages) for v in holes] == [(("n3",), (("g", "n1", 7),))]
    # n1#8 (its own predecessor) and n2#1 (deps n1#1..8) both miss n1#7 at n3
    causal = check_causal(rows)
    assert sorted((v.messages[0], v.messages[1]) for v in causal) == [
        (("g", "n1", 8), ("g", "n1", 7)), (("g", "n2", 1), ("g", "n1", 7))]


def test_rejoin_crash_a_first_incarnation_hole_is_not_excused_by_a_later_snapshot() -> None:
    """n3 skipped n1#2 before it was cut off; its second incarnation's state holds n1#2,
    but the delivery that skipped it (n1#3) belongs to the first one, which had none."""
    rows = rejoined_then_crashed(skip_before=True).rows()
    assert [(v.nodes, v.messages) for v in check_fifo(rows)] == [(("n3",), (("g", "n1", 2),))]
    assert [(v.messages, v.positions) for v in check_causal(rows)] == [
        ((("g", "n1", 3), ("g", "n1", 2)), (2,))]


def test_rejoin_crash_a_second_group_keeps_its_snapshot_across_a_recover() -> None:
    """n3 joined group h late (state n1#1..2) and then rejoined group g (crash, recover,
    rows without a group as a builder writes them): no h view follows the recover, so
    in h it keeps its admission, and n2#1 (deps n1#1..2) misses no predecessor there."""
    b = TraceBuilder("two-groups", group="h")
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2"])
    b.view("n3", 0, ["n3"])
    b.deliver_all(["n1", "n2"], [b.send("n1"), b.send("n1")])
    for node in ("n1", "n2", "n3"):
        b.view(node, 2, ["n1", "n2", "n3"])
    b.crash("n3")
    b.recover("n3")
    b.view("n3", 5, ["n1", "n3"], group="g")
    b.deliver_all(["n1", "n2", "n3"], [b.send("n2", deps={"n1": 2})])
    assert _order_counts(b.rows()) == {FIFO_ORDER: 0, CAUSAL_ORDER: 0}


def _rejoined_then_crashed_nodes(rows: list[EventRow]) -> set[str]:
    """Nodes with a `recover` row, a view after it, and a later crash with no view
    after that: the situation this file is about."""
    out: set[str] = set()
    for node in {r.node for r in rows if r.kind == "recover"}:
        mine = sorted((r for r in rows if r.node == node), key=lambda r: r.t_ns)
        kinds = [r.kind for r in mine if r.kind in ("view", "crash", "recover")]
        last_crash = len(kinds) - 1 - kinds[::-1].index("crash")
        rejoined = "view" in kinds[kinds.index("recover"):last_crash]
        if rejoined and "view" not in kinds[last_crash:] and "recover" not in kinds[last_crash:]:
            out.add(node)
    return out


def test_rejoin_crash_a_flapping_chandra_toueg_run_is_in_order() -> None:
    """Seed 30 of the flapping sweep: n5 rejoins in view 6 and crashes at 3512 ms; judged
    as one incarnation with its first admission, its catch-up was 27 false FIFO_ORDER
    and 24 false CAUSAL_ORDER units."""
    seed = 30
    nodes = random.Random(seed).choice((6, 7, 8))
    faults = flapping_faults(random.Random(seed), nodes)
    result = run_simulation(SimConfig("chandra-toueg", nodes=nodes, messages=200,
                                      seed=seed, faults=faults))
    rows = result.recorder.rows()
    assert "n5" in _rejoined_then_crashed_nodes(rows)
    assert _order_counts(rows) == {FIFO_ORDER: 0, CAUSAL_ORDER: 0}


# ---------------------------------------------------------------- the definitions, naively


def reference_order_counts(rows: list[EventRow]) -> dict[str, int]:
    """FIFO_ORDER and CAUSAL_ORDER as docs/checks.md defines them with incarnations,
    transcribed line by line (no index, no cleverness)."""
    dels = [r for r in rows if r.kind == "deliver" and r.origin is not None
            and r.seq is not None and r.index is not None]

    def msg(r: EventRow) -> Msg:
        assert r.origin is not None and r.seq is not None
        return (r.group, r.origin, r.seq)

    def start(q: str, t: int) -> int | None:
        """The t_ns of the recover row that began q's incarnation at t (None: the first)."""
        recovers = [r.t_ns for r in rows if r.kind == "recover" and r.node == q and r.t_ns <= t]
        return max(recovers) if recovers else None

    def own_admission(q: str, g: str | None, s: int | None) -> int | None:
        views = sorted((r for r in rows if r.kind == "view" and r.node == q and r.group == g
                        and r.view_id is not None and start(q, r.t_ns) == s),
                       key=lambda r: r.t_ns)
        if views and views[0].members is not None and set(views[0].members) == {q}:
            views = views[1:]
        return views[0].view_id if views else None

    def admission(q: str, g: str | None, t: int) -> int | None:
        """Of the incarnation at t, else of the latest earlier one that has one."""
        s = start(q, t)
        starts = [None, *sorted(r.t_ns for r in rows if r.kind == "recover" and r.node == q)]
        for candidate in reversed(starts[: starts.index(s) + 1]):
            found = own_admission(q, g, candidate)
            if found is not None:
                return found
        return None

    def snap(q: str, g: str | None, o: str, t: int) -> int:
        admitted = admission(q, g, t)
        if admitted is None:
            return 0
        top = 0
        while any(msg(r) == (g, o, top + 1) and r.view_id is not None
                  and r.view_id < admitted for r in dels):
            top += 1
        return top

    fifo = 0
    streams: dict[tuple[str, str | None, str], list[EventRow]] = defaultdict(list)
    for r in sorted(dels, key=lambda r: (r.index or 0, r.t_ns)):
        streams[(r.node, r.group, msg(r)[1])].append(r)
    for (q, g, o), mine in streams.items():
        seqs = [msg(r)[2] for r in mine]
        fifo += sum(1 for a, b in pairwise(seqs) if b < a)
        for s in range(min(seqs) + 1, max(seqs)):
            if s in seqs:
                continue
            above = min(x for x in seqs if x > s)
            first_above = next(r for r in mine if msg(r)[2] == above)
            fifo += s > snap(q, g, o, first_above.t_ns)

    causal: set[tuple[str, Msg, str]] = set()
    sends = [r for r in rows if r.kind == "send" and r.node == r.origin and r.seq is not None]
    for (q, g, o), mine in streams.items():
        for d in mine:
            m = msg(d)
            if next(r for r in mine if msg(r) == m) is not d:
                continue  # judged at the first delivery
            preds: dict[str, int] = defaultdict(int)
            for r in sends:
                if msg(r) == m:
                    for o2, k in (r.deps or {}).items():
                        preds[o2] = max(preds[o2], k)
            preds[o] = max(preds[o], m[2] - 1)
            for o2, k in preds.items():
                q_seqs = [msg(r)[2] for r in streams.get((q, g, o2), [])]
                base = max(min(q_seqs) - 1 if q_seqs else 0, snap(q, g, o2, d.t_ns))
                before = {msg(r)[2] for r in streams.get((q, g, o2), [])
                          if (r.index or 0) < (d.index or 0)}
                if k >= 1 and k > base and any(j not in before
                                               for j in range(base + 1, k + 1)):
                    causal.add((q, m, o2))
    return {FIFO_ORDER: fifo, CAUSAL_ORDER: len(causal)}


@st.composite
def incarnation_traces(draw: st.DrawFn) -> list[EventRow]:
    """Three nodes, one group (sometimes a second), messages delivered in whatever view
    a node is in, views installed, crashes and recovers at any time, so nodes have several
    incarnations, with and without views of their own."""
    rec = TraceRecorder("inc")
    nodes = ("n1", "n2", "n3")
    t = 0
    for o in nodes:
        for s in (1, 2, 3):
            deps = draw(st.dictionaries(st.sampled_from(nodes), st.integers(0, 3), max_size=2))
            t += 1
            rec.record(o, "send", t, origin=o, seq=s, group="g", deps=deps or None)
    current: dict[str, int | None] = dict.fromkeys(nodes)
    step = st.one_of(
        st.tuples(st.just("deliver"), st.sampled_from(nodes), st.sampled_from(nodes),
                  st.integers(1, 3)),
        st.tuples(st.just("deliver"), st.sampled_from(nodes), st.sampled_from(nodes),
                  st.integers(1, 3)),
        st.tuples(st.just("view"), st.sampled_from(nodes), st.just(""), st.integers(0, 4)),
        st.tuples(st.just("crash"), st.sampled_from(nodes), st.just(""), st.just(0)),
        st.tuples(st.just("recover"), st.sampled_from(nodes), st.just(""), st.just(0)),
    )
    for kind, node, origin, arg in draw(st.lists(step, min_size=10, max_size=45)):
        t += 1
        if kind == "deliver":
            group = draw(st.sampled_from(("g", "g", "g", "h")))
            rec.record(node, "deliver", t, origin=origin, seq=arg, group=group,
                       view_id=current[node])
        elif kind == "view":
            members = draw(st.sampled_from(((node,), nodes, None)))
            rec.record(node, "view", t, group="g", view_id=arg, members=members)
            current[node] = arg
        else:
            rec.record(node, kind, t, group=draw(st.sampled_from(("g", None))))
    return rec.rows()


@settings(max_examples=200, deadline=None)
@given(rows=incarnation_traces())
def test_rejoin_crash_indexed_checks_count_what_the_definitions_say(
        rows: list[EventRow]) -> None:
    assert _order_counts(rows) == reference_order_counts(rows)
