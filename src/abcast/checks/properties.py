"""The in-memory trace checks: docs/checks.md, definition for definition and unit for unit.

Rules: one function per property, each usable alone on any rows (it checks each run_id
found among them separately); `check_events` runs the ones a run's guarantees claim and
`check_traces` does that for every run. Every violation is one unit of its code, so
`len()` of a code's violations is the number the Spark pipeline must report too. The
choices docs/checks.md leaves open are made here, once:

- node order (TOTAL_ORDER's p < q) is abcast.ids node order (n2 before n10), ties by
  the raw string;
- a node's deliveries are in DELIVERY_ORDER (abcast.checks.facts: position, ties by
  t_ns, then by message), which FIFO descents and TOTAL_ORDER walk;
- where a node delivered a message more than once, its position for TOTAL_ORDER is its
  first delivery; for CAUSAL_ORDER the unit is judged at the first delivery too, with
  the snapshot of that delivery's incarnation (within one incarnation this counts the
  same as "violated at any of its deliveries": a later copy has more before it);
- a delivered message without a `send` row still has its origin's earlier broadcasts
  as causal predecessors (its deps are empty);
- a crashed origin's message with a seq above every send row it wrote is not
  INTEGRITY_UNKNOWN: a killed node's last rows die with it (`RunFacts.lost_with_crash`);
- LOCAL_ORDER compares, per incarnation of the node (its `recover` rows begin new ones),
  the latest `opt_deliver` with the earliest `deliver` of m in it (the same as "some
  opt_deliver row is later than some deliver row of the same incarnation"); one unit per
  (node, m), reported at its first such incarnation, with the positions of those two
  rows (ties in t_ns by index: TIME_ORDER);
- rows a check cannot place are skipped, and a null group is one group of its own
  (abcast.checks.facts says which).
- a joiner's snapshot (docs/checks.md, "Joiners and rejoined nodes") is a prefix
  o#1..top per origin (`RunFacts.snapshot_top`), one per incarnation (a node's
  `recover` rows begin new ones): FIFO_ORDER skips the seqs of a gap up to the top of
  the incarnation of its first delivery of the seq above the gap, CAUSAL_ORDER raises
  `base` to the top of the incarnation of q's first delivery of m. Positions and
  descents still run over the node's whole sequence.
- the view codes (VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY, SAME_VIEW_DELIVERY) make their
  own choices, listed in abcast.checks.views.

Counterexample layout (`nodes`, `messages`, `positions`) per code:

| code | nodes | messages | positions |
|---|---|---|---|
| INTEGRITY_DUPLICATE | (node,) | (m,) | every position m was delivered at |
| INTEGRITY_UNKNOWN | (node,) | (m,) | every position m was delivered at |
| VALIDITY | (origin,) | (m,) | () |
| AGREEMENT, UNIFORM_AGREEMENT | (q, p) p: a deliverer owing q | (m,) | (p's position,) |
| FIFO_ORDER descent | (q,) | (m, then m' with a lower seq) | (m's, m''s position) |
| FIFO_ORDER hole | (q,) | (its lowest missing m, its highest if another) | () |
| CAUSAL_ORDER | (q,) | (m, a missing predecessor: `Reach.missing`) | (m's, predecessor's if ever) |
| TOTAL_ORDER | (p, q) | (m1, m2) adjacent in p | (p's of m1, m2, q's of m1, m2) |
| LOCAL_ORDER | (node,) | (m,) | (deliver index, opt_deliver index) |
| VIEW_CONSISTENCY membership | (node, reference holder) | () | (deviating view row index,) |
| VIEW_CONSISTENCY order | (node,) | () | (previous, this view row index) |
| VIRTUAL_SYNCHRONY | (q, p) p moved on with q | (m,) | (p's position of m in v,) |
| SAME_VIEW_DELIVERY split | (p lowest view, q highest) | (m,) | (p's, q's position) |
| SAME_VIEW_DELIVERY early | (q, origin) | (m,) | (q's position in the older view,) |

Messages are `(group, origin, seq)` tuples. Nothing here reads files (abcast.trace does).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from itertools import pairwise
from typing import Final

from abcast.checks.facts import (
    Delivery,
    RunFacts,
    StreamKey,
    Violation,
    node_order,
    time_order,
)
from abcast.checks.facts import show_message as _show
from abcast.checks.views import check_views
from abcast.errors import LocalProtocolError
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
    GUARANTEE_CODES,
    GUARANTEES,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    LOCAL_ORDER,
    TOTAL_ORDER,
    UNIFORM_AGREEMENT,
    VALIDITY,
)

__all__ = [
    "Violation", "check_agreement", "check_causal", "check_events", "check_fifo",
    "check_integrity", "check_local_order", "check_total_order", "check_traces",
    "check_uniform_agreement", "check_validity", "check_virtual_synchrony", "codes_for",
    "count_by_code", "validate_guarantees",
]

def validate_guarantees(guarantees: Iterable[str]) -> tuple[str, ...]:
    """The guarantee names, deduplicated, in GUARANTEES order; LocalProtocolError for a
    name that is not one of GUARANTEES (or for a bare string, a common slip)."""
    if isinstance(guarantees, str):
        raise LocalProtocolError(
            f"guarantees must be a collection of names, not the string {guarantees!r}")
    given = set(guarantees)
    unknown = sorted(given - set(GUARANTEES))
    if unknown:
        raise LocalProtocolError(f"unknown guarantees {unknown}; expected names from "
                                 f"{GUARANTEES}")
    return tuple(g for g in GUARANTEES if g in given)


def codes_for(guarantees: Iterable[str]) -> tuple[str, ...]:
    """The codes a run claiming these guarantees is checked for."""
    return tuple(code for g in validate_guarantees(guarantees) for code in GUARANTEE_CODES[g])


# ---------------------------------------------------------------- integrity, validity


def _integrity(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for node, by_message in f.positions.items():
        for m, positions in by_message.items():
            if len(positions) > 1:
                out.append(Violation(
                    f.run_id, INTEGRITY_DUPLICATE, (node,), (m,), tuple(positions),
                    f"{node} delivered {_show(m)} {len(positions)} times"))
            if m not in f.sent and not f.lost_with_crash(m):
                out.append(Violation(
                    f.run_id, INTEGRITY_UNKNOWN, (node,), (m,), tuple(positions),
                    f"{node} delivered {_show(m)}, which {m[1]} never sent"))
    return out


def _validity(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for m in f.sent:
        origin = m[1]
        if origin in f.crashed or m in f.positions.get(origin, {}):
            continue
        out.append(Violation(f.run_id, VALIDITY, (origin,), (m,), (),
                             f"correct {origin} sent {_show(m)} and never delivered it"))
    return out


# ---------------------------------------------------------------- agreement


def _agreement(f: RunFacts, *, uniform: bool) -> list[Violation]:
    """AGREEMENT (m delivered by a correct node) or UNIFORM_AGREEMENT (m delivered only by
    crashed nodes): every correct q owed m that never delivers it is one unit."""
    code = UNIFORM_AGREEMENT if uniform else AGREEMENT
    out: list[Violation] = []
    for m, deliveries in f.deliverers.items():
        by_correct = [d for d in deliveries if d.node not in f.crashed]
        if uniform == bool(by_correct):
            continue
        # Without a correct deliverer, every deliverer crashed.
        sources = deliveries if uniform else by_correct
        delivered_by = {d.node for d in deliveries}
        for q in f.correct:
            if q in delivered_by:
                continue
            witness = next((d for d in sources if f.owes(d, q)), None)
            if witness is None:
                continue
            who = "crashed " if uniform else "correct "
            out.append(Violation(
                f.run_id, code, (q, witness.node), (m,), (witness.position,),
                f"{who}{witness.node} delivered {_show(m)} at position {witness.position} "
                f"(view {witness.view_id}); correct {q} is owed it and never delivers it"))
    return out


# ---------------------------------------------------------------- fifo


def _fifo(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for node, deliveries in f.deliveries.items():
        streams: dict[StreamKey, list[Delivery]] = {}
        for d in deliveries:
            streams.setdefault((d.message[0], d.message[1]), []).append(d)
        for stream_key, stream in streams.items():
            out.extend(_descents(f, node, stream))
            out.extend(_holes(f, node, stream_key, stream))
    return out


def _descents(f: RunFacts, node: str, stream: list[Delivery]) -> list[Violation]:
    return [Violation(
        f.run_id, FIFO_ORDER, (node,), (before.message, after.message),
        (before.position, after.position),
        f"{node} delivered {_show(before.message)} at {before.position} "
        f"then {_show(after.message)} at {after.position}")
        for before, after in pairwise(stream) if after.message[2] < before.message[2]]


def _holes(f: RunFacts, node: str, stream_key: StreamKey,
           stream: list[Delivery]) -> list[Violation]:
    """Each gap between two seqs the node delivered (no seq between them delivered) is
    one hole, judged in the incarnation of its first delivery of the seq just above it:
    up to that incarnation's snapshot top it came as state, not as a delivery. A hole is
    the gap's seqs above that top, named by its lowest and highest missing message
    (docs/checks.md): however wide, it costs one record, never one per missing seq."""
    group, origin = stream_key
    first: dict[int, Delivery] = {}
    for d in stream:  # position order: the first copy of each seq stays
        first.setdefault(d.message[2], d)
    out: list[Violation] = []
    seqs = sorted(first)
    for below, above in pairwise(seqs):
        if above - below < 2:
            continue
        upper = first[above]
        low = max(below, f.snapshot_top(node, stream_key, upper.t_ns)) + 1
        high = above - 1
        if low > high:
            continue
        lowest, highest = (group, origin, low), (group, origin, high)
        missing = (lowest,) if low == high else (lowest, highest)
        never = (_show(lowest) if low == high
                 else f"{_show(lowest)}..{_show(highest)} ({high - low + 1} seqs)")
        out.append(Violation(
            f.run_id, FIFO_ORDER, (node,), missing, (),
            f"{node} delivered {origin}'s seqs {below} and {above} (at {upper.position}) "
            f"but never {never}"))
    return out


# ---------------------------------------------------------------- causal


def _causal(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for node, by_message in f.positions.items():
        for m, positions in by_message.items():
            group, origin, seq = m
            i = positions[0]
            at = f.first_delivery_t(node, m)
            bounds = dict(f.sent.get(m, {}))
            if seq - 1 > bounds.get(origin, 0):
                bounds[origin] = seq - 1
            for pred_origin in sorted(bounds, key=node_order):
                k = bounds[pred_origin]
                if k < 1:
                    continue
                stream = (group, pred_origin)
                reach = f.reach(node, stream, f.snapshot_top(node, stream, at))
                missing = 1 if reach is None else reach.missing(k, i)
                if missing is None:
                    continue
                pred = (group, pred_origin, missing)
                pred_positions = f.positions[node].get(pred) if reach is not None else None
                if pred_positions:
                    where = f"only at position {pred_positions[0]}"
                    shown: tuple[int, ...] = (i, pred_positions[0])
                else:
                    where = "never"
                    shown = (i,)
                out.append(Violation(
                    f.run_id, CAUSAL_ORDER, (node,), (m, pred), shown,
                    f"{node} delivered {_show(m)} at position {i}, which depends on "
                    f"{pred_origin}#1..{k}, but delivered {_show(pred)} {where}"))
    return out


# ---------------------------------------------------------------- total order


def _total_order(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for firsts in f.first_positions_by_group.values():
        nodes = sorted(firsts, key=node_order)
        for a, p in enumerate(nodes):
            p_order = list(firsts[p].items())  # already in p's position order
            for q in nodes[a + 1:]:
                q_pos = firsts[q]
                common = [(m, pos, q_pos[m]) for m, pos in p_order if m in q_pos]
                for (m1, p1, q1), (m2, p2, q2) in pairwise(common):
                    if q2 < q1:
                        out.append(Violation(
                            f.run_id, TOTAL_ORDER, (p, q), (m1, m2), (p1, p2, q1, q2),
                            f"{p} delivered {_show(m1)} ({p1}) before {_show(m2)} ({p2}); "
                            f"{q} delivered them at {q1} and {q2}"))
    return out


# ---------------------------------------------------------------- local order


def _local_order(f: RunFacts) -> list[Violation]:
    out: list[Violation] = []
    for (node, m), (opt_rows, final_rows) in f.local_order_rows.items():
        for start in sorted({f.incarnation_start(node, r.t_ns) for r in opt_rows}):
            opts = [r for r in opt_rows if f.incarnation_start(node, r.t_ns) == start]
            finals = [r for r in final_rows if f.incarnation_start(node, r.t_ns) == start]
            if not finals:
                continue
            latest_opt = max(opts, key=time_order)
            earliest_final = min(finals, key=time_order)
            if latest_opt.t_ns > earliest_final.t_ns:
                out.append(Violation(
                    f.run_id, LOCAL_ORDER, (node,), (m,),
                    (earliest_final.index or 0, latest_opt.index or 0),
                    f"{node} opt-delivered {_show(m)} at t_ns {latest_opt.t_ns}, after its "
                    f"final delivery at t_ns {earliest_final.t_ns}"))
                break
    return out


# ---------------------------------------------------------------- public API

_CHECKS: Final[Mapping[str, Callable[[RunFacts], list[Violation]]]] = {
    "integrity": _integrity,
    "validity": _validity,
    "agreement": lambda f: _agreement(f, uniform=False),
    "uniform_agreement": lambda f: _agreement(f, uniform=True),
    "fifo": _fifo,
    "causal": _causal,
    "total": _total_order,
    "local_order": _local_order,
    "virtual_synchrony": check_views,
}


def _split_runs(events: Iterable[EventRow]) -> dict[str, list[EventRow]]:
    runs: dict[str, list[EventRow]] = {}
    for row in events:
        runs.setdefault(row.run_id, []).append(row)
    return runs


def _each_run(events: Iterable[EventRow], guarantee: str) -> list[Violation]:
    check = _CHECKS[guarantee]
    out: list[Violation] = []
    for run_id, rows in sorted(_split_runs(events).items()):
        out.extend(check(RunFacts(run_id, rows)))
    return out


def check_integrity(events: Iterable[EventRow]) -> list[Violation]:
    """INTEGRITY_DUPLICATE and INTEGRITY_UNKNOWN."""
    return _each_run(events, "integrity")


def check_validity(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "validity")


def check_agreement(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "agreement")


def check_uniform_agreement(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "uniform_agreement")


def check_fifo(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "fifo")


def check_causal(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "causal")


def check_total_order(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "total")


def check_local_order(events: Iterable[EventRow]) -> list[Violation]:
    return _each_run(events, "local_order")


def check_virtual_synchrony(events: Iterable[EventRow]) -> list[Violation]:
    """VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY and SAME_VIEW_DELIVERY
    (abcast.checks.views)."""
    return _each_run(events, "virtual_synchrony")


def check_events(
    events: Iterable[EventRow],
    guarantees: Iterable[str],
    run_id: str | None = None,
) -> list[Violation]:
    """Check one run's rows for the given guarantees (violations in CODES order).

    With `run_id`, only that run's rows are looked at; without it, the rows must all
    belong to one run (LocalProtocolError otherwise: use `check_traces`).
    """
    claimed = validate_guarantees(guarantees)
    rows = list(events)
    if run_id is not None:
        rows = [r for r in rows if r.run_id == run_id]
    else:
        run_ids = {r.run_id for r in rows}
        if len(run_ids) > 1:
            raise LocalProtocolError(f"rows of {len(run_ids)} runs given to check_events; "
                                     "pass run_id or use check_traces")
        if not run_ids:
            return []
        run_id = run_ids.pop()
    facts = RunFacts(run_id, rows)
    out: list[Violation] = []
    for guarantee in claimed:
        out.extend(_CHECKS[guarantee](facts))
    order = {code: n for n, code in enumerate(CODES)}
    out.sort(key=lambda v: order[v.code])  # stable: each code keeps its own order
    return out


def check_traces(
    runs: Iterable[RunInfo],
    events: Iterable[EventRow],
) -> dict[str, list[Violation]]:
    """Each run checked for the guarantees its own runs row claims; rows of runs that
    have no runs row are not checked."""
    by_run = _split_runs(events)
    return {
        run.run_id: check_events(by_run.get(run.run_id, []), run.guarantees, run.run_id)
        for run in runs
    }


def count_by_code(
    violations: Iterable[Violation],
    codes: Iterable[str] | None = None,
) -> dict[str, int]:
    """Violations per code, in CODES order. With `codes`, each of them appears (0 when
    none was found), so two checkers' results compare with `==`."""
    counts = Counter(v.code for v in violations)
    wanted = set(counts) | set(codes or ())
    return {code: counts[code] for code in CODES if code in wanted}
