"""Identifiers shared by every layer: nodes, groups, messages and views.

Node ids are short strings ("n1", "n7", "c3"); they sort naturally (n2 < n10), which
matters because "the lowest node" picks sequencers, coordinators and leaders. The order
is total and strict over every string: runs of ASCII digits compare as numbers (without
converting them, so no string makes it raise), everything else as text, and ids equal
that way ("n7", "n07") by their raw string, so the leader never depends on input order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, NamedTuple

#: the most members a group may declare: what the registry's wire carries
MAX_GROUP_SIZE: Final = 65_536

NodeId = str
GroupName = str

#: node_sort_key's value: the natural parts, then the raw id (the tie-break)
NodeOrder = tuple[tuple[tuple[int, int, str], ...], str]

_NATURAL = re.compile(r"([0-9]+)")  # ASCII digits only: "²" and "٣" are text here


def node_sort_key(node: NodeId) -> NodeOrder:
    """Key that orders "n2" before "n10" (plain string order would not), "n07" before
    "n7" (the raw string breaks ties). A digit run compares as (its length without
    leading zeros, those digits): a number's order, for any length."""
    parts = _NATURAL.split(node)
    # split() puts the digit runs at the odd positions.
    natural = tuple(
        (1, len(p.lstrip("0")), p.lstrip("0")) if i % 2 else (0, 0, p)
        for i, p in enumerate(parts) if p != ""
    )
    return natural, node


def sorted_nodes(nodes: tuple[NodeId, ...] | list[NodeId] | set[NodeId]) -> tuple[NodeId, ...]:
    return tuple(sorted(nodes, key=node_sort_key))


class MsgId(NamedTuple):
    """A broadcast message: its origin and the origin's own counter (1, 2, 3 …)."""

    origin: NodeId
    seq: int


@dataclass(frozen=True, slots=True)
class View:
    """A group membership: installed in the same sequence by every member."""

    view_id: int
    members: tuple[NodeId, ...]

    def __post_init__(self) -> None:
        if list(self.members) != list(sorted_nodes(self.members)):
            object.__setattr__(self, "members", sorted_nodes(self.members))

    @property
    def leader(self) -> NodeId:
        """The lowest member: sequencer, coordinator and leader by convention."""
        return self.members[0]

    def others(self, me: NodeId) -> tuple[NodeId, ...]:
        return tuple(m for m in self.members if m != me)

    @property
    def majority(self) -> int:
        return len(self.members) // 2 + 1
