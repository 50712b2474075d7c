"""Churn in the simulator: random churn schedules, and the properties a run with joins,
leaves, crashes and partitions must keep.

Rules: this module draws fault schedules and judges finished runs; it never builds a stack
(the registry's `build_stack` does: an open detector and channel under the membership
layer, whose cut-off members stop; chandra-toueg's rejoin) and never runs one
(abcast.sim.harness does). The judging has three parts.

- The trace checks (abcast.checks) over the members *present for the whole run* — in
  every view anybody installed, never crashed, never left. The other nodes' `send` rows
  stay (what they broadcast is known), their deliveries and views go, and each gets a
  `crash` row, so the checks owe them nothing and expect nothing of them.
- Membership properties over every *incarnation* (a node's rows up to a `recover` row,
  and after it, are two processes), as `Problem`s. The three view codes are the
  reference ones (abcast.checks.views, docs/checks.md "Views"), run over the trace with
  each later incarnation renamed `node#k` so that each is judged as a node of its own:
  VIEW_CONSISTENCY and VIRTUAL_SYNCHRONY over every incarnation, SAME_VIEW_DELIVERY over
  the correct ones (a plain sequencer cut off in a minority may deliver there what the
  others deliver later: its incarnation ended at the cut). Beside them, VIEW_ORDER: the
  members present throughout install the same sequence of views.
- STATE: the nodes running at the end of a settled run (not on their way out: leaving,
  or, under primary partition, left out of the last view) hold equal application states
  (the simulated application chains a digest over its deliveries, so a joiner that got
  a message twice, or missed one, holds another state).

Extended virtual synchrony (`partitions="evs"`, abcast.membership.merge) moves
two things. A *merge view* is a view that nodes enter from two or more different views;
each node's rows are cut at its merge views into *epochs*, and within an epoch the
nodes are grouped by the last view they reach in it (their *side*). The trace checks
run over the whole trace for what the run claims (integrity, validity, total order,
the view codes), and per (epoch, side) *lineage* for the ordering's primary-partition
guarantees (agreement, FIFO, causal): members of different sides are not owed each
other's partition-time messages, and a merged member gets the other side's messages
as state, not as deliveries. A send row belongs to the epoch of its origin's delivery
of it (else of its recording). The members judged are the initial members that never
crashed, left or rejoined; VIEW_ORDER asks that they end in one view and go through the
same views since their last merge.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from abcast.checks import Violation, check_events
from abcast.checks.facts import RunFacts
from abcast.checks.views import ViewFacts, same_view_delivery, view_consistency, virtual_synchrony
from abcast.ids import NodeId, sorted_nodes
from abcast.ordering.registry import get_ordering
from abcast.reliability.channel import ChannelConfig
from abcast.sim.harness import SimResult
from abcast.trace.rows import EventRow
from abcast.trace.schema import STATE, VIEW_ORDER

# -- random churn schedules ----------------------------------------------------------------


#: the runtime's stream channel (abcast.runtime.stack_options.STREAM_CHANNEL: acks
#: carried, one tick for all links) in the simulator's time scale, a 1 ms tick: the shape
#: bench/sweep_churn.py --stream-channel runs, and the only one whose frames the native
#: lane takes
STREAM_SHAPE = ChannelConfig(piggyback_acks=True, tick_us=1_000)


def churn_faults(rng: random.Random, nodes: int, *, span_ms: int = 1_500,
                 network: str = "drop=0.03,dup=0.02,delay=1-20ms",
                 partition_ms: tuple[int, int] = (1_500, 3_000),
                 cut_leader: bool = False, clean_split: bool = False) -> str:
    """One join, one leave, one crash and one partition that heals, at random times in
    the first `span_ms`, over n1..n<nodes>, under `network` faults. The partition puts a
    random minority apart (never the crashed node) for `partition_ms` (long enough, by
    default, that the majority removes it); with `cut_leader` the minority holds n1, the
    first sequencer. The joiner is n<nodes+1>, named on neither side of the partition:
    it keeps its links to both (a partial partition; see abcast.sim.faults) — unless
    `clean_split`, where the other side is `*`, the joiner with it."""
    ids = [f"n{i}" for i in range(1, nodes + 1)]
    if cut_leader:
        crashed, leaver = rng.sample(ids[1:], 2)
    else:
        crashed, leaver = rng.sample(ids, 2)
    rest = [n for n in ids if n not in (crashed, leaver)]
    size = rng.randint(1, max(1, (nodes - 2) // 2 - 1))
    if cut_leader:
        minority = ["n1", *rng.sample([n for n in rest if n != "n1"], size - 1)]
    else:
        minority = rng.sample(rest, size)
    majority = ["*"] if clean_split else [n for n in ids if n not in minority]
    start = rng.randint(0, span_ms)
    length = rng.randint(*partition_ms)
    items = [
        network,
        f"join=n{nodes + 1}@{rng.randint(0, span_ms)}ms",
        f"leave={leaver}@{rng.randint(0, span_ms)}ms",
        f"crash={crashed}@{rng.randint(0, span_ms)}ms",
        f"partition={'+'.join(sorted_nodes(minority))}|{'+'.join(sorted_nodes(majority))}"
        f"@{start}ms-{start + length}ms",
    ]
    return ",".join(i for i in items if i)


def flapping_faults(rng: random.Random, nodes: int, *,
                    network: str = "drop=0.03,dup=0.02,delay=1-20ms") -> str:
    """Harsher churn: two to four partitions one after another, overlapping, each a
    random minority (n1, the first sequencer, in about half of them) cut from the rest —
    by `*` (joiners too) or by naming the rest (joiners bridge) — for 0.2–4 s; one or
    two joiners, a crash and a leave at random times in the first 6 s."""
    ids = [f"n{i}" for i in range(1, nodes + 1)]
    items = [network]
    t = 0
    for _ in range(rng.randint(2, 4)):
        t += rng.randint(300, 2_500)
        side = rng.sample(ids, rng.randint(1, max(1, (nodes - 1) // 2)))
        if rng.random() < 0.5 and "n1" not in side:
            side[0] = "n1"
        length = rng.randint(200, 4_000)
        rest = "*" if rng.random() < 0.6 else "+".join(n for n in ids if n not in side)
        items.append(f"partition={'+'.join(sorted_nodes(side))}|{rest}@{t}ms-{t + length}ms")
    items.append(f"join=n{nodes + 1}@{rng.randint(0, 4_000)}ms")
    if rng.random() < 0.5:
        items.append(f"join=n{nodes + 2}@{rng.randint(0, 6_000)}ms")
    crashed, leaver = rng.sample(ids, 2)
    items.append(f"crash={crashed}@{rng.randint(0, 6_000)}ms")
    items.append(f"leave={leaver}@{rng.randint(0, 6_000)}ms")
    return ",".join(i for i in items if i)


# -- judging a run ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Problem:
    """A membership property that does not hold, with what shows it."""

    code: str
    detail: str


@dataclass(slots=True)
class Incarnation:
    node: NodeId
    number: int
    view_ids: list[int]
    crashed: bool = False

    @property
    def name(self) -> str:
        """The node's id for its first incarnation, `node#k` for its k-th."""
        return self.node if self.number == 1 else f"{self.node}#{self.number}"


