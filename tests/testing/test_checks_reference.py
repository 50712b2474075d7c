"""Differential test: on random messy traces (duplicates, holes, unsent messages, crashes,
views, private starts, two groups, optimistic deliveries), the indexed checks count
exactly what a naive, line-by-line transcription of docs/checks.md counts, unit for unit
(joiners' snapshots included)."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.ids import node_sort_key, sorted_nodes
from abcast.testing import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    LOCAL_ORDER,
    SAME_VIEW_DELIVERY,
    TOTAL_ORDER,
    UNIFORM_AGREEMENT,
    VALIDITY,
    VIEW_CONSISTENCY,
    VIRTUAL_SYNCHRONY,
    check_events,
    count_by_code,
)
from abcast.trace import GUARANTEES, EventRow, TraceRecorder

NODES = ("n1", "n2", "n3", "n10")
GROUPS = ("g", "h")
Msg = tuple[str | None, str, int]


def reference_counts(rows: list[EventRow]) -> dict[str, int]:
    nodes = {r.node for r in rows}
    crashed = {r.node for r in rows if r.kind == "crash"}
    correct = nodes - crashed
    sends = [r for r in rows if r.kind == "send" and r.node == r.origin]
    sent = {(r.group, r.origin, r.seq) for r in sends}
    dels = [r for r in rows if r.kind == "deliver"]

    def msg(r: EventRow) -> Msg:
        assert r.origin is not None and r.seq is not None
        return (r.group, r.origin, r.seq)

    delivered_by: dict[tuple[str, Msg], list[EventRow]] = defaultdict(list)
    for r in dels:
        delivered_by[(r.node, msg(r))].append(r)
    counts = dict.fromkeys(CODES, 0)
    counts[INTEGRITY_DUPLICATE] = sum(1 for v in delivered_by.values() if len(v) > 1)
    # a crashed origin's seq above all its send rows: its send row may have died with it
    top: dict[tuple[str | None, str], int] = defaultdict(int)
    for g, o, s in sent:
        top[(g, o)] = max(top[(g, o)], s)
    counts[INTEGRITY_UNKNOWN] = sum(
        1 for (_, m) in delivered_by
        if m not in sent and not (m[1] in crashed and m[2] > top[(m[0], m[1])]))
    counts[VALIDITY] = sum(1 for m in sent if m[1] in correct and (m[1], m) not in delivered_by)

    view_rows = {(r.node, r.group, r.view_id) for r in rows if r.kind == "view"}
    groups_with_views = {r.group for r in rows if r.kind == "view"}

    def owed(q: str, d: EventRow) -> bool:
        return q in correct and (d.group not in groups_with_views
                                 or (q, d.group, d.view_id) in view_rows)

    all_msgs = {msg(r) for r in dels}
    for m in all_msgs:
        deliveries = [r for r in dels if msg(r) == m]
        by_correct = [d for d in deliveries if d.node in correct]
        code = AGREEMENT if by_correct else UNIFORM_AGREEMENT
        sources = by_correct or deliveries
        for q in nodes:
            if (q, m) not in delivered_by and any(owed(q, d) for d in sources):
                counts[code] += 1

    def start(q: str, t: int) -> int | None:
        """The t_ns of the recover row that began q's incarnation at t (None: the first)."""
        recovers = [r.t_ns for r in rows if r.kind == "recover" and r.node == q and r.t_ns <= t]
        return max(recovers) if recovers else None

    def own_admission(q: str, g: str | None, s: int | None) -> int | None:
        """The first view row of q's incarnation begun at s, not counting a first row
        that lists q alone."""
        views = sorted((r for r in rows if r.kind == "view" and r.node == q and r.group == g
                        and r.view_id is not None and start(q, r.t_ns) == s),
                       key=lambda r: r.t_ns)
        if views and views[0].members is not None and set(views[0].members) == {q}:
            views = views[1:]
        return views[0].view_id if views else None

    def admission(q: str, g: str | None, t: int) -> int | None:
        """Of q's incarnation at t, else of the latest earlier one that has one."""
        starts = [None, *sorted(r.t_ns for r in rows if r.kind == "recover" and r.node == q)]
        for candidate in reversed(starts[: starts.index(start(q, t)) + 1]):
            found = own_admission(q, g, candidate)
            if found is not None:
                return found
        return None

    def snapshot_top(q: str, g: str | None, o: str, t: int) -> int:
        """The highest s with o#1..s each delivered (by anyone) in a view older than the
        admission view of q's incarnation at t."""
        admitted = admission(q, g, t)
        if admitted is None:
            return 0
        top = 0
        while any(r.group == g and r.origin == o and r.seq == top + 1
                  and r.view_id is not None and r.view_id < admitted for r in dels):
            top += 1
        return top

    for q in nodes:
        mine = sorted((r for r in dels if r.node == q), key=lambda r: r.index or 0)
        for g in GROUPS:
            for o in NODES:
                seqs = [msg(r)[2] for r in mine if r.group == g and r.origin == o]
                if not seqs:
                    continue
                counts[FIFO_ORDER] += sum(1 for a, b in pairwise(seqs) if b < a)
                present = set(seqs)
                stream = [r for r in mine if r.group == g and r.origin == o]

                def above(s: int, stream: list[EventRow] = stream) -> int:
                    """The lowest seq above s that q delivered: it closes s's gap."""
                    return min(msg(r)[2] for r in stream if msg(r)[2] > s)

                def judged_at(s: int, stream: list[EventRow] = stream) -> int:
                    """t_ns of q's first delivery of the seq just above the hole s."""
                    return next(r.t_ns for r in stream if msg(r)[2] == above(s))

                # one unit per gap with a missing seq above the snapshot top
                counts[FIFO_ORDER] += len({
                    above(s) for s in range(min(present) + 1, max(present))
                    if s not in present and s > snapshot_top(q, g, o, judged_at(s))})

    causal_units: set[tuple[str, Msg, str]] = set()
    for d in dels:
        q, m, i = d.node, msg(d), d.index or 0
        grp, o, s = m
        preds: dict[str, int] = defaultdict(int)
        for r in sends:
            if msg(r) == m:
                for o2, k in (r.deps or {}).items():
                    preds[o2] = max(preds[o2], k)
        preds[o] = max(preds[o], s - 1)
        for o2, k in preds.items():
            if k < 1:
                continue
            q_seqs = [msg(r)[2] for r in dels
                      if r.node == q and r.group == grp and r.origin == o2]
            first = min((r for r in dels if r.node == q and msg(r) == m),
                        key=lambda r: (r.index or 0, r.t_ns))
            base = max(min(q_seqs) - 1 if q_seqs else 0, snapshot_top(q, grp, o2, first.t_ns))
            before = {msg(r)[2] for r in dels if r.node == q and r.group == grp and r.origin == o2
                      and (r.index or 0) < i}
            if k > base and any(j not in before for j in range(base + 1, k + 1)):
                causal_units.add((q, m, o2))
    counts[CAUSAL_ORDER] = len(causal_units)

    for g in GROUPS:
        first: dict[str, dict[Msg, int]] = defaultdict(dict)
        for r in sorted(dels, key=lambda r: r.index or 0):
            if r.group == g:
                first[r.node].setdefault(msg(r), r.index or 0)
        ordered = sorted_nodes(list(first))
        for a, p in enumerate(ordered):
            for q in ordered[a + 1:]:
                common = sorted((m for m in first[p] if m in first[q]), key=first[p].__getitem__)
                counts[TOTAL_ORDER] += sum(
                    1 for m1, m2 in pairwise(common) if first[q][m2] < first[q][m1])

    opts = [r for r in rows if r.kind == "opt_deliver"]
    counts[LOCAL_ORDER] = len({(o.node, msg(o)) for o in opts for d in dels
                               if d.node == o.node and msg(d) == msg(o) and o.t_ns > d.t_ns
                               and start(o.node, o.t_ns) == start(d.node, d.t_ns)})
    counts.update(reference_view_counts(rows))
    return counts


