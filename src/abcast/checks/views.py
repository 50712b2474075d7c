"""The in-memory view checks: VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY, SAME_VIEW_DELIVERY
(docs/checks.md, "Views"), unit for unit what abcast.pipeline.checks_views counts.

Rules: each function takes one run's `RunFacts` and returns its violations, one per
unit; `ViewFacts` indexes the rows these three codes judge, once per run. The choices
docs/checks.md makes are made here the same way:

- a crashed node is judged only by its rows before its first `crash` row;
- a node's view rows are in VIEW_ROW_ORDER (abcast.checks.facts): t_ns, ties broken
  by index, view_id and member set, as Spark orders them;
- a node's first view row, when it lists the node alone, is its private start (a
  joiner before admission) and is dropped from its views;
- member lists compare as sets; a null list is installed but never compared;
- rows with a null `view_id`, and deliver rows without origin, seq or index, are
  skipped; a view row without `index` shows position 0;
- a merge view (entered from two or more different views: extended virtual synchrony)
  must be installed by every member its reference set lists that has no `crash` row.

Nothing here reads files; abcast.checks.properties wires these into `check_events`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise
from typing import Any

from abcast.checks.facts import (
    MessageKey,
    RunFacts,
    Violation,
    member_set,
    node_order,
    show_message,
    view_row_order,
)
from abcast.trace.rows import EventRow
from abcast.trace.schema import SAME_VIEW_DELIVERY, VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY

Group = str | None
Members = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class InstalledView:
    """One judged view row: who installed which view, listing whom."""

    node: str
    group: Group
    view_id: int
    members: Members | None  # as a sorted set; None when the row lists none
    index: int


def _show_members(members: Members) -> str:
    return "[" + ",".join(sorted(members, key=node_order)) + "]"


class ViewFacts:
    """The rows the view checks judge, indexed."""

    def __init__(self, facts: RunFacts) -> None:
        self.run_id = facts.run_id
        self.rows = facts.rows

    @cached_property
    def crash_t_ns(self) -> dict[str, int]:
        """node -> t_ns of its first crash row."""
        out: dict[str, int] = {}
        for r in self.rows:
            if r.kind == "crash" and (r.node not in out or r.t_ns < out[r.node]):
                out[r.node] = r.t_ns
        return out

    def judged(self, row: EventRow) -> bool:
        crashed_at = self.crash_t_ns.get(row.node)
        return crashed_at is None or row.t_ns < crashed_at

    @cached_property
    def views(self) -> dict[tuple[str, Group], list[InstalledView]]:
        """(node, group) -> the node's views in VIEW_ROW_ORDER (t_ns order), private
        start dropped."""
        keyed: dict[tuple[str, Group], list[tuple[Any, InstalledView]]] = {}
        for r in self.rows:
            if r.kind != "view" or r.view_id is None or not self.judged(r):
                continue
            view = InstalledView(r.node, r.group, r.view_id, member_set(r.members),
                                 r.index or 0)
            keyed.setdefault((r.node, r.group), []).append((view_row_order(r), view))
        out: dict[tuple[str, Group], list[InstalledView]] = {}
        for key, items in keyed.items():
            items.sort(key=lambda item: item[0])
            views = [v for _, v in items]
            if views[0].members == (views[0].node,):
                views = views[1:]
            if views:
                out[key] = views
        return out

    @cached_property
    def cohorts(self) -> dict[tuple[Group, int, int], frozenset[str]]:
        """(group, v, v') -> the nodes that moved from v to v'."""
        out: dict[tuple[Group, int, int], set[str]] = {}
        for (node, group), views in self.views.items():
            for before, after in pairwise(views):
                if after.view_id != before.view_id:
                    out.setdefault((group, before.view_id, after.view_id), set()).add(node)
        return {key: frozenset(nodes) for key, nodes in out.items()}

    @cached_property
    def delivered_in(self) -> dict[tuple[str, Group, int], dict[MessageKey, int]]:
        """(node, group, view_id) -> message -> the node's first position of it in that
        view."""
        out: dict[tuple[str, Group, int], dict[MessageKey, int]] = {}
        for r in self.rows:
            if (r.kind != "deliver" or r.origin is None or r.seq is None or r.index is None
                    or r.view_id is None or not self.judged(r)):
                continue
            mine = out.setdefault((r.node, r.group, r.view_id), {})
            m = (r.group, r.origin, r.seq)
            if m not in mine or r.index < mine[m]:
                mine[m] = r.index
        return out

    @cached_property
    def send_view(self) -> dict[MessageKey, int]:
        """message -> the lowest view_id on its origin's judged send rows."""
        out: dict[MessageKey, int] = {}
        for r in self.rows:
            if (r.kind != "send" or r.origin is None or r.seq is None or r.node != r.origin
                    or r.view_id is None or not self.judged(r)):
                continue
            m = (r.group, r.origin, r.seq)
            if m not in out or r.view_id < out[m]:
                out[m] = r.view_id
        return out


# ---------------------------------------------------------------- view consistency


def _reference(by_set: dict[Members, set[str]]) -> tuple[Members, set[str]]:
    """A view's reference set and its holders: most holders, then the lowest holder in
    node order, then the set in list order."""
    return min(by_set.items(), key=lambda kv: (
        -len(kv[1]), node_order(min(kv[1], key=node_order)), kv[0]))


def _holders(vf: ViewFacts) -> dict[tuple[Group, int], dict[Members, set[str]]]:
    """(group, view_id) -> member set -> the nodes whose rows list it."""
    holders: dict[tuple[Group, int], dict[Members, set[str]]] = {}
    for views in vf.views.values():
        for v in views:
            if v.members is not None:
                holders.setdefault((v.group, v.view_id), {}).setdefault(
                    v.members, set()).add(v.node)
    return holders


def _membership(vf: ViewFacts) -> list[Violation]:
    # (group, view_id) -> member set -> holders; and each node's first row per set:
    # (its place in the node's views, its index)
    holders: dict[tuple[Group, int], dict[Members, set[str]]] = {}
    first_row: dict[tuple[str, Group, int, Members], tuple[int, int]] = {}
    for views in vf.views.values():
        for place, v in enumerate(views):
            if v.members is None:
                continue
            holders.setdefault((v.group, v.view_id), {}).setdefault(v.members, set()).add(
                v.node)
            first_row.setdefault((v.node, v.group, v.view_id, v.members), (place, v.index))
    out: list[Violation] = []
    for (group, view_id), by_set in holders.items():
        if len(by_set) < 2:
            continue
        reference, ref_nodes = _reference(by_set)
        ref_holder = min(ref_nodes, key=node_order)
        # each deviant's first deviating row in its views (VIEW_ROW_ORDER)
        deviants: dict[str, tuple[tuple[int, int], Members]] = {}
        for members, nodes in by_set.items():
            if members == reference:
                continue
            for node in nodes:
                row = first_row[(node, group, view_id, members)]
                if node not in deviants or row < deviants[node][0]:
                    deviants[node] = (row, members)
        for node in sorted(deviants, key=node_order):
            (_place, index), members = deviants[node]
            where = "" if group is None else f" of {group}"
            out.append(Violation(
                vf.run_id, VIEW_CONSISTENCY, (node, ref_holder), (), (index,),
                f"{node} installed view {view_id}{where} as {_show_members(members)}; "
                f"{ref_holder} and {len(ref_nodes) - 1} more installed it as "
                f"{_show_members(reference)}"))
    return out


def _view_order(vf: ViewFacts) -> list[Violation]:
    out: list[Violation] = []
    for (node, group), views in vf.views.items():
        where = "" if group is None else f" of {group}"
        for before, after in pairwise(views):
            if after.view_id <= before.view_id:
                out.append(Violation(
                    vf.run_id, VIEW_CONSISTENCY, (node,), (), (before.index, after.index),
                    f"{node} installed view {before.view_id}{where} then view "
                    f"{after.view_id}: view ids must strictly increase"))
    return out


def merge_views(vf: ViewFacts) -> set[tuple[Group, int]]:
    """(group, view_id) of the views nodes moved into from two or more different views."""
    sources: dict[tuple[Group, int], set[int]] = {}
    for (_node, group), views in vf.views.items():
        for before, after in pairwise(views):
            if after.view_id != before.view_id:
                sources.setdefault((group, after.view_id), set()).add(before.view_id)
    return {key for key, came_from in sources.items() if len(came_from) > 1}


def _missed_merges(vf: ViewFacts) -> list[Violation]:
    installed = {(v.node, v.group, v.view_id) for views in vf.views.values() for v in views}
    holders = _holders(vf)
    out: list[Violation] = []
    for group, view_id in merge_views(vf):
        by_set = holders.get((group, view_id))
        if not by_set:
            continue
        reference, ref_nodes = _reference(by_set)
        ref_holder = min(ref_nodes, key=node_order)
        where = "" if group is None else f" of {group}"
        for node in sorted(reference, key=node_order):
            if node in vf.crash_t_ns or (node, group, view_id) in installed:
                continue
            out.append(Violation(
                vf.run_id, VIEW_CONSISTENCY, (node, ref_holder), (), (),
                f"merge view {view_id}{where} lists {node}, which never installed it "
                f"(installed by {ref_holder} and {len(ref_nodes) - 1} more as "
                f"{_show_members(reference)})"))
    return out


def view_consistency(vf: ViewFacts) -> list[Violation]:
    """VIEW_CONSISTENCY: a node listing a view's members unlike the reference set, each
    view row of a node whose view_id does not rise, and each member of a merge view's
    reference set without a crash row that never installs it."""
    return [*_membership(vf), *_view_order(vf), *_missed_merges(vf)]


# ---------------------------------------------------------------- virtual synchrony


def virtual_synchrony(vf: ViewFacts) -> list[Violation]:
    """VIRTUAL_SYNCHRONY: one violation per (q, group, v, m) where q and another node p
    moved from v to the same next view, p delivered m in v and q did not."""
    # (q, group, v, m) -> the witness: p, v', p's position (lowest p, then lowest v')
    found: dict[tuple[str, Group, int, MessageKey], tuple[str, int, int]] = {}
    for (group, v, after), cohort in vf.cohorts.items():
        if len(cohort) < 2:
            continue
        sets = {n: vf.delivered_in.get((n, group, v), {}) for n in cohort}
        for p in cohort:
            for m, position in sets[p].items():
                for q in cohort:
                    if m in sets[q]:
                        continue
                    key = (q, group, v, m)
                    best = found.get(key)
                    if best is None or (node_order(p), after) < (node_order(best[0]),
                                                                 best[1]):
                        found[key] = (p, after, position)
    out: list[Violation] = []
    for (q, group, v, m), (p, after, position) in sorted(
            found.items(), key=lambda kv: (node_order(kv[0][0]), kv[0][2], kv[0][3][1:])):
        where = "" if group is None else f" of {group}"
        out.append(Violation(
            vf.run_id, VIRTUAL_SYNCHRONY, (q, p), (m,), (position,),
            f"{q} and {p} both moved from view {v} to view {after}{where}; {p} delivered "
            f"{show_message(m)} in view {v} at position {position}, {q} did not"))
    return out


# ---------------------------------------------------------------- same view delivery


def same_view_delivery(vf: ViewFacts) -> list[Violation]:
    """SAME_VIEW_DELIVERY: each message delivered in more than one view (split), and
    each (q, m) where q delivered m in a view older than m's send view (early)."""
    # message -> view_id -> node -> first position
    where_delivered: dict[MessageKey, dict[int, dict[str, int]]] = {}
    for (node, _group, view_id), by_message in vf.delivered_in.items():
        for m, position in by_message.items():
            where_delivered.setdefault(m, {}).setdefault(view_id, {})[node] = position
    out: list[Violation] = []
    for m, by_view in where_delivered.items():
        if len(by_view) < 2:
            continue
        low, high = min(by_view), max(by_view)
        p = min(by_view[low], key=node_order)
        q = min(by_view[high], key=node_order)
        out.append(Violation(
            vf.run_id, SAME_VIEW_DELIVERY, (p, q), (m,), (by_view[low][p], by_view[high][q]),
            f"{show_message(m)} was delivered in {len(by_view)} views: by {p} in view "
            f"{low} (position {by_view[low][p]}), by {q} in view {high} (position "
            f"{by_view[high][q]})"))
    for m, by_view in where_delivered.items():
        sent_in = vf.send_view.get(m)
        if sent_in is None:
            continue
        early: dict[str, tuple[int, int]] = {}  # q -> (first position, its view)
        for view_id, by_node in by_view.items():
            if view_id >= sent_in:
                continue
            for q, position in by_node.items():
                if q not in early or position < early[q][0]:
                    early[q] = (position, view_id)
        for q in sorted(early, key=node_order):
            position, view_id = early[q]
            out.append(Violation(
                vf.run_id, SAME_VIEW_DELIVERY, (q, m[1]), (m,), (position,),
                f"{q} delivered {show_message(m)} in view {view_id} at position {position}; "
                f"{m[1]} sent it in view {sent_in}"))
    return out


def check_views(facts: RunFacts) -> list[Violation]:
    """All three codes of the `virtual_synchrony` guarantee on one run, sharing one
    ViewFacts."""
    vf = ViewFacts(facts)
    return [*view_consistency(vf), *virtual_synchrony(vf), *same_view_delivery(vf)]