def incarnations(rows: Iterable[EventRow]) -> list[Incarnation]:
    """Each node's incarnations (its rows split at its `recover` rows), in recording
    order."""
    return _split(rows)[0]


def _split(rows: Iterable[EventRow]) -> tuple[list[Incarnation], list[EventRow]]:
    """The incarnations, and the rows with each later incarnation's node renamed to its
    `name` (its private start, a view listing the node alone, dropped as the reference
    checks drop a joiner's)."""
    out: list[Incarnation] = []
    renamed: list[EventRow] = []
    current: dict[NodeId, Incarnation] = {}
    for row in rows:
        inc = current.get(row.node)
        if inc is None or row.kind == "recover":
            inc = Incarnation(row.node, (inc.number + 1) if inc else 1, [])
            current[row.node] = inc
            out.append(inc)
        if row.kind == "view" and row.view_id is not None:
            if inc.number > 1 and not inc.view_ids and tuple(row.members or ()) == (row.node,):
                continue
            inc.view_ids.append(row.view_id)
        elif row.kind == "crash":
            inc.crashed = True
        renamed.append(row if inc.number == 1 else replace(row, node=inc.name))
    return out, renamed


def view_problems(rows: list[EventRow]) -> list[Problem]:
    """The reference view codes over every incarnation (SAME_VIEW_DELIVERY over the
    correct ones), one Problem per violation unit."""
    incs, renamed = _split(rows)
    run_id = rows[0].run_id if rows else ""
    every = ViewFacts(RunFacts(run_id, renamed))
    crashed = {inc.name for inc in incs if inc.crashed}
    correct = ViewFacts(RunFacts(run_id, [r for r in renamed if r.node not in crashed]))
    found = [*view_consistency(every), *virtual_synchrony(every), *same_view_delivery(correct)]
    return [Problem(v.code, v.detail) for v in found]