def reference_view_counts(rows: list[EventRow]) -> dict[str, int]:
    """docs/checks.md "Views", transcribed line by line."""
    crash_t: dict[str, int] = {}
    for r in rows:
        if r.kind == "crash":
            crash_t[r.node] = min(r.t_ns, crash_t.get(r.node, r.t_ns))
    judged = [r for r in sorted(rows, key=lambda r: r.t_ns)
              if r.node not in crash_t or r.t_ns < crash_t[r.node]]
    views: dict[tuple[str, str | None], list[EventRow]] = defaultdict(list)
    for r in judged:
        if r.kind == "view" and r.view_id is not None:
            views[(r.node, r.group)].append(r)
    for (node, _), seq in views.items():
        if seq[0].members is not None and set(seq[0].members) == {node}:
            del seq[0]

    consistency = 0
    lists: dict[tuple[str | None, int], dict[tuple[str, ...], set[str]]] = defaultdict(
        lambda: defaultdict(set))
    for seq in views.values():
        for r in seq:
            if r.members is not None and r.view_id is not None:
                lists[(r.group, r.view_id)][tuple(sorted(set(r.members)))].add(r.node)
    for by_set in lists.values():
        ranked = sorted(by_set, key=lambda ms: (
            -len(by_set[ms]), node_sort_key(sorted_nodes(list(by_set[ms]))[0]),
            sorted_nodes(list(by_set[ms]))[0], ms))
        deviants = {n for ms in ranked[1:] for n in by_set[ms]}
        consistency += len(deviants)
    for seq in views.values():
        consistency += sum(1 for a, b in pairwise(seq) if (b.view_id or 0) <= (a.view_id or 0))
    # A merge view (nodes moved into it from two or more different views) is installed by
    # every member of its reference set that has no crash row.
    entered: dict[tuple[str | None, int], set[int]] = defaultdict(set)
    for (_, group), seq in views.items():
        for a, b in pairwise(seq):
            if a.view_id is not None and b.view_id is not None and a.view_id != b.view_id:
                entered[(group, b.view_id)].add(a.view_id)
    installed = {(r.node, r.group, r.view_id) for seq in views.values() for r in seq}
    for (group, view_id), sources in entered.items():
        by_set = lists.get((group, view_id))
        if len(sources) < 2 or not by_set:
            continue
        reference = min(by_set, key=lambda ms: (
            -len(by_set[ms]), node_sort_key(sorted_nodes(list(by_set[ms]))[0]),
            sorted_nodes(list(by_set[ms]))[0], ms))
        consistency += sum(1 for n in reference
                           if n not in crash_t and (n, group, view_id) not in installed)

    def delivered(node: str, group: str | None, view: int) -> set[Msg]:
        return {(r.group, r.origin or "", r.seq or 0) for r in judged
                if r.kind == "deliver" and r.node == node and r.group == group
                and r.view_id == view and r.index is not None}

    moved = {(node, group, a.view_id, b.view_id) for (node, group), seq in views.items()
             for a, b in pairwise(seq) if a.view_id != b.view_id}
    synchrony: set[tuple[str, str | None, int | None, Msg]] = set()
    for p, g, v, after in moved:
        for q, g2, v2, after2 in moved:
            if p != q and (g, v, after) == (g2, v2, after2) and v is not None:
                for m in delivered(p, g, v) - delivered(q, g, v):
                    synchrony.add((q, g, v, m))

    in_view = [r for r in judged if r.kind == "deliver" and r.view_id is not None
               and r.index is not None]
    by_message: dict[Msg, set[int]] = defaultdict(set)
    for r in in_view:
        by_message[(r.group, r.origin or "", r.seq or 0)].add(r.view_id or 0)
    split = sum(1 for vs in by_message.values() if len(vs) > 1)
    send_view: dict[Msg, int] = {}
    for r in judged:
        if r.kind == "send" and r.node == r.origin and r.view_id is not None:
            m = (r.group, r.origin, r.seq or 0)
            send_view[m] = min(r.view_id, send_view.get(m, r.view_id))
    early = {(r.node, (r.group, r.origin, r.seq)) for r in in_view
             if (r.group, r.origin, r.seq) in send_view
             and (r.view_id or 0) < send_view[(r.group, r.origin or "", r.seq or 0)]}
    return {VIEW_CONSISTENCY: consistency, VIRTUAL_SYNCHRONY: len(synchrony),
            SAME_VIEW_DELIVERY: split + len(early)}


