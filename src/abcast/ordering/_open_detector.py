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
"""

from __future__ import annotations

from abcast.effects import Effect, Up
from abcast.events import Event, Received
from abcast.group.failure_detector import FailureDetectorLayer, Fd


class OpenDetector(FailureDetectorLayer):
    name = "open-fd"

    def is_peer(self, node: str) -> bool:
        return node in self._s.peers

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case Received(sender, Fd(), inner) if sender not in self._s.peers:
                return [*self._not_a_member(sender, now), Up(sender, inner)]
            case _:
                return super().handle(event, now)