def present_throughout(rows: list[EventRow], initial: Iterable[NodeId]) -> set[NodeId]:
    """The initial members in every view anybody installed that never crashed or left."""
    keep = set(initial)
    for row in rows:
        if row.kind == "view" and row.view_id:
            keep &= set(row.members or ())
        elif row.kind in ("crash", "recover"):
            keep.discard(row.node)
    return keep


def checked_rows(rows: list[EventRow], keep: set[NodeId]) -> list[EventRow]:
    """The rows the trace checks judge: everything of `keep`; of the others their
    `send` rows and a `crash` row each (they are owed nothing)."""
    out = [r for r in rows if r.node in keep or r.kind == "send"]
    others = sorted({r.node for r in rows} - keep)
    last_t = max((r.t_ns for r in rows), default=0)
    run_id = rows[0].run_id if rows else ""
    group = next((r.group for r in rows if r.group is not None), None)
    for k, node in enumerate(others, 1):
        out.append(EventRow(run_id, node, "crash", None, None, group, last_t + k, None))
    return out


def violations_among_present(result: SimResult) -> list[Violation]:
    rows = result.recorder.rows()
    if result.config.options.evs:
        return violations_by_lineage(result)
    keep = present_throughout(rows, result.config.node_ids())
    return check_events(checked_rows(rows, keep), result.guarantees, result.run_id)


# -- extended virtual synchrony: lineages ----------------------------------------------------


def merge_views(rows: Iterable[EventRow]) -> set[int]:
    """The view ids nodes entered from two or more different views (private starts and
    first views have no previous view)."""
    before: dict[NodeId, int] = {}
    entered_from: dict[int, set[int]] = defaultdict(set)
    for row in rows:
        if row.kind == "recover":
            before.pop(row.node, None)
        if row.kind != "view" or not row.view_id:
            continue
        previous = before.get(row.node)
        if previous is not None and previous != row.view_id:
            entered_from[row.view_id].add(previous)
        before[row.node] = row.view_id
    return {v for v, sources in entered_from.items() if len(sources) > 1}


def steady_members(
    rows: list[EventRow], initial: Iterable[NodeId], gone: Iterable[NodeId] = ()
) -> set[NodeId]:
    """Initial members that never crashed, rejoined, left (`gone`) or stopped being in
    the group."""
    keep = set(initial) - set(gone)
    last_view: dict[NodeId, tuple[NodeId, ...]] = {}
    for row in rows:
        if row.kind in ("crash", "recover"):
            keep.discard(row.node)
        elif row.kind == "view":
            last_view[row.node] = tuple(row.members or ())
    return {n for n in keep if n in last_view.get(n, ())}


@dataclass(frozen=True, slots=True)
class Lineage:
    """One (epoch, side): the rows its checks judge and the members judged."""

    epoch: int
    side: int  # the last view its nodes reach in the epoch
    rows: list[EventRow]
    members: set[NodeId]


def lineages(
    rows: list[EventRow], initial: Iterable[NodeId], gone: Iterable[NodeId] = ()
) -> list[Lineage]:
    merges = merge_views(rows)
    epoch_of: dict[NodeId, int] = defaultdict(int)
    tagged: list[tuple[int, EventRow]] = []
    delivered_epoch: dict[tuple[str | None, int | None], int] = {}
    last_view: dict[tuple[NodeId, int], int] = {}
    for row in rows:
        if row.kind == "view" and row.view_id in merges:
            epoch_of[row.node] += 1
        epoch = epoch_of[row.node]
        tagged.append((epoch, row))
        if row.kind == "view" and row.view_id:
            last_view[(row.node, epoch)] = row.view_id
        elif row.kind == "deliver" and row.node == row.origin:
            delivered_epoch.setdefault((row.origin, row.seq), epoch)
    steady = steady_members(rows, initial, gone)
    # What a merged member got as state is not owed to it as predecessors: a send
    # row's deps keep only what was delivered in its own epoch.
    prefix_before: dict[int, dict[str, int]] = defaultdict(dict)
    for epoch, row in tagged:
        if row.kind == "deliver" and row.origin is not None and row.seq is not None:
            for later in range(epoch + 1, max(epoch_of.values(), default=0) + 1):
                top = prefix_before[later]
                top[row.origin] = max(top.get(row.origin, 0), row.seq)
    out: list[Lineage] = []
    sides = sorted({(e, v) for (_, e), v in last_view.items()})
    for epoch, side in sides:
        nodes = {n for (n, e), v in last_view.items() if e == epoch and v == side}
        chosen: list[EventRow] = []
        for row_epoch, row in tagged:
            if row.kind == "send":
                sent_in = delivered_epoch.get((row.origin, row.seq), row_epoch)
                if sent_in != epoch:
                    continue
                seen = prefix_before[epoch]
                chosen.append(row if not (row.deps and epoch) else replace(
                    row, deps={o: k for o, k in row.deps.items() if k > seen.get(o, 0)}))
            elif row_epoch == epoch and row.node in nodes:
                chosen.append(row)
        keep = present_throughout(chosen, nodes) & steady
        out.append(Lineage(epoch, side, chosen, keep))
    return out


