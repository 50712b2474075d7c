"""Membership: views for an ordering — join with state transfer, leave, removal on
suspicion, and the flush that makes view changes virtually synchronous
(abcast.membership.layer, with its phase table; the member's side of the flush in
abcast.membership.flush_member, the coordinator's in
abcast.membership.flush_coordinator, join/leave/removal in abcast.membership.join_leave,
the merge of partitions under `partitions="evs"` in abcast.membership.merge (finding the
sides to merge in abcast.membership.discovery), the state the layer owns and hands to
its parts in abcast.membership.state); the interface an ordering plugs in
(abcast.membership.api)."""

from abcast.membership.api import ViewOrdering
from abcast.membership.layer import Membership
from abcast.membership.state import MembershipConfig
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport

__all__ = ["FlushMessage", "JoinCut", "Membership", "MembershipConfig", "ViewOrdering",
           "ViewReport"]
