"""The failure detector for an open group: traffic from outside the view still goes up.

Rules: this is `FailureDetectorLayer` (heartbeats, per-peer timeouts, `Suspect` and
`Restore` only for members of the current view) with one difference. The plain detector
answers a node outside the view with `NotMember` and drops its packet, which makes a join
impossible: the joiner is outside every member's view until the group has admitted it,
and a member still finishing a view change hears the joiner's first packets before it
installs the view that holds it. Here such a packet is still answered with `NotMember`
(at most once a period; that is how a member the group removed while it was cut off
learns it) and is also handed up; the layers above decide what a non-member may say.
It never starts watching a non-member: only a view makes a node a peer.

Only the stranger case differs, so only that hook is overridden: a member's packet takes
the plain detector's path, with no extra dispatch here.
"""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Effect, Up
from abcast.group.failure_detector import FailureDetectorLayer, Fd
from abcast.ids import NodeId


class OpenDetector(FailureDetectorLayer):
    __slots__ = ()

    name = "open-fd"

    def is_peer(self, node: str) -> bool:
        return node in self._s.peers

    def _from_stranger(
        self, sender: NodeId, header: object, inner: Packet, now: int
    ) -> list[Effect]:
        if isinstance(header, Fd):
            return [*self._not_a_member(sender, now), Up(sender, inner)]
        return super()._from_stranger(sender, header, inner, now)