def violations_by_lineage(result: SimResult) -> list[Violation]:
    """Under evs: the run's claims over the whole trace (members judged: the steady
    ones), and the ordering's primary-partition claims per lineage."""
    rows = result.recorder.rows()
    gone = (*result.departed, *result.leaving)
    steady = steady_members(rows, result.config.node_ids(), gone)
    out = check_events(checked_rows(rows, steady), result.guarantees, result.run_id)
    spec = get_ordering(result.config.ordering)
    per_lineage = tuple(g for g in spec.guarantees if g not in result.guarantees)
    for lineage in lineages(rows, result.config.node_ids(), gone):
        if lineage.members:
            out += check_events(checked_rows(lineage.rows, lineage.members), per_lineage,
                                result.run_id)
    return out


def evs_view_order(
    incs: list[Incarnation], steady: set[NodeId], merges: set[int]
) -> list[Problem]:
    """Under evs: the steady members end in one view and go through the same views since
    their last merge."""
    problems: list[Problem] = []
    tails: set[tuple[int, ...]] = set()
    for inc in incs:
        if inc.node not in steady:
            continue
        ids = inc.view_ids
        cut = max((i for i, v in enumerate(ids) if v in merges), default=0)
        tails.add(tuple(ids[cut:]))
    if len({t[-1] for t in tails if t}) > 1 or len(tails) > 1:
        problems.append(Problem(VIEW_ORDER, f"steady members' views since their last "
                                              f"merge differ: {sorted(tails)}"))
    return problems


def membership_problems(result: SimResult) -> list[Problem]:
    rows = result.recorder.rows()
    problems = view_problems(rows)
    incs = incarnations(rows)
    if result.config.options.evs:
        gone = (*result.departed, *result.leaving)
        steady = steady_members(rows, result.config.node_ids(), gone)
        problems += evs_view_order(incs, steady, merge_views(rows))
    else:
        problems += view_order(incs, present_throughout(rows, result.config.node_ids()))
    if result.quiescent or result.config.options.evs:
        # (Under evs a run with a crash under an open-loop workload ends by going idle,
        # which the harness calls stalled; the sides must have merged by then anyway.)
        problems += equal_states(result)
    return problems


def view_order(incs: list[Incarnation], present: set[NodeId]) -> list[Problem]:
    """The members present throughout install the same sequence of views (that each
    incarnation's view ids rise is VIEW_CONSISTENCY's, in `view_problems`)."""
    sequences = {tuple(inc.view_ids) for inc in incs if inc.node in present}
    if len(sequences) > 1:
        return [Problem(VIEW_ORDER, f"members present throughout differ: "
                                      f"{sorted(sequences)}")]
    return []


def equal_states(result: SimResult) -> list[Problem]:
    # A node still on its way out holds what it delivered before it froze to leave;
    # under primary partition so does one the group's last view left out (cut off, it
    # stops once it hears: the run may end before the heal lets it).
    states = {n: s for n, s in result.app_states.items() if n not in result.leaving}
    if not result.config.options.evs:
        views = [r for r in result.recorder.rows() if r.kind == "view" and r.view_id]
        if views:
            last = max(views, key=lambda r: r.view_id or 0)
            states = {n: s for n, s in states.items() if n in (last.members or ())}
    if len(set(states.values())) <= 1:
        return []
    groups: dict[bytes, list[NodeId]] = defaultdict(list)
    for node, state in states.items():
        groups[state].append(node)
    return [Problem(STATE, f"application states differ: {sorted(groups.values())}")]


#: what `judge` returns: violations among the members present throughout, and problems
Verdict = tuple[list[Violation], list[Problem]]
Judge = Callable[[SimResult], Verdict]


def judge(result: SimResult) -> Verdict:
    return violations_among_present(result), membership_problems(result)
