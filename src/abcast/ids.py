"""Identifiers shared by every layer: nodes, groups, messages and views.

Node ids are short strings ("n1", "n7", "c3"); they sort naturally (n2 < n10), which
matters because "the lowest node" picks sequencers, coordinators and leaders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

NodeId = str
GroupName = str

_NATURAL = re.compile(r"(\d+)")


def node_sort_key(node: NodeId) -> tuple[tuple[int, int | str], ...]:
    """Key that orders "n2" before "n10" (plain string order would not)."""
    parts = _NATURAL.split(node)
    return tuple((1, int(p)) if p.isdigit() else (0, p) for p in parts if p != "")


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