MEMBER_LISTS = (None, ("self",), ("n1", "n2"), ("n2", "n1", "n3"), ("n1", "n2", "n3"))
message_ids = st.tuples(st.sampled_from(GROUPS), st.sampled_from(NODES), st.integers(1, 4))


@st.composite
def messy_traces(draw: st.DrawFn) -> list[EventRow]:
    """A small pool of messages that nodes deliver in random orders, with duplicates and
    gaps, so pairs of nodes share messages; plus stray ids, views, crashes, opt rows."""
    rec = TraceRecorder("r")
    t = 0
    pool = draw(st.lists(message_ids, min_size=1, max_size=6, unique=True))
    for g, o, s in draw(st.lists(st.one_of(st.sampled_from(pool), message_ids), max_size=8)):
        deps = draw(st.dictionaries(st.sampled_from(NODES), st.integers(0, 4), max_size=3))
        t += 1
        rec.record(o, "send", t, origin=o, seq=s, group=g, deps=deps or None,
                   view_id=draw(st.sampled_from((None, 1, 2))))
    ids = st.one_of(st.sampled_from(pool), st.sampled_from(pool), message_ids)
    events = st.one_of(
        st.tuples(st.just("deliver"), st.sampled_from(NODES), ids,
                  st.sampled_from((None, 1, 2))),
        st.tuples(st.just("deliver"), st.sampled_from(NODES), ids, st.just(1)),
        st.tuples(st.just("opt_deliver"), st.sampled_from(NODES), ids, st.none()),
        st.tuples(st.just("view"), st.sampled_from(NODES), ids, st.sampled_from((0, 1, 2, 3))),
        st.tuples(st.just("crash"), st.sampled_from(NODES), ids, st.none()),
        st.tuples(st.just("recover"), st.sampled_from(NODES), ids, st.none()),
    )
    for kind, node, (g, o, s), view in draw(st.lists(events, min_size=15, max_size=60)):
        t += 1
        if kind in ("deliver", "opt_deliver"):
            rec.record(node, kind, t, origin=o, seq=s, group=g, view_id=view)
        elif kind == "view":
            members = draw(st.sampled_from(MEMBER_LISTS))
            rec.record(node, "view", t, group=g, view_id=view,
                       members=(node,) if members == ("self",) else members)
        else:
            rec.record(node, kind, t)
    return rec.rows()


