"""What every ordering's membership does the same way, whoever decides its views: a
joiner asking its contacts one at a time, and the rule that says a member was left out.

Rules. A joiner asks its first contact (`MJoin`), then the next one every
`MembershipConfig.join_retry_us`, round the list, until it is welcomed: one at a time,
because a contact forwards the ask (`MJoinFwd`), and fewer asks go to contacts that may
have gone, which an open channel retransmits for ever. A member's "you are not in my
view" (the detector's `Excluded(by, view_id)`) says this node was left out only when
`by` is one of its members and that view is later than its own: an earlier view may
predate this node's joining.

Used by chandra-toueg (abcast.consensus.lifecycle), whose views are decided by consensus;
the membership layer's flush (abcast.membership.join_leave) follows the same rules.
"""

from __future__ import annotations

from collections.abc import Collection

from abcast.errors import LocalProtocolError
from abcast.ids import NodeId


class JoinContacts:
    """The contacts a joiner asks, one at a time, round the list."""

    __slots__ = ("_index", "nodes")

    def __init__(self, contacts: tuple[NodeId, ...], me: NodeId) -> None:
        self.nodes = tuple(c for c in contacts if c != me)
        if not self.nodes:
            raise LocalProtocolError("join needs at least one contact other than this node")
        self._index = 0

    def current(self) -> NodeId:
        """The contact to ask now (the first, until `next`)."""
        return self.nodes[self._index]

    def next(self) -> NodeId:
        """The one to ask after `join_retry_us` unanswered."""
        self._index = (self._index + 1) % len(self.nodes)
        return self.nodes[self._index]


def left_out_by(
    members: Collection[NodeId], view_id: int, by: NodeId, by_view_id: int
) -> bool:
    """Whether `by` saying "not in my view `by_view_id`" means this node, in view
    `view_id` with `members`, was left out of a later view."""
    return by in members and by_view_id > view_id
