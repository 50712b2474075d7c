"""Differential test: on random messy traces (duplicates, holes, unsent messages, crashes,
views, two groups, optimistic deliveries), the indexed checks count exactly what a naive,
line-by-line transcription of docs/checks.md counts, unit for unit."""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.ids import sorted_nodes
from abcast.testing import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    LOCAL_ORDER,
    TOTAL_ORDER,
    UNIFORM_AGREEMENT,
    VALIDITY,
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
    counts[INTEGRITY_UNKNOWN] = sum(1 for (_, m) in delivered_by if m not in sent)
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

    for q in nodes:
        mine = sorted((r for r in dels if r.node == q), key=lambda r: r.index or 0)
        for g in GROUPS:
            for o in NODES:
                seqs = [msg(r)[2] for r in mine if r.group == g and r.origin == o]
                if not seqs:
                    continue
                counts[FIFO_ORDER] += sum(1 for a, b in pairwise(seqs) if b < a)
                present = set(seqs)
                counts[FIFO_ORDER] += sum(
                    1 for s in range(min(present) + 1, max(present)) if s not in present)

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
            base = min(q_seqs) - 1 if q_seqs else 0
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
                               if d.node == o.node and msg(d) == msg(o) and o.t_ns > d.t_ns})
    return counts


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
        rec.record(o, "send", t, origin=o, seq=s, group=g, deps=deps or None)
    ids = st.one_of(st.sampled_from(pool), st.sampled_from(pool), message_ids)
    events = st.one_of(
        st.tuples(st.just("deliver"), st.sampled_from(NODES), ids,
                  st.sampled_from((None, 1, 2))),
        st.tuples(st.just("deliver"), st.sampled_from(NODES), ids, st.just(1)),
        st.tuples(st.just("opt_deliver"), st.sampled_from(NODES), ids, st.none()),
        st.tuples(st.just("view"), st.sampled_from(NODES), ids, st.sampled_from((1, 2))),
        st.tuples(st.just("crash"), st.sampled_from(NODES), ids, st.none()),
    )
    for kind, node, (g, o, s), view in draw(st.lists(events, min_size=15, max_size=60)):
        t += 1
        if kind in ("deliver", "opt_deliver"):
            rec.record(node, kind, t, origin=o, seq=s, group=g, view_id=view)
        elif kind == "view":
            rec.record(node, "view", t, group=g, view_id=view)
        else:
            rec.record(node, "crash", t)
    return rec.rows()


@settings(max_examples=300, deadline=None)
@given(rows=messy_traces())
def test_indexed_checks_count_what_the_definitions_say(rows: list[EventRow]) -> None:
    found = check_events(rows, GUARANTEES)
    assert count_by_code(found, codes=CODES) == reference_counts(rows)