@settings(max_examples=300, deadline=None)
@given(rows=messy_traces())
def test_indexed_checks_count_what_the_definitions_say(rows: list[EventRow]) -> None:
    found = check_events(rows, GUARANTEES)
    assert count_by_code(found, codes=CODES) == reference_counts(rows)


@st.composite
def view_traces(draw: st.DrawFn) -> list[EventRow]:
    """One group, three nodes stepping through a few views (sometimes out of order, with
    odd member lists, private starts, crashes), delivering a handful of messages in
    whatever view they are in, so pairs of nodes often move on together."""
    rec = TraceRecorder("v")
    nodes = ("n1", "n2", "n10")
    pool = [("g", o, s) for o in nodes for s in (1, 2)]
    t = 0
    current: dict[str, int | None] = dict.fromkeys(nodes)
    for _, o, s in pool:
        t += 1
        rec.record(o, "send", t, origin=o, seq=s, group="g",
                   view_id=draw(st.sampled_from((None, 1, 2, 3))))
    steps = st.one_of(
        st.tuples(st.just("view"), st.sampled_from(nodes), st.sampled_from((-1, -1, 0, 2))),
        st.tuples(st.just("view"), st.sampled_from(nodes), st.just(-1)),
        st.tuples(st.just("deliver"), st.sampled_from(nodes), st.integers(0, len(pool) - 1)),
        st.tuples(st.just("deliver"), st.sampled_from(nodes), st.integers(0, len(pool) - 1)),
    )
    crash = st.tuples(st.just("crash"), st.sampled_from(nodes), st.just(0))
    for kind, node, arg in draw(st.lists(st.one_of(steps, steps, steps, crash),
                                         min_size=10, max_size=40)):
        t += 1
        if kind == "view":  # -1: the node's next view
            view = (current[node] or 0) + 1 if arg == -1 else arg
            members = draw(st.sampled_from(((node,), nodes, nodes, nodes[:2], None)))
            rec.record(node, "view", t, group="g", view_id=view, members=members)
            current[node] = view
        elif kind == "deliver":
            _, o, s = pool[arg]
            rec.record(node, "deliver", t, origin=o, seq=s, group="g", view_id=current[node])
        else:
            rec.record(node, "crash", t)
    return rec.rows()


@settings(max_examples=300, deadline=None)
@given(rows=view_traces())
def test_view_checks_count_what_the_definitions_say(rows: list[EventRow]) -> None:
    found = check_events(rows, ["virtual_synchrony"])
    codes = (VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY, SAME_VIEW_DELIVERY)
    assert count_by_code(found, codes=codes) == reference_view_counts(rows)
